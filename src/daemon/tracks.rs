//! What the daemon keeps of each object it works on, by `namespace/name`: since when it is
//! pending (the latency metric), its failures in a row (the backoff), its turn among the
//! instances, whether this instance cleared it; and, apart, the copies proven stale (a PATCH
//! whose `test` failed, then a GET that showed otherwise): such a copy is read again before
//! any PATCH, however often a watch or a lagging server's relist brings it back.

use std::{
    collections::HashMap,
    hash::{Hash, Hasher},
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use tokio::time::Instant;

use crate::{object::Held, peers::Turn};

/// The objects seen pending and not cleared yet, by `namespace/name`: since when (for
/// the latency metric) and how many attempts failed in a row (for the backoff).
#[derive(Default)]
pub struct Tracks {
    tracks: Mutex<HashMap<String, Track, ahash::RandomState>>,
    /// The copies proven stale: the uid and `fingerprint` of each, by key.
    stale: Mutex<HashMap<String, (Option<String>, u64), ahash::RandomState>>,
}

struct Track {
    uid: Option<String>,
    first_seen: Instant,
    failures: u32,
    /// Left to the instances ranked before this one, waiting its turn.
    waiting: bool,
    /// Ever left to the instances ranked before this one.
    backup: bool,
    /// Cleared by this instance during the store's list with that number: what the watch
    /// shows of it pending after that is older than the PATCH, until a relist.
    cleared: Option<u32>,
    /// A PATCH of it lost a race (409, or a 422 whose `test` failed): the copy it was made
    /// from is stale, and the object is read again before the next one.
    reread: bool,
}

fn track(uid: Option<&str>) -> Track {
    let (uid, first_seen) = (uid.map(str::to_string), Instant::now());
    Track {
        uid,
        first_seen,
        failures: 0,
        waiting: false,
        backup: false,
        cleared: None,
        reread: false,
    }
}

impl Tracks {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Track, ahash::RandomState>> {
        self.tracks.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stale(&self) -> MutexGuard<'_, HashMap<String, (Option<String>, u64), ahash::RandomState>> {
        self.stale.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A PATCH of the object lost a race: read it again before the next.
    pub(super) fn lost_race(&self, key: &str) {
        if let Some(t) = self.lock().get_mut(key) {
            t.reread = true;
        }
    }

    /// Whether the stored copy `obj` must be read again before a PATCH: a race was lost
    /// since, or it is the very copy proven stale.
    pub(super) fn needs_reading(&self, key: &str, obj: &Held) -> bool {
        let reread = self.lock().get(key).is_some_and(|t| t.reread);
        reread
            || self.stale().get(key).is_some_and(|(uid, print)| {
                uid.as_deref() == obj.uid() && *print == fingerprint(obj)
            })
    }

    /// The object was read again: `read`, against the stored copy `stored`. If they differ
    /// in what the work depends on, the stored copy is proven stale: remembered, so that
    /// it is never patched from again (gates and initializers are only ever removed: a copy
    /// that held more than the object once did never is the newest again).
    pub(super) fn read_again(&self, key: &str, stored: &Held, read: &Held) {
        if let Some(t) = self.lock().get_mut(key) {
            t.reread = false;
        }
        let print = fingerprint(stored);
        if fingerprint(read) != print {
            let uid = stored.uid().map(str::to_string);
            self.stale().insert(key.to_string(), (uid, print));
        }
    }

    /// The object is gone from the store: no copy of it is stale any more.
    pub(super) fn forget_stale(&self, key: &str) {
        self.stale().remove(key);
    }

    /// Starts tracking a pending object; a new uid under the same name starts afresh.
    pub(super) fn pending(&self, key: &str, uid: Option<&str>) {
        let mut tracks = self.lock();
        if tracks.get(key).is_some_and(|t| t.uid.as_deref() == uid) {
            return;
        }
        tracks.insert(key.to_string(), track(uid));
    }

    /// Done with an object: how long it was pending, if it was.
    pub(super) fn done(&self, key: &str) -> Option<Duration> {
        self.lock().remove(key).map(|t| t.first_seen.elapsed())
    }

    /// Done with an object this instance cleared during the store's list `list`: how long
    /// it was pending. It stays known as cleared until the watch shows it so (`gone`): the
    /// watch may show an older state first (pending, from an event during the PATCH).
    pub(super) fn cleared(&self, key: &str, list: u32) -> Option<Duration> {
        let mut tracks = self.lock();
        let t = tracks.get_mut(key)?;
        t.cleared = Some(list);
        Some(t.first_seen.elapsed())
    }

    /// Whether this instance cleared the object `uid` already, during the store's list
    /// `list`: then what shows it pending is older than the PATCH. After a relist it is
    /// the server's word (an etcd restored from a backup holds it back again).
    pub(super) fn cleared_already(&self, key: &str, uid: Option<&str>, list: u32) -> bool {
        self.lock()
            .get(key)
            .is_some_and(|t| t.cleared == Some(list) && uid.is_some() && t.uid.as_deref() == uid)
    }

    /// Whether this instance ever left the object to the instances ranked before it.
    pub(super) fn backup(&self, key: &str) -> bool {
        self.lock().get(key).is_some_and(|t| t.backup)
    }

    /// Done with an object gone from the store: if it went while this instance waited its
    /// turn (another cleared it), its uid.
    pub(super) fn gone(&self, key: &str) -> Option<Option<String>> {
        self.lock()
            .remove(key)
            .and_then(|t| t.waiting.then_some(t.uid))
    }

    /// How long until this instance's turn at a pending object (`turn`, given when it was
    /// first seen); marks it waiting if that is not now.
    pub(super) fn wait_turn(
        &self,
        key: &str,
        turn: impl FnOnce(Instant) -> Turn,
    ) -> Option<Duration> {
        let mut tracks = self.lock();
        let t = tracks.get_mut(key)?;
        let turn = turn(t.first_seen);
        let left = (t.first_seen + turn.after).saturating_duration_since(Instant::now());
        t.waiting = !left.is_zero();
        t.backup |= turn.rank > 0;
        t.waiting.then_some(left)
    }

    /// Counts a failure of the object with `uid`; returns how many in a row. A new uid
    /// under the same name is another object: its count starts afresh.
    pub(super) fn failed(&self, key: &str, uid: Option<&str>) -> u32 {
        let mut tracks = self.lock();
        let t = tracks.entry(key.to_string()).or_insert_with(|| track(uid));
        if uid.is_some() && t.uid.as_deref() != uid {
            *t = track(uid);
        }
        t.failures = t.failures.saturating_add(1);
        t.failures
    }

    /// Forgets objects no longer in the store (deleted while pending).
    pub(super) fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|k, _| keep(k));
        self.stale().retain(|k, _| keep(k));
    }

    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// What the work on an object depends on (its uid, gates, initializers, label), hashed.
fn fingerprint(obj: &Held) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    obj.uid().hash(&mut h);
    let spec = obj.spec.as_ref();
    spec.and_then(|s| s.scheduling_gates.as_deref())
        .map(|g| g.get())
        .hash(&mut h);
    obj.metadata
        .initializers
        .as_deref()
        .map(|i| i.get())
        .hash(&mut h);
    obj.metadata.kept_label.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, gates: &[&str]) -> Held {
        let gates: Vec<_> = gates.iter().map(|g| json!({"name": g})).collect();
        crate::object::held(
            json!({"metadata": {"name": "a", "namespace": "ns", "uid": uid},
                                   "spec": {"schedulingGates": gates}}),
        )
    }

    /// A lost race makes the object read again once; a copy the reading proved stale is
    /// read again whenever it comes back (a lagging server's relist), until the object is
    /// gone; a copy the reading confirmed is not.
    #[test]
    fn a_copy_proven_stale_is_read_again_before_any_patch() {
        let tracks = Tracks::default();
        let old = pod("u1", &["g1", "g2"]);
        let now = pod("u1", &["g2"]);
        tracks.pending("ns/a", Some("u1"));
        assert!(!tracks.needs_reading("ns/a", &old));
        tracks.lost_race("ns/a");
        assert!(tracks.needs_reading("ns/a", &old));
        tracks.read_again("ns/a", &old, &now);
        assert!(
            tracks.needs_reading("ns/a", &old),
            "the stale copy, brought back"
        );
        assert!(!tracks.needs_reading("ns/a", &now), "the copy read");
        assert!(
            !tracks.needs_reading("ns/a", &pod("u2", &["g1", "g2"])),
            "another object"
        );
        // Done with it (cleared, left): the stale copy is still known.
        tracks.done("ns/a");
        assert!(tracks.needs_reading("ns/a", &old));
        // Gone from the store: forgotten.
        tracks.forget_stale("ns/a");
        assert!(!tracks.needs_reading("ns/a", &old));
        // A race lost, and the reading shows the same: nothing proven stale.
        tracks.pending("ns/a", Some("u1"));
        tracks.lost_race("ns/a");
        tracks.read_again("ns/a", &now, &now.clone());
        assert!(!tracks.needs_reading("ns/a", &now));
        tracks.retain(|_| false);
        assert_eq!(tracks.len(), 0);
    }

    #[test]
    fn an_object_cleared_here_is_not_patched_again_until_the_watch_shows_it_or_a_relist() {
        let tracks = Tracks::default();
        tracks.pending("ns/a", Some("u1"));
        assert!(!tracks.cleared_already("ns/a", Some("u1"), 1));
        assert!(tracks.cleared("ns/a", 1).is_some());
        // An older state shown after the PATCH (pending, from an event during it).
        assert!(tracks.cleared_already("ns/a", Some("u1"), 1));
        assert!(
            !tracks.cleared_already("ns/a", Some("u2"), 1),
            "another object under its name"
        );
        assert!(!tracks.cleared_already("ns/a", None, 1));
        // A relist shows it pending: the server's word (an etcd restored), cleared again.
        assert!(!tracks.cleared_already("ns/a", Some("u1"), 2));
        // The watch shows it cleared (dropped from the store): forgotten, not left to peers.
        assert_eq!(tracks.gone("ns/a"), None);
        assert!(!tracks.cleared_already("ns/a", Some("u1"), 1));
        assert_eq!(tracks.len(), 0);
    }
}
