//! Clearing one object, and the queue that clears many: one worker per object at most,
//! each patching the newest state seen, retried with backoff without holding up the
//! others, under a shared bound on concurrent patches.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use backon::{ExponentialBuilder, Retryable};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, info, warn};

use crate::{
    blocker::{Decision, Leave, Mode},
    connect::{Target, is_transient},
    events,
    metrics::Metrics,
    object::Held,
    shutdown::Shutdown,
};

/// What became of one object.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Cleared(Vec<String>),
    WouldClear(Vec<String>),
    Left(LeftReason),
    /// Deleted meanwhile (404 or a watch DELETED).
    Gone,
    /// Someone else changed it first (409, 422): the watch brings the new state.
    Raced,
    /// Could not be cleared; the label says why.
    Failed(&'static str),
    /// Shutdown came first.
    Abandoned,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LeftReason {
    NotPending,
    Failed,
    Terminating,
    Bound,
    NotSelected,
}

/// Everything needed to clear objects of one resource.
pub struct Clearer {
    pub client: Client,
    pub target: Target,
    pub mode: Mode,
    pub only: Vec<String>,
    pub dry_run: bool,
    pub node: String,
    pub metrics: Arc<Metrics>,
    pub events: Arc<events::Sink>,
}

/// A failed attempt that may succeed later.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Transient(kube::Error);

impl Clearer {
    fn api(&self, namespace: Option<&str>) -> Api<Held> {
        match namespace {
            Some(ns) if self.target.namespaced => {
                Api::namespaced_with(self.client.clone(), ns, &self.target.resource)
            }
            _ => Api::all_with(self.client.clone(), &self.target.resource),
        }
    }

    /// One attempt at the object as seen.
    async fn attempt(&self, obj: &Held) -> Result<Outcome, Transient> {
        let (names, patch) = match self.mode.decide(obj, &self.only) {
            Decision::Clear { names, patch } => (names, patch),
            Decision::Leave(leave) => return Ok(Outcome::Left(self.left(obj, leave))),
        };
        let kind = &self.target.resource.kind;
        if self.dry_run {
            info!(kind = %kind, object = %obj.key(), names = %names.join(","), "dry run: would clear");
            return Ok(Outcome::WouldClear(names));
        }
        let patch: json_patch::Patch = match serde_json::from_value(patch) {
            Ok(p) => p,
            Err(e) => {
                warn!(object = %obj.key(), error = %e, "cannot build the clearing patch");
                return Ok(Outcome::Failed("patch"));
            }
        };
        match self
            .api(obj.namespace())
            .patch(
                obj.name(),
                &PatchParams::default(),
                &Patch::Json::<()>(patch),
            )
            .await
        {
            Ok(_) => {
                info!(kind = %kind, object = %obj.key(), names = %names.join(","), "cleared");
                Ok(Outcome::Cleared(names))
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                debug!(object = %obj.key(), "deleted before it was cleared");
                Ok(Outcome::Gone)
            }
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
                debug!(object = %obj.key(), code = s.code, message = %s.message, "changed by someone else first; waiting for its new state");
                Ok(Outcome::Raced)
            }
            Err(e) if is_transient(&e) => Err(Transient(e)),
            Err(e) => {
                let reason = match &e {
                    kube::Error::Api(s) if s.code == 401 => "unauthorized",
                    kube::Error::Api(s) if s.code == 403 => "forbidden",
                    kube::Error::Api(_) => "rejected",
                    _ => "other",
                };
                warn!(kind = %kind, object = %obj.key(), error = %e, "cannot clear");
                self.metrics.failure(reason);
                Ok(Outcome::Failed(reason))
            }
        }
    }

    fn left(&self, obj: &Held, leave: Leave) -> LeftReason {
        match leave {
            Leave::NotPending => LeftReason::NotPending,
            Leave::Failed => {
                info!(object = %obj.key(), "initialization failed on purpose (initializers.result is set): left alone");
                LeftReason::Failed
            }
            Leave::Terminating => LeftReason::Terminating,
            Leave::Bound => LeftReason::Bound,
            Leave::NotSelected(names) => {
                debug!(object = %obj.key(), pending = %names.join(","), "no --only name is pending");
                LeftReason::NotSelected
            }
        }
    }

    fn publish_event(&self, obj: &Held, names: &[String]) {
        let event = events::cleared_event(
            &self.target.resource,
            obj,
            self.mode.event_reason(),
            names,
            &self.node,
        );
        self.events.send(event, obj.key());
    }
}

/// The server's Retry-After, from the Status details of a 429 or 503.
fn retry_after(e: &kube::Error) -> Duration {
    match e {
        kube::Error::Api(s) => s
            .details
            .as_ref()
            .map(|d| Duration::from_secs(u64::from(d.retry_after_seconds).min(30)))
            .unwrap_or_default(),
        _ => Duration::ZERO,
    }
}

fn transient_reason(e: &kube::Error) -> &'static str {
    match e {
        kube::Error::Api(s) if s.code == 429 => "throttled",
        kube::Error::Api(_) => "server_error",
        _ => "unreachable",
    }
}

