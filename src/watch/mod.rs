//! Every watch of the process goes through here (the labelled objects or unbound pods, the
//! webhook configurations, a webhook service's EndpointSlices): the list and watch of
//! `stream.rs` with the server's selection, which pages the list, resumes from the last
//! resourceVersion and relists on a 410 event, and fails a watch that ends at once with
//! nothing delivered and a list whose continue tokens go round. Around it (`Events`), what
//! a real cluster needs besides:
//!
//! - one backoff for the watch's whole life (`retry::Backoff` on `retry::WATCH`, each
//!   failure's step as the failure table says: a refused connection about once a second, a
//!   first 410 at once, else 0.8 s doubling to 30 s), kept across relists
//!   (a server answering every watch start 504 was once listed 1,250 times a second).
//!   It starts again when the watch delivers an event or has run for a second, or after
//!   120 s without a failure: a list followed at once by a failed (or at once ended) watch
//!   is no success;
//! - a full relist every `--resync-period`, counted from the end of the last list and
//!   never cutting one, which bounds any blindness (a watch resumed from a version the
//!   server has not reached since an etcd restore is accepted and silent until the
//!   revision passes it); before it, a one-item LIST reads the server's revision, and a
//!   revision lower than one already seen is said out loud;
//! - a relist when a watch start is answered with an HTTP 410 or 504, which the watcher
//!   alone would retry from the same version for ever;
//! - `/readyz`, the restart metric and the "watch failed"/"watch recovered" lines, fed
//!   with the real reason of every failure.
//!
//! The watch of the objects to clear is `objects.rs`.

mod lines;
mod objects;
mod stream;

pub use objects::{Selector, UNBOUND, Watch};
pub use stream::SHORT;
use stream::{Failure, Lister, Step};

use std::{
    fmt::Debug,
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant},
};

use kube::{Api, Resource, api::ListParams, runtime::watcher};
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use crate::{
    admin::Health,
    failure::{Wait, class_of, classify, describe, retry_after, retry_after_of},
    metrics::{Metrics, WatchCause},
    retry::{Backoff, WATCH},
};

/// Why the watch restarted, for the metric.
fn cause(e: &Failure) -> WatchCause {
    match e {
        Failure::List(_) => WatchCause::ListFailed,
        Failure::Pages(_) => WatchCause::ListLoop,
        Failure::WatchStart(_) => WatchCause::WatchStartFailed,
        Failure::Event(s) if s.code == 410 => WatchCause::Expired,
        Failure::Event(_) => WatchCause::WatchError,
        Failure::Stream(_) => WatchCause::StreamFailed,
        Failure::NoResourceVersion => WatchCause::NoResourceVersion,
        Failure::Short { .. } => WatchCause::ShortWatch,
    }
}

/// The failure in words, with what to do about a 401 or 403 (`rbac_hint`: the watch's own
/// manifest), or, when the server is still starting (`starting`: its `/readyz` in words),
/// that there is nothing to do but wait.
fn reason_with(e: &Failure, rbac_hint: &str, starting: Option<&str>) -> String {
    let (what, status) = match e {
        Failure::List(e) => ("list failed", describe(e)),
        Failure::Pages(e) => ("list failed", e.to_string()),
        Failure::WatchStart(e) => ("watch start failed", describe(e)),
        Failure::Stream(e) => ("watch stream failed", describe(e)),
        Failure::Event(s) => ("watch error", crate::failure::status_text(s)),
        Failure::NoResourceVersion => ("no resourceVersion", "the server sent none".to_string()),
        Failure::Short { lasted, bookmarks } => (
            "watch ended at once",
            format!(
                "the server ended the watch after {} with no event{} (a proxy or load \
                 balancer in front of the API server that closes idle connections?)",
                crate::text::duration(*lasted),
                match bookmarks {
                    0 => String::new(),
                    1 => ", 1 bookmark".to_string(),
                    n => format!(", {n} bookmarks"),
                }
            ),
        ),
    };
    let hint = match (status.split(' ').next(), starting) {
        (Some("401" | "403"), Some(ready)) => format!(
            "; the API server is starting (its /readyz: {ready}): a 401 or 403 now is its \
             start-up, its RBAC policy not loaded yet, not missing RBAC; waiting"
        ),
        (Some("403"), None) => format!("; {rbac_hint}"),
        (Some("401"), None) => {
            "; the API server does not accept the kubeconfig's credentials".into()
        }
        _ => String::new(),
    };
    format!("{what}: {status}{hint}")
}

