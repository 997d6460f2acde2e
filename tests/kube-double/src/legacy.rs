// Kubernetes 1.13 alpha initializers: admission on create and update, visibility,
// and the creator's POST that blocks until the object is initialized.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::auth::Caller;
use crate::config::InitializerRule;
use crate::resources::ResourceInfo;
use crate::state::Shared;
use crate::status::{self, ApiError, Cause};
use crate::store::ChangeKind;

const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// `metadata.initializers` if present and not null.
pub fn initializers(obj: &Value) -> Option<&Value> {
    obj.pointer("/metadata/initializers")
        .filter(|v| !v.is_null())
}

/// Whether a request without `includeUninitialized=true` may see the object.
pub fn is_initialized(obj: &Value) -> bool {
    initializers(obj).is_none()
}

fn pending_is_empty(init: &Value) -> bool {
    init.get("pending")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
}

fn result(init: &Value) -> Option<&Value> {
    init.get("result").filter(|v| !v.is_null())
}

/// The initializer result, if the object is being rejected.
pub fn failure(obj: &Value) -> Option<&Value> {
    initializers(obj).and_then(result)
}

fn remove_initializers(obj: &mut Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("initializers");
    }
}

fn canonical_initializers(obj: &mut Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut)
        && m.get("initializers").is_some_and(Value::is_null)
    {
        m.remove("initializers");
    }
}

/// Names of the configured initializers that apply to a resource.
pub fn names_for(rules: &[InitializerRule], res: &ResourceInfo) -> Vec<String> {
    rules
        .iter()
        .filter(|r| r.resources.iter().any(|x| x == &res.key || x == "*"))
        .map(|r| r.name.clone())
        .collect()
}

fn can_initialize(
    caller: &Caller,
    res: &ResourceInfo,
    name: &str,
    message: &str,
) -> Result<(), ApiError> {
    // 1.13.12 `canInitialize` (`plugin/pkg/admission/initialization/initialization.go`):
    // `errors.NewForbidden(resource, name, fmt.Errorf("%s: %s", message, reason))`, the
    // reason being the authorizer's, which RBAC leaves empty when no rule matches (it
    // only reports errors resolving roles): `pods "p" is forbidden: update to
    // uninitialized resource denied: `.
    if caller.can("initialize", &res.key) {
        return Ok(());
    }
    Err(status::forbidden(res, name, &format!("{message}: ")))
}

/// The Initializers admission plugin on create.
pub fn admit_create(
    obj: &mut Value,
    rules: &[InitializerRule],
    res: &ResourceInfo,
    name: &str,
    caller: &Caller,
) -> Result<(), ApiError> {
    canonical_initializers(obj);
    if let Some(init) = initializers(obj) {
        can_initialize(caller, res, name, "create with initializers denied")?;
        if pending_is_empty(init) && result(init).is_none() {
            remove_initializers(obj);
        }
        return Ok(());
    }
    if res.is_pods()
        && obj
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(MIRROR_ANNOTATION))
            .is_some()
    {
        return Ok(());
    }
    let names = names_for(rules, res);
    if names.is_empty() {
        return Ok(());
    }
    let pending: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("initializers".into(), json!({"pending": pending}));
    }
    Ok(())
}

/// The Initializers admission plugin on update: the transition rules of
/// ValidateInitializersUpdate, then the `initialize` permission.
pub fn admit_update(
    new: &mut Value,
    old: &Value,
    res: &ResourceInfo,
    name: &str,
    caller: &Caller,
) -> Result<(), ApiError> {
    canonical_initializers(new);
    let existing = initializers(old).cloned();
    if initializers(new).is_none() && existing.is_none() {
        return Ok(());
    }
    if let Some(init) = initializers(new)
        && pending_is_empty(init)
        && result(init).is_none()
    {
        remove_initializers(new);
    }
    let updated = initializers(new).cloned();
    let field = "metadata.initializers";
    let mut causes = Vec::new();
    match (&existing, &updated) {
        (None, Some(_)) => causes.push(Cause::invalid(
            field,
            "\"null\"",
            "field is immutable once initialization has completed",
        )),
        (Some(old_init), Some(new_init)) => match (result(old_init), result(new_init)) {
            (None, Some(r)) => {
                let st = r.get("status").and_then(Value::as_str).unwrap_or("");
                if st != "Failure" {
                    causes.push(Cause::invalid(
                        format!("{field}.result.status"),
                        format!("\"{st}\""),
                        "must be 'Failure'",
                    ));
                }
            }
            (Some(a), b) if Some(a) != b => causes.push(Cause::invalid(
                format!("{field}.result"),
                b.map_or_else(|| "\"null\"".to_string(), |v| v.to_string()),
                "field is immutable",
            )),
            _ => {}
        },
        _ => {}
    }
    if !causes.is_empty() {
        return Err(status::invalid(res, name, &causes));
    }
    can_initialize(caller, res, name, "update to uninitialized resource denied")
}

