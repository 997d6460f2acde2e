//! What the two mechanisms share: the decision about one object, and the guarded JSON
//! patch that removes entries from a `[{name: ...}]` list.

use serde_json::Value;

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
    // Built by hand: `json!` would turn `seen` into a Value again by serializing it, a
    // few thousand instructions per cleared object; a clone is a fraction of that.
    let test = operation("test", test_path, Some(seen.clone()));
    let change = if kept.is_empty() {
        operation("remove", remove_path, None)
    } else {
        operation("replace", list_path, Some(Value::Array(kept)))
    };
    Value::Array(vec![test, change])
}

/// One RFC 6902 operation.
pub fn operation(op: &str, path: &str, value: Option<Value>) -> Value {
    let mut map = serde_json::Map::new();
    map.insert("op".into(), op.into());
    map.insert("path".into(), path.into());
    if let Some(value) = value {
        map.insert("value".into(), value);
    }
    Value::Object(map)
}
