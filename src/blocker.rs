//! The two mechanisms that hold objects back, behind one enum: what counts as pending,
//! and which JSON patch clears it. The watch loop, the clearing and `status` only talk
//! to this module; `initializers` and `gates` hold the rules of each.

use serde_json::{Value, json};

use crate::{gates, initializers, object::Held};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `metadata.initializers.pending`, Kubernetes 1.7 to 1.13.
    Initializers,
    /// `spec.schedulingGates`, Kubernetes 1.26 and later.
    SchedulingGates,
}

impl Mode {
    /// The label used in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Initializers => "initializers",
            Mode::SchedulingGates => "scheduling-gates",
        }
    }

    /// The reason of the Event written on a cleared object.
    pub fn event_reason(self) -> &'static str {
        match self {
            Mode::Initializers => "InitializersCleared",
            Mode::SchedulingGates => "SchedulingGatesCleared",
        }
    }

    /// Decides what to do with an object as seen, given the `--only` names (empty: all).
    pub fn decide(self, obj: &Held, only: &[String]) -> Decision {
        match self {
            Mode::Initializers => initializers::decide(obj.metadata.initializers.as_ref(), only),
            Mode::SchedulingGates => gates::decide(obj, only),
        }
    }

    /// The names holding the object back, whatever `--only` says (for `status`).
    pub fn blocking_names(self, obj: &Held) -> Vec<String> {
        match self {
            Mode::Initializers => initializers::pending_names(obj.metadata.initializers.as_ref()),
            Mode::SchedulingGates => {
                names(obj.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()))
            }
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to do with one object.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Remove `names` with this RFC 6902 patch.
    Clear { names: Vec<String>, patch: Value },
    /// Nothing to do, and why.
    Leave(Leave),
}

#[derive(Debug, PartialEq)]
pub enum Leave {
    /// Nothing is pending.
    NotPending,
    /// Initialization failed on purpose (`initializers.result` is set): the server is
    /// rejecting this object, which must not be let through.
    Failed,
    /// The pod is being deleted.
    Terminating,
    /// The pod is already bound to a node.
    Bound,
    /// Only names outside `--only` are pending.
    NotSelected(Vec<String>),
}

/// The `name` of every entry of a `[{name: ...}]` list.
pub fn names(list: Option<&Value>) -> Vec<String> {
    list.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|e| e.get("name")?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Splits a `[{name: ...}]` list into the names to remove and the entries to keep.
pub fn split(list: &[Value], only: &[String]) -> (Vec<String>, Vec<Value>) {
    let mut removed = Vec::new();
    let mut kept = Vec::new();
    for entry in list {
        let name = entry.get("name").and_then(Value::as_str);
        match name {
            Some(n) if only.is_empty() || only.iter().any(|o| o == n) => {
                removed.push(n.to_string())
            }
            _ => kept.push(entry.clone()),
        }
    }
    (removed, kept)
}

/// The clearing patch: test that `test_path` still holds what was seen, then remove
/// `remove_path` when nothing is kept, or replace `list_path` with what is kept.
/// Never writes an empty list: a server without the initializers plugin rejects one.
pub fn clearing_patch(
    test_path: &str,
    seen: &Value,
    remove_path: &str,
    list_path: &str,
    kept: Vec<Value>,
) -> Value {
    let test = json!({"op": "test", "path": test_path, "value": seen});
    if kept.is_empty() {
        json!([test, {"op": "remove", "path": remove_path}])
    } else {
        json!([test, {"op": "replace", "path": list_path, "value": kept}])
    }
}
