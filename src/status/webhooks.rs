//! `metainit status --webhooks`: the webhooks of the labelled configurations that are down
//! or exempted, and in what state. Read-only: a LIST of each configuration kind (by label)
//! and of each guarded service's EndpointSlices.

use std::{collections::HashMap, time::Duration};

use k8s_openapi::jiff::Timestamp;
use kube::{Client, api::DynamicObject};
use serde::Serialize;

use crate::{
    Result,
    budget::Budget,
    text,
    webhooks::{
        ConfigKind,
        endpoints::ready_now,
        hook::{self, Service},
        list_labelled,
        record::records_of,
        slipped,
    },
};

/// One webhook that is down or exempted.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookRow {
    /// `validating` or `mutating`.
    pub kind: String,
    pub configuration: String,
    pub webhook: String,
    /// `namespace/name`.
    pub service: String,
    pub ready_endpoints: usize,
    pub state: State,
    /// The service's namespace: the one that fails closed, or is exempted.
    pub namespace: String,
    /// How long ago metainit exempted it (from its record).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exempted_seconds: Option<u64>,
    /// The pods created in the namespace since it was exempted: the webhook never saw them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub created_while_exempted: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum State {
    /// No ready endpoint, not exempted: pods in its namespace cannot be created.
    FailingClosed,
    /// Exempted by metainit, still no ready endpoint.
    Exempted,
    /// Exempted by metainit, endpoints ready again: restored after the grace.
    Restoring,
    /// The expression is there without metainit's record: someone added it; metainit
    /// never removes it.
    ExemptedByHand,
}

impl WebhookRow {
    /// The STATE column.
    pub fn describe(&self) -> String {
        let ago = self
            .exempted_seconds
            .map(|s| format!(" {} ago", text::age(s)))
            .unwrap_or_default();
        let ns = &self.namespace;
        let slipped = match self.created_while_exempted.len() {
            0 => String::new(),
            1 => "; 1 pod created since, unseen by the webhook".into(),
            n => format!("; {n} pods created since, unseen by the webhook"),
        };
        match self.state {
            State::FailingClosed => format!("failing closed on {ns}"),
            State::Exempted => format!("{ns} exempted{ago}{slipped}"),
            State::Restoring => {
                format!("{ns} exempted{ago}, endpoints back: restoring after the grace{slipped}")
            }
            State::ExemptedByHand => format!("{ns} exempted by hand"),
        }
    }
}

/// The rows, from the labelled configurations (`kind` label, object) and the number of
/// ready endpoints of each service (absent: not listed).
pub fn rows(
    configs: &[(&str, DynamicObject)],
    ready: &HashMap<Service, usize>,
    now: Timestamp,
) -> Vec<WebhookRow> {
    let mut out = Vec::new();
    for (kind, obj) in configs {
        let records = records_of(obj).unwrap_or_default();
        for h in hook::hooks(&obj.data) {
            let Some(service) = h.guarded_service() else {
                continue;
            };
            let ready_endpoints = ready.get(service).copied().unwrap_or(0);
            // What is there decides, not the record alone: a rewrite (a Helm upgrade, a
            // GitOps sync) that dropped metainit's expression leaves the namespace failing
            // closed until metainit adds it again.
            let exempted = h.has(&hook::expression(&service.namespace));
            let record = records.get(&h.name).filter(|_| exempted);
            let state = match (exempted, record, ready_endpoints) {
                (true, Some(_), 0) => State::Exempted,
                (true, Some(_), _) => State::Restoring,
                (true, None, _) => State::ExemptedByHand,
                (false, _, 0) => State::FailingClosed,
                (false, _, _) => continue,
            };
            let exempted_seconds = record
                .and_then(|r| r.since.parse::<Timestamp>().ok())
                .map(|t| now.as_second().saturating_sub(t.as_second()).max(0) as u64);
            out.push(WebhookRow {
                kind: kind.to_string(),
                configuration: obj.metadata.name.clone().unwrap_or_default(),
                webhook: h.name.clone(),
                service: service.to_string(),
                ready_endpoints,
                state,
                namespace: service.namespace.clone(),
                exempted_seconds,
                created_while_exempted: Vec::new(),
            });
        }
    }
    out
}