/// Blocks a creator until its object is initialized (201 with the object), fails
/// (the initializer's Status), is deleted (500), or the request times out (504).
pub async fn wait_initialized(
    shared: &Shared,
    res: &ResourceInfo,
    ns: &str,
    name: &str,
    created: Arc<Value>,
    timeout: Duration,
) -> Result<Arc<Value>, ApiError> {
    let uid = created
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut cursor: u64 = created
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut rx = shared.store.subscribe();
    let wait = async {
        loop {
            let outcome = {
                let mut inner = shared.store.lock();
                check(&mut inner, res, ns, name, &uid, &mut cursor)
            };
            if let Some(o) = outcome {
                return o;
            }
            if rx.changed().await.is_err() {
                return Err(status::internal("the store was closed"));
            }
        }
    };
    match tokio::time::timeout(timeout, wait).await {
        Ok(r) => r,
        Err(_) => Err(status::post_timeout(timeout)),
    }
}

fn object_uid(obj: &Value) -> &str {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn deleted_outcome(
    inner: &mut crate::store::Inner,
    uid: &str,
    last: Option<&Value>,
) -> Result<Arc<Value>, ApiError> {
    if let Some(st) = inner.take_failed(uid) {
        return Err(status::from_result(&st));
    }
    if let Some(r) = last.and_then(failure) {
        return Err(status::from_result(r));
    }
    Err(status::internal(
        "object deleted while waiting for creation",
    ))
}

fn check(
    inner: &mut crate::store::Inner,
    res: &ResourceInfo,
    ns: &str,
    name: &str,
    uid: &str,
    cursor: &mut u64,
) -> Option<Result<Arc<Value>, ApiError>> {
    match inner.events_after(*cursor, usize::MAX) {
        Ok(events) => {
            for e in events {
                *cursor = e.rv;
                if e.resource != res.key || e.namespace != ns || e.name != name {
                    continue;
                }
                if object_uid(&e.object) != uid {
                    continue;
                }
                match e.kind {
                    ChangeKind::Deleted => {
                        return Some(deleted_outcome(inner, uid, Some(&e.object)));
                    }
                    _ if is_initialized(&e.object) => return Some(Ok(e.object.clone())),
                    // 1.13.12 `WaitForInitialized`: a MODIFIED event with a result ends
                    // the wait with that Status (the DELETED follows).
                    _ => {
                        if let Some(r) = failure(&e.object) {
                            let st = inner.take_failed(uid).unwrap_or_else(|| r.clone());
                            return Some(Err(status::from_result(&st)));
                        }
                    }
                }
            }
            None
        }
        // The change log moved past us: decide from the current state.
        Err(_) => {
            *cursor = inner.revision();
            match inner.get(&res.key, ns, name) {
                Some(o) if object_uid(&o) == uid => {
                    if is_initialized(&o) {
                        Some(Ok(o))
                    } else {
                        None
                    }
                }
                _ => Some(deleted_outcome(inner, uid, None)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> ResourceInfo {
        ResourceInfo::new("pods")
    }

    #[test]
    fn create_fills_pending_from_rules() {
        let rules = vec![InitializerRule {
            name: "a.example.com".into(),
            resources: vec!["pods".into()],
        }];
        let mut o = json!({"metadata": {"name": "x"}});
        admit_create(&mut o, &rules, &pods(), "x", &Caller::everything()).unwrap();
        assert_eq!(
            o["metadata"]["initializers"]["pending"][0]["name"],
            "a.example.com"
        );
        let mut mirror =
            json!({"metadata": {"name": "x", "annotations": {MIRROR_ANNOTATION: "1"}}});
        admit_create(&mut mirror, &rules, &pods(), "x", &Caller::everything()).unwrap();
        assert!(is_initialized(&mirror));
        let mut bypass = json!({"metadata": {"name": "x", "initializers": {"pending": []}}});
        admit_create(&mut bypass, &rules, &pods(), "x", &Caller::everything()).unwrap();
        assert!(is_initialized(&bypass));
    }

    #[test]
    fn update_rules() {
        let c = Caller::everything();
        let old = json!({"metadata": {"initializers": {"pending": [{"name": "a"}]}}});
        let mut cleared = json!({"metadata": {"initializers": {"pending": []}}});
        admit_update(&mut cleared, &old, &pods(), "x", &c).unwrap();
        assert!(is_initialized(&cleared));

        let mut readd = json!({"metadata": {"initializers": {"pending": [{"name": "a"}]}}});
        let e = admit_update(&mut readd, &json!({"metadata": {}}), &pods(), "x", &c).unwrap_err();
        assert_eq!(
            e.status["message"],
            "Pod \"x\" is invalid: metadata.initializers: Invalid value: \"null\": field is immutable once initialization has completed"
        );

        let failed = json!({"metadata": {"initializers": {"pending": [], "result": {"status": "Failure", "message": "no"}}}});
        let mut changed = json!({"metadata": {"initializers": {"pending": [], "result": {"status": "Failure", "message": "other"}}}});
        let e = admit_update(&mut changed, &failed, &pods(), "x", &c).unwrap_err();
        assert_eq!(e.code(), 422);
    }
}
