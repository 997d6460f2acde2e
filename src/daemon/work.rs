//! One unit of the daemon's work: an attempt at the newest state of one object. A failure
//! brings the object back on the per-object schedule (`retry::PER_OBJECT`: 100 ms doubling
//! to 30 s, never before the server's Retry-After), so no failure is ever final while the server can be reached.

use std::{sync::Arc, time::Duration};

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;
use tracing::{debug, info};

use crate::{
    blocker::Decision,
    clear::{Clearer, Done},
    failure::Failure,
    object::Held,
    peers::Peers,
    queue::Queue,
    release::{self, Releaser, Verdict},
    retry::PER_OBJECT,
    store::{Key, Store},
    validation::later,
};

use super::tracks::Tracks;

/// What the work on one object needs: the clearer, the store, the objects seen pending,
/// and the queue to come back to after a failure.
pub struct Ctx {
    pub clearer: Clearer,
    pub store: Arc<Store>,
    pub tracks: Tracks,
    pub queue: Arc<Queue<Key>>,
    /// The release rules, when given: then the store holds every unbound pod, and the
    /// unlabelled ones are theirs.
    pub release: Option<Releaser>,
    /// The instances that share the work: who patches an object first.
    pub peers: Arc<Peers>,
}

/// The delay before the next attempt at an object after a failure.
fn retry_delay(tracks: &Tracks, key: &str, uid: Option<&str>, f: &Failure) -> (u32, Duration) {
    let failures = tracks.failed(key, uid);
    (failures, PER_OBJECT.after(failures, &f.error))
}

/// One attempt at the newest state of the object; after a failure, it comes back later.
pub async fn work(key: Key, ctx: Arc<Ctx>) {
    // Gone since it was queued (deleted, bound, cleared by another): nothing is kept, not
    // even a timer an earlier attempt set while it went.
    let Some(stored) = ctx.store.get(&key) else {
        ctx.queue.cancel(&key);
        ctx.tracks.forget_stale(&key);
        if let Some(uid) = ctx.tracks.gone(&key) {
            ctx.clearer.metrics.left_to_peers.inc();
            ctx.peers.handed_over(uid.as_deref());
        }
        if let Some(r) = &ctx.release {
            r.pace.forget(&key);
            r.said.forget(&key);
        }
        return;
    };
    let obj = match read_again(stored, &key, &ctx).await {
        Ok(Some(obj)) => obj,
        Ok(None) => {
            ctx.tracks.done(&key);
            return;
        }
        Err(f) => return failed(key, None, &ctx, f),
    };
    match reconcile(&obj, &key, &ctx).await {
        Ok(None) => {}
        // A gate's age, or its turn under --release-rate: a timer, not a retry.
        Ok(Some(wait)) => ctx.queue.add_at(key, later(Instant::now(), wait)),
        Err(f) => failed(key, Some(&obj), &ctx, f),
    }
}

/// A failed attempt at `obj`: counted, said, and the object back after its backoff.
fn failed(key: Key, obj: Option<&Held>, ctx: &Ctx, f: Failure) {
    let uid = obj.and_then(Held::uid);
    // Changed first by another at this instance's turn: the owner is at work (its
    // look again waits for the newest state, or its turn after that).
    if f.class.stale() && ctx.tracks.backup(&key) {
        ctx.peers.handed_over(uid);
    }
    let (failures, backoff) = retry_delay(&ctx.tracks, &key, uid, &f);
    // Lost a race: the copy patched from is stale; the next attempt reads the object.
    if f.class.stale() {
        ctx.tracks.lost_race(&key);
    }
    let id = key.to_string();
    let wait = ctx.queue.add_after(key, backoff);
    ctx.clearer.report(&id, &f, failures, Some(wait));
}

