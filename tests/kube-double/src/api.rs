// The API operations (create, get, list, update, patch, delete) with the admission and
// validation both generations apply; shared by the HTTP routes and the library handle.

use std::sync::Arc;
use std::time::SystemTime;

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::auth::Caller;
use crate::config::{Generation, Rejection};
use crate::legacy;
use crate::modern;
use crate::namespaces;
use crate::patch::{self, PatchType};
use crate::resources::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::state::{Shared, format_time, now_rfc3339};
use crate::status::{self, ApiError, Cause};
use crate::store::Inner;
use crate::strategy;
use crate::validation;

/// Options of a LIST (or the filtering part of a WATCH).
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub include_uninitialized: bool,
}

impl ListOptions {
    /// Whether an object passes the namespace, selectors and initialization filters.
    pub fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && obj.pointer("/metadata/namespace").and_then(Value::as_str) != Some(ns)
        {
            return false;
        }
        (self.include_uninitialized || legacy::is_initialized(obj))
            && self.labels.matches_object(obj)
            && self.fields.matches_object(obj)
    }
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn meta_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let o = obj.as_object_mut()?;
    let m = o.entry("metadata").or_insert_with(|| json!({}));
    if !m.is_object() {
        *m = json!({});
    }
    m.as_object_mut()
}

/// The name rule of a resource's `ValidateObjectMeta`: RFC 1123 label for namespaces
/// (`ValidateNamespaceName`), RFC 1035 label for services (`ValidateServiceName`), RFC 1123
/// subdomain for everything else the double serves (kubernetes
/// `pkg/apis/core/validation/validation.go`, 1.33.4).
fn name_errors(res: &ResourceInfo, name: &str) -> Vec<String> {
    if res.is_namespaces() {
        validation::dns1123_label(name)
    } else if res.key == "services" {
        validation::dns1035_label(name)
    } else {
        validation::dns1123_subdomain(name)
    }
}

/// Fields the client may not set or change, and the kind/apiVersion of the resource.
/// Empty or null `labels`, `annotations`, `finalizers` and `ownerReferences` are dropped,
/// as the server's decode and encode drop them (`omitempty` on ObjectMeta's fields,
/// k8s.io/apimachinery `pkg/apis/meta/v1/types.go`): a patch that removes the last
/// annotation leaves no `annotations` key.
fn normalize(obj: &mut Value, res: &ResourceInfo) {
    if let Some(o) = obj.as_object_mut() {
        o.insert("kind".into(), json!(res.kind));
        o.insert("apiVersion".into(), json!(res.api_version()));
    }
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in ["labels", "annotations", "finalizers", "ownerReferences"] {
            let empty = match m.get(k) {
                Some(Value::Null) => true,
                Some(Value::Object(x)) => x.is_empty(),
                Some(Value::Array(x)) => x.is_empty(),
                _ => false,
            };
            if empty {
                m.remove(k);
            }
        }
    }
}

fn drop_unknown_fields(obj: &mut Value, res: &ResourceInfo, generation: Generation) {
    match generation {
        // 1.33 has no metadata.initializers: an unknown field, silently dropped.
        Generation::Modern => {
            if let Some(m) = meta_mut(obj) {
                m.remove("initializers");
            }
        }
        // 1.13 has no spec.schedulingGates.
        Generation::Legacy => {
            if res.is_pods()
                && let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
            {
                spec.remove("schedulingGates");
            }
        }
    }
}

/// Deployments always had `metadata.generation`; pods have it since 1.33.
fn tracks_generation(res: &ResourceInfo, generation: Generation) -> bool {
    res.is_deployments() || (res.is_pods() && generation == Generation::Modern)
}

/// POST: admission, validation and storage; never blocks (see `legacy::wait_initialized`).
pub fn create(
    shared: &Shared,
    res: &ResourceInfo,
    namespace: &str,
    obj: Value,
    caller: &Caller,
) -> Result<Arc<Value>, ApiError> {
    create_at(shared, res, namespace, obj, caller, None)
}