#[derive(Default)]
struct Slot {
    /// The newest state seen since the worker last looked.
    latest: Option<Arc<Held>>,
    deleted: bool,
}

#[derive(Default)]
struct State {
    slots: HashMap<String, Slot>,
    /// When each object still to clear was first seen pending.
    first_seen: HashMap<String, Instant>,
}

/// Tallies of `--once`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Summary {
    pub cleared: usize,
    pub would_clear: usize,
    pub already_clear: usize,
    pub left_alone: usize,
    pub gone: usize,
    pub failed: usize,
}

/// The clearing queue of one resource.
pub struct Queue {
    clearer: Clearer,
    state: Mutex<State>,
    permits: Arc<Semaphore>,
    idle: Notify,
    retry: ExponentialBuilder,
    shutdown: Shutdown,
    summary: Mutex<Summary>,
    /// `--once` has no watch to bring an object's new state after a race: it reads it.
    reread_on_race: bool,
}

impl Queue {
    /// `attempts`: how many times a transient failure is retried; `None` for ever.
    /// With `attempts` set (`--once`), a race is followed by a GET of the object.
    pub fn new(
        clearer: Clearer,
        permits: Arc<Semaphore>,
        attempts: Option<usize>,
        shutdown: Shutdown,
    ) -> Arc<Queue> {
        let retry = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(30))
            .with_factor(2.0)
            .with_jitter();
        let retry = match attempts {
            Some(n) => retry.with_max_times(n),
            None => retry.without_max_times(),
        };
        Arc::new(Queue {
            clearer,
            state: Mutex::default(),
            permits,
            idle: Notify::new(),
            retry,
            shutdown,
            summary: Mutex::default(),
            reread_on_race: attempts.is_some(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave it inconsistent: every update is one step.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new state of an object, from the list or the watch.
    pub fn offer(self: &Arc<Self>, obj: Held) {
        let key = obj.key();
        let leave = match self.clearer.mode.decide(&obj, &self.clearer.only) {
            Decision::Clear { .. } => None,
            Decision::Leave(leave) => Some(leave),
        };
        let pending = leave.is_none();
        let obj = Arc::new(obj);
        let mut state = self.state();
        if pending {
            if !state.first_seen.contains_key(&key) {
                state.first_seen.insert(key.clone(), Instant::now());
                self.clearer.metrics.pending.inc();
            }
        } else if !state.slots.contains_key(&key) && state.first_seen.remove(&key).is_some() {
            // With a worker on it, the worker settles the entry (and times the clear).
            self.clearer.metrics.pending.dec();
        }
        if let Some(slot) = state.slots.get_mut(&key) {
            slot.latest = Some(obj);
            return;
        }
        if let Some(leave) = leave {
            drop(state);
            let reason = self.clearer.left(&obj, leave);
            self.tally(&Outcome::Left(reason));
            return;
        }
        state.slots.insert(
            key.clone(),
            Slot {
                latest: Some(obj),
                deleted: false,
            },
        );
        drop(state);
        let queue = self.clone();
        tokio::spawn(async move { queue.work(key).await });
    }

    /// The object was deleted.
    pub fn forget(&self, obj: &Held) {
        let key = obj.key();
        let mut state = self.state();
        if state.first_seen.remove(&key).is_some() {
            self.clearer.metrics.pending.dec();
        }
        if let Some(slot) = state.slots.get_mut(&key) {
            slot.deleted = true;
        }
    }

    /// After a relist: objects not listed any more are gone.
    pub fn retain(&self, listed: &HashSet<String>) {
        let mut state = self.state();
        let before = state.first_seen.len();
        state.first_seen.retain(|k, _| listed.contains(k));
        let dropped = before - state.first_seen.len();
        self.clearer.metrics.pending.dec_by(dropped as i64);
        for (key, slot) in state.slots.iter_mut() {
            if !listed.contains(key) {
                slot.deleted = true;
            }
        }
    }

    /// The newest state to work on, or `None` when the object is gone.
    fn refresh(&self, key: &str, current: &mut Arc<Held>) -> Option<Arc<Held>> {
        let mut state = self.state();
        let slot = state.slots.get_mut(key)?;
        if slot.deleted {
            return None;
        }
        if let Some(newer) = slot.latest.take() {
            *current = newer;
        }
        Some(current.clone())
    }

    async fn work(self: Arc<Self>, key: String) {
        let Ok(permit) = self.permits.clone().acquire_owned().await else {
            return;
        };
        // The clearing future is large (the client's request futures, the retries): boxed,
        // it is allocated only once a permit is held, so objects waiting in a burst cost
        // a small task each instead of a whole clearing each.
        Box::pin(self.clear(key, permit)).await
    }

    async fn clear(self: Arc<Self>, key: String, permit: OwnedSemaphorePermit) {
        let mut current = Arc::new(Held::default());
        // The permit bounds requests in flight, not objects being retried: it is given
        // back while a retry waits, so one failing object does not hold up new ones.
        let held = Arc::new(Mutex::new(Some(permit)));
        loop {
            let shutdown = self.shutdown.clone();
            let (held_sleep, permits) = (held.clone(), self.permits.clone());
            let current_cell = Mutex::new(current.clone());
            let outcome = (|| async {
                if self.shutdown.is_requested() {
                    return Ok(Outcome::Abandoned);
                }
                let obj = {
                    let mut c = current_cell.lock().unwrap_or_else(|p| p.into_inner());
                    self.refresh(&key, &mut c)
                };
                match obj {
                    None => Ok(Outcome::Gone),
                    Some(obj) => self.clearer.attempt(&obj).await,
                }
            })
            .retry(self.retry)
            .sleep(move |d| {
                let (shutdown, held, permits) =
                    (shutdown.clone(), held_sleep.clone(), permits.clone());
                async move {
                    drop(held.lock().unwrap_or_else(|p| p.into_inner()).take());
                    tokio::select! {
                        _ = tokio::time::sleep(d) => {}
                        _ = shutdown.requested() => {}
                    }
                    if let Ok(p) = permits.acquire_owned().await {
                        *held.lock().unwrap_or_else(|p| p.into_inner()) = Some(p);
                    }
                }
            })
            .adjust(|e: &Transient, wait| Some(wait?.max(retry_after(&e.0))))
            .notify(|e: &Transient, wait| {
                self.clearer.metrics.failure(transient_reason(&e.0));
                debug!(object = %key, error = %e, retry_in = ?wait, "clearing failed, retrying");
            })
            .await;
            current = current_cell.into_inner().unwrap_or_else(|p| p.into_inner());
            let outcome = outcome.unwrap_or_else(|e| {
                warn!(object = %key, error = %e, "giving up clearing after retries");
                Outcome::Failed(transient_reason(&e.0))
            });
            self.finished(&key, &current, &outcome);
            if outcome == Outcome::Raced && self.reread_on_race {
                self.reread(&key, &current).await;
            }
            let mut state = self.state();
            let again = state
                .slots
                .get(&key)
                .is_some_and(|s| s.latest.is_some() && !s.deleted)
                && !matches!(outcome, Outcome::Abandoned);
            if !again {
                state.slots.remove(&key);
                let settled = matches!(outcome, Outcome::Left(_) | Outcome::Gone);
                if settled && state.first_seen.remove(&key).is_some() {
                    self.clearer.metrics.pending.dec();
                }
                if state.slots.is_empty() {
                    self.idle.notify_waiters();
                }
                return;
            }
        }
    }

    fn finished(&self, key: &str, obj: &Held, outcome: &Outcome) {
        if let Outcome::Cleared(names) = outcome {
            let first = {
                let mut state = self.state();
                state.first_seen.remove(key)
            };
            if let Some(first) = first {
                self.clearer.metrics.pending.dec();
                self.clearer
                    .metrics
                    .clear_latency
                    .observe(first.elapsed().as_secs_f64());
            }
            self.clearer
                .metrics
                .cleared(self.clearer.mode.as_str(), &self.clearer.target.name);
            self.clearer.publish_event(obj, names);
        }
        self.tally(outcome);
    }

    fn tally(&self, outcome: &Outcome) {
        let mut s = self.summary.lock().unwrap_or_else(|p| p.into_inner());
        match outcome {
            Outcome::Cleared(_) => s.cleared += 1,
            Outcome::WouldClear(_) => s.would_clear += 1,
            Outcome::Left(LeftReason::NotPending) => s.already_clear += 1,
            Outcome::Left(_) => s.left_alone += 1,
            Outcome::Gone => s.gone += 1,
            // A race in --once: the object changed under us; it is counted when its
            // new state is looked at again.
            Outcome::Raced => {}
            Outcome::Failed(_) | Outcome::Abandoned => s.failed += 1,
        }
    }

    /// Reads the object's current state into its slot after a race.
    async fn reread(&self, key: &str, obj: &Held) {
        let fresh = self.clearer.api(obj.namespace()).get_opt(obj.name()).await;
        let mut state = self.state();
        let Some(slot) = state.slots.get_mut(key) else {
            return;
        };
        match fresh {
            Ok(Some(fresh)) => slot.latest = Some(Arc::new(fresh.slim())),
            Ok(None) => {
                slot.deleted = true;
                drop(state);
                self.tally(&Outcome::Gone);
            }
            Err(e) => {
                warn!(object = %key, error = %e, "cannot read the object again after a race");
                drop(state);
                self.tally(&Outcome::Failed("reread"));
            }
        }
    }

    pub fn summary(&self) -> Summary {
        self.summary
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits until no object is being worked on, at most `limit`. Returns whether it got there.
    pub async fn drained(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, async {
            loop {
                let idle = self.idle.notified();
                tokio::pin!(idle);
                idle.as_mut().enable();
                if self.state().slots.is_empty() {
                    return;
                }
                idle.await;
            }
        })
        .await
        .is_ok()
    }

    /// How many objects are being worked on.
    pub fn in_flight(&self) -> usize {
        self.state().slots.len()
    }
}