/// The server's answer behind a failure, as log fields (see `failure::status_fields`).
fn status_fields(e: &Failure) -> (Option<u16>, Option<&str>) {
    match e {
        Failure::List(e) | Failure::WatchStart(e) | Failure::Stream(e) => {
            crate::failure::status_fields(e)
        }
        Failure::Event(s) => (Some(s.code), Some(s.reason.as_str())),
        _ => (None, None),
    }
}

/// How long a watch's 401 or 403 waits for the server's `/readyz` (`server_starting`).
const READYZ_WAIT: Duration = Duration::from_secs(2);

/// The request error behind a failure, if the server answered it 401 or 403.
fn denied(e: &Failure) -> Option<&kube::Error> {
    match e {
        Failure::List(e) | Failure::WatchStart(e) | Failure::Stream(e) if matches!(e, kube::Error::Api(s) if matches!(s.code, 401 | 403)) => {
            Some(e)
        }
        _ => None,
    }
}

/// A watch start the watcher would retry from the same version, but which needs a relist.
fn needs_relist(e: &Failure) -> bool {
    matches!(e, Failure::WatchStart(kube::Error::Api(s)) if s.code == 410 || s.code == 504)
}

/// Which objects the server sends: by label, by field, or both.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub labels: Option<String>,
    pub fields: Option<String>,
}

impl Filter {
    pub fn labels(selector: &str) -> Filter {
        Filter {
            labels: Some(selector.to_string()),
            fields: None,
        }
    }

    fn list(&self) -> ListParams {
        let mut params = ListParams::default();
        if let Some(l) = &self.labels {
            params = params.labels(l);
        }
        if let Some(f) = &self.fields {
            params = params.fields(f);
        }
        params
    }
}

/// One watch: its name in logs and `/readyz`, what it selects, how often it lists
/// everything again, and where it reports.
pub struct Spec {
    pub name: String,
    pub filter: Filter,
    pub resync: Duration,
    /// What to grant when the server answers 403.
    pub rbac_hint: &'static str,
    pub health: Arc<Health>,
    /// Its entry in `health` (`Health::add_watch`).
    pub index: usize,
    pub metrics: Arc<Metrics>,
}

/// The events of one watch with every failure handled here: `next` never ends and never
/// fails. After a relist (a resync, a 410) the events are `Init`, the objects, `InitDone`.
pub struct Events<K: Resource + 'static> {
    api: Api<K>,
    spec: Spec,
    inner: Lister<K>,
    /// When to list everything again; one timer for the watch's life, not one per event.
    resync_at: Pin<Box<tokio::time::Sleep>>,
    /// A list is under way: the resync waits for its end.
    listing: bool,
    /// The highest resourceVersion seen, to notice the server's going backwards.
    highest: u64,
    /// Since when, and how many times, the watch has been failing.
    failing: Option<(Instant, u32)>,
    /// The last failure was a list's.
    list_failed: bool,
    backoff: Backoff,
    /// The failures counted before the last list succeeded, while the watch after it has
    /// delivered nothing: a watch start failing then takes the reset back.
    unproven: Option<(u32, u32)>,
    /// Since when the server has denied both the watch and its `/readyz` (`discovery::starting`).
    denied_since: Option<Instant>,
}

