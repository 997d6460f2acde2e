//! The watch of one resource, the same for both modes: kube-runtime's watcher on the
//! labelled objects (selection on the server, by label key), which pages the list,
//! resumes from the last resourceVersion, relists on a 410 event and backs off a failing
//! server (0.8 s to 30 s, jittered). Around it, what a real cluster needs besides:
//!
//! - a full relist every `--resync-period`, which bounds any blindness (a watch resumed
//!   from a version the server has not reached since an etcd restore is accepted and
//!   silent until the revision passes it); before it, a one-item LIST reads the
//!   server's revision, and a revision lower than one already seen is said out loud;
//! - a relist when a watch start is answered with an HTTP 410 or 504, which the watcher
//!   alone would retry from the same version for ever;
//! - `/readyz` and the restart metric, fed with the real reason of every failure.
//!
//! Objects go into the reflector's store (trimmed), and the key of every applied one that
//! needs work is yielded for the work queue; a list's objects only once the list is done,
//! when the store holds them (before, a relist's new objects were looked up in the old
//! store, not found, and skipped until the next resync).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{Stream, StreamExt, stream::BoxStream};
use kube::{
    Api,
    api::ListParams,
    runtime::{
        WatchStreamExt,
        reflector::{ObjectRef, Store, store::Writer},
        watcher,
    },
};
use tracing::{info, warn};

use crate::{
    admin::Health,
    failure::describe,
    metrics::Metrics,
    object::{Held, Kind},
};

/// Which objects the server sends.
#[derive(Clone, Debug)]
pub enum Selector {
    /// The objects that carry the label key.
    Labelled,
    /// Every pod not bound to a node (`spec.nodeName=`), labelled or not: the scope of the
    /// release rules. A gated pod is never bound, so no labelled gated pod is missed, and
    /// the cluster's running pods are never sent.
    Unbound,
}

/// One watched resource.
pub struct Watch {
    pub api: Api<Held>,
    pub label_key: String,
    pub selector: Selector,
    /// How the user named the resource, for logs.
    pub resource: String,
    pub resync: Duration,
    pub health: Arc<Health>,
    pub metrics: Arc<Metrics>,
    /// Whether an object needs work: one that holds nothing back (the state after
    /// metainit's own patch, most often) is only stored, not queued.
    pub wanted: Box<dyn Fn(&Held) -> bool + Send + Sync>,
}

/// Why the watch restarted, for the metric.
pub(crate) fn cause(e: &watcher::Error) -> &'static str {
    match e {
        watcher::Error::InitialListFailed(_) => "list_failed",
        watcher::Error::WatchStartFailed(_) => "watch_start_failed",
        watcher::Error::WatchError(s) if s.code == 410 => "expired",
        watcher::Error::WatchError(_) => "watch_error",
        watcher::Error::WatchFailed(_) => "stream_failed",
        watcher::Error::NoResourceVersion => "no_resource_version",
    }
}

/// The failure in words, with what to do about a 401 or 403.
pub(crate) fn reason(e: &watcher::Error) -> String {
    reason_with(e, crate::failure::RBAC_HINT)
}

/// As `reason`, with the hint for a 403 of the watch's own manifest.
pub(crate) fn reason_with(e: &watcher::Error, rbac_hint: &str) -> String {
    let (what, status) = match e {
        watcher::Error::InitialListFailed(e) => ("list failed", describe(e)),
        watcher::Error::WatchStartFailed(e) => ("watch start failed", describe(e)),
        watcher::Error::WatchFailed(e) => ("watch stream failed", describe(e)),
        watcher::Error::WatchError(s) => (
            "watch error",
            format!("{} {}: {}", s.code, s.reason, s.message),
        ),
        watcher::Error::NoResourceVersion => {
            ("no resourceVersion", "the server sent none".to_string())
        }
    };
    let hint = match status.split(' ').next() {
        Some("403") => format!("; {rbac_hint}"),
        Some("401") => "; the API server does not accept the kubeconfig's credentials".into(),
        _ => String::new(),
    };
    format!("{what}: {status}{hint}")
}

