// PATCH bodies: RFC 6902 JSON patch, RFC 7386 merge patch, and the strategic merge
// patch subset metainit and kubectl use (list maps merged by key, `$patch: delete`).

use serde_json::{Map, Value};

use crate::status::{self, ApiError};

/// The patch types the double accepts, by Content-Type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Result<PatchType, ApiError> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            other => Err(status::unsupported_media_type(other)),
        }
    }
}

/// Applies `body` to `current` and returns the patched object.
pub fn apply(current: &Value, kind: PatchType, body: &[u8]) -> Result<Value, ApiError> {
    let mut doc = current.clone();
    match kind {
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| status::bad_request(format!("error decoding patch: {e}")))?;
            json_patch::patch(&mut doc, &ops).map_err(|_| status::patch_unprocessable())?;
        }
        PatchType::Merge => {
            let p: Value = serde_json::from_slice(body)
                .map_err(|e| status::bad_request(format!("error decoding patch: {e}")))?;
            if !p.is_object() {
                return Err(status::bad_request(
                    "json: cannot unmarshal array into Go value of type map[string]interface {}",
                ));
            }
            json_patch::merge(&mut doc, &p);
        }
        PatchType::Strategic => {
            let p: Value = serde_json::from_slice(body)
                .map_err(|e| status::bad_request(format!("error decoding patch: {e}")))?;
            let Value::Object(p) = p else {
                return Err(status::bad_request(
                    "json: cannot unmarshal array into Go value of type map[string]interface {}",
                ));
            };
            strategic_merge(&mut doc, &p, "").map_err(status::bad_request)?;
        }
    }
    Ok(doc)
}

/// The merge key of list-map fields, by dotted path from the object root.
fn merge_key(path: &str) -> Option<&'static str> {
    let path = path.strip_prefix("spec.template.").unwrap_or(path);
    match path {
        "spec.schedulingGates"
        | "spec.containers"
        | "spec.initContainers"
        | "spec.ephemeralContainers"
        | "spec.volumes"
        | "spec.imagePullSecrets"
        | "metadata.initializers.pending"
        | "metadata.ownerReferences" => Some(if path == "metadata.ownerReferences" {
            "uid"
        } else {
            "name"
        }),
        "status.conditions" => Some("type"),
        // `patchMergeKey` of ValidatingWebhookConfiguration.webhooks and
        // MutatingWebhookConfiguration.webhooks (k8s.io/api `admissionregistration/v1/types.go`)
        // and of ServiceSpec.ports (`core/v1/types.go`).
        "webhooks" => Some("name"),
        "spec.ports" => Some("port"),
        _ => None,
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn strategic_merge(doc: &mut Value, patch: &Map<String, Value>, path: &str) -> Result<(), String> {
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut p = patch.clone();
        p.remove("$patch");
        *doc = Value::Object(p);
        return Ok(());
    }
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let Some(target) = doc.as_object_mut() else {
        return Ok(());
    };
    for (k, v) in patch {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(have)), Value::Array(remove)) = (target.get_mut(field), v) {
                have.retain(|x| !remove.contains(x));
            }
            continue;
        }
        let child = join(path, k);
        match v {
            Value::Null => {
                target.remove(k);
            }
            Value::Object(pm) => {
                let entry = target.entry(k.clone()).or_insert(Value::Null);
                strategic_merge(entry, pm, &child)?;
            }
            Value::Array(items) if child == "metadata.finalizers" => {
                // A list of strings with patch strategy "merge": a union, order kept.
                let entry = target.entry(k.clone()).or_insert(Value::Array(vec![]));
                if let Value::Array(have) = entry {
                    for item in items {
                        if !have.contains(item) {
                            have.push(item.clone());
                        }
                    }
                } else {
                    *entry = v.clone();
                }
            }
            Value::Array(items) => match merge_key(&child) {
                Some(key) => {
                    let entry = target.entry(k.clone()).or_insert(Value::Array(vec![]));
                    merge_list(entry, items, key, &child)?;
                }
                None => {
                    target.insert(k.clone(), v.clone());
                }
            },
            other => {
                target.insert(k.clone(), other.clone());
            }
        }
    }
    Ok(())
}

fn merge_list(doc: &mut Value, items: &[Value], key: &str, path: &str) -> Result<(), String> {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *doc = Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .cloned()
                .collect(),
        );
        return Ok(());
    }
    if !doc.is_array() {
        *doc = Value::Array(vec![]);
    }
    let Some(list) = doc.as_array_mut() else {
        return Ok(());
    };
    for item in items {
        let Some(obj) = item.as_object() else {
            return Err(format!("{path}: list item is not an object: {item}"));
        };
        let Some(kv) = obj.get(key) else {
            return Err(format!(
                "map: {item} does not contain declared merge key: {key}"
            ));
        };
        let pos = list.iter().position(|e| e.get(key) == Some(kv));
        if obj.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(p) = pos {
                list.remove(p);
            }
            continue;
        }
        match pos {
            Some(p) => strategic_merge(&mut list[p], obj, path)?,
            None => {
                let mut fresh = Value::Object(Map::new());
                strategic_merge(&mut fresh, obj, path)?;
                list.push(fresh);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({"metadata": {"name": "p", "labels": {"a": "1"}},
               "spec": {"schedulingGates": [{"name": "g1"}, {"name": "g2"}],
                        "containers": [{"name": "c", "image": "i"}]}})
    }

    #[test]
    fn json_patch() {
        let out = apply(
            &pod(),
            PatchType::Json,
            br#"[{"op":"remove","path":"/spec/schedulingGates"}]"#,
        )
        .unwrap();
        assert!(out["spec"].get("schedulingGates").is_none());
        let err = apply(
            &out,
            PatchType::Json,
            br#"[{"op":"remove","path":"/spec/schedulingGates"}]"#,
        )
        .unwrap_err();
        assert_eq!(err.code(), 422);
        let err = apply(
            &pod(),
            PatchType::Json,
            br#"[{"op":"test","path":"/metadata/name","value":"q"}]"#,
        )
        .unwrap_err();
        assert_eq!(err.code(), 422);
        let err = apply(&pod(), PatchType::Json, b"{").unwrap_err();
        assert_eq!(err.code(), 400);
    }

    #[test]
    fn merge_and_strategic() {
        let out = apply(
            &pod(),
            PatchType::Merge,
            br#"{"metadata":{"labels":{"a":null,"b":"2"}}}"#,
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"b": "2"}));
        let out = apply(
            &pod(),
            PatchType::Strategic,
            br#"{"spec":{"schedulingGates":[{"name":"g1","$patch":"delete"}],"containers":[{"name":"c","image":"j"}]}}"#,
        )
        .unwrap();
        assert_eq!(out["spec"]["schedulingGates"], json!([{"name": "g2"}]));
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "c", "image": "j"}])
        );
        let out = apply(
            &json!({"status": {"conditions": [{"type": "A", "status": "False"}]}}),
            PatchType::Strategic,
            br#"{"status":{"conditions":[{"type":"B","status":"True"}]}}"#,
        )
        .unwrap();
        assert_eq!(out["status"]["conditions"].as_array().unwrap().len(), 2);
        let out = apply(
            &json!({"metadata": {"finalizers": ["a"]}}),
            PatchType::Strategic,
            br#"{"metadata":{"finalizers":["b","a"]}}"#,
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
        let out = apply(
            &out,
            PatchType::Strategic,
            br#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["a"]}}"#,
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
    }
}
