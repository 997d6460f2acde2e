//! The engine's store: the newest state of every watched object that matters, by
//! `namespace/name`, in a few dozen bytes each (BENCHMARKS.md, "Orphaned gates at scale",
//! says what each byte is). In place of kube-runtime's reflector store, which keeps each
//! object whole (an `ObjectMeta` of sixteen fields, mostly empty) under a key of four
//! strings, and on a relist builds a second store beside the first.
//!
//! - Only what the watch's `keep` says is kept: an unbound pod without a watched gate, or a
//!   labelled object holding nothing back, is dropped at once (nothing can bring it back
//!   but a new event: gates are only ever removed, and a label change is an event).
//! - What is kept: the uid (16 bytes when it is a UUID, as the API server writes them),
//!   the resourceVersion (for Events), the creation and deletion times in seconds (the API
//!   server's `Time` has no fraction), the gates as sent (one shared copy per distinct list
//!   of gates: most pods of a cluster carry the same few), and, only where there is one, the
//!   initializers, the label's value and the node name.
//! - A relist marks what it lists with its number and, once done, drops what it did not
//!   list: one store, never two.
//!
//! `get` rebuilds the `Held` the engine works with; the key handed out is the store's own
//! `Arc`, so the queue's copies of it cost no memory of their own.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, RwLock},
};

use ahash::RandomState;
use kube::{core::ObjectMeta, runtime::watcher};
use serde_json::value::RawValue;

use crate::object::{Held, HeldMeta, HeldSpec};

mod lifted;
mod packed;
use packed::{seconds, time, uuid, uuid_text};

/// `namespace/name`, or `name` for a cluster-scoped object: neither may hold a `/`.
pub type Key = Arc<str>;

/// The key of an object, as `Held::key` writes it.
pub fn key_of(obj: &Held) -> Key {
    Arc::from(obj.key())
}

/// What a pod's gates gauges need of a stored object, without rebuilding it.
pub struct View<'a> {
    /// `spec.schedulingGates` as sent.
    pub gates: Option<&'a str>,
    /// `metadata.creationTimestamp`, in seconds since the epoch.
    pub created: Option<i64>,
    pub terminating: bool,
    /// Whether it carries the label key.
    pub labelled: bool,
}

#[derive(Default)]
pub struct Store {
    inner: RwLock<Inner>,
}

#[derive(Default)]
struct Inner {
    objects: HashMap<Key, Slim, RandomState>,
    /// Each distinct `spec.schedulingGates` text once.
    gates: HashSet<Arc<str>, RandomState>,
    /// The list under way (or last done): counted up at each `Init`. A count, not a flag:
    /// a list cut short by an error is followed by another `Init`, and a flag flipped twice
    /// would take what neither list named for listed.
    list: u32,
    /// How many distinct gate lists there were after the last sweep.
    swept_at: usize,
}

/// One object, slim.
struct Slim {
    uid: [u8; 16],
    version: u64,
    created: i64,
    gates: Option<Arc<str>>,
    /// What few objects have, behind one pointer.
    rest: Option<Box<Rest>>,
    /// The list (`Inner::list`) it was last stored in or after.
    list: u32,
    flags: u8,
}

const HAS_UUID: u8 = 1;
const HAS_VERSION: u8 = 2;
const HAS_CREATED: u8 = 4;

#[derive(Default)]
struct Rest {
    /// A uid that is not a UUID in its usual form, kept as text.
    uid: Option<Box<str>>,
    deleted: Option<i64>,
    initializers: Option<Box<RawValue>>,
    label: Option<(Box<str>, Box<str>)>,
    node_name: Option<Box<str>>,
}

/// What of `Rest` the work on an object depends on (`Slim::same_work`).
type RestWork<'a> = (
    Option<&'a str>,
    bool,
    Option<&'a str>,
    Option<&'a (Box<str>, Box<str>)>,
    Option<&'a str>,
);

