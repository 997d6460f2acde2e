// Kubernetes 1.33 pod scheduling gates: create validation and the SchedulingGated
// condition on create, only-deletion validation on update, and the binding that a
// scheduler performs (a client POSTing `pods/NAME/binding`: the double runs none).
//
// Without a scheduler the condition stays after the last gate goes, as on a real
// server: kubectl keeps printing `SchedulingGated` until something binds the pod.

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

/// Once no gate is left, an empty `spec.schedulingGates` is dropped (Go's `omitempty`
/// on a nil slice). The `PodScheduled=False/SchedulingGated` condition stays: the pod
/// strategy's `PrepareForUpdate` copies the old status and `applySchedulingGatedCondition`
/// runs only in `PrepareForCreate` (`pkg/registry/core/pod/strategy.go`, 1.33.4); the
/// condition changes when a scheduler binds the pod or marks it `Unschedulable`.
pub fn after_update(pod: &mut Value) {
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut)
        && spec
            .get("schedulingGates")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
    {
        spec.remove("schedulingGates");
    }
}

/// Create validation of a pod's gates (1.33.4 `pkg/apis/core/validation/validation.go`):
/// `validateSchedulingGates` refuses a duplicate name (`field.Duplicate`), and
/// `ValidatePodCreate` refuses `spec.nodeName` while gates remain ("cannot be set until
/// all schedulingGates have been cleared").
pub fn validate_create(pod: &Value, res: &ResourceInfo, name: &str) -> Result<(), ApiError> {
    let names = gate_names(pod);
    let mut causes = Vec::new();
    for (i, gate) in names.iter().enumerate() {
        if names[..i].contains(gate) {
            causes.push(Cause::duplicate(
                format!("spec.schedulingGates[{i}]"),
                format!("\"{gate}\""),
            ));
        }
    }
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !node.is_empty() && !names.is_empty() {
        causes.push(Cause::forbidden(
            "spec.nodeName",
            "cannot be set until all schedulingGates have been cleared",
        ));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(status::invalid(res, name, &causes))
    }
}

/// The binding subresource's update of a pod (`BindingREST.setPodHostAndAnnotations`,
/// `pkg/registry/core/pod/storage/storage.go`, 1.13.12 and 1.33.4): refused while the
/// pod is being deleted, already bound or (1.33) still gated; otherwise `spec.nodeName`
/// is set, the binding's annotations merged, and `PodScheduled` becomes `True`
/// (`podutil.UpdatePodCondition`: reason and message cleared, transition time now).
pub fn bind(
    pod: &mut Value,
    name: &str,
    node: &str,
    annotations: Option<&Value>,
    now: &str,
) -> Result<(), String> {
    if pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        return Err(format!(
            "pod {name} is being deleted, cannot be assigned to a host"
        ));
    }
    if let Some(n) = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        return Err(format!("pod {name} is already assigned to node \"{n}\""));
    }
    if !gate_names(pod).is_empty() {
        return Err(format!("pod {name} has non-empty .spec.schedulingGates"));
    }
    let Some(obj) = pod.as_object_mut() else {
        return Err(format!("unexpected object: {name}"));
    };
    let spec = obj.entry("spec").or_insert_with(|| json!({}));
    if let Some(spec) = spec.as_object_mut() {
        spec.insert("nodeName".into(), json!(node));
    }
    if let Some(extra) = annotations
        .and_then(Value::as_object)
        .filter(|a| !a.is_empty())
    {
        let meta = obj.entry("metadata").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            let ann = meta.entry("annotations").or_insert_with(|| json!({}));
            if let Some(ann) = ann.as_object_mut() {
                for (k, v) in extra {
                    ann.insert(k.clone(), v.clone());
                }
            }
        }
    }
    let status = obj.entry("status").or_insert_with(|| json!({}));
    let Some(status) = status.as_object_mut() else {
        return Ok(());
    };
    let conditions = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(vec![]));
    if let Some(list) = conditions.as_array_mut() {
        let scheduled = json!({
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": null,
            "lastTransitionTime": now,
        });
        match list
            .iter_mut()
            .find(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled"))
        {
            Some(c) => {
                let mut scheduled = scheduled;
                if c.get("status").and_then(Value::as_str) == Some("True") {
                    scheduled["lastTransitionTime"] =
                        c.get("lastTransitionTime").cloned().unwrap_or(Value::Null);
                }
                *c = scheduled;
            }
            None => list.push(scheduled),
        }
    }
    Ok(())
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
        assert!(
            is_gated(&cleared),
            "the condition stays until a scheduler acts"
        );
        assert!(cleared["spec"].get("schedulingGates").is_none());
        assert_eq!(
            bind(&mut p.clone(), "p", "n1", None, "t").unwrap_err(),
            "pod p has non-empty .spec.schedulingGates"
        );
        bind(&mut cleared, "p", "n1", None, "t").unwrap();
        assert!(!is_gated(&cleared));
        assert_eq!(cleared["spec"]["nodeName"], "n1");
        assert_eq!(
            bind(&mut cleared, "p", "n2", None, "t").unwrap_err(),
            "pod p is already assigned to node \"n1\""
        );
    }
}
