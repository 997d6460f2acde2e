// Namespaces on the modern double: real objects with the 1.33 strategy, plus a leniency for
// namespaces that hold objects but were never created.
//
// The strategy (kubernetes `pkg/registry/core/namespace/strategy.go`, 1.33.4):
// `PrepareForCreate` sets `status.phase: Active` and adds the `kubernetes` finalizer to
// `spec.finalizers`; `PrepareForUpdate` keeps the old `spec.finalizers` and `status`;
// `Canonicalize` sets the label `kubernetes.io/metadata.name` to the name on every create
// and update (the NamespaceDefaultLabelName feature, GA in 1.22), so the label can be
// neither removed nor changed: whatever a write says, the stored label is the name.
//
// Leniency, knowingly kept: a real server refuses to create an object in a namespace that
// does not exist (the NamespaceLifecycle admission plugin: 404 `namespaces "x" not found`).
// Tests of this project create pods in `default`, `kube-system` and arbitrary namespaces
// without creating them first, so the double keeps allowing it. Such an *implicit*
// namespace (`default`, `kube-system`, or any namespace holding an object, and not
// stored) is listed and returned by GET as a Namespace carrying only the label
// `kubernetes.io/metadata.name: NAME` (no uid, resourceVersion or creationTimestamp; no
// watch event when it appears). Its first PUT or PATCH stores it (ADDED); creating it
// (POST) stores it as any new namespace.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::store::Inner;

pub const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Namespaces the NamespaceLifecycle admission plugin never lets anyone delete
/// (k8s.io/apiserver `pkg/admission/plugin/namespace/lifecycle/admission.go`, `Register`:
/// `metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic`).
pub const IMMORTAL: &[&str] = &["default", "kube-system", "kube-public"];

/// Namespaces a fresh double treats as existing although nothing was created in them.
const ALWAYS: &[&str] = &["default", "kube-system"];

fn set_name_label(obj: &mut Value, name: &str) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    if let Some(l) = labels.as_object_mut() {
        l.insert(NAME_LABEL.into(), json!(name));
    }
}

/// `PrepareForCreate` and `Canonicalize`.
pub fn on_create(obj: &mut Value, name: &str) {
    if let Some(o) = obj.as_object_mut() {
        o.insert("status".into(), json!({"phase": "Active"}));
        let spec = o.entry("spec").or_insert_with(|| json!({}));
        if !spec.is_object() {
            *spec = json!({});
        }
        if let Some(s) = spec.as_object_mut() {
            let fins = s.entry("finalizers").or_insert_with(|| json!([]));
            if !fins.is_array() {
                *fins = json!([]);
            }
            if let Some(f) = fins.as_array_mut()
                && !f.iter().any(|x| x == "kubernetes")
            {
                f.push(json!("kubernetes"));
            }
        }
    }
    set_name_label(obj, name);
}

/// `PrepareForUpdate` (the main resource) and `Canonicalize`.
pub fn on_update(new: &mut Value, old: &Value, name: &str) {
    if let Some(o) = new.as_object_mut() {
        match old.get("status") {
            Some(s) => o.insert("status".into(), s.clone()),
            None => o.remove("status"),
        };
        let fins = old.pointer("/spec/finalizers").cloned();
        let spec = o.entry("spec").or_insert_with(|| json!({}));
        if let Some(s) = spec.as_object_mut() {
            match fins {
                Some(f) => s.insert("finalizers".into(), f),
                None => s.remove("finalizers"),
            };
        }
    }
    set_name_label(new, name);
}

/// What GET answers for an implicit namespace.
pub fn implicit_object(name: &str) -> Value {
    json!({
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": {"name": name, "labels": {NAME_LABEL: name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

/// Whether `name` is an implicit namespace (not stored, but `default`, `kube-system` or
/// holding an object).
pub fn is_implicit(inner: &Inner, name: &str) -> bool {
    !name.is_empty()
        && inner.get("namespaces", "", name).is_none()
        && (ALWAYS.contains(&name) || inner.holds_objects(name))
}

/// Every implicit namespace as (key, object), in key order.
pub fn implicit_entries(inner: &Inner) -> Vec<((String, String), Arc<Value>)> {
    let mut names: BTreeMap<String, ()> = ALWAYS.iter().map(|n| (n.to_string(), ())).collect();
    for n in inner.namespaces() {
        names.insert(n, ());
    }
    names
        .into_keys()
        .filter(|n| inner.get("namespaces", "", n).is_none())
        .map(|n| {
            let obj = Arc::new(implicit_object(&n));
            ((String::new(), n), obj)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_label_cannot_be_changed_or_removed() {
        let mut ns = json!({"metadata": {"name": "a", "labels": {NAME_LABEL: "b", "x": "1"}}});
        on_create(&mut ns, "a");
        assert_eq!(ns["metadata"]["labels"][NAME_LABEL], "a");
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(ns["status"]["phase"], "Active");
        let old = ns.clone();
        let mut new = json!({"metadata": {"name": "a"}, "spec": {"finalizers": []}, "status": {"phase": "Terminating"}});
        on_update(&mut new, &old, "a");
        assert_eq!(new["metadata"]["labels"], json!({NAME_LABEL: "a"}));
        assert_eq!(new["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(new["status"]["phase"], "Active");
    }
}
