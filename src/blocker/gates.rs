//! Scheduling gates (Kubernetes 1.26 and later): `spec.schedulingGates`, a list of `{name}`
//! set at creation that keeps a pod `SchedulingGated`. See NOTES §2: entries can only be
//! removed, and a pod that is already clear, terminating or bound is left alone.

use super::decision::{self, Decision, Leave};
use crate::object::Held;

/// The pod's gate names.
pub fn names_of(pod: &Held) -> Vec<String> {
    super::names(pod.scheduling_gates().as_ref())
}

pub fn decide(pod: &Held, only: &[String]) -> Decision {
    let spec = pod.spec.as_ref();
    let Some(seen) = pod.scheduling_gates() else {
        return Decision::Leave(Leave::NotPending);
    };
    let seen = &seen;
    let gates = seen.as_array().map(Vec::as_slice).unwrap_or_default();
    if gates.is_empty() {
        return Decision::Leave(Leave::NotPending);
    }
    if pod.is_terminating() {
        return Decision::Leave(Leave::Terminating);
    }
    if spec.is_some_and(|s| s.node_name.as_deref().is_some_and(|n| !n.is_empty())) {
        return Decision::Leave(Leave::Bound);
    }
    let (names, kept) = decision::split(gates, only);
    if names.is_empty() {
        return Decision::Leave(Leave::NotSelected(decision::names(Some(seen))));
    }
    // The gates as the server sent them (`scheduling_gates` parsed these very bytes).
    let raw = spec
        .and_then(|s| s.scheduling_gates.as_deref())
        .map_or("null", |r| r.get());
    let patch = decision::clearing_patch(
        "/spec/schedulingGates",
        raw,
        "/spec/schedulingGates",
        "/spec/schedulingGates",
        kept,
    );
    Decision::Clear { names, patch }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(v: Value) -> Held {
        crate::object::held(v)
    }

    #[test]
    fn table() {
        let gates = json!([{"name": "example.com/a"}, {"name": "kueue.x-k8s.io/admission"}]);
        let cases = vec![
            (
                "no spec",
                json!({"metadata": {"name": "p"}}),
                vec![],
                Decision::Leave(Leave::NotPending),
            ),
            (
                "no gates",
                json!({"metadata": {"name": "p"}, "spec": {}}),
                vec![],
                Decision::Leave(Leave::NotPending),
            ),
            (
                "empty gates",
                json!({"metadata": {"name": "p"}, "spec": {"schedulingGates": []}}),
                vec![],
                Decision::Leave(Leave::NotPending),
            ),
            (
                "terminating",
                json!({"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"schedulingGates": gates}}),
                vec![],
                Decision::Leave(Leave::Terminating),
            ),
            (
                "bound",
                json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "schedulingGates": gates}}),
                vec![],
                Decision::Leave(Leave::Bound),
            ),
            (
                "all gates",
                json!({"metadata": {"name": "p"}, "spec": {"schedulingGates": gates}}),
                vec![],
                Decision::Clear {
                    names: vec!["example.com/a".into(), "kueue.x-k8s.io/admission".into()],
                    patch: json!([
                        {"op": "test", "path": "/spec/schedulingGates", "value": gates},
                        {"op": "remove", "path": "/spec/schedulingGates"}
                    ])
                    .into(),
                },
            ),
            (
                "--only one",
                json!({"metadata": {"name": "p"}, "spec": {"schedulingGates": gates}}),
                vec!["kueue.x-k8s.io/admission".to_string()],
                Decision::Clear {
                    names: vec!["kueue.x-k8s.io/admission".into()],
                    patch: json!([
                        {"op": "test", "path": "/spec/schedulingGates", "value": gates},
                        {"op": "replace", "path": "/spec/schedulingGates", "value": [{"name": "example.com/a"}]}
                    ])
                    .into(),
                },
            ),
            (
                "--only none",
                json!({"metadata": {"name": "p"}, "spec": {"schedulingGates": gates}}),
                vec!["other.io/x".to_string()],
                Decision::Leave(Leave::NotSelected(vec![
                    "example.com/a".into(),
                    "kueue.x-k8s.io/admission".into(),
                ])),
            ),
        ];
        for (what, obj, only, want) in cases {
            assert_eq!(decide(&pod(obj), &only), want, "{what}");
        }
    }
}
