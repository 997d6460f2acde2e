//! `metainit status`: every object held back right now, labelled or not, with how long
//! and by what. Read-only: it only LISTs (and reads discovery documents).

use std::{
    collections::{BTreeMap, HashSet},
    process::ExitCode,
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;
use kube::{
    Client,
    api::{ApiResource, ListParams},
};
use serde::Serialize;

use crate::{
    Error, Result,
    blocker::Mode,
    cli::{ModeArg, Output, StatusArgs},
    discovery::{self, Target},
    object::{Held, Kind},
    release::Rules,
    shutdown::Shutdown,
    text,
    webhooks::status::WebhookRow,
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

/// What `status` says when a signal stops it.
pub const ON_SIGNAL: &str =
    "status interrupted by a signal before every object was listed: nothing printed";

pub async fn run(args: StatusArgs) -> Result<ExitCode> {
    let format = args.common.log_format;
    // Read-only: a signal has nothing to drain; it ends the listing, exit 1.
    let stop = Shutdown::on_signals_saying("signal received: stopping the listing");
    let report = tokio::select! {
        report = report(&args) => report,
        _ = stop.requested() => return Ok(crate::logging::final_line(format, ON_SIGNAL, 1)),
    };
    // Any failure of `status` exits 2: 1 is kept for "held longer than --max-age".
    match report {
        Ok(report) => {
            print(&report, args.output)?;
            let Some(max) = args.max_age else {
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

/// Which objects are held back longer than `--max-age`, oldest first (at most 10 named).
pub fn over_age(rows: &[&Row], max: Duration) -> String {
    const SHOWN: usize = 10;
    let named: Vec<String> = rows
        .iter()
        .take(SHOWN)
        .map(|r| {
            format!(
                "{} {}{} ({} by {})",
                r.kind,
                r.namespace
                    .as_ref()
                    .map(|n| format!("{n}/"))
                    .unwrap_or_default(),
                r.name,
                text::age(r.age_seconds),
                r.blocked_by.join(",")
            )
        })
        .collect();
    let more = match rows.len().saturating_sub(SHOWN) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    format!(
        "{} held back longer than --max-age {}: {}{more}",
        rows.len(),
        text::duration(max),
        named.join(", ")
    )
}

/// The report's mode on a 1.21 to 1.25 server, which has only webhooks to look at.
const WEBHOOKS_ONLY: &str = "webhooks only";

async fn report(args: &StatusArgs) -> Result<Report> {
    let common = &args.common;
    let label_key = args.label_key()?;
    args.rules.check()?;
    if !args.rules.release_gate.is_empty() && common.mode == ModeArg::Initializers {
        return Err(discovery::gates_only(
            "--release-gate",
            "--mode initializers means initializers",
        ));
    }
    if args.webhooks && common.mode == ModeArg::Initializers {
        return Err(discovery::webhooks_too_old(
            "--mode initializers means a 1.7 to 1.13 server",
        ));
    }
    let rules = Rules {
        rules: args.rules.release_gate.clone(),
        exclude: args.rules.exclude_namespace.clone(),
    };
    let conn = crate::setup::connect(&common.kubeconfig(), common.request_timeout, None).await?;
    let (client, url) = (conn.client, conn.url);
    let deadline = Some(common.timeout);
    let mode =
        discovery::choose_mode(&client, &url, common.mode.mode(), deadline, args.webhooks).await?;
    conn.legacy.set(mode == Some(Mode::Initializers));
    if !rules.is_empty() && mode != Some(Mode::SchedulingGates) {
        return Err(discovery::gates_only(
            "--release-gate",
            "the server's version (--mode auto) means initializers",
        ));
    }
    let webhooks = match args.webhooks {
        true => {
            let mut rows =
                crate::webhooks::status::list(&client, &label_key, &url, deadline).await?;
            // `-n NS`: the webhooks whose service is in NS (the namespace they fail closed on).
            if let Some(ns) = &common.namespace {
                rows.retain(|r| &r.namespace == ns);
            }
            Some(rows)
        }
        false => None,
    };
    // A 1.21 to 1.25 server (only with --webhooks): nothing can be held back.
    let targets = match mode {
        Some(Mode::SchedulingGates) => vec![
            discovery::resolve(&client, &url, &discovery::ResourceSpec::pods(), deadline).await?,
        ],
        Some(Mode::Initializers) => every_listable_resource(&client, &url, deadline).await?,
        None => Vec::new(),
    };
    let now = Timestamp::now();
    let mut items = Vec::new();
    let mut seen = HashSet::new();
    for target in &targets {
        for obj in list_all(&client, target, common.namespace.as_deref(), &url, deadline).await? {
            let Some(mode) = mode else { continue };
            let blocked_by = mode.blocking_names(&obj);
            if blocked_by.is_empty() || (mode == Mode::Initializers && init_failed(&obj)) {
                continue;
            }
            // The same object can be served by two groups (deployments in apps and extensions).
            if let Some(uid) = obj.metadata.meta.uid.clone()
                && !seen.insert(uid)
            {
                continue;
            }
            let mut row = row(&target.resource, &obj, blocked_by, &label_key, now);
            if !row.labelled {
                row.release = releases(&rules, &obj, now);
            }
            items.push(row);
        }
    }
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
    Ok(Report {
        mode: mode.map_or_else(|| WEBHOOKS_ONLY.to_string(), |m| m.to_string()),
        label_key,
        items,
        by_name,
        release_rules: rules.rules.iter().map(ToString::to_string).collect(),
        webhooks,
    })
}

/// The rule that releases an unlabelled pod first, and when: "GATE=AGE in 12m", or
/// "GATE=AGE now" once due (within --release-rate).
pub fn releases(rules: &Rules, obj: &Held, now: Timestamp) -> Option<String> {
    if !rules.applies(obj) {
        return None;
    }
    let age = crate::release::age(obj, now)?;
    crate::release::gates(obj)
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
    }
}

/// Every resource the server lists (legacy initializers can be configured on any of them).
async fn every_listable_resource(
    client: &Client,
    url: &str,
    deadline: Option<Duration>,
) -> Result<Vec<Target>> {
    let mut lists = Vec::new();
    let core = discovery::with_retries("discovery", url, deadline, || {
        client.list_core_api_resources("v1")
    })
    .await?;
    lists.push(("v1".to_string(), core));
    let groups =
        discovery::with_retries("discovery", url, deadline, || client.list_api_groups()).await?;
    for g in groups.groups {
        let Some(gv) = g
            .preferred_version
            .or_else(|| g.versions.into_iter().next())
        else {
            continue;
        };
        let gv = gv.group_version;
        let list = discovery::with_retries("discovery", url, deadline, || {
            client.list_api_group_resources(&gv)
        })
        .await?;
        lists.push((gv, list));
    }
    let mut targets = Vec::new();
    for (gv, list) in lists {
        let (group, version) = match gv.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), gv.clone()),
        };
        for r in list.resources {
            if r.name.contains('/') || !r.verbs.iter().any(|v| v == "list") {
                continue;
            }
            targets.push(Target {
                name: if group.is_empty() {
                    r.name.clone()
                } else {
                    format!("{}.{group}", r.name)
                },
                resource: Kind::from(ApiResource {
                    group: group.clone(),
                    version: version.clone(),
                    api_version: gv.clone(),
                    kind: r.kind,
                    plural: r.name,
                }),
                namespaced: r.namespaced,
            });
        }
    }
    Ok(targets)
}

async fn list_all(
    client: &Client,
    target: &Target,
    namespace: Option<&str>,
    url: &str,
    deadline: Option<Duration>,
) -> Result<Vec<Held>> {
    if namespace.is_some() && !target.namespaced {
        return Ok(Vec::new());
    }
    let api = target.api(client, namespace);
    crate::list::all(&api, ListParams::default(), url, deadline).await
}

/// The table, aligned like kubectl's: columns padded to the widest cell plus three spaces.
pub fn table(report: &Report) -> String {
    let mut out = objects_table(report);
    if let Some(rows) = &report.webhooks {
        out.push('\n');
        out.push_str(&webhooks_table(rows));
    }
    out
}

/// The webhooks that are down or exempted, or one line saying none is.
pub fn webhooks_table(rows: &[WebhookRow]) -> String {
    if rows.is_empty() {
        return "no webhook of a labelled configuration is down or exempted\n".into();
    }
    let mut cells = vec![
        ["CONFIGURATION", "WEBHOOK", "SERVICE", "READY", "STATE"]
            .map(String::from)
            .to_vec(),
    ];
    for r in rows {
        cells.push(vec![
            format!("{}/{}", r.kind, r.configuration),
            r.webhook.clone(),
            r.service.clone(),
            r.ready_endpoints.to_string(),
            r.describe(),
        ]);
    }
    aligned(&cells)
}

/// Columns padded to the widest cell plus three spaces, as kubectl prints them.
fn aligned(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

fn objects_table(report: &Report) -> String {
    if report.items.is_empty() {
        return summary(report) + "\n";
    }
    let with_release = !report.release_rules.is_empty();
    let mut header = ["KIND", "NAME", "AGE", "BLOCKED BY", "LABELLED", "OWNER"]
        .map(String::from)
        .to_vec();
    if with_release {
        header.push("RELEASE".into());
    }
    let mut rows = vec![header];
    for r in &report.items {
        let mut row = vec![
            r.kind.clone(),
            match &r.namespace {
                Some(ns) => format!("{ns}/{}", r.name),
                None => r.name.clone(),
            },
            text::age(r.age_seconds),
            r.blocked_by.join(","),
            if r.labelled { "yes" } else { "no" }.into(),
            r.owner.clone().unwrap_or_else(|| "<none>".into()),
        ];
        if with_release {
            row.push(r.release.clone().unwrap_or_else(|| "-".into()));
        }
        rows.push(row);
    }
    let mut out = aligned(&rows);
    out.push_str(&summary(report));
    out.push('\n');
    out
}

/// One line: how many are held, by which names, and the oldest.
pub fn summary(report: &Report) -> String {
    if report.items.is_empty() {
        return format!("nothing held back ({} mode)", report.mode);
    }
    let by: Vec<String> = report
        .by_name
        .iter()
        .map(|(n, c)| format!("{c} by {n}"))
        .collect();
    let oldest = &report.items[0];
    let labelled = report.items.iter().filter(|r| r.labelled).count();
    format!(
        "{} held back ({labelled} labelled {}): {}; oldest {} {}{} ({})",
        report.items.len(),
        report.label_key,
        by.join(", "),
        oldest.kind,
        oldest
            .namespace
            .as_ref()
            .map(|n| format!("{n}/"))
            .unwrap_or_default(),
        oldest.name,
        text::age(oldest.age_seconds)
    )
}

fn print(report: &Report, output: Output) -> Result<()> {
    let text = match output {
        Output::Table => table(report),
        Output::Json => {
            serde_json::to_string_pretty(report).map_err(|e| Error::Output(e.to_string()))? + "\n"
        }
        Output::Yaml => {
            serde_saphyr::to_string(report).map_err(|e| Error::Output(e.to_string()))?
        }
    };
    crate::output::print(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_aligned_and_summarised() {
        let report = Report {
            mode: "scheduling-gates".into(),
            label_key: "k8s.opsani.io/initializer".into(),
            items: vec![
                Row {
                    kind: "Pod".into(),
                    namespace: Some("kueue-system".into()),
                    name: "kueue-controller-manager-7d9f".into(),
                    age_seconds: 700,
                    blocked_by: vec!["kueue.x-k8s.io/admission".into()],
                    labelled: true,
                    owner: Some("ReplicaSet/kueue-controller-manager".into()),
                    release: None,
                },
                Row {
                    kind: "Pod".into(),
                    namespace: Some("default".into()),
                    name: "job-1".into(),
                    age_seconds: 30,
                    blocked_by: vec!["kueue.x-k8s.io/admission".into(), "example.com/b".into()],
                    labelled: false,
                    owner: None,
                    release: None,
                },
            ],
            by_name: BTreeMap::from([
                ("example.com/b".into(), 1),
                ("kueue.x-k8s.io/admission".into(), 2),
            ]),
            release_rules: Vec::new(),
            webhooks: None,
        };
        let t = table(&report);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        let col = |l: &str, word: &str| l.find(word).unwrap();
        assert_eq!(col(lines[0], "AGE"), col(lines[1], "11m"));
        assert_eq!(col(lines[0], "OWNER"), col(lines[2], "<none>"));
        assert_eq!(
            lines[3],
            "2 held back (1 labelled k8s.opsani.io/initializer): 1 by example.com/b, 2 by kueue.x-k8s.io/admission; \
             oldest Pod kueue-system/kueue-controller-manager-7d9f (11m)"
        );
    }
}