/// The object to work on: the stored copy, or, where that copy is known stale (a race
/// lost since, or the very copy proven stale brought back by a watch or a lagging server's
/// relist), the object itself, read with a GET (never the cache: a GET by name reads etcd).
/// `None`: it is gone.
async fn read_again(stored: Held, key: &Key, ctx: &Ctx) -> Result<Option<Held>, Failure> {
    if !ctx.tracks.needs_reading(key, &stored) {
        return Ok(Some(stored));
    }
    let c = &ctx.clearer;
    let api = c.target.api(&c.client, stored.namespace());
    let mut read = match api.get(stored.name()).await {
        Ok(read) => read,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
        Err(e) => return Err(Failure::from(e)),
    };
    read.trim(&c.label_key);
    debug!(object = %key, "read again: the copy patched from was stale");
    ctx.tracks.read_again(key, &stored, &read);
    Ok(Some(read))
}

/// Works on the object; `Some(wait)`: look at it again after `wait`.
async fn reconcile(obj: &Held, id: &Key, ctx: &Ctx) -> Result<Option<Duration>, Failure> {
    if let Some(r) = &ctx.release
        && !obj.has_label(&ctx.clearer.label_key)
    {
        return release(obj, id, ctx, r).await;
    }
    let key: &str = id;
    if ctx
        .tracks
        .cleared_already(key, obj.uid(), ctx.store.list_number())
    {
        debug!(object = %key, "cleared already: the watch shows an older state");
        return Ok(None);
    }
    let decision = ctx.clearer.decide(obj);
    if matches!(decision, Decision::Clear { .. }) {
        ctx.tracks.pending(key, obj.uid());
        // Objects deleted while pending leave a track behind: sweep now and then.
        if ctx.tracks.len() > 2 * ctx.store.len() + 64 {
            ctx.tracks.retain(|k| ctx.store.contains(k));
        }
        // Another instance's first (peers/): a timer, and a look again when it fires.
        let turn = |first| ctx.peers.turn(obj.uid(), first);
        if let Some(left) = ctx
            .peers
            .shares()
            .then(|| ctx.tracks.wait_turn(key, turn))
            .flatten()
        {
            return Ok(Some(left));
        }
    }
    let done = ctx.clearer.attempt(obj, key, decision).await?;
    // Cleared: known so until the watch shows it. Left or gone: no longer tracked.
    if let Done::Cleared(_) = &done {
        if let Some(pending) = ctx.tracks.cleared(key, ctx.store.list_number()) {
            ctx.clearer
                .metrics
                .clear_latency
                .observe(pending.as_secs_f64());
        }
    } else {
        ctx.tracks.done(key);
    }
    Ok(None)
}

