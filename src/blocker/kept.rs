//! Success only when the object shows it: the answer to a clearing PATCH is the object as
//! the server stored it, and a 200 whose object still holds a name the PATCH removed is no
//! clearing. A mutating webhook or admission policy that puts the gates back on UPDATE
//! leaves the pod as it was (gates can be removed, never added: the server writes nothing)
//! and the API server still answers 200; such a pod was once logged "cleared", counted and
//! given an Event, and stayed gated with nobody told.
//!
//! The field manager named is the one that last wrote the field, by its `managedFields`
//! entry (Kubernetes 1.18 and later; none on 1.13).

use serde::Deserialize;
use serde_json::Value;

use super::Mode;
use crate::object::Held;

/// A PATCH answered with success whose object still holds what it removed.
#[derive(Clone, Debug, thiserror::Error)]
#[error(
    "the server answered the PATCH with success but kept the {what} {} (last written by {}): \
     not cleared; a mutating admission webhook or policy that puts them back on update?",
    .names.join(", "),
    .manager.as_deref().unwrap_or("an unknown field manager")
)]
pub struct Kept {
    pub what: &'static str,
    /// The names the PATCH removed that the object still holds.
    pub names: Vec<String>,
    /// The field manager that last wrote the field, and how (`kubectl-create (Update)`).
    pub manager: Option<String>,
    /// The object as answered: its name, namespace, uid and resourceVersion, for the Event.
    pub object: Held,
}

/// Whether the answer `body` to a PATCH that removed `removed` in `mode` shows them gone;
/// `Err(Kept)` if it still holds any, or the answer's parse error.
pub fn check(mode: Mode, body: &[u8], removed: &[String]) -> Result<(), Answer> {
    let object: Held = serde_json::from_slice(body).map_err(Answer::NotAnObject)?;
    let held = mode.blocking_names(&object);
    let names: Vec<String> = removed
        .iter()
        .filter(|n| held.contains(n))
        .cloned()
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    let (what, field) = match mode {
        Mode::Initializers => ("initializers", ["f:metadata", "f:initializers"]),
        Mode::SchedulingGates => ("gates", ["f:spec", "f:schedulingGates"]),
    };
    Err(Answer::Kept(Box::new(Kept {
        what,
        names,
        manager: last_writer(body, field),
        object,
    })))
}

/// What a success's answer said against it.
#[derive(Debug)]
pub enum Answer {
    NotAnObject(serde_json::Error),
    Kept(Box<Kept>),
}

#[derive(Deserialize)]
struct Managed {
    metadata: ManagedMeta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManagedMeta {
    #[serde(default)]
    managed_fields: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(default)]
    manager: String,
    #[serde(default)]
    operation: String,
    #[serde(default)]
    time: String,
    #[serde(default)]
    fields_v1: Value,
}

/// The field manager whose entry owns `field` (a path in `fieldsV1`) and was written last.
fn last_writer(body: &[u8], field: [&str; 2]) -> Option<String> {
    let managed: Managed = serde_json::from_slice(body).ok()?;
    managed
        .metadata
        .managed_fields
        .into_iter()
        .filter(|e| !e.fields_v1[field[0]][field[1]].is_null())
        // RFC 3339 in UTC, as the server writes them: ordered as text.
        .max_by(|a, b| a.time.cmp(&b.time))
        .map(|e| written_by(&e))
}

/// Who added each gate of a pod (its JSON `text`): the field manager whose entry owns
/// `k:{"name":GATE}` under `f:spec.f:schedulingGates`, the earliest if several share it
/// (gates are set only at creation: the creator's request, a mutating webhook's change
/// included). `(gate, "manager (Operation)")`, by gate; empty without managedFields.
pub fn gate_writers(text: &str) -> Vec<(String, String)> {
    let Ok(managed) = serde_json::from_str::<Managed>(text) else {
        return Vec::new();
    };
    let mut entries = managed.metadata.managed_fields;
    entries.sort_by(|a, b| a.time.cmp(&b.time));
    let mut out: Vec<(String, String)> = Vec::new();
    for e in &entries {
        let Some(gates) = e.fields_v1["f:spec"]["f:schedulingGates"].as_object() else {
            continue;
        };
        for key in gates.keys() {
            let Some(gate) = key
                .strip_prefix("k:")
                .and_then(|k| serde_json::from_str::<Value>(k).ok())
                .and_then(|k| k["name"].as_str().map(str::to_string))
            else {
                continue;
            };
            if !out.iter().any(|(g, _)| *g == gate) {
                out.push((gate, written_by(e)));
            }
        }
    }
    out.sort();
    out
}

