//! `metainit status`: every object held back right now, labelled or not, with how long
//! and by what. Read-only: it only LISTs (and reads discovery documents).
//!
//! The command's one room: the report of held objects (here, listed by `lists.rs`, with
//! what a server kept marked by `kept.rs`), `--webhooks`' rows (`webhooks.rs`), how the
//! report is printed (`table.rs`), and `--risks` (`risks.rs`), which prints the forecast of
//! the `risks` feature as `forecast.rs` lays it out. What it presents is computed by the
//! features below (`risks`' rules, `webhooks`' hooks and records); what is only `status`'s
//! view of them is here.

pub mod forecast;
mod kept;
mod lists;
mod risks;
mod table;
pub mod webhooks;

use std::{
    collections::{BTreeMap, HashSet},
    process::ExitCode,
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;
use kube::{Client, api::ApiResource};
use serde::Serialize;
pub use table::{Output, over_age, summary, table, webhooks_table};
use webhooks::WebhookRow;

use crate::{
    Result,
    blocker::Mode,
    budget::Budget,
    discovery::{self, ResourceSpec, Target},
    logging::LogFormat,
    object::Held,
    release::Rules,
    setup::ClientSettings,
    shutdown::Shutdown,
    text,
};

/// One held object.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    pub age_seconds: u64,
    pub blocked_by: Vec<String>,
    pub labelled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// With `--release-gate`: the rule that will release this pod and when ("GATE=AGE in
    /// 12m", "GATE=AGE now"); `None` if no rule will.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// A running metainit's PATCH was answered with success but the server kept what it
    /// removed (its Event, `kept.rs`): the field manager that last wrote the field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_by: Option<String>,
    /// Who added each gate, by gate: the field manager (and operation) whose
    /// `managedFields` entry owns it (none on 1.13, and none for initializers).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub added_by: BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub mode: String,
    pub label_key: String,
    pub items: Vec<Row>,
    /// How many objects each name holds back.
    pub by_name: BTreeMap<String, usize>,
    /// The `--release-gate` rules the `release` of each row is computed with.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub release_rules: Vec<String>,
    /// With `--webhooks`: the webhooks of labelled configurations that are down or exempted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhooks: Option<Vec<WebhookRow>>,
}

/// What `status` needs, checked by the command line.
#[derive(Clone, Debug)]
pub struct Settings {
    pub client: ClientSettings,
    pub label_key: String,
    /// `--mode`; `None`: the server's version decides.
    pub mode: Option<Mode>,
    /// `-n`; `None`: every namespace.
    pub namespace: Option<String>,
    /// How long each request may wait for an unreachable server (`--timeout`).
    pub timeout: Duration,
    /// `--release-gate` and `--exclude-namespace`: when each pod would be released.
    pub rules: Rules,
    /// The flag that asks for gate work beyond the label, if any.
    pub gate_flag: Option<&'static str>,
    /// `--webhooks`: the webhooks that are down or exempted too.
    pub webhooks: bool,
    pub output: Output,
    /// `--max-age`: exit 1 if anything is held back longer.
    pub max_age: Option<Duration>,
    /// `--risks`: the forecast instead.
    pub risks: bool,
}

/// What `status` says when a signal stops it.
pub const ON_SIGNAL: &str =
    "status interrupted by a signal before every object was listed: nothing printed";

pub async fn run(settings: Settings, format: LogFormat) -> Result<ExitCode> {
    if settings.risks {
        return risks::run(&settings, format).await;
    }
    // Read-only: a signal has nothing to drain; it ends the listing, exit 1.
    let stop = Shutdown::on_signals_saying("signal received: stopping the listing");
    let report = tokio::select! {
        report = report(&settings) => report,
        _ = stop.requested() => return Ok(crate::logging::final_line(format, ON_SIGNAL, 1)),
    };
    // Any failure of `status` exits 2: 1 is kept for "held longer than --max-age".
    match report {
        Ok(report) => {
            table::print(&report, settings.output)?;
            let Some(max) = settings.max_age else {
                return Ok(ExitCode::SUCCESS);
            };
            let too_old: Vec<&Row> = report
                .items
                .iter()
                .filter(|r| r.age_seconds > max.as_secs())
                .collect();
            if too_old.is_empty() {
                return Ok(ExitCode::SUCCESS);
            }
            Ok(crate::logging::final_line(
                format,
                &over_age(&too_old, max),
                1,
            ))
        }
        Err(e) => Ok(crate::logging::fatal_with(format, &e, 2)),
    }
}

/// The report's mode on a 1.21 to 1.25 server, which has only webhooks to look at.
const WEBHOOKS_ONLY: &str = "webhooks only";