/// The release rules on an unlabelled pod: nothing, later (its age), later (its turn
/// under --release-rate), or now.
async fn release(
    obj: &Held,
    id: &Key,
    ctx: &Ctx,
    r: &Releaser,
) -> Result<Option<Duration>, Failure> {
    let key: &str = id;
    let dry_run = ctx.clearer.dry_run;
    let due = match r.rules.verdict(obj, Timestamp::now()) {
        Verdict::None => {
            r.pace.forget(key);
            r.said.forget(key);
            ctx.tracks.done(key);
            return Ok(None);
        }
        Verdict::Later(wait) => {
            if dry_run && r.said.first(key, obj.uid(), false) {
                info!(object = %key, gates = %crate::blocker::gates::names_of(obj).join(","), releases_in = %crate::text::age_of(wait),
                      "dry run: would release a gate when its pod is old enough");
            }
            return Ok(Some(wait));
        }
        Verdict::Due(due) => due,
    };
    if dry_run {
        // Pods deleted once said leave an entry behind: sweep now and then.
        if r.said.len() > 2 * ctx.store.len() + 64 {
            r.said.retain(|k| ctx.store.contains(k));
        }
        if r.said.first(key, obj.uid(), true) {
            for d in &due {
                info!(object = %key, gate = %d.gate, age = %crate::text::age_of(d.age), rule = %d.rule,
                      "dry run: would release an orphaned gate now (at most --release-rate)");
            }
        }
        return Ok(None);
    }
    if let Err(wait) = r.pace.slot(id, obj.uid(), Instant::now()) {
        return Ok(Some(wait));
    }
    let Some(patch) = release::patch(obj, &due) else {
        return Ok(None);
    };
    ctx.clearer.release(obj, &due, &patch).await?;
    // Released: a later failure of this pod is the first of a new run.
    ctx.tracks.done(key);
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: u16, retry_after: u32) -> Failure {
        Failure::from(kube::Error::Api(Box::new(kube::core::Status {
            code,
            details: Some(kube::core::response::StatusDetails {
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                causes: Vec::new(),
                retry_after_seconds: retry_after,
            }),
            ..kube::core::Status::default()
        })))
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_per_object_grows_resets_and_starts_afresh_for_a_new_uid() {
        let tracks = Tracks::default();
        tracks.pending("ns/a", Some("uid-1"));
        let delays: Vec<Duration> = (0..10)
            .map(|_| retry_delay(&tracks, "ns/a", None, &failure(403, 0)).1)
            .collect();
        assert!(
            delays
                .windows(2)
                .all(|w| w[1] >= w[0].mul_f64(1.5) || w[1] >= Duration::from_secs(24)),
            "{delays:?}"
        );
        assert!(delays[0] <= Duration::from_millis(100));
        assert!(*delays.last().unwrap() <= Duration::from_secs(30));
        // Another object is not slowed down by this one.
        assert!(
            retry_delay(&tracks, "ns/b", None, &failure(403, 0)).1 <= Duration::from_millis(100)
        );
        // The server's Retry-After comes first.
        assert!(retry_delay(&tracks, "ns/c", None, &failure(429, 7)).1 == Duration::from_secs(7));

        // Pending time is measured from when it was first seen, on the runtime's clock.
        tokio::time::advance(Duration::from_secs(5)).await;
        tracks.pending("ns/a", Some("uid-1"));
        assert_eq!(tracks.done("ns/a"), Some(Duration::from_secs(5)));
        assert_eq!(tracks.done("ns/a"), None, "done once");
        assert_eq!(
            retry_delay(&tracks, "ns/a", None, &failure(403, 0)).0,
            1,
            "reset after success"
        );

        // The same name with a new uid is a new object: a fresh count and clock.
        tracks.pending("ns/d", Some("old"));
        retry_delay(&tracks, "ns/d", None, &failure(500, 0));
        retry_delay(&tracks, "ns/d", None, &failure(500, 0));
        tokio::time::advance(Duration::from_secs(3)).await;
        tracks.pending("ns/d", Some("new"));
        assert_eq!(retry_delay(&tracks, "ns/d", None, &failure(500, 0)).0, 1);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(tracks.done("ns/d"), Some(Duration::from_secs(1)));

        tracks.retain(|k| k != "ns/b");
        assert_eq!(tracks.len(), 2, "ns/a and ns/c are left");
    }

    #[test]
    fn release_failures_count_per_pod_and_start_afresh_for_a_new_uid() {
        // An unlabelled pod under --release-gate is never `pending`: its failures make its
        // track.
        let tracks = Tracks::default();
        let f = failure(500, 0);
        assert_eq!(retry_delay(&tracks, "ns/p", Some("u1"), &f).0, 1);
        assert_eq!(retry_delay(&tracks, "ns/p", Some("u1"), &f).0, 2);
        assert_eq!(
            retry_delay(&tracks, "ns/p", Some("u2"), &f).0,
            1,
            "deleted and created again under its name"
        );
        // Released (or gone): done with it.
        assert!(tracks.done("ns/p").is_some());
        assert_eq!(tracks.len(), 0, "nothing left behind");
        assert_eq!(retry_delay(&tracks, "ns/p", Some("u2"), &f).0, 1);
    }
}
