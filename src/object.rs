//! The slim view of an object that metainit reads: the metadata fields it uses, the
//! legacy `metadata.initializers` (which k8s-openapi 0.29 no longer models and would
//! drop), and the two pod fields the gates mode needs. Everything else in a list or watch
//! response is skipped while parsing, so a pod costs a few hundred bytes here.

use std::{
    borrow::Cow,
    collections::BTreeMap,
    hash::{Hash, Hasher},
    ops::Deref,
    sync::Arc,
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::{
    Resource,
    core::{ApiResource, DynamicResourceScope, ObjectMeta},
};
use serde::{Deserialize, Serialize, de::IgnoredAny};
use serde_json::{Value, value::RawValue};

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(from = "Wire")]
pub struct Held {
    pub metadata: HeldMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<HeldSpec>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct HeldMeta {
    #[serde(flatten)]
    pub meta: ObjectMeta,
    /// Kept as the server sent it, text and all: the clearing patch tests this value. (As
    /// text it costs its length; parsed, each `{name}` would be a map of eleven slots.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initializers: Option<Box<RawValue>>,
    /// The one label the engine reads, `(key, value)`, once `trim` dropped the others.
    #[serde(skip)]
    pub kept_label: Option<(String, String)>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldSpec {
    /// Kept as the server sent it, text and all: the clearing patch tests this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_gates: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
}

/// An object as parsed: only the metadata fields metainit reads, named one by one: the
/// whole `ObjectMeta` flattened beside `initializers` would make serde buffer all of the
/// metadata, managed fields included, before reading it (BENCHMARKS.md, "The engine
/// rebuild: before and after").
#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: WireMeta,
    #[serde(default)]
    spec: Option<HeldSpec>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    owner_references: Option<Vec<OwnerReference>>,
    initializers: Option<Box<RawValue>>,
}

impl From<Wire> for Held {
    fn from(w: Wire) -> Self {
        let m = w.metadata;
        Held {
            metadata: HeldMeta {
                meta: ObjectMeta {
                    name: m.name,
                    namespace: m.namespace,
                    uid: m.uid,
                    resource_version: m.resource_version,
                    labels: m.labels,
                    creation_timestamp: m.creation_timestamp,
                    deletion_timestamp: m.deletion_timestamp,
                    owner_references: m.owner_references,
                    ..ObjectMeta::default()
                },
                initializers: m.initializers,
                kept_label: None,
            },
            spec: w.spec,
        }
    }
}

impl Held {
    pub fn name(&self) -> &str {
        self.metadata.meta.name.as_deref().unwrap_or("")
    }

    pub fn namespace(&self) -> Option<&str> {
        self.metadata.meta.namespace.as_deref()
    }

    /// `namespace/name`, or `name` for a cluster-scoped object.
    pub fn key(&self) -> String {
        let name = self.name();
        match self.namespace() {
            Some(ns) => {
                let mut key = String::with_capacity(ns.len() + 1 + name.len());
                key.push_str(ns);
                key.push('/');
                key.push_str(name);
                key
            }
            None => name.to_string(),
        }
    }

    /// The object's own URL path, `Resource::url_path` and its name, written directly
    /// (one allocation, no formatting machinery: it is built for every PATCH).
    pub fn url(kind: &ApiResource, namespace: Option<&str>, name: &str) -> String {
        let mut url = String::with_capacity(96);
        if kind.group.is_empty() {
            url.push_str("/api/");
        } else {
            url.push_str("/apis/");
            url.push_str(&kind.group);
            url.push('/');
        }
        url.push_str(&kind.version);
        if let Some(ns) = namespace {
            url.push_str("/namespaces/");
            url.push_str(ns);
        }
        url.push('/');
        url.push_str(&kind.plural);
        url.push('/');
        url.push_str(name);
        url
    }

    pub fn has_label(&self, key: &str) -> bool {
        self.label(key).is_some()
    }

    /// The value of the label `key`, if the object carries it.
    pub fn label(&self, key: &str) -> Option<&str> {
        if let Some((k, v)) = &self.metadata.kept_label
            && k == key
        {
            return Some(v);
        }
        self.metadata
            .meta
            .labels
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    /// `metadata.initializers`, parsed.
    pub fn initializers(&self) -> Option<Value> {
        parse(self.metadata.initializers.as_deref())
    }

    /// `spec.schedulingGates`, parsed.
    pub fn scheduling_gates(&self) -> Option<Value> {
        parse(self.spec.as_ref()?.scheduling_gates.as_deref())
    }

    /// Whether `metadata.initializers` has a `pending` entry, and whether its `result` is
    /// set, read without building anything.
    pub fn initializers_state(&self) -> (bool, bool) {
        #[derive(Deserialize)]
        struct State {
            #[serde(default)]
            pending: Option<Vec<IgnoredAny>>,
            #[serde(default)]
            result: Option<IgnoredAny>,
        }
        self.metadata
            .initializers
            .as_deref()
            .and_then(|r| serde_json::from_str::<State>(r.get()).ok())
            .map_or((false, false), |s| {
                (s.pending.is_some_and(|p| !p.is_empty()), s.result.is_some())
            })
    }

    /// Whether `spec.schedulingGates` has an entry, read without building anything.
    pub fn has_gates(&self) -> bool {
        self.spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_deref())
            .and_then(|r| serde_json::from_str::<Vec<IgnoredAny>>(r.get()).ok())
            .is_some_and(|g| !g.is_empty())
    }

    pub fn is_terminating(&self) -> bool {
        self.metadata.meta.deletion_timestamp.is_some()
    }