impl Rest {
    fn work(&self) -> RestWork<'_> {
        (
            self.uid.as_deref(),
            self.deleted.is_some(),
            self.initializers.as_deref().map(RawValue::get),
            self.label.as_ref(),
            self.node_name.as_deref(),
        )
    }

    fn is_empty(&self) -> bool {
        self.uid.is_none()
            && self.deleted.is_none()
            && self.initializers.is_none()
            && self.label.is_none()
            && self.node_name.is_none()
    }
}

impl Inner {
    /// The shared copy of a gates text.
    fn intern(&mut self, raw: &RawValue) -> Arc<str> {
        if let Some(g) = self.gates.get(raw.get()) {
            return g.clone();
        }
        let g: Arc<str> = Arc::from(raw.get());
        self.gates.insert(g.clone());
        g
    }

    /// Drops the gate texts no object uses any more, once there are twice as many as at
    /// the last sweep.
    fn sweep_gates(&mut self) {
        if self.gates.len() > 2 * self.swept_at + 64 {
            self.gates.retain(|g| Arc::strong_count(g) > 1);
            self.swept_at = self.gates.len();
        }
    }

    fn slim(&mut self, obj: &Held) -> Slim {
        let m = &obj.metadata.meta;
        let mut rest = Rest::default();
        let mut flags = 0;
        let mut uid = [0u8; 16];
        match m.uid.as_deref().map(|u| (u, uuid(u))) {
            Some((_, Some(b))) => {
                uid = b;
                flags |= HAS_UUID;
            }
            Some((text, None)) => rest.uid = Some(text.into()),
            None => {}
        }
        let version = match m.resource_version.as_deref().and_then(|v| v.parse().ok()) {
            Some(v) => {
                flags |= HAS_VERSION;
                v
            }
            None => 0,
        };
        let created = match seconds(m.creation_timestamp.as_ref()) {
            Some(s) => {
                flags |= HAS_CREATED;
                s
            }
            None => 0,
        };
        rest.deleted = seconds(m.deletion_timestamp.as_ref());
        rest.initializers = obj.metadata.initializers.clone();
        rest.label = obj
            .metadata
            .kept_label
            .as_ref()
            .map(|(k, v)| (k.as_str().into(), v.as_str().into()));
        let spec = obj.spec.as_ref();
        rest.node_name = spec.and_then(|s| s.node_name.as_deref()).map(Into::into);
        let gates = spec
            .and_then(|s| s.scheduling_gates.as_deref())
            .map(|g| self.intern(g));
        Slim {
            uid,
            version,
            created,
            gates,
            rest: (!rest.is_empty()).then(|| Box::new(rest)),
            list: self.list,
            flags,
        }
    }
}

fn split(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

impl Slim {
    /// Whether `other` is the same object in everything its work depends on: its uid, its
    /// gates, initializers and label, whether it is terminating or bound. A new
    /// resourceVersion alone (a status or an annotation written, an event repeated) is no
    /// news: a failing object's backoff stands (a watch that repeated the pod's last event 20
    /// times a second once made 1,169 PATCHes of it a minute, each event cutting its wait).
    fn same_work(&self, other: &Slim) -> bool {
        let same_gates = match (&self.gates, &other.gates) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            (a, b) => a.is_none() && b.is_none(),
        };
        let uuid = |o: &Slim| (o.flags & HAS_UUID != 0).then_some(o.uid);
        let rest = (
            self.rest.as_deref().map(Rest::work),
            other.rest.as_deref().map(Rest::work),
        );
        same_gates && uuid(self) == uuid(other) && rest.0 == rest.1
    }

    fn view(&self) -> View<'_> {
        let rest = self.rest.as_deref();
        View {
            gates: self.gates.as_deref(),
            created: (self.flags & HAS_CREATED != 0).then_some(self.created),
            terminating: rest.is_some_and(|r| r.deleted.is_some()),
            labelled: rest.is_some_and(|r| r.label.is_some()),
        }
    }

    fn held(&self, key: &str) -> Held {
        let (namespace, name) = split(key);
        let rest = self.rest.as_deref();
        let uid = if self.flags & HAS_UUID != 0 {
            Some(uuid_text(&self.uid))
        } else {
            rest.and_then(|r| r.uid.as_deref()).map(str::to_string)
        };
        let label = rest.and_then(|r| r.label.as_ref());
        Held {
            metadata: HeldMeta {
                meta: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: namespace.map(str::to_string),
                    uid,
                    resource_version: (self.flags & HAS_VERSION != 0)
                        .then(|| self.version.to_string()),
                    creation_timestamp: (self.flags & HAS_CREATED != 0)
                        .then(|| time(self.created))
                        .flatten(),
                    deletion_timestamp: rest.and_then(|r| r.deleted).and_then(time),
                    ..ObjectMeta::default()
                },
                initializers: rest.and_then(|r| r.initializers.clone()),
                kept_label: label.map(|(k, v)| (k.to_string(), v.to_string())),
            },
            spec: Some(HeldSpec {
                scheduling_gates: self
                    .gates
                    .as_deref()
                    .and_then(|g| RawValue::from_string(g.to_string()).ok()),
                node_name: rest
                    .and_then(|r| r.node_name.as_deref())
                    .map(str::to_string),
            })
            .filter(|s| s.scheduling_gates.is_some() || s.node_name.is_some()),
        }
    }
}

