//! The hook model: the webhooks of a configuration as metainit reads them from its JSON,
//! which of them can deadlock their own namespace, and the expression that exempts one.
//!
//! The exemption is one expression appended to the webhook's
//! `namespaceSelector.matchExpressions`:
//! `{key: kubernetes.io/metadata.name, operator: NotIn, values: [NS]}` (the API server
//! sets that label on every namespace since 1.21).

use serde_json::{Value, json};

/// The label the API server puts on every namespace, its own name as the value.
pub const NS_LABEL: &str = "kubernetes.io/metadata.name";

/// A webhook's service, `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Service {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A webhook of a configuration, as metainit reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Hook {
    pub index: usize,
    pub name: String,
    /// The entry as the server sent it: the patch tests it.
    pub entry: Value,
    /// `clientConfig.service`; `None` for a `url` webhook.
    pub service: Option<Service>,
    /// `failurePolicy: Fail`, or none given (the v1 default).
    pub fails_closed: bool,
}

impl Hook {
    /// The service whose lack of endpoints can deadlock its own namespace: a webhook
    /// that fails closed and calls a service. `Ignore` webhooks cannot deadlock anything;
    /// `url` webhooks have no service to watch.
    pub fn guarded_service(&self) -> Option<&Service> {
        self.service.as_ref().filter(|_| self.fails_closed)
    }

    /// Whether the entry's namespace selector already holds `expr`.
    pub fn has(&self, expr: &Value) -> bool {
        self.expressions().iter().any(|e| e == expr)
    }

    pub(super) fn expressions(&self) -> &[Value] {
        self.entry
            .pointer("/namespaceSelector/matchExpressions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The index of the last expression equal to `expr`.
    pub(super) fn position(&self, expr: &Value) -> Option<usize> {
        self.expressions().iter().rposition(|e| e == expr)
    }
}

/// The webhooks of a configuration (`webhooks` of its JSON, apart from metadata).
pub fn hooks(data: &Value) -> Vec<Hook> {
    let Some(list) = data.get("webhooks").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .enumerate()
        .map(|(index, entry)| {
            let service = entry.pointer("/clientConfig/service").and_then(|s| {
                Some(Service {
                    namespace: s.get("namespace")?.as_str()?.to_string(),
                    name: s.get("name")?.as_str()?.to_string(),
                })
            });
            let fails_closed = entry
                .get("failurePolicy")
                .and_then(Value::as_str)
                .is_none_or(|p| p == "Fail");
            Hook {
                index,
                name: entry
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                entry: entry.clone(),
                service,
                fails_closed,
            }
        })
        .collect()
}

/// The services that the fail-closed webhooks of these configurations call, each once,
/// sorted.
pub fn guarded_services<'a>(configs: impl IntoIterator<Item = &'a Value>) -> Vec<Service> {
    let mut services: Vec<Service> = configs
        .into_iter()
        .flat_map(hooks)
        .filter_map(|h| h.guarded_service().cloned())
        .collect();
    services.sort();
    services.dedup();
    services
}

/// The expression that exempts `namespace`.
pub fn expression(namespace: &str) -> Value {
    json!({"key": NS_LABEL, "operator": "NotIn", "values": [namespace]})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhooks::fixtures::{config, entry};

    #[test]
    fn which_webhooks_can_deadlock() {
        let data = config(json!([
            entry("fail.example.com", Some("Fail"), json!({})),
            entry("default.example.com", None, json!({})),
            entry("ignore.example.com", Some("Ignore"), json!({})),
            {"name": "url.example.com", "clientConfig": {"url": "https://x.example.com/v"}, "failurePolicy": "Fail"},
        ]));
        let hooks = hooks(&data);
        let guarded: Vec<bool> = hooks
            .iter()
            .map(|h| h.guarded_service().is_some())
            .collect();
        assert_eq!(guarded, [true, true, false, false]);
        assert_eq!(hooks[1].service.as_ref().unwrap().to_string(), "gk/gk-svc");
        assert!(super::hooks(&json!({})).is_empty());
    }
}
