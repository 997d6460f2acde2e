//! Legacy initializers (Kubernetes 1.7 to 1.13): `metadata.initializers.pending`, a list of
//! `{name}` that the API server fills on create; the object stays invisible until it is
//! empty. See NOTES §1: remove the whole field, never write an empty `pending`, and never
//! touch an object whose `result` is set.

use serde_json::Value;

use super::decision::{self, Decision, Leave};

/// The pending initializer names.
pub fn pending_names(initializers: Option<&Value>) -> Vec<String> {
    decision::names(initializers.and_then(|i| i.get("pending")))
}

/// `raw` is the same `initializers` as the server sent them, when at hand: the patch tests
/// that text rather than the parsed value written out again.
pub fn decide(initializers: Option<&Value>, raw: Option<&str>, only: &[String]) -> Decision {
    let Some(init) = initializers.filter(|v| !v.is_null()) else {
        return Decision::Leave(Leave::NotPending);
    };
    if init.get("result").is_some_and(|r| !r.is_null()) {
        return Decision::Leave(Leave::Failed);
    }
    let pending = init
        .get("pending")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if pending.is_empty() {
        return Decision::Leave(Leave::NotPending);
    }
    let (names, kept) = decision::split(pending, only);
    if names.is_empty() {
        return Decision::Leave(Leave::NotSelected(pending_names(Some(init))));
    }
    let written;
    let seen = match raw {
        Some(raw) => raw,
        None => {
            written = init.to_string();
            &written
        }
    };
    let patch = decision::clearing_patch(
        "/metadata/initializers",
        seen,
        "/metadata/initializers",
        "/metadata/initializers/pending",
        kept,
    );
    Decision::Clear { names, patch }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn only(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn table() {
        let two = json!({"pending": [{"name": "a.example.com"}, {"name": "b.example.com"}]});
        // Both pending removed, with the whole field.
        let removes_both = || Decision::Clear {
            names: only(&["a.example.com", "b.example.com"]),
            patch: json!([
                {"op": "test", "path": "/metadata/initializers", "value": two},
                {"op": "remove", "path": "/metadata/initializers"}
            ])
            .into(),
        };
        let cases: Vec<(&str, Option<Value>, Vec<String>, Decision)> = vec![
            ("absent", None, vec![], Decision::Leave(Leave::NotPending)),
            (
                "null",
                Some(Value::Null),
                vec![],
                Decision::Leave(Leave::NotPending),
            ),
            (
                "empty pending",
                Some(json!({"pending": []})),
                vec![],
                Decision::Leave(Leave::NotPending),
            ),
            (
                "result set",
                Some(
                    json!({"pending": [{"name": "a.example.com"}], "result": {"status": "Failure"}}),
                ),
                vec![],
                Decision::Leave(Leave::Failed),
            ),
            (
                "all pending removed with the whole field",
                Some(two.clone()),
                vec![],
                removes_both(),
            ),
            (
                "--only keeps the others",
                Some(two.clone()),
                only(&["b.example.com"]),
                Decision::Clear {
                    names: only(&["b.example.com"]),
                    patch: json!([
                        {"op": "test", "path": "/metadata/initializers", "value": two},
                        {"op": "replace", "path": "/metadata/initializers/pending", "value": [{"name": "a.example.com"}]}
                    ])
                    .into(),
                },
            ),
            (
                "--only naming every pending one removes the field",
                Some(two.clone()),
                only(&["a.example.com", "b.example.com", "c.example.com"]),
                removes_both(),
            ),
            (
                "--only naming none of them",
                Some(two.clone()),
                only(&["c.example.com"]),
                Decision::Leave(Leave::NotSelected(only(&[
                    "a.example.com",
                    "b.example.com",
                ]))),
            ),
        ];
        for (what, init, only, want) in cases {
            assert_eq!(decide(init.as_ref(), None, &only), want, "{what}");
            // The server's own text, spaced otherwise, gives the same patch.
            let raw = init
                .as_ref()
                .map(|v| serde_json::to_string_pretty(v).unwrap());
            assert_eq!(
                decide(init.as_ref(), raw.as_deref(), &only),
                want,
                "{what}, raw"
            );
        }
    }
}