impl Store {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies one event of the watch: an object `keep` accepts is stored (its key
    /// returned, and whether it is news: stored for the first time, or changed in what
    /// clearing it depends on, `Slim::same_work`), any other is dropped. After `InitDone`, what the list did not name is
    /// gone. The keys of the objects dropped are pushed on `gone` (a timer waiting for one
    /// is not needed any more); a relist that drops few costs a key's clone for each.
    pub fn apply(
        &self,
        event: &watcher::Event<Held>,
        keep: impl Fn(&Held) -> bool,
        gone: &mut Vec<Key>,
    ) -> Option<(Key, bool)> {
        let mut s = self.write();
        match event {
            watcher::Event::Init => {
                s.list = s.list.wrapping_add(1);
                None
            }
            watcher::Event::InitApply(obj) | watcher::Event::Apply(obj) => {
                let key = obj.key();
                if !keep(obj) {
                    gone.extend(s.objects.remove_entry(key.as_str()).map(|(k, _)| k));
                    return None;
                }
                let slim = s.slim(obj);
                let (k, news) = match s.objects.get_key_value(key.as_str()) {
                    Some((k, old)) => (k.clone(), !old.same_work(&slim)),
                    None => (Arc::from(key), true),
                };
                s.objects.insert(k.clone(), slim);
                Some((k, news))
            }
            watcher::Event::Delete(obj) => {
                gone.extend(s.objects.remove_entry(obj.key().as_str()).map(|(k, _)| k));
                None
            }
            watcher::Event::InitDone => {
                let list = s.list;
                s.objects.retain(|k, o| {
                    let listed = o.list == list;
                    if !listed {
                        gone.push(k.clone());
                    }
                    listed
                });
                s.sweep_gates();
                None
            }
        }
    }

    /// The number of the list under way or last done: a relist counts it up. What a
    /// relist shows is the server's word; what a watch shows may be older than a PATCH.
    pub fn list_number(&self) -> u32 {
        self.read().list
    }

    /// The object's newest state, rebuilt.
    pub fn get(&self, key: &str) -> Option<Held> {
        self.read().objects.get(key).map(|o| o.held(key))
    }

    /// The resourceVersion stored for `key`, if it is stored with one.
    pub fn version(&self, key: &str) -> Option<u64> {
        let s = self.read();
        let o = s.objects.get(key)?;
        (o.flags & HAS_VERSION != 0).then_some(o.version)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.read().objects.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every object's key.
    pub fn keys(&self) -> Vec<Key> {
        self.read().objects.keys().cloned().collect()
    }

    /// Looks at every object without rebuilding it.
    pub fn visit(&self, mut f: impl FnMut(View<'_>)) {
        for o in self.read().objects.values() {
            f(o.view());
        }
    }

    /// The objects `f` wants, rebuilt.
    pub fn filter(&self, f: impl Fn(View<'_>) -> bool) -> Vec<Held> {
        let s = self.read();
        s.objects
            .iter()
            .filter(|(_, o)| f(o.view()))
            .map(|(k, o)| o.held(k))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn held(v: serde_json::Value) -> Held {
        crate::object::held(v)
    }

    fn pod(name: &str, uid: &str, gates: &[&str]) -> Held {
        let gates: Vec<_> = gates.iter().map(|g| json!({"name": g})).collect();
        held(
            json!({"metadata": {"name": name, "namespace": "ns", "uid": uid,
                                 "resourceVersion": "42", "creationTimestamp": "2026-01-02T03:04:05Z"},
                    "spec": {"schedulingGates": gates}}),
        )
    }

    fn same(a: &Held, b: &Held) {
        assert_eq!(
            serde_json::to_value(a).unwrap(),
            serde_json::to_value(b).unwrap()
        );
        assert_eq!(a.metadata.kept_label, b.metadata.kept_label);
    }

    #[test]
    fn an_object_comes_back_as_it_was_stored() {
        let store = Store::default();
        let mut labelled = held(json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": "Not-A-UUID",
                         "resourceVersion": "x7", "labels": {"k": "v", "other": "o"},
                         "creationTimestamp": "2026-01-02T03:04:05Z",
                         "deletionTimestamp": "2026-01-03T00:00:00Z",
                         "initializers": {"pending": [{"name": "i.example.com"}]}},
            "spec": {"schedulingGates": [{"name": "g"}], "nodeName": "n1"}
        }));
        labelled.trim("k");
        let cases = [
            pod(
                "p",
                "0a1b2c3d-4e5f-6789-abcd-ef0123456789",
                &["a.io/x", "b.io/y"],
            ),
            pod("q", "0A1B2C3D-4E5F-6789-ABCD-EF0123456789", &[]),
            held(json!({"metadata": {"name": "cluster-wide"}})),
        ];
        for obj in cases.iter().chain([&labelled]) {
            let key = store
                .apply(
                    &watcher::Event::Apply(obj.clone()),
                    |_| true,
                    &mut Vec::new(),
                )
                .expect("kept")
                .0;
            let mut want = obj.clone();
            if want.metadata.meta.resource_version.as_deref() == Some("x7") {
                // Not a number: not kept (only Events name it).
                want.metadata.meta.resource_version = None;
            }
            same(&store.get(&key).expect("stored"), &want);
        }
        assert_eq!(store.len(), 4);
    }

    #[test]
    fn what_keep_refuses_is_dropped_and_a_relist_drops_what_it_did_not_name() {
        let store = Store::default();
        let gated = |o: &Held| o.has_gates();
        let mut gone = Vec::new();
        let mut apply = |event| {
            gone.clear();
            store.apply(&event, gated, &mut gone);
            gone.iter().map(|k| k.to_string()).collect::<Vec<_>>()
        };
        for (name, gates) in [("a", &["g"][..]), ("b", &["g"]), ("c", &[])] {
            apply(watcher::Event::Apply(pod(name, "u", gates)));
        }
        assert_eq!(store.len(), 2, "c has no gate: not kept");
        // Its gate removed: gone from the store.
        assert_eq!(apply(watcher::Event::Apply(pod("b", "u", &[]))), ["ns/b"]);
        assert!(!store.contains("ns/b"));
        assert!(
            apply(watcher::Event::Apply(pod("b", "u", &[]))).is_empty(),
            "gone once"
        );
        // A relist that names only a new object: a and nothing else goes.
        apply(watcher::Event::Init);
        apply(watcher::Event::InitApply(pod("d", "u", &["g"])));
        assert!(store.contains("ns/a"), "kept until the list is done");
        assert_eq!(apply(watcher::Event::InitDone), ["ns/a"]);
        assert_eq!(store.keys(), vec![Key::from("ns/d")]);
        // A list cut short by an error, then another: what neither named goes.
        apply(watcher::Event::Apply(pod("e", "u", &["g"])));
        apply(watcher::Event::Init);
        apply(watcher::Event::InitApply(pod("f", "u", &["g"])));
        apply(watcher::Event::Init);
        apply(watcher::Event::InitApply(pod("d", "u", &["g"])));
        let mut swept = apply(watcher::Event::InitDone);
        swept.sort();
        assert_eq!(swept, ["ns/e", "ns/f"], "e and f were not in the last list");
        assert_eq!(store.keys(), vec![Key::from("ns/d")]);
        assert_eq!(
            apply(watcher::Event::Delete(pod("d", "u", &["g"]))),
            ["ns/d"]
        );
        assert!(store.is_empty());
        assert!(apply(watcher::Event::Delete(pod("d", "u", &["g"]))).is_empty());
    }

    /// What is news: a first sight, or a change in what the work depends on; not a new
    /// resourceVersion alone.
    #[test]
    fn news_is_a_change_in_what_the_work_depends_on() {
        let store = Store::default();
        let news = |obj: serde_json::Value| {
            let event = watcher::Event::Apply(held(obj));
            store.apply(&event, |_| true, &mut Vec::new()).unwrap().1
        };
        let at = |version: &str, uid: &str, gates: serde_json::Value, extra: serde_json::Value| {
            let mut meta = json!({"name": "p", "namespace": "ns", "uid": uid,
                                  "resourceVersion": version});
            meta.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            json!({"metadata": meta, "spec": {"schedulingGates": gates}})
        };
        let g = json!([{"name": "a"}, {"name": "b"}]);
        assert!(news(at("1", "u1", g.clone(), json!({}))), "first sight");
        assert!(
            !news(at("1", "u1", g.clone(), json!({}))),
            "the same event again"
        );
        assert!(
            !news(at("2", "u1", g.clone(), json!({}))),
            "a new version alone"
        );
        assert!(
            news(at("3", "u1", json!([{"name": "a"}]), json!({}))),
            "a gate gone"
        );
        assert!(
            news(at("3", "u2", json!([{"name": "a"}]), json!({}))),
            "another uid"
        );
        let labelled = json!({"labels": {"k": "v"}});
        let mut o = held(at("4", "u2", json!([{"name": "a"}]), labelled));
        o.trim("k");
        let event = watcher::Event::Apply(o);
        assert!(
            store.apply(&event, |_| true, &mut Vec::new()).unwrap().1,
            "labelled"
        );
        let deleting = json!({"deletionTimestamp": "2026-01-03T00:00:00Z"});
        assert!(
            news(at("5", "u2", json!([{"name": "a"}]), deleting)),
            "terminating"
        );
        let init = json!({"initializers": {"pending": [{"name": "i"}]}});
        assert!(
            news(at("6", "u2", json!([{"name": "a"}]), init.clone())),
            "initializers"
        );
        assert!(!news(at("7", "u2", json!([{"name": "a"}]), init)));
    }

    #[test]
    fn an_object_takes_80_bytes_in_the_table() {
        // BENCHMARKS.md ("Orphaned gates at scale") counts on these sizes: a change here
        // is a change there.
        assert_eq!(std::mem::size_of::<Slim>(), 64);
        assert_eq!(std::mem::size_of::<(Key, Slim)>(), 80);
    }

    #[test]
    fn equal_gates_are_kept_once_and_the_key_is_the_stores() {
        let store = Store::default();
        let (a, news) = store
            .apply(
                &watcher::Event::Apply(pod("a", "u", &["g"])),
                |_| true,
                &mut Vec::new(),
            )
            .unwrap();
        assert!(news, "stored for the first time");
        store.apply(
            &watcher::Event::Apply(pod("b", "u", &["g"])),
            |_| true,
            &mut Vec::new(),
        );
        let (again, news) = store
            .apply(
                &watcher::Event::Apply(pod("a", "u", &["g"])),
                |_| true,
                &mut Vec::new(),
            )
            .unwrap();
        assert!(Arc::ptr_eq(&a, &again), "one key per object");
        assert!(!news, "the same again");
        assert_eq!(store.read().gates.len(), 1);
        let mut seen = 0;
        store.visit(|v| {
            assert_eq!(v.gates, Some(r#"[{"name":"g"}]"#));
            assert_eq!(v.created, Some(1_767_323_045));
            seen += 1;
        });
        assert_eq!(seen, 2);
    }
}