/// Lists what `rows` needs.
pub async fn list(
    client: &Client,
    label_key: &str,
    url: &str,
    deadline: Option<Duration>,
) -> Result<Vec<WebhookRow>> {
    let mut configs = Vec::new();
    for kind in ConfigKind::ALL {
        let items =
            list_labelled(client, kind, label_key, url, deadline.map(Budget::from_now)).await?;
        configs.extend(items.into_iter().map(|o| (kind.label(), o)));
    }
    let mut ready = HashMap::new();
    for s in hook::guarded_services(configs.iter().map(|(_, o)| &o.data)) {
        let count = ready_now(client, &s, url, deadline.map(Budget::from_now)).await?;
        ready.insert(s, count);
    }
    let now = Timestamp::now();
    let mut rows = rows(&configs, &ready, now);
    for row in rows.iter_mut() {
        let Some(ago) = row.exempted_seconds else {
            continue;
        };
        let since = Timestamp::from_second(now.as_second() - ago as i64).unwrap_or(now);
        let limit = deadline.unwrap_or(Duration::from_secs(10));
        // What could not be listed is left out: the row still says the exemption.
        if let Ok(pods) = slipped::created_since(client, &row.namespace, since, limit).await {
            row.created_while_exempted = pods.into_iter().filter_map(|p| p.name).collect();
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhooks::record::ANNOTATION;
    use serde_json::json;

    fn config(name: &str, annotation: Option<Value>, hooks: Value) -> DynamicObject {
        let mut meta = json!({"name": name});
        if let Some(a) = annotation {
            meta["annotations"] = json!({ANNOTATION: a.to_string()});
        }
        serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": meta,
            "webhooks": hooks,
        }))
        .unwrap()
    }

    use serde_json::Value;

    fn hook(name: &str, policy: &str, ns: &str, exempted: bool) -> Value {
        let mut h = json!({
            "name": name,
            "failurePolicy": policy,
            "clientConfig": {"service": {"namespace": ns, "name": "svc"}},
        });
        if exempted {
            h["namespaceSelector"] = json!({"matchExpressions": [hook::expression(ns)]});
        }
        h
    }

    #[test]
    fn only_what_is_down_or_exempted_and_in_which_state() {
        let now: Timestamp = "2026-11-24T12:00:00Z".parse().unwrap();
        let record = |name: &str, ns: &str| json!({name: {"expression": hook::expression(ns), "since": "2026-11-24T11:48:00Z"}});
        let configs = vec![
            (
                "validating",
                config(
                    "down",
                    None,
                    json!([hook("d.example.com", "Fail", "down", false)]),
                ),
            ),
            (
                "validating",
                config(
                    "up",
                    None,
                    json!([hook("u.example.com", "Fail", "up", false)]),
                ),
            ),
            (
                "validating",
                config(
                    "ignore",
                    None,
                    json!([hook("i.example.com", "Ignore", "down", false)]),
                ),
            ),
            (
                "mutating",
                config(
                    "exempt",
                    Some(record("e.example.com", "down")),
                    json!([hook("e.example.com", "Fail", "down", true)]),
                ),
            ),
            (
                "validating",
                config(
                    "back",
                    Some(record("b.example.com", "up")),
                    json!([hook("b.example.com", "Fail", "up", true)]),
                ),
            ),
            (
                "validating",
                config(
                    "hand",
                    None,
                    json!([hook("h.example.com", "Fail", "up", true)]),
                ),
            ),
            // Recorded, but a rewrite dropped the expression: failing closed again.
            (
                "validating",
                config(
                    "reverted",
                    Some(record("r.example.com", "down")),
                    json!([hook("r.example.com", "Fail", "down", false)]),
                ),
            ),
            // Recorded, expression dropped, endpoints back: nothing to show.
            (
                "validating",
                config(
                    "reverted-up",
                    Some(record("v.example.com", "up")),
                    json!([hook("v.example.com", "Fail", "up", false)]),
                ),
            ),
        ];
        let svc = |ns: &str| Service {
            namespace: ns.into(),
            name: "svc".into(),
        };
        let ready = HashMap::from([(svc("down"), 0), (svc("up"), 2)]);
        let got: Vec<(String, State, String)> = rows(&configs, &ready, now)
            .into_iter()
            .map(|r| (r.configuration.clone(), r.state, r.describe()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "down".into(),
                    State::FailingClosed,
                    "failing closed on down".into()
                ),
                (
                    "exempt".into(),
                    State::Exempted,
                    "down exempted 12m ago".into()
                ),
                (
                    "back".into(),
                    State::Restoring,
                    "up exempted 12m ago, endpoints back: restoring after the grace".into()
                ),
                (
                    "hand".into(),
                    State::ExemptedByHand,
                    "up exempted by hand".into()
                ),
                (
                    "reverted".into(),
                    State::FailingClosed,
                    "failing closed on down".into()
                ),
            ]
        );
    }
}