/// `create` with the server's clock read as `created` (`None`: now) for every time it
/// stamps on the new object: `metadata.creationTimestamp` (set by
/// `rest.FillObjectMetaSystemFields`, whatever the client sent) and, for a gated pod,
/// the `PodScheduled` condition's `lastTransitionTime`. Stored in one write: one ADDED
/// event, one resourceVersion.
pub fn create_at(
    shared: &Shared,
    res: &ResourceInfo,
    namespace: &str,
    mut obj: Value,
    caller: &Caller,
    created: Option<SystemTime>,
) -> Result<Arc<Value>, ApiError> {
    let namespace = if res.namespaced { namespace } else { "" };
    if !obj.is_object() {
        return Err(status::bad_request(format!(
            "the body of the request was not a {} object",
            res.kind
        )));
    }
    let generation = shared.config.generation;
    // `rest.EnsureObjectNamespaceMatchesRequestNamespace` (k8s.io/apiserver
    // `pkg/registry/rest/meta.go`): a cluster-scoped object's namespace is cleared, a
    // namespaced object's must be the URL's.
    let body_ns = meta_str(&obj, "namespace").to_string();
    if !res.namespaced {
        if let Some(m) = meta_mut(&mut obj) {
            m.remove("namespace");
        }
    } else if !body_ns.is_empty() && body_ns != namespace {
        return Err(status::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let mut name = meta_str(&obj, "name").to_string();
    let generate = meta_str(&obj, "generateName").to_string();
    if name.is_empty() && !generate.is_empty() {
        name = format!("{generate}{}", shared.name_suffix());
    }
    if name.is_empty() {
        return Err(status::invalid(
            res,
            "",
            &[Cause::required(
                "metadata.name",
                "name or generateName is required",
            )],
        ));
    }
    let bad_name: Vec<Cause> = name_errors(res, &name)
        .into_iter()
        .map(|m| Cause::invalid("metadata.name", validation::quote(&name), m))
        .collect();
    if !bad_name.is_empty() {
        return Err(status::invalid(res, &name, &bad_name));
    }
    if !meta_str(&obj, "resourceVersion").is_empty() {
        return Err(status::internal(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    normalize(&mut obj, res);
    drop_unknown_fields(&mut obj, res, generation);
    let now = created.map_or_else(now_rfc3339, format_time);
    let uid = shared.uid();
    if let Some(m) = meta_mut(&mut obj) {
        m.insert("name".into(), json!(name));
        if res.namespaced {
            m.insert("namespace".into(), json!(namespace));
        }
        m.insert("uid".into(), json!(uid));
        m.insert("creationTimestamp".into(), json!(now));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("selfLink");
        if tracks_generation(res, generation) {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
    }
    if generation == Generation::Legacy {
        legacy::admit_create(&mut obj, &shared.config.initializers, res, &name, caller)?;
    }
    if let Some(o) = obj.as_object_mut() {
        if res.is_pods() {
            o.insert(
                "status".into(),
                json!({"phase": "Pending", "qosClass": "BestEffort"}),
            );
        } else if res.is_deployments() {
            o.insert("status".into(), json!({}));
        }
    }
    if res.is_pods() && generation == Generation::Modern {
        modern::validate_create(&obj, res, &name)?;
        modern::on_create(&mut obj, &now);
        crate::pods::on_create(&mut obj, res, &name, &shared.name_suffix())?;
    }
    if generation == Generation::Modern {
        strategy::on_create(res, &mut obj, namespace, &name)?;
    }
    let gates = (res.is_pods() && generation == Generation::Modern)
        .then(|| obj.pointer("/spec/schedulingGates").cloned())
        .flatten()
        .filter(|g| g.as_array().is_some_and(|a| !a.is_empty()));
    let mut inner = shared.store.lock();
    if inner.get(&res.key, namespace, &name).is_some() {
        return Err(status::already_exists(res, &name));
    }
    if let Some(g) = gates {
        inner.set_created_with(&uid, g);
    }
    Ok(inner.put(&res.key, namespace, &name, obj))
}

/// Deletes an object at once (finalizers and preconditions ignored: one DELETED event)
/// and creates it again from its stored state without the server-set fields, as a
/// controller replacing it from the same template would: a new uid, admission again
/// (legacy: pending initializers filled from the rules; modern pods: the scheduling
/// gates they were created with, hence pending again).
pub fn recreate(
    shared: &Shared,
    res: &ResourceInfo,
    namespace: &str,
    name: &str,
) -> Result<Arc<Value>, ApiError> {
    let generation = shared.config.generation;
    let (mut obj, gates) = {
        let mut inner = shared.store.lock();
        let current = inner
            .get(&res.key, namespace, name)
            .ok_or_else(|| status::not_found(res, name))?;
        let gates = inner.created_with(meta_str(&current, "uid")).cloned();
        inner.remove(&res.key, namespace, name);
        ((*current).clone(), gates)
    };
    if let Some(m) = meta_mut(&mut obj) {
        for f in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "initializers",
        ] {
            m.remove(f);
        }
    }
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
    if let Some(g) = gates
        && res.is_pods()
        && generation == Generation::Modern
        && let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.insert("schedulingGates".into(), g);
    }
    create(shared, res, namespace, obj, &Caller::everything())
}

/// GET of one object, initialized or not: 1.13.12 `Store.Get`
/// (`pkg/registry/generic/registry/store.go`) reads the key with no initialization
/// filter (only LIST and WATCH take `IncludeUninitialized` into their predicate), and
/// the 1.13 e2e test (`test/e2e/apimachinery/initializers.go`) GETs uninitialized pods
/// without the flag.
pub fn get(
    shared: &Shared,
    res: &ResourceInfo,
    namespace: &str,
    name: &str,
) -> Result<Arc<Value>, ApiError> {
    let inner = shared.store.lock();
    current(&inner, res, namespace, name).ok_or_else(|| status::not_found(res, name))
}

/// The stored object, or for `namespaces` an implicit one (see `namespaces.rs`).
fn current(inner: &Inner, res: &ResourceInfo, namespace: &str, name: &str) -> Option<Arc<Value>> {
    inner.get(&res.key, namespace, name).or_else(|| {
        (res.is_namespaces() && namespaces::is_implicit(inner, name))
            .then(|| Arc::new(namespaces::implicit_object(name)))
    })
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    v: String,
    rv: u64,
    start: String,
}

pub fn encode_continue(rv: u64, namespace: &str, name: &str) -> String {
    let token = ContinueToken {
        v: "meta.k8s.io/v1".into(),
        rv,
        start: format!("{namespace}/{name}\u{0}"),
    };
    let bytes = serde_json::to_vec(&token).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE.encode(bytes)
}

fn decode_continue(token: &str) -> Result<(u64, (String, String)), ApiError> {
    // 1.13.12 (etcd3/store.go) and 1.33.4 (storage/interfaces.go) alike: "invalid continue
    // token: " before the decoder's own words, which are Go's.
    let bad = |why: &str| {
        status::bad_request(format!(
            "invalid continue token: continue key is not valid: {why}"
        ))
    };
    let bytes = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .or_else(|_| base64::engine::general_purpose::STANDARD.decode(token))
        .map_err(|e| match e {
            base64::DecodeError::InvalidByte(at, _)
            | base64::DecodeError::InvalidLastSymbol(at, _) => {
                bad(&format!("illegal base64 data at input byte {at}"))
            }
            _ => bad(&format!(
                "illegal base64 data at input byte {}",
                token.len()
            )),
        })?;
    let t: ContinueToken = serde_json::from_slice(&bytes).map_err(|e| bad(&e.to_string()))?;
    if t.v != "meta.k8s.io/v1" {
        return Err(bad(
            "incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        ));
    }
    let start = t.start.trim_end_matches('\u{0}');
    let (ns, name) = start.split_once('/').unwrap_or(("", start));
    Ok((t.rv, (ns.to_string(), name.to_string())))
}

/// A stored object's key: namespace and name.
type StoreKey = (String, String);

/// LIST: `{kind: PodList, apiVersion, metadata: {resourceVersion, continue?, remainingItemCount?}, items}`.
pub fn list(shared: &Shared, res: &ResourceInfo, opts: &ListOptions) -> Result<Value, ApiError> {
    list_with(shared, res, opts, |meta, items, _| {
        json!({
            "kind": res.list_kind(),
            "apiVersion": res.api_version(),
            "metadata": meta,
            "items": items.iter().map(|(_, v)| (***v).clone()).collect::<Vec<Value>>(),
        })
    })
}

/// `list` written out as its response body: each item's JSON as written when it was stored
/// (`Inner::encoded`), else written from where it is stored, never copied first (at 100,000
/// pods, copying and then writing each page was most of the double's time).
pub fn list_body(
    shared: &Shared,
    res: &ResourceInfo,
    opts: &ListOptions,
) -> Result<Vec<u8>, ApiError> {
    list_with(shared, res, opts, |meta, items, inner| {
        let mut out = Vec::with_capacity(256 + items.len() * 1024);
        let head =
            json!({"kind": res.list_kind(), "apiVersion": res.api_version(), "metadata": meta});
        let head = serde_json::to_vec(&head).unwrap_or_default();
        // `{...}` without its closing brace, then `,"items":[...]}`.
        out.extend_from_slice(&head[..head.len() - 1]);
        out.extend_from_slice(br#","items":["#);
        for (i, (key, item)) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            match inner.encoded(&res.key, key, item) {
                Some(json) => out.extend_from_slice(json),
                None => {
                    let _ = serde_json::to_writer(&mut out, &***item);
                }
            }
        }
        out.extend_from_slice(b"]}");
        out
    })
}

/// The list's metadata and items, handed to `f` under the store's lock.
fn list_with<R>(
    shared: &Shared,
    res: &ResourceInfo,
    opts: &ListOptions,
    f: impl FnOnce(Map<String, Value>, &[(&StoreKey, &Arc<Value>)], &Inner) -> R,
) -> Result<R, ApiError> {
    let inner = shared.store.lock();
    let (list_rv, start) = match &opts.continue_token {
        Some(t) if !t.is_empty() => {
            let (rv, start) = decode_continue(t)?;
            if rv < inner.continue_floor() {
                return Err(status::continue_expired());
            }
            (rv, Some(start))
        }
        _ => (inner.revision(), None),
    };
    let implicit = if res.is_namespaces() {
        namespaces::implicit_entries(&inner)
    } else {
        Vec::new()
    };
    let candidates: Box<dyn Iterator<Item = (&StoreKey, &Arc<Value>)>> = if implicit.is_empty() {
        inner.range_iter(&res.key, opts.namespace.as_deref(), start.as_ref())
    } else {
        let mut all = inner.range(&res.key, opts.namespace.as_deref(), start.as_ref());
        all.extend(
            implicit
                .iter()
                .filter(|(k, _)| start.as_ref().is_none_or(|s| k > s))
                .map(|(k, v)| (k, v)),
        );
        all.sort_by(|a, b| a.0.cmp(b.0));
        Box::new(all.into_iter())
    };
    let limit = opts.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
    // `remainingItemCount` is given only for a list without selectors (below): with one,
    // a page stops at the first match past it, as the real server's does (so a page of
    // 500 out of 100,000 pods does not test all that follow).
    let counting = opts.labels.is_empty() && opts.fields.is_empty();
    let mut items = Vec::new();
    let mut last: Option<&(String, String)> = None;
    let mut remaining = 0usize;
    for (key, obj) in candidates {
        if !opts.matches(obj) {
            continue;
        }
        if items.len() < limit {
            items.push((key, obj));
            last = Some(key);
        } else {
            remaining += 1;
            if !counting {
                break;
            }
        }
    }
    let mut meta = Map::new();
    meta.insert("resourceVersion".into(), json!(list_rv.to_string()));
    if remaining > 0
        && let Some((ns, name)) = last
    {
        meta.insert("continue".into(), json!(encode_continue(list_rv, ns, name)));
        // `remainingItemCount` arrived in 1.15 (apimachinery `ListMeta`); 1.13.12 lists
        // carry only resourceVersion and continue.
        if opts.labels.is_empty()
            && opts.fields.is_empty()
            && shared.config.generation == Generation::Modern
        {
            meta.insert("remainingItemCount".into(), json!(remaining));
        }
    }
    Ok(f(meta, &items, &inner))
}

/// The namespaces holding objects, plus `default` and `kube-system`.
pub fn namespaces(shared: &Shared) -> Value {
    let inner = shared.store.lock();
    let mut names = inner.namespaces();
    for n in ["default", "kube-system"] {
        if !names.iter().any(|x| x == n) {
            names.push(n.to_string());
        }
    }
    names.sort();
    let items: Vec<Value> = names
        .iter()
        .map(|n| {
            json!({
                "kind": "Namespace",
                "apiVersion": "v1",
                "metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            })
        })
        .collect();
    json!({
        "kind": "NamespaceList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": inner.revision().to_string()},
        "items": items,
    })
}

/// Where an update came from: a full PUT or a PATCH (which may leave resourceVersion as is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    Main,
    Status,
}

/// PUT semantics shared by update and patch: preconditions, admission, store.
/// `reject` is `Faults::reject_writes` for API requests (`None` from the library).
#[allow(clippy::too_many_arguments)]
pub fn update(
    shared: &Shared,
    res: &ResourceInfo,
    namespace: &str,
    name: &str,
    obj: Value,
    caller: &Caller,
    sub: Subresource,
    reject: Option<&Rejection>,
) -> Result<Arc<Value>, ApiError> {
    let namespace = if res.namespaced { namespace } else { "" };
    let mut inner = shared.store.lock();
    let old = match inner.get(&res.key, namespace, name) {
        Some(o) => o,
        // An implicit namespace is stored on its first write (see `namespaces.rs`).
        None if res.is_namespaces() && namespaces::is_implicit(&inner, name) => {
            let mut ns = namespaces::implicit_object(name);
            if let Some(m) = meta_mut(&mut ns) {
                m.insert("uid".into(), json!(shared.uid()));
                m.insert("creationTimestamp".into(), json!(now_rfc3339()));
            }
            inner.put(&res.key, "", name, ns)
        }
        None => return Err(status::not_found(res, name)),
    };
    let new = prepare_update(shared, res, namespace, name, obj, &old, caller, sub)?;
    // Validating admission runs inside the storage's update function, after the patch
    // was applied and the strategy validated (`rest.ValidateObjectUpdateFunc`, called
    // from `Store.Update`'s GuaranteedUpdate closure in
    // `staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`), and before
    // the no-op check: a refused update stores nothing and produces no watch event.
    if sub == Subresource::Main
        && let Some(r) = reject.filter(|r| name.starts_with(&r.name_prefix))
    {
        return Err(status::rejected(res, name, r.code, &r.message));
    }
    let Some(new) = new else {
        return Ok(old);
    };
    if shared.config.generation == Generation::Legacy
        && let Some(result) = legacy::failure(&new).cloned()
    {
        // An initializer rejected the object: 1.13.12 `Store.Update` stores the update
        // first (watchers with `includeUninitialized` see MODIFIED with the result), then
        // `shouldDeleteForFailedInitialization` → `deleteWithoutFinalizers` deletes it
        // (DELETED) and the update answers the object it stored
        // (`pkg/registry/generic/registry/store.go`); the creator is told why.
        let uid = meta_str(&new, "uid").to_string();
        inner.set_failed(&uid, result);
        let stored = inner.put(&res.key, namespace, name, new);
        inner.remove(&res.key, namespace, name);
        return Ok(stored);
    }
    if is_terminating(&new) && !has_finalizers(&new) {
        // The last finalizer is gone: the deletion completes.
        return inner
            .remove_as(&res.key, namespace, name, Some(new))
            .ok_or_else(|| status::not_found(res, name));
    }
    Ok(inner.put(&res.key, namespace, name, new))
}

/// Checks and completes an updated object; `None` when nothing changes.
#[allow(clippy::too_many_arguments)]
fn prepare_update(
    shared: &Shared,
    res: &ResourceInfo,
    namespace: &str,
    name: &str,
    mut new: Value,
    old: &Value,
    caller: &Caller,
    sub: Subresource,
) -> Result<Option<Value>, ApiError> {
    if !new.is_object() {
        return Err(status::bad_request(format!(
            "the body of the request was not a {} object",
            res.kind
        )));
    }
    let body_name = meta_str(&new, "name");
    if !body_name.is_empty() && body_name != name {
        return Err(status::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let body_ns = meta_str(&new, "namespace");
    if res.namespaced && !body_ns.is_empty() && body_ns != namespace {
        return Err(status::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let want_rv = meta_str(&new, "resourceVersion");
    if !want_rv.is_empty() && want_rv != meta_str(old, "resourceVersion") {
        return Err(status::conflict(res, name));
    }
    if sub == Subresource::Status {
        let mut merged = old.clone();
        if let (Some(o), Some(s)) = (merged.as_object_mut(), new.get("status")) {
            o.insert("status".into(), s.clone());
        }
        new = merged;
    }
    let generation = shared.config.generation;
    normalize(&mut new, res);
    drop_unknown_fields(&mut new, res, generation);
    if let Some(m) = meta_mut(&mut new) {
        for f in [
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            match old.get("metadata").and_then(|om| om.get(f)) {
                Some(v) => m.insert(f.into(), v.clone()),
                None => m.remove(f),
            };
        }
        m.insert("name".into(), json!(name));
        if res.namespaced {
            m.insert("namespace".into(), json!(namespace));
        } else {
            m.remove("namespace");
        }
        m.remove("resourceVersion");
        m.remove("selfLink");
    }
    if sub == Subresource::Main && (res.is_pods() || res.is_deployments()) {
        // The main resource ignores status changes (only /status writes it).
        if let Some(o) = new.as_object_mut() {
            match old.get("status") {
                Some(s) => o.insert("status".into(), s.clone()),
                None => o.remove("status"),
            };
        }
    }
    match generation {
        // The Initializers plugin "returns early for any subresource" (1.13.12
        // `initializer.Admit`: `if len(a.GetSubresource()) > 0 { return nil }`), so a
        // `/status` write of an uninitialized object needs no `initialize` verb.
        Generation::Legacy if sub == Subresource::Main => {
            legacy::admit_update(&mut new, old, res, name, caller)?;
        }
        Generation::Legacy => {}
        Generation::Modern => {
            if res.is_pods() {
                // Every write is decoded with the defaults; admission's additions were made
                // at create.
                crate::pods::defaults(&mut new);
                modern::validate_update(&new, old, res, name)?;
                modern::after_update(&mut new);
            }
            if sub == Subresource::Main {
                strategy::on_update(res, &mut new, old, name)?;
            }
        }
    }
    if tracks_generation(res, generation) && new.get("spec") != old.get("spec") {
        let g = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        if let Some(m) = meta_mut(&mut new) {
            m.insert("generation".into(), json!(g + 1));
        }
    }
    let mut old_cmp = old.clone();
    if let Some(m) = meta_mut(&mut old_cmp) {
        m.remove("resourceVersion");
    }
    if old_cmp == new {
        return Ok(None);
    }
    Ok(Some(new))
}

/// PATCH: applies the patch to the current object, then the update rules.
#[allow(clippy::too_many_arguments)]
pub fn patch(
    shared: &Shared,
    res: &ResourceInfo,
    namespace: &str,
    name: &str,
    kind: PatchType,
    body: &[u8],
    caller: &Caller,
    sub: Subresource,
    reject: Option<&Rejection>,
) -> Result<Arc<Value>, ApiError> {
    // A concurrent writer between the read and the update makes the implicit
    // precondition fail; the real server retries in that case, and so do we.
    let mut attempts = 0;
    loop {
        let current = {
            let inner = shared.store.lock();
            current(&inner, res, namespace, name).ok_or_else(|| status::not_found(res, name))?
        };
        // A failed operation (a `test` that does not match) is answered here, before
        // any validation or admission: the 422 with empty details.
        let patched = patch::apply(&current, kind, body)?;
        match update(shared, res, namespace, name, patched, caller, sub, reject) {
            Err(e)
                if e.status["reason"] == "Conflict"
                    && !patch_sets_rv(kind, body)
                    && attempts < 5 =>
            {
                attempts += 1;
            }
            other => return other,
        }
    }
}

fn patch_sets_rv(kind: PatchType, body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(body);
    match kind {
        PatchType::Json => text.contains("/metadata/resourceVersion"),
        _ => text.contains("\"resourceVersion\""),
    }
}

/// The binding subresource (`POST pods/NAME/binding`, what kube-scheduler does; the
/// double runs no scheduler): `BindingREST.assignPod` (`pkg/registry/core/pod/storage/storage.go`, 1.13.12
/// and 1.33.4) sets `spec.nodeName` and `PodScheduled=True` in one storage update, no
/// strategy involved; a refusal (terminating, already bound, still gated) is
/// `errors.NewConflict(pods/binding, name, err)`.
pub fn bind(
    shared: &Shared,
    res: &ResourceInfo,
    namespace: &str,
    name: &str,
    node: &str,
    annotations: Option<&Value>,
) -> Result<Arc<Value>, ApiError> {
    let mut inner = shared.store.lock();
    let current = inner
        .get(&res.key, namespace, name)
        .ok_or_else(|| status::not_found(res, name))?;
    let mut pod = (*current).clone();
    modern::bind(&mut pod, name, node, annotations, &now_rfc3339())
        .map_err(|why| status::binding_conflict(name, &why))?;
    Ok(inner.put(&res.key, namespace, name, pod))
}

/// DELETE: immediate removal; returns the object's last state.
pub fn delete(
    shared: &Shared,
    res: &ResourceInfo,
    namespace: &str,
    name: &str,
    options: Option<&Value>,
) -> Result<Arc<Value>, ApiError> {
    let namespace = if res.namespaced { namespace } else { "" };
    let mut inner = shared.store.lock();
    let modern = shared.config.generation == Generation::Modern;
    let immortal = res.is_namespaces() && namespaces::IMMORTAL.contains(&name);
    let current = match inner.get(&res.key, namespace, name) {
        Some(c) => c,
        // `default` and `kube-system` exist on every cluster: refused below like a stored
        // one. Other implicit namespaces have no object to delete.
        None if immortal && namespaces::is_implicit(&inner, name) => {
            return Err(never_delete(res, name));
        }
        None => return Err(status::not_found(res, name)),
    };
    if let Some(pre) = options.and_then(|o| o.get("preconditions")) {
        if let Some(uid) = pre.get("uid").and_then(Value::as_str) {
            let have = meta_str(&current, "uid");
            if uid != have {
                let mut e = status::conflict(res, name);
                e.status["message"] = json!(format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {have}"
                ));
                return Err(e);
            }
        }
        if let Some(rv) = pre.get("resourceVersion").and_then(Value::as_str) {
            let have = meta_str(&current, "resourceVersion");
            if rv != have {
                let mut e = status::conflict(res, name);
                e.status["message"] = json!(format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {have}"
                ));
                return Err(e);
            }
        }
    }
    if has_finalizers(&current) && is_terminating(&current) {
        // Already terminating: `Store.Delete` returns before admission (`pendingGraceful`).
        return Ok(current);
    }
    if modern && immortal {
        return Err(never_delete(res, name));
    }
    if has_finalizers(&current) {
        // Finalizers keep the object, terminating, until the last one is removed.
        let mut obj = (*current).clone();
        let generation = obj.pointer("/metadata/generation").and_then(Value::as_i64);
        if let Some(m) = meta_mut(&mut obj) {
            m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            if let Some(g) = generation.filter(|g| *g > 0) {
                m.insert("generation".into(), json!(g + 1));
            }
        }
        return Ok(inner.put(&res.key, namespace, name, obj));
    }
    inner
        .remove(&res.key, namespace, name)
        .ok_or_else(|| status::not_found(res, name))
}

/// The NamespaceLifecycle admission plugin's refusal (`Lifecycle.Admit`, k8s.io/apiserver
/// `pkg/admission/plugin/namespace/lifecycle/admission.go`): it runs before the webhooks.
fn never_delete(res: &ResourceInfo, name: &str) -> ApiError {
    status::forbidden(res, name, "this namespace may not be deleted")
}

fn has_finalizers(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

fn is_terminating(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let t = encode_continue(42, "ns", "a");
        let (rv, (ns, name)) = decode_continue(&t).unwrap();
        assert_eq!((rv, ns.as_str(), name.as_str()), (42, "ns", "a"));
        assert_eq!(decode_continue("!!").unwrap_err().code(), 400);
    }
}
