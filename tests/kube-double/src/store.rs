// The object store: objects by resource and key, one global revision counter (as etcd),
// a bounded change log for watches and continue tokens, and per-object change history.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use serde_json::{Value, json};
use tokio::sync::watch;

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "ADDED",
            ChangeKind::Modified => "MODIFIED",
            ChangeKind::Deleted => "DELETED",
        }
    }
}

/// One entry of an object's history, kept even after the change log drops the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub at: SystemTime,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: String,
    pub resource_version: u64,
}

/// One retained change, with the object before and after it.
#[derive(Debug)]
pub struct LogEvent {
    pub rv: u64,
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub kind: ChangeKind,
    /// The object after the change (for DELETED: its last state, stamped with the deletion revision).
    pub object: Arc<Value>,
    pub prev: Option<Arc<Value>>,
}

pub type Key = (String, String);

/// An object and its JSON.
type Encoded = (Arc<Value>, Arc<[u8]>);

/// Mutable state behind the store's lock.
pub struct Inner {
    rv: u64,
    objects: HashMap<String, BTreeMap<Key, Arc<Value>>>,
    log: VecDeque<Arc<LogEvent>>,
    window: usize,
    /// Watches and continue tokens from a revision below this are too old.
    expired_through: u64,
    /// Continue tokens from a revision below this are too old.
    continue_floor: u64,
    history: HashMap<(String, String, String), Vec<Change>>,
    /// Each stored object's JSON, written when it is stored, by resource and key: a LIST
    /// sends these bytes, as the real server's watch cache sends an object it serialized
    /// once (`cachingObject`). Kept with the object it was written from, and used only
    /// while that is the object stored.
    encoded: HashMap<String, HashMap<Key, Encoded>>,
    /// Statuses of objects deleted because an initializer set `result`, by uid.
    failed: HashMap<String, Value>,
    /// What an object's template held at creation, by uid, for `recreate` (modern pods'
    /// `spec.schedulingGates`, which updates may only remove).
    created_with: HashMap<String, Value>,
    notify: watch::Sender<u64>,
}

/// The objects of every resource and the store's revision at one moment, as an etcd
/// snapshot holds them. Cheap to take and to clone (objects are shared).
/// `Snapshot::default()` is the state at start: no objects, revision 0.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    revision: u64,
    objects: HashMap<String, BTreeMap<Key, Arc<Value>>>,
    created_with: HashMap<String, Value>,
}

impl Snapshot {
    /// The store revision the snapshot was taken at.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// How many objects it holds, every resource together.
    pub fn len(&self) -> usize {
        self.objects.values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub struct Store {
    inner: Mutex<Inner>,
    notify: watch::Sender<u64>,
}

/// Sets `metadata.resourceVersion` to `rv`.
pub fn stamp(obj: &mut Value, rv: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
    } else if let Some(o) = obj.as_object_mut() {
        o.insert(
            "metadata".into(),
            json!({"resourceVersion": rv.to_string()}),
        );
    }
}

impl Store {
    pub fn new(window: usize) -> Store {
        let (notify, _) = watch::channel(0);
        Store {
            inner: Mutex::new(Inner {
                rv: 0,
                objects: HashMap::new(),
                log: VecDeque::new(),
                window: window.max(1),
                expired_through: 0,
                continue_floor: 0,
                history: HashMap::new(),
                encoded: HashMap::new(),
                failed: HashMap::new(),
                created_with: HashMap::new(),
                notify: notify.clone(),
            }),
            notify,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every change is one insert).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fires (with the current revision) after every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.notify.subscribe()
    }
}

impl Inner {
    pub fn revision(&self) -> u64 {
        self.rv
    }

    pub fn expired_through(&self) -> u64 {
        self.expired_through
    }

    /// `obj`'s JSON as written when it was stored, if `obj` is still the object stored
    /// under `key`.
    pub fn encoded(&self, resource: &str, key: &Key, obj: &Arc<Value>) -> Option<&[u8]> {
        let (stored, json) = self.encoded.get(resource)?.get(key)?;
        Arc::ptr_eq(stored, obj).then_some(&**json)
    }

    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(resource)?
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// All objects of a resource (optionally one namespace), in key order, after `start`.
    pub fn range<'a>(
        &'a self,
        resource: &str,
        namespace: Option<&'a str>,
        start: Option<&(String, String)>,
    ) -> Vec<(&'a Key, &'a Arc<Value>)> {
        self.range_iter(resource, namespace, start).collect()
    }

