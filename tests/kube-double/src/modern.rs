// Kubernetes 1.33 pod scheduling gates: the SchedulingGated condition on create,
// only-deletion validation on update, and dropping the condition when the last gate goes.
//
// Nothing schedules in the double: once the gates are gone the pod stays Pending with
// no PodScheduled condition, as a real pod waiting for the scheduler would briefly be.

use serde_json::{Value, json};

use crate::resources::ResourceInfo;
use crate::status::{self, ApiError, Cause};

pub const GATED_REASON: &str = "SchedulingGated";
pub const GATED_MESSAGE: &str = "Scheduling is blocked due to non-empty scheduling gates";

fn gate_names(pod: &Value) -> Vec<String> {
    pod.pointer("/spec/schedulingGates")
        .and_then(Value::as_array)
        .map(|gates| {
            gates
                .iter()
                .filter_map(|g| g.get("name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Adds `PodScheduled=False, reason SchedulingGated` to a new gated pod (applySchedulingGatedCondition).
pub fn on_create(pod: &mut Value, now: &str) {
    if gate_names(pod).is_empty() {
        return;
    }
    let Some(status) = pod.get_mut("status").and_then(Value::as_object_mut) else {
        return;
    };
    let conditions = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(vec![]));
    let Some(list) = conditions.as_array_mut() else {
        return;
    };
    if list
        .iter()
        .any(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled"))
    {
        return;
    }
    list.push(json!({
        "type": "PodScheduled",
        "status": "False",
        "lastProbeTime": null,
        "lastTransitionTime": now,
        "reason": GATED_REASON,
        "message": GATED_MESSAGE,
    }));
}

/// Gates may only be removed after creation (validateOnlyDeletedSchedulingGates).
pub fn validate_update(
    new: &Value,
    old: &Value,
    res: &ResourceInfo,
    name: &str,
) -> Result<(), ApiError> {
    let old_names = gate_names(old);
    let mut causes = Vec::new();
    for (i, gate) in gate_names(new).iter().enumerate() {
        if !old_names.contains(gate) {
            causes.push(Cause::forbidden(
                format!("spec.schedulingGates[{i}].name"),
                format!("only deletion is allowed, but found new scheduling gate '{gate}'"),
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(status::invalid(res, name, &causes))
    }
}

/// Once no gate is left, the SchedulingGated condition goes away.
pub fn after_update(pod: &mut Value) {
    if !gate_names(pod).is_empty() {
        return;
    }
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut)
        && spec
            .get("schedulingGates")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
    {
        spec.remove("schedulingGates");
    }
    if let Some(list) = pod
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        list.retain(|c| {
            !(c.get("type").and_then(Value::as_str) == Some("PodScheduled")
                && c.get("reason").and_then(Value::as_str) == Some(GATED_REASON))
        });
    }
    if let Some(status) = pod.get_mut("status").and_then(Value::as_object_mut)
        && status
            .get("conditions")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
    {
        status.remove("conditions");
    }
}

/// Whether the pod still carries the SchedulingGated condition (kubectl's STATUS column).
pub fn is_gated(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|l| {
            l.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("PodScheduled")
                    && c.get("reason").and_then(Value::as_str) == Some(GATED_REASON)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates() {
        let mut p = json!({"spec": {"schedulingGates": [{"name": "a"}, {"name": "b"}]}, "status": {"phase": "Pending"}});
        on_create(&mut p, "2024-01-01T00:00:00Z");
        assert!(is_gated(&p));
        let res = ResourceInfo::new("pods");
        let added = json!({"spec": {"schedulingGates": [{"name": "a"}, {"name": "X"}]}});
        let e = validate_update(&added, &p, &res, "p").unwrap_err();
        assert_eq!(
            e.status["message"],
            "Pod \"p\" is invalid: spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate 'X'"
        );
        let mut cleared = p.clone();
        cleared["spec"]["schedulingGates"] = json!([]);
        validate_update(&cleared, &p, &res, "p").unwrap();
        after_update(&mut cleared);
        assert!(!is_gated(&cleared));
        assert!(cleared["spec"].get("schedulingGates").is_none());
    }
}