async fn report(settings: &Settings) -> Result<Report> {
    let (label_key, rules) = (settings.label_key.clone(), &settings.rules);
    let namespace = settings.namespace.as_deref();
    let conn = crate::setup::connect(&settings.client, None).await?;
    let (client, url) = (conn.client, conn.url);
    // `--timeout` is how long each request may wait for an answer (a large cluster's
    // listing may take longer in all): a budget of its own for each.
    let timeout = settings.timeout;
    let fresh = || Some(Budget::from_now(timeout));
    let asked = settings.mode;
    let mode = discovery::choose_mode(&client, &url, asked, fresh(), settings.webhooks).await?;
    conn.legacy.set(mode == Some(Mode::Initializers));
    discovery::check_mode(settings.gate_flag, &[ResourceSpec::pods()], mode)?;
    let webhooks = match settings.webhooks {
        true => Some(webhook_rows(&client, settings, &url).await?),
        false => None,
    };
    let Some(mode) = mode else {
        // A 1.21 to 1.25 server (only with --webhooks): nothing can be held back.
        return Ok(Report::new(
            WEBHOOKS_ONLY.into(),
            label_key,
            Vec::new(),
            rules,
            webhooks,
        ));
    };
    let targets = match mode {
        Mode::SchedulingGates => {
            vec![discovery::resolve(&client, &url, &ResourceSpec::pods(), fresh()).await?]
        }
        Mode::Initializers => lists::every_listable_resource(&client, &url, timeout).await?,
    };
    let mut items = Vec::new();
    let mut seen = HashSet::new();
    let now = Timestamp::now();
    for target in &targets {
        let objects = lists::list_all(&client, target, namespace, &url, timeout);
        for obj in objects.await? {
            // The same object can be served by two groups (deployments in apps and extensions).
            let new = |uid: &String| seen.insert(uid.clone());
            if let Some(mut row) = held(mode, target, &obj.held, &label_key, rules, now)
                && obj.held.metadata.meta.uid.as_ref().is_none_or(new)
            {
                row.added_by = obj
                    .writers
                    .into_iter()
                    .filter(|(gate, _)| row.blocked_by.contains(gate))
                    .collect();
                items.push(row);
            }
        }
    }
    kept::mark(&client, namespace, mode, &mut items, timeout).await;
    Ok(Report::new(
        mode.to_string(),
        label_key,
        items,
        rules,
        webhooks,
    ))
}

/// With `--webhooks`: the webhooks of labelled configurations that are down or exempted.
async fn webhook_rows(client: &Client, settings: &Settings, url: &str) -> Result<Vec<WebhookRow>> {
    let deadline = Some(settings.timeout);
    let label_key = &settings.label_key;
    let mut rows = webhooks::list(client, label_key, url, deadline).await?;
    // `-n NS`: the webhooks whose service is in NS (the namespace they fail closed on).
    if let Some(ns) = &settings.namespace {
        rows.retain(|r| &r.namespace == ns);
    }
    Ok(rows)
}

/// The row of `obj` if something holds it back; the release due to it if unlabelled.
fn held(
    mode: Mode,
    target: &Target,
    obj: &Held,
    label_key: &str,
    rules: &Rules,
    now: Timestamp,
) -> Option<Row> {
    let blocked_by = mode.blocking_names(obj);
    if blocked_by.is_empty() || (mode == Mode::Initializers && init_failed(obj)) {
        return None;
    }
    let mut row = row(&target.resource, obj, blocked_by, label_key, now);
    if !row.labelled {
        row.release = releases(rules, obj, now);
    }
    Some(row)
}

impl Report {
    /// The report of `items`, oldest first, with how many each name holds back.
    fn new(
        mode: String,
        label_key: String,
        mut items: Vec<Row>,
        rules: &Rules,
        webhooks: Option<Vec<WebhookRow>>,
    ) -> Report {
        items.sort_by(|a, b| {
            b.age_seconds
                .cmp(&a.age_seconds)
                .then_with(|| a.name.cmp(&b.name))
        });
        let mut by_name = BTreeMap::new();
        for r in &items {
            for n in &r.blocked_by {
                *by_name.entry(n.clone()).or_insert(0) += 1;
            }
        }
        Report {
            mode,
            label_key,
            items,
            by_name,
            release_rules: rules.rules.iter().map(ToString::to_string).collect(),
            webhooks,
        }
    }
}

/// The rule that releases an unlabelled pod first, and when: "GATE=AGE in 12m", or
/// "GATE=AGE now" once due (within --release-rate).
pub fn releases(rules: &Rules, obj: &Held, now: Timestamp) -> Option<String> {
    if !rules.applies(obj) {
        return None;
    }
    let age = obj.age(now)?;
    crate::blocker::gates::names_of(obj)
        .iter()
        .filter_map(|g| rules.rules.iter().find(|r| &r.gate == g))
        .min_by_key(|r| r.after)
        .map(
            |r| match r.after.checked_sub(age).filter(|w| !w.is_zero()) {
                Some(wait) => format!("{r} in {}", text::age(wait.as_secs().max(1))),
                None => format!("{r} now"),
            },
        )
}

fn init_failed(obj: &Held) -> bool {
    obj.initializers_state().1
}

fn row(
    resource: &ApiResource,
    obj: &Held,
    blocked_by: Vec<String>,
    label_key: &str,
    now: Timestamp,
) -> Row {
    let meta = &obj.metadata.meta;
    let age_seconds = meta
        .creation_timestamp
        .as_ref()
        .map(|t| now.as_second().saturating_sub(t.0.as_second()).max(0) as u64)
        .unwrap_or(0);
    let owners = meta.owner_references.as_deref().unwrap_or_default();
    let owner = owners
        .iter()
        .find(|o| o.controller == Some(true))
        .or_else(|| owners.first())
        .map(|o| format!("{}/{}", o.kind, o.name));
    Row {
        kind: resource.kind.clone(),
        namespace: meta.namespace.clone(),
        name: obj.name().to_string(),
        age_seconds,
        blocked_by,
        labelled: obj.has_label(label_key),
        owner,
        release: None,
        kept_by: None,
        added_by: BTreeMap::new(),
    }
}