    /// `range`, read as it goes: a page of a LIST stops reading once it is full.
    pub fn range_iter<'a>(
        &'a self,
        resource: &str,
        namespace: Option<&'a str>,
        start: Option<&(String, String)>,
    ) -> Box<dyn Iterator<Item = (&'a Key, &'a Arc<Value>)> + 'a> {
        let Some(map) = self.objects.get(resource) else {
            return Box::new(std::iter::empty());
        };
        let iter: Box<dyn Iterator<Item = (&Key, &Arc<Value>)>> = match start {
            Some(s) => Box::new(
                map.range::<Key, _>((std::ops::Bound::Excluded(s), std::ops::Bound::Unbounded)),
            ),
            None => Box::new(map.iter()),
        };
        Box::new(iter.filter(move |(k, _)| namespace.is_none_or(|ns| k.0 == ns)))
    }

    pub fn count(&self, resource: &str) -> usize {
        self.objects.get(resource).map_or(0, BTreeMap::len)
    }

    /// Every namespace that holds an object (cluster-scoped objects, stored under "",
    /// are in none).
    pub fn namespaces(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .objects
            .values()
            .flat_map(|m| m.keys().map(|k| k.0.clone()))
            .filter(|ns| !ns.is_empty())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Whether any resource has an object in namespace `ns`.
    pub fn holds_objects(&self, ns: &str) -> bool {
        let from = (ns.to_string(), String::new());
        self.objects.values().any(|m| {
            m.range::<Key, _>((std::ops::Bound::Included(&from), std::ops::Bound::Unbounded))
                .next()
                .is_some_and(|(k, _)| k.0 == ns)
        })
    }

    fn record(
        &mut self,
        resource: &str,
        namespace: &str,
        name: &str,
        kind: ChangeKind,
        object: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) {
        let rv = self.rv;
        self.history
            .entry((
                resource.to_string(),
                namespace.to_string(),
                name.to_string(),
            ))
            .or_default()
            .push(Change {
                at: SystemTime::now(),
                kind: kind.as_str().to_string(),
                resource_version: rv,
            });
        self.log.push_back(Arc::new(LogEvent {
            rv,
            resource: resource.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            kind,
            object,
            prev,
        }));
        while self.log.len() > self.window {
            if let Some(old) = self.log.pop_front() {
                self.expired_through = self.expired_through.max(old.rv);
                self.continue_floor = self.continue_floor.max(old.rv);
            }
        }
        self.notify.send_replace(rv);
    }

    /// Stores a new or changed object, stamping the next revision; returns the stored object.
    pub fn put(
        &mut self,
        resource: &str,
        namespace: &str,
        name: &str,
        mut obj: Value,
    ) -> Arc<Value> {
        self.rv += 1;
        stamp(&mut obj, self.rv);
        let obj = Arc::new(obj);
        let json = serde_json::to_vec(&*obj).unwrap_or_default().into();
        self.encoded
            .entry(resource.to_string())
            .or_default()
            .insert(
                (namespace.to_string(), name.to_string()),
                (obj.clone(), json),
            );
        let prev = self
            .objects
            .entry(resource.to_string())
            .or_default()
            .insert((namespace.to_string(), name.to_string()), obj.clone());
        let kind = if prev.is_some() {
            ChangeKind::Modified
        } else {
            ChangeKind::Added
        };
        self.record(resource, namespace, name, kind, obj.clone(), prev);
        obj
    }

    /// Removes an object; returns its last state stamped with the deletion revision.
    pub fn remove(&mut self, resource: &str, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.remove_as(resource, namespace, name, None)
    }

    /// Removes an object, recording `last` (or its stored state) as its final state.
    pub fn remove_as(
        &mut self,
        resource: &str,
        namespace: &str,
        name: &str,
        last: Option<Value>,
    ) -> Option<Arc<Value>> {
        let key = (namespace.to_string(), name.to_string());
        if let Some(e) = self.encoded.get_mut(resource) {
            e.remove(&key);
        }
        let prev = self.objects.get_mut(resource)?.remove(&key)?;
        if let Some(uid) = prev.pointer("/metadata/uid").and_then(Value::as_str) {
            self.created_with.remove(uid);
        }
        self.rv += 1;
        let mut last = last.unwrap_or_else(|| (*prev).clone());
        stamp(&mut last, self.rv);
        let last = Arc::new(last);
        self.record(
            resource,
            namespace,
            name,
            ChangeKind::Deleted,
            last.clone(),
            Some(prev),
        );
        Some(last)
    }

    /// Retained changes with revision above `after`, at most `max`; `Err(oldest)` when
    /// changes after `after` were already dropped.
    pub fn events_after(&self, after: u64, max: usize) -> Result<Vec<Arc<LogEvent>>, u64> {
        if after < self.expired_through {
            return Err(self.expired_through);
        }
        let start = self.log.partition_point(|e| e.rv <= after);
        Ok(self.log.range(start..).take(max).cloned().collect())
    }

    pub fn continue_floor(&self) -> u64 {
        self.continue_floor
    }

    /// Makes every revision before now too old to watch from, and every continue
    /// token of an older revision too old to use. Like etcd's compaction, it spares the
    /// current revision: a list started now can still be paged.
    pub fn expire(&mut self) {
        self.expired_through = self.rv;
        self.continue_floor = self.rv;
        self.log.clear();
    }

    pub fn history(&self, resource: &str, namespace: &str, name: &str) -> Vec<Change> {
        self.history
            .get(&(
                resource.to_string(),
                namespace.to_string(),
                name.to_string(),
            ))
            .cloned()
            .unwrap_or_default()
    }

    /// Remembers what the object with this uid was created with (see `created_with`).
    pub fn set_created_with(&mut self, uid: &str, template: Value) {
        self.created_with.insert(uid.to_string(), template);
    }

    pub fn created_with(&self, uid: &str) -> Option<&Value> {
        self.created_with.get(uid)
    }

    /// Every object and the revision, sharing the stored objects.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            revision: self.rv,
            objects: self.objects.clone(),
            created_with: self.created_with.clone(),
        }
    }

    /// etcd restored from a snapshot (or an API server restarted on an empty etcd): every
    /// object and the revision go back to the snapshot's, even when that is backwards.
    /// The change log is cleared and every older revision is too old: a watch or a
    /// continue token from before the snapshot's revision gets 410, one from a revision
    /// at or above it is accepted (a watch then waits for the revision to pass it).
    /// Per-object history is kept: it records what happened.
    pub fn restore(&mut self, snapshot: &Snapshot) {
        self.objects = snapshot.objects.clone();
        self.encoded.clear();
        self.created_with = snapshot.created_with.clone();
        self.rv = snapshot.revision;
        self.log.clear();
        self.expired_through = snapshot.revision;
        self.continue_floor = snapshot.revision;
        self.failed.clear();
        self.notify.send_replace(self.rv);
    }

    pub fn set_failed(&mut self, uid: &str, status: Value) {
        self.failed.insert(uid.to_string(), status);
    }

    pub fn take_failed(&mut self, uid: &str) -> Option<Value> {
        self.failed.remove(uid)
    }

    pub fn all(&self, resource: &str) -> Vec<Arc<Value>> {
        self.objects
            .get(resource)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_and_expiry() {
        let store = Store::new(2);
        let mut s = store.lock();
        s.put("pods", "a", "x", json!({"metadata": {"name": "x"}}));
        s.put("pods", "a", "y", json!({"metadata": {"name": "y"}}));
        s.remove("pods", "a", "x");
        assert_eq!(s.revision(), 3);
        assert_eq!(s.events_after(0, 10).unwrap_err(), 1);
        assert_eq!(s.events_after(1, 10).unwrap().len(), 2);
        assert_eq!(s.history("pods", "a", "x").len(), 2);
        s.expire();
        assert!(s.events_after(2, 10).is_err());
        assert!(s.events_after(3, 10).unwrap().is_empty());
        assert_eq!(
            s.get("pods", "a", "y").unwrap()["metadata"]["resourceVersion"],
            "2"
        );
    }

    #[test]
    fn snapshot_and_restore_go_back() {
        let store = Store::new(100);
        let mut s = store.lock();
        s.put("pods", "a", "x", json!({"metadata": {"name": "x"}}));
        let snap = s.snapshot();
        s.put("pods", "a", "y", json!({"metadata": {"name": "y"}}));
        s.remove("pods", "a", "x");
        assert_eq!(s.revision(), 3);
        s.restore(&snap);
        assert_eq!((s.revision(), snap.revision(), snap.len()), (1, 1, 1));
        assert!(s.get("pods", "a", "x").is_some());
        assert!(s.get("pods", "a", "y").is_none());
        assert!(s.events_after(0, 10).is_err());
        assert!(s.events_after(3, 10).unwrap().is_empty());
        s.put("pods", "a", "z", json!({"metadata": {"name": "z"}}));
        assert_eq!(s.revision(), 2);
        s.restore(&Snapshot::default());
        assert_eq!((s.revision(), s.count("pods")), (0, 0));
    }
}