impl<K> Events<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    pub fn new(api: Api<K>, spec: Spec) -> Self {
        Events {
            inner: Lister::new(api.clone(), &spec.filter),
            resync_at: Box::pin(tokio::time::sleep(spec.resync)),
            listing: true,
            api,
            spec,
            highest: 0,
            failing: None,
            list_failed: false,
            backoff: Backoff::new(WATCH),
            unproven: None,
            denied_since: None,
        }
    }

    pub async fn next(&mut self) -> watcher::Event<K> {
        loop {
            let event = tokio::select! {
                event = self.inner.next() => event,
                _ = self.resync_at.as_mut(), if !self.listing => {
                    self.resync().await;
                    continue;
                }
            };
            match event {
                Ok(Step::Event(event)) => {
                    self.seen(&event);
                    return event;
                }
                Ok(Step::Running) => self.running(),
                Err(e) => {
                    let starting = self.server_starting(&e).await;
                    let wait = self.failed(e, starting.as_deref());
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                }
            }
        }
    }

    /// Lists everything again.
    fn restart(&mut self) {
        self.inner.restart();
        self.listing = true;
    }

    /// What an event proves: a list's end, that a failed list works again; a watch event,
    /// that the watch runs (a list alone never did: where RBAC grants list and not watch,
    /// each resync's list made `/readyz` 200 for its length).
    fn seen(&mut self, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Init => self.listing = true,
            watcher::Event::InitApply(o) => self.highest = self.highest.max(version(o)),
            watcher::Event::InitDone => {
                if self.list_failed {
                    self.recovered();
                }
                let s = &self.spec;
                s.health.synced(s.index);
                self.listing = false;
                let next = tokio::time::Instant::now() + s.resync;
                self.resync_at.as_mut().reset(next);
                self.unproven = Some(self.backoff.save());
                self.backoff.reset();
            }
            // A watch event: the watch runs, the schedule starts again (kube-runtime's
            // StreamBackoff reset on every item; a malformed line now and then between events
            // must not grow the wait to 30 s).
            watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                self.highest = self.highest.max(version(o));
                self.running();
            }
        }
    }

    /// For a 401 or 403: the server's `/readyz` in words if it is still starting (an API
    /// server restarted under a running metainit denies it for its first second), so that
    /// the failure does not say to grant what needs no granting. A `/readyz` not answered
    /// within `READYZ_WAIT` says nothing, and the retry waits for it no longer than that.
    async fn server_starting(&mut self, e: &Failure) -> Option<String> {
        let denied = denied(e)?;
        let client = kube::Client::from(self.api.clone());
        let ask = crate::discovery::starting(&client, denied, &mut self.denied_since);
        tokio::time::timeout(READYZ_WAIT, ask).await.ok().flatten()
    }

    /// The watch delivered an event, or has lasted a second: it runs.
    fn running(&mut self) {
        let s = &self.spec;
        s.health.watch_ok(s.index);
        self.unproven = None;
        self.backoff.reset();
        self.recovered();
    }

    fn recovered(&mut self) {
        self.denied_since = None;
        if let Some((since, attempts)) = self.failing.take() {
            info!(resource = %self.spec.name, after = ?since.elapsed(), attempts, "watch recovered");
        }
        self.list_failed = false;
    }

    /// Counts and reports a failure (`server_starting`: the server's `/readyz` in words when a 401 or
    /// 403 came from a server still starting); returns the wait before the next attempt.
    fn failed(&mut self, e: Failure, server_starting: Option<&str>) -> Duration {
        let starting = matches!(
            e,
            Failure::WatchStart(_) | Failure::Event(_) | Failure::Short { .. }
        );
        if let Some(saved) = self.unproven.take()
            && starting
        {
            self.backoff.restore(saved);
        }
        let (step, retry_after) = wait_of(&e);
        let wait = self.backoff.next(step, retry_after);
        self.list_failed = matches!(e, Failure::List(_) | Failure::Pages(_));
        let s = &self.spec;
        let cause = cause(&e);
        s.metrics.watch_restart(cause);
        let (_, attempts) = self.failing.get_or_insert((Instant::now(), 0));
        *attempts += 1;
        // A first 410 is the watch's ordinary life; one in a row after it is a watch that
        // does not run (a relist between each leaves `/readyz` 200 otherwise).
        if cause == WatchCause::Expired && wait.is_zero() {
            info!(resource = %s.name, retry_in = ?wait, "resource version expired; listing again");
            return wait;
        }
        let why = reason_with(&e, s.rbac_hint, server_starting);
        s.health.watch_failed(s.index, why.clone());
        let (code, reason) = status_fields(&e);
        warn!(resource = %s.name, error = %why, status.code = code,
              status.reason = reason.map(tracing::field::display), retry_in = ?wait, "watch failed; retrying");
        if needs_relist(&e) {
            self.restart();
        }
        wait
    }

    /// Reads the server's revision, then lists everything again.
    async fn resync(&mut self) {
        let s = &self.spec;
        let probe = s.filter.list().limit(1);
        if let Ok(list) = self.api.list(&probe).await
            && let Some(now) = list
                .metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        {
            if now < self.highest {
                warn!(resource = %s.name, from = self.highest, to = now,
                      "the server's revision went backwards: etcd restored from a snapshot? listing everything again");
                s.metrics.watch_restart(WatchCause::RevisionBackwards);
            }
            self.highest = now;
        }
        self.restart();
    }
}

/// What a watch failure says for the backoff: its class's step, and the server's
/// Retry-After. A failure that is no answer of the server (a list that goes round, no
/// resourceVersion, a watch ended at once) takes the next step.
fn wait_of(e: &Failure) -> (Wait, Duration) {
    match e {
        Failure::List(e) | Failure::WatchStart(e) | Failure::Stream(e) => {
            (classify(e).policy().wait, retry_after(e))
        }
        Failure::Event(s) => (class_of(s).policy().wait, retry_after_of(s)),
        Failure::Pages(_) | Failure::NoResourceVersion | Failure::Short { .. } => {
            (Wait::Step, Duration::ZERO)
        }
    }
}

fn version<K: Resource>(obj: &K) -> u64 {
    obj.meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
