//! What the two mechanisms share: the decision about one object, and the guarded JSON
//! patch that removes entries from a `[{name: ...}]` list.

use serde_json::{Value, json};

/// What to do with one object.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Remove `names` with this RFC 6902 patch.
    Clear { names: Vec<String>, patch: Value },
    /// Nothing to do, and why.
    Leave(Leave),
}

#[derive(Clone, Debug, PartialEq)]
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
