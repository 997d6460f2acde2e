//! What the unit tests of the webhook rules share: configurations, their metadata and
//! records, and applying a patch as the server would.

use std::{collections::BTreeMap, time::Duration};

use serde_json::{Value, json};

use super::{
    decide::Step,
    hook::{Hook, expression, hooks},
    record::Record,
};

pub const S: Duration = Duration::from_secs(1);

pub fn config(entries: Value) -> Value {
    json!({ "webhooks": entries })
}

pub fn entry(name: &str, policy: Option<&str>, selector: Value) -> Value {
    let mut e = json!({
        "name": name,
        "clientConfig": {"service": {"namespace": "gk", "name": "gk-svc", "port": 443}},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}],
        "namespaceSelector": selector,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    if let Some(p) = policy {
        e["failurePolicy"] = json!(p);
    }
    e
}

pub fn hooks_with(selector: Value) -> Vec<Hook> {
    hooks(&config(json!([entry("w.example.com", None, selector)])))
}

pub fn meta(annotations: Option<Value>) -> kube::core::ObjectMeta {
    serde_json::from_value(json!({
        "name": "c", "uid": "u1", "resourceVersion": "7", "annotations": annotations
    }))
    .unwrap()
}

pub fn apply(doc: &Value, patch: &Value) -> Value {
    let p: json_patch::Patch = serde_json::from_value(patch.clone()).unwrap();
    let mut d = doc.clone();
    json_patch::patch(&mut d, &p).unwrap();
    d
}

pub fn exempt() -> Step {
    Step::Exempt {
        namespace: "gk".into(),
        down_for: Duration::ZERO,
    }
}

/// The restore of what `record` says, for any reason but endpoints back.
pub fn restore(record: Record) -> Step {
    Step::Restore {
        record,
        up_for: None,
    }
}

/// The record of an exemption of `gk`.
pub fn gk_record() -> Record {
    Record {
        expression: expression("gk"),
        since: "t".into(),
    }
}

/// The annotation's text with one record.
pub fn recorded(webhook: &str, record: &Record) -> String {
    serde_json::to_string(&BTreeMap::from([(webhook, record)])).unwrap()
}
