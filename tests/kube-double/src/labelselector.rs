// metav1.LabelSelector in its JSON form (`matchLabels`, `matchExpressions`), as webhook
// `namespaceSelector` and `objectSelector` hold it: validation with the real field errors
// (k8s.io/apimachinery `pkg/apis/meta/v1/validation/validation.go`, 1.33.4:
// `ValidateLabelSelector`, `ValidateLabelSelectorRequirement`, `ValidateLabels`), the
// round trip that drops empty fields (`omitempty` on `matchLabels`, `matchExpressions`,
// `values`), and matching (`LabelSelectorAsSelector`, `pkg/apis/meta/v1/helpers.go`).

use serde_json::{Map, Value};

use crate::status::Cause;
use crate::validation::{self, quote};

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The field errors of a selector at `path` (`webhooks[0].namespaceSelector`).
pub fn validate(selector: &Value, path: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    let labels_path = format!("{path}.matchLabels");
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            for m in validation::qualified_name(k) {
                out.push(Cause::invalid(&labels_path, quote(k), m));
            }
            let v = v.as_str().unwrap_or_default();
            for m in validation::label_value(v) {
                out.push(Cause::invalid(&labels_path, quote(v), m));
            }
        }
    }
    let exprs = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, e) in exprs.iter().enumerate() {
        let p = format!("{path}.matchExpressions[{i}]");
        let op = e
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let values = strings(e.get("values"));
        match op {
            "In" | "NotIn" if values.is_empty() => out.push(Cause::required(
                format!("{p}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => out.push(Cause::forbidden(
                format!("{p}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => out.push(Cause::invalid(
                format!("{p}.operator"),
                quote(other),
                "not a valid selector operator",
            )),
        }
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        for m in validation::qualified_name(key) {
            out.push(Cause::invalid(format!("{p}.key"), quote(key), m));
        }
        for (j, v) in values.iter().enumerate() {
            for m in validation::label_value(v) {
                out.push(Cause::invalid(format!("{p}.values[{j}]"), quote(v), m));
            }
        }
    }
    out
}

/// What the stored selector looks like after Go decodes and encodes it: empty or null
/// `matchLabels`, `matchExpressions` and `values` are dropped (all `omitempty`).
pub fn canonical(selector: &mut Value) {
    let Some(m) = selector.as_object_mut() else {
        return;
    };
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    for k in ["matchLabels", "matchExpressions"] {
        if m.get(k).is_some_and(empty) {
            m.remove(k);
        }
    }
    if let Some(exprs) = m.get_mut("matchExpressions").and_then(Value::as_array_mut) {
        for e in exprs.iter_mut().filter_map(Value::as_object_mut) {
            if e.get("values").is_some_and(empty) {
                e.remove("values");
            }
        }
    }
}

/// Whether `labels` satisfy the (valid) selector; `{}` matches everything.
pub fn matches(selector: &Value, labels: &Map<String, Value>) -> bool {
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    if let Some(ml) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in ml {
            if get(k) != v.as_str() {
                return false;
            }
        }
    }
    let exprs = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    exprs.iter().all(|e| {
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        let values = strings(e.get("values"));
        let have = get(key);
        match e
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "In" => have.is_some_and(|h| values.iter().any(|v| v == h)),
            "NotIn" => !have.is_some_and(|h| values.iter().any(|v| v == h)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            // Refused by validation; `LabelSelectorAsSelector` fails on it.
            _ => false,
        }
    })
}

/// True for `{}` (or a selector whose fields are all empty): matches everything.
pub fn is_empty(selector: &Value) -> bool {
    let mut s = selector.clone();
    canonical(&mut s);
    s.as_object()
        .is_none_or(|m| !m.contains_key("matchLabels") && !m.contains_key("matchExpressions"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn validation_and_matching() {
        let bad = json!({"matchExpressions": [
            {"key": "a", "operator": "In"},
            {"key": "b", "operator": "Exists", "values": ["x"]},
            {"key": "c/d/e", "operator": "Near", "values": ["x"]},
        ]});
        let causes = validate(&bad, "webhooks[0].namespaceSelector");
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "webhooks[0].namespaceSelector.matchExpressions[0].values",
                "webhooks[0].namespaceSelector.matchExpressions[1].values",
                "webhooks[0].namespaceSelector.matchExpressions[2].operator",
                "webhooks[0].namespaceSelector.matchExpressions[2].key",
            ]
        );
        assert_eq!(
            causes[0].message,
            "Required value: must be specified when `operator` is 'In' or 'NotIn'"
        );
        let sel = json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["gk"]}]});
        let ns = |n: &str| {
            json!({"kubernetes.io/metadata.name": n})
                .as_object()
                .cloned()
                .unwrap()
        };
        assert!(!matches(&sel, &ns("gk")));
        assert!(matches(&sel, &ns("team-a")));
        assert!(matches(&json!({}), &ns("gk")));
        let mut s = json!({"matchExpressions": [], "matchLabels": {}});
        canonical(&mut s);
        assert_eq!(s, json!({}));
        assert!(is_empty(&json!({"matchExpressions": []})));
    }
}