/// The server's answer behind a failure, as log fields (see `failure::status_fields`).
pub(crate) fn status_fields(e: &watcher::Error) -> (Option<u16>, Option<&str>) {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => crate::failure::status_fields(e),
        watcher::Error::WatchError(s) => (Some(s.code), Some(s.reason.as_str())),
        watcher::Error::NoResourceVersion => (None, None),
    }
}

/// A watch start the watcher would retry from the same version, but which needs a relist.
fn needs_relist(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 410 || s.code == 504)
}

struct State {
    watch: Watch,
    index: usize,
    writer: Writer<Held>,
    store: Store<Held>,
    dyntype: Kind,
    /// Objects of a list just completed, still to hand to the queue.
    replay: Vec<Arc<Held>>,
    inner: BoxStream<'static, watcher::Result<watcher::Event<Held>>>,
    /// When to list everything again; one timer for the watch's life, not one per event.
    resync_at: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// The highest resourceVersion seen, to notice the server's going backwards.
    highest: u64,
    listed: usize,
    /// Since when, and how many times, the watch has been failing.
    failing: Option<(Instant, u32)>,
}

impl Watch {
    /// The keys of objects that need work; the store behind `writer` is kept up to date
    /// first. The stream never ends and never yields an error: failures are handled here.
    pub fn stream(
        self,
        writer: Writer<Held>,
        dyntype: Kind,
    ) -> impl Stream<Item = ObjectRef<Held>> + Send + 'static {
        let index = self
            .health
            .add_watch(&self.resource, self.api.resource_url());
        let state = State {
            store: writer.as_reader(),
            dyntype,
            replay: Vec::new(),
            inner: start(&self),
            resync_at: Box::pin(tokio::time::sleep(self.resync)),
            watch: self,
            index,
            writer,
            highest: 0,
            listed: 0,
            failing: None,
        };
        futures::stream::unfold(state, |mut st| async move {
            let key = st.next().await;
            Some((key, st))
        })
    }
}

/// The field selector of unbound pods.
pub const UNBOUND: &str = "spec.nodeName=";

fn start(w: &Watch) -> BoxStream<'static, watcher::Result<watcher::Event<Held>>> {
    let config = match w.selector {
        Selector::Labelled => watcher::Config::default().labels(&w.label_key),
        Selector::Unbound => watcher::Config::default().fields(UNBOUND),
    };
    watcher(w.api.clone(), config).default_backoff().boxed()
}