/// `manager (Operation)`, or the manager alone if the entry names no operation.
fn written_by(e: &Entry) -> String {
    match e.operation.as_str() {
        "" => e.manager.clone(),
        op => format!("{} ({op})", e.manager),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(gates: &[&str], managed: Value) -> Vec<u8> {
        let gates: Vec<Value> = gates.iter().map(|g| json!({"name": g})).collect();
        json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                            "managedFields": managed},
               "spec": {"schedulingGates": gates, "containers": []}})
        .to_string()
        .into_bytes()
    }

    fn gates_entry(manager: &str, op: &str, time: &str) -> Value {
        json!({"manager": manager, "operation": op, "time": time, "fieldsType": "FieldsV1",
               "fieldsV1": {"f:spec": {"f:schedulingGates": {".": {}, "k:{\"name\":\"a\"}": {}}}}})
    }

    #[test]
    fn an_answer_without_the_removed_names_is_a_clearing() {
        let removed = vec!["a".to_string(), "b".to_string()];
        let m = Mode::SchedulingGates;
        assert!(check(m, &pod(&[], json!([])), &removed).is_ok());
        let cleared = json!({"metadata": {"name": "p"}, "spec": {}}).to_string();
        assert!(check(m, cleared.as_bytes(), &removed).is_ok());
        // `--only a`: b was not removed, and stays.
        assert!(check(m, &pod(&["b"], json!([])), &removed[..1]).is_ok());
        assert!(matches!(
            check(m, b"{not json", &removed),
            Err(Answer::NotAnObject(_))
        ));
    }

    #[test]
    fn an_answer_that_kept_a_removed_name_names_it_and_its_last_writer() {
        let removed = vec!["a".to_string(), "b".to_string()];
        let managed = json!([
            gates_entry("kueue", "Update", "2026-01-01T00:00:00Z"),
            gates_entry("kubectl-create", "Update", "2026-01-02T00:00:00Z"),
            {"manager": "kubelet", "operation": "Update", "time": "2026-01-03T00:00:00Z",
             "fieldsV1": {"f:status": {}}}
        ]);
        let Err(Answer::Kept(kept)) =
            check(Mode::SchedulingGates, &pod(&["a", "c"], managed), &removed)
        else {
            panic!("not kept");
        };
        assert_eq!(kept.names, ["a"]);
        assert_eq!(kept.manager.as_deref(), Some("kubectl-create (Update)"));
        assert_eq!(kept.object.key(), "ns/p");
        assert_eq!(
            kept.to_string(),
            "the server answered the PATCH with success but kept the gates a (last written by \
             kubectl-create (Update)): not cleared; a mutating admission webhook or policy that \
             puts them back on update?"
        );
        // No managedFields (Kubernetes 1.13, or a server that strips them).
        let Err(Answer::Kept(kept)) =
            check(Mode::SchedulingGates, &pod(&["b"], Value::Null), &removed)
        else {
            panic!("not kept");
        };
        assert_eq!(kept.manager, None);
        assert!(
            kept.to_string()
                .contains("last written by an unknown field manager")
        );
    }

    #[test]
    fn each_gate_named_with_the_manager_that_added_it() {
        let mut late = gates_entry("kubectl-edit", "Update", "2026-01-02T00:00:00Z");
        late["fieldsV1"]["f:spec"]["f:schedulingGates"]["k:{\"name\":\"b\"}"] = json!({});
        let managed = json!([
            late,
            gates_entry("kube-controller-manager", "Update", "2026-01-01T00:00:00Z"),
            {"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}
        ]);
        let text = String::from_utf8(pod(&["a", "b"], managed)).unwrap();
        assert_eq!(
            gate_writers(&text),
            [
                (
                    "a".to_string(),
                    "kube-controller-manager (Update)".to_string()
                ),
                ("b".to_string(), "kubectl-edit (Update)".to_string())
            ]
        );
        let none = String::from_utf8(pod(&["a"], Value::Null)).unwrap();
        assert!(gate_writers(&none).is_empty(), "1.13: no managedFields");
    }

    #[test]
    fn initializers_kept_too() {
        let body = json!({"metadata": {"name": "p", "initializers": {"pending": [{"name": "i.example.com"}]}}});
        let removed = vec!["i.example.com".to_string()];
        let Err(Answer::Kept(kept)) =
            check(Mode::Initializers, body.to_string().as_bytes(), &removed)
        else {
            panic!("not kept");
        };
        assert_eq!(kept.what, "initializers");
        let done = json!({"metadata": {"name": "p"}});
        assert!(check(Mode::Initializers, done.to_string().as_bytes(), &removed).is_ok());
    }
}
