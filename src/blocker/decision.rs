//! What the two mechanisms share: the decision about one object, and the guarded JSON
//! patch that removes entries from a `[{name: ...}]` list.

use serde_json::Value;

/// What to do with one object.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Remove `names` with this RFC 6902 patch.
    Clear { names: Vec<String>, patch: Patch },
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

/// An RFC 6902 JSON patch, kept as the text that is sent: built as text, what was seen
/// copied in as the server sent it, with no tree of `Value`s to build, serialize and drop
/// per cleared object (BENCHMARKS.md, "Start-up: exec to the first clearing PATCH").
#[derive(Clone, Debug)]
pub struct Patch(String);

impl Patch {
    /// The text sent as the PATCH's body.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A patch from its text, which the caller built as valid JSON.
    pub(crate) fn from_text(text: String) -> Patch {
        Patch(text)
    }

    /// Parsed, to compare or show it.
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
}

/// The same operations, whatever the spacing and the order of the keys.
impl PartialEq for Patch {
    fn eq(&self, other: &Patch) -> bool {
        self.value() == other.value()
    }
}

impl From<Value> for Patch {
    fn from(value: Value) -> Patch {
        Patch(value.to_string())
    }
}

/// The clearing patch: test that `test_path` still holds `seen` (JSON text, as the server
/// sent it), then remove `remove_path` when nothing is kept, or replace `list_path` with
/// what is kept. Never writes an empty list: a server without the initializers plugin
/// rejects one.
pub fn clearing_patch(
    test_path: &str,
    seen: &str,
    remove_path: &str,
    list_path: &str,
    kept: Vec<Value>,
) -> Patch {
    let change = if kept.is_empty() {
        operation("remove", remove_path, None)
    } else {
        operation("replace", list_path, Some(&Value::Array(kept).to_string()))
    };
    let test = operation("test", test_path, Some(seen));
    Patch(["[", &test, ",", &change, "]"].concat())
}

/// One RFC 6902 operation as JSON text; `value`, when given, is JSON text already.
pub fn operation(op: &str, path: &str, value: Option<&str>) -> String {
    let mut out = String::with_capacity(32 + path.len() + value.map_or(0, str::len));
    out.push_str("{\"op\":\"");
    out.push_str(op);
    out.push_str("\",\"path\":");
    push_json_string(&mut out, path);
    if let Some(value) = value {
        out.push_str(",\"value\":");
        out.push_str(value);
    }
    out.push('}');
    out
}

/// `s` as a JSON string (RFC 8259 §7: `"`, `\\` and control characters escaped).
pub fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    // Names, uids and label values seldom need escaping: copied whole.
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `s` as a JSON string.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_json_string(&mut out, s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_is_json_and_escapes_what_it_must() {
        for s in [
            "plain",
            "a\"b\\c",
            "tab\there\nnew\rline",
            "\u{1}\u{1f}",
            "é/~ü",
            "",
        ] {
            let text = json_string(s);
            assert_eq!(serde_json::from_str::<String>(&text).unwrap(), s, "{text}");
        }
        let p = clearing_patch("/t", r#"[ {"name": "a"} ]"#, "/r", "/l", vec![]);
        assert_eq!(
            p.value(),
            json!([{"op": "test", "path": "/t", "value": [{"name": "a"}]}, {"op": "remove", "path": "/r"}])
        );
        let p = clearing_patch("/t", "[]", "/r", "/l", vec![json!({"name": "k"})]);
        assert_eq!(
            p.value(),
            json!([
                {"op": "test", "path": "/t", "value": []},
                {"op": "replace", "path": "/l", "value": [{"name": "k"}]}
            ])
        );
        assert_eq!(p, Patch::from(p.value()));
    }
}