fn version(obj: &Held) -> u64 {
    obj.metadata
        .meta
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The queue's key of an object: its names and the resource, without the uid and version
/// `ObjectRef::from_obj` copies in (the store's lookups ignore them, and the queue clones a
/// key a few times per object).
fn queue_key(obj: &Held, kind: &Kind) -> ObjectRef<Held> {
    let key = ObjectRef::new_with(obj.name(), kind.clone());
    match obj.namespace() {
        Some(ns) => key.within(ns),
        None => key,
    }
}

impl State {
    async fn next(&mut self) -> ObjectRef<Held> {
        loop {
            if let Some(obj) = self.replay.pop() {
                if (self.watch.wanted)(&obj) {
                    return queue_key(&obj, &self.dyntype);
                }
                continue;
            }
            let event = tokio::select! {
                event = self.inner.next() => event,
                _ = self.resync_at.as_mut() => {
                    self.resync().await;
                    continue;
                }
            };
            match event {
                Some(Ok(event)) => {
                    let key = &self.watch.label_key;
                    let event = event.modify(|o| o.trim(key));
                    if let Some(obj) = self.apply(event)
                        && (self.watch.wanted)(&obj)
                    {
                        return queue_key(&obj, &self.dyntype);
                    }
                }
                Some(Err(e)) => self.failed(e),
                None => self.inner = start(&self.watch),
            }
        }
    }

    fn apply(&mut self, event: watcher::Event<Held>) -> Option<Held> {
        let w = &self.watch;
        // `Init` comes before the list is even asked for: it proves nothing.
        if !matches!(event, watcher::Event::Init) {
            if let Some((since, attempts)) = self.failing.take() {
                info!(resource = %w.resource, after = ?since.elapsed(), attempts, "watch recovered");
            }
            w.health.watch_ok(self.index);
        }
        self.writer.apply_watcher_event(&event);
        match event {
            watcher::Event::Init => {
                self.listed = 0;
                None
            }
            // A listed object reaches the store only when the whole list is done: the
            // queue, whose workers read the store, hears of it then (see `InitDone`).
            watcher::Event::InitApply(obj) => {
                self.listed += 1;
                self.highest = self.highest.max(version(&obj));
                None
            }
            watcher::Event::Apply(obj) => {
                self.highest = self.highest.max(version(&obj));
                Some(obj)
            }
            watcher::Event::Delete(obj) => {
                self.highest = self.highest.max(version(&obj));
                None
            }
            watcher::Event::InitDone => {
                match w.selector {
                    Selector::Labelled => {
                        info!(resource = %w.resource, labelled = self.listed, label_key = %w.label_key, "listed; watching")
                    }
                    Selector::Unbound => {
                        info!(resource = %w.resource, unbound = self.listed, field_selector = UNBOUND, "listed; watching")
                    }
                }
                w.health.synced(self.index);
                self.replay = self.store.state();
                None
            }
        }
    }

    fn failed(&mut self, e: watcher::Error) {
        let w = &self.watch;
        let cause = cause(&e);
        w.metrics.watch_restart(cause);
        let why = reason(&e);
        let (_, attempts) = self.failing.get_or_insert((Instant::now(), 0));
        *attempts += 1;
        if cause == "expired" {
            info!(resource = %w.resource, "resource version expired; listing again");
            return;
        }
        w.health.watch_failed(self.index, why.clone());
        let (code, reason) = status_fields(&e);
        warn!(resource = %w.resource, error = %why, status.code = code,
              status.reason = reason.map(tracing::field::display), "watch failed; retrying with backoff");
        if needs_relist(&e) {
            self.inner = start(&self.watch);
        }
    }

    /// Reads the server's revision, then lists everything again.
    async fn resync(&mut self) {
        let w = &self.watch;
        self.resync_at
            .as_mut()
            .reset(tokio::time::Instant::now() + w.resync);
        let probe = match w.selector {
            Selector::Labelled => ListParams::default().labels(&w.label_key),
            Selector::Unbound => ListParams::default().fields(UNBOUND),
        }
        .limit(1);
        if let Ok(list) = w.api.list(&probe).await
            && let Some(now) = list
                .metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        {
            if now < self.highest {
                warn!(resource = %w.resource, from = self.highest, to = now,
                      "the server's revision went backwards: etcd restored from a snapshot? listing everything again");
                w.metrics.watch_restart("revision_backwards");
            }
            self.highest = now;
        }
        self.inner = start(&self.watch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::ApiResource;
    use serde_json::json;

    fn pods() -> Kind {
        Kind::from(ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()))
    }

    #[test]
    fn the_queue_key_finds_what_the_reflector_stored() {
        // The store keys by `ObjectRef::from_obj` (uid and version in `extra`), under its
        // own copy of the resource; the queue's key has neither.
        let mut writer = Writer::new(pods());
        let store = writer.as_reader();
        let obj = crate::object::held(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7"}
        }));
        writer.apply_watcher_event(&watcher::Event::Apply(obj.clone()));
        let found = store
            .get(&queue_key(&obj, &pods()))
            .expect("found by the queue's key");
        assert_eq!(found.uid(), Some("u"));
        let other = crate::object::held(json!({"metadata": {"name": "p", "namespace": "other"}}));
        assert!(
            store.get(&queue_key(&other, &pods())).is_none(),
            "namespaces differ"
        );
        let mut nodes = (*pods()).clone();
        nodes.plural = "nodes".into();
        assert!(
            store.get(&queue_key(&obj, &Kind::from(nodes))).is_none(),
            "resources differ"
        );
    }
}