    /// Keeps only what the engine reads, for objects held in the watch's store for as long
    /// as they are watched: names, uid, version, creation (a gate's age), deletion, the one
    /// label, and the blockers.
    pub fn trim(&mut self, label_key: &str) {
        let m = &mut self.metadata.meta;
        m.owner_references = None;
        if let Some(value) = m.labels.take().and_then(|mut l| l.remove(label_key)) {
            self.metadata.kept_label = Some((label_key.to_string(), value));
        }
    }

    /// How old the object is at `now`, by its `creationTimestamp`.
    pub fn age(&self, now: k8s_openapi::jiff::Timestamp) -> Option<std::time::Duration> {
        let created = self.metadata.meta.creation_timestamp.as_ref()?.0;
        let secs = now.as_second().saturating_sub(created.as_second());
        Some(std::time::Duration::from_secs(
            u64::try_from(secs).unwrap_or(0),
        ))
    }

    pub fn uid(&self) -> Option<&str> {
        self.metadata.meta.uid.as_deref()
    }
}

fn parse(raw: Option<&RawValue>) -> Option<Value> {
    serde_json::from_str(raw?.get()).ok()
}

/// The resource a `Held` belongs to: the reflector's store and the work queue key every
/// object by it (`ObjectRef::dyntype`), hash it on every lookup and clone it with every key.
/// An `ApiResource` is five strings to clone and hash each time; this is one pointer,
/// hashed by its plural (all keys of a store share one resource).
#[derive(Clone, Debug)]
pub struct Kind(Arc<ApiResource>);

impl From<ApiResource> for Kind {
    fn from(r: ApiResource) -> Kind {
        Kind(Arc::new(r))
    }
}

impl Deref for Kind {
    type Target = ApiResource;
    fn deref(&self) -> &ApiResource {
        &self.0
    }
}

impl PartialEq for Kind {
    fn eq(&self, other: &Kind) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl Eq for Kind {}

impl Hash for Kind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Equal kinds have equal plurals: consistent with `eq`.
        self.0.plural.hash(state);
    }
}

impl Resource for Held {
    type DynamicType = Kind;
    type Scope = DynamicResourceScope;

    fn group(dt: &Kind) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &Kind) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &Kind) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &Kind) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &Kind) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata.meta
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata.meta
    }
}

/// An object from its JSON, as the watch parses it (from text: raw values need that).
#[cfg(test)]
pub(crate) fn held(v: Value) -> Held {
    serde_json::from_str(&v.to_string()).expect("an object")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn url_is_kubes_url_path_and_the_name() {
        let pods = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let sets = ApiResource::erase::<k8s_openapi::api::apps::v1::StatefulSet>(&());
        let nodes = ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&());
        for (kind, ns) in [
            (&pods, Some("kube-system")),
            (&sets, Some("a")),
            (&nodes, None),
            (&pods, None),
        ] {
            assert_eq!(
                Held::url(kind, ns, "x-1"),
                format!(
                    "{}/x-1",
                    <Held as Resource>::url_path(&Kind::from(kind.clone()), ns)
                ),
            );
        }
        assert_eq!(
            Held::url(&sets, Some("a"), "s"),
            "/apis/apps/v1/namespaces/a/statefulsets/s"
        );
    }

    #[test]
    fn key_is_namespace_slash_name() {
        let mut held = held(json!({"metadata": {"name": "p", "namespace": "ns"}}));
        assert_eq!(held.key(), "ns/p");
        held.metadata.meta.namespace = None;
        assert_eq!(held.key(), "p");
    }

    #[test]
    fn trimmed_for_the_store_keeps_what_the_engine_reads() {
        let mut held = held(json!({
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "generateName": "p-", "creationTimestamp": "2026-01-01T00:00:00Z",
                "deletionTimestamp": "2026-01-02T00:00:00Z",
                "labels": {"k8s.opsani.io/initializer": "", "app": "x"},
                "annotations": {"a": "b"}, "finalizers": ["f"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "ou"}],
                "initializers": {"pending": [{"name": "a.example.com"}]}
            },
            "spec": {"schedulingGates": [{"name": "g"}]}
        }));
        held.trim("k8s.opsani.io/initializer");
        assert_eq!(held.label("k8s.opsani.io/initializer"), Some(""));
        assert!(!held.has_label("app"));
        assert_eq!(
            serde_json::to_value(&held).unwrap(),
            json!({
                "metadata": {
                    "name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                    "deletionTimestamp": "2026-01-02T00:00:00Z",
                    "initializers": {"pending": [{"name": "a.example.com"}]}
                },
                "spec": {"schedulingGates": [{"name": "g"}]}
            })
        );
    }

    #[test]
    fn keeps_initializers_and_gates_drops_the_rest() {
        let held = held(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "ns", "resourceVersion": "7",
                "labels": {"k8s.opsani.io/initializer": "true"},
                "initializers": {"pending": [{"name": "a.example.com"}]}
            },
            "spec": {"containers": [{"name": "c", "image": "x"}],
                     "schedulingGates": [{"name": "example.com/g"}], "nodeName": "n1"},
            "status": {"phase": "Pending"}
        }));
        assert_eq!(held.key(), "ns/p");
        assert!(held.has_label("k8s.opsani.io/initializer"));
        assert_eq!(
            held.initializers(),
            Some(json!({"pending": [{"name": "a.example.com"}]}))
        );
        assert_eq!(held.initializers_state(), (true, false));
        assert_eq!(
            held.scheduling_gates(),
            Some(json!([{"name": "example.com/g"}]))
        );
        assert!(held.has_gates());
        assert_eq!(held.spec.unwrap().node_name.as_deref(), Some("n1"));
        assert_eq!(held.metadata.meta.resource_version.as_deref(), Some("7"));
    }
}
