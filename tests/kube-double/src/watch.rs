// WATCH streams: initial ADDED events or resumption from a revision, selector-driven
// ADDED/DELETED transitions like the watch cache, bookmarks, timeouts, 410 Expired,
// and the watch faults (cuts and malformed lines).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use crate::api::ListOptions;
use crate::namespaces;
use crate::resources::ResourceInfo;
use crate::state::Shared;
use crate::status;
use crate::store::{ChangeKind, LogEvent, stamp};
use crate::table::{self, TableRequest};

/// One chunk of a watch body; an `Err` aborts the connection (a cut stream).
pub type Frame = Result<Bytes, io::Error>;

pub struct WatchRequest {
    pub res: ResourceInfo,
    pub opts: ListOptions,
    /// `None`: start with ADDED for every current object (rv "" or "0").
    pub since: Option<u64>,
    pub timeout: Option<Duration>,
    pub bookmarks: bool,
    pub table: Option<TableRequest>,
}

/// Starts the producer; the receiver is the response body.
pub fn spawn(shared: Arc<Shared>, req: WatchRequest) -> mpsc::Receiver<Frame> {
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        let mut w = Watcher {
            shared,
            req,
            tx,
            sent: 0,
        };
        // Err means the client went away or the stream was cut: nothing more to do.
        let _ = w.run().await;
    });
    rx
}

struct Watcher {
    shared: Arc<Shared>,
    req: WatchRequest,
    tx: mpsc::Sender<Frame>,
    sent: u32,
}

struct Stop;

type Key = (String, String);

/// Where a watch starts: the revision and the objects to announce first.
type Start = (u64, Vec<Arc<Value>>);

impl Watcher {
    async fn send_raw(&self, frame: Frame) -> Result<(), Stop> {
        self.tx.send(frame).await.map_err(|_| Stop)
    }

    fn line(kind: &str, object: &Value) -> Bytes {
        let obj = serde_json::to_string(object).unwrap_or_else(|_| "{}".into());
        Bytes::from(format!("{{\"type\":\"{kind}\",\"object\":{obj}}}\n"))
    }

    /// Sends one event, applying the watch faults first.
    async fn event(&mut self, kind: &str, object: &Value) -> Result<(), Stop> {
        let faults = self.shared.faults();
        if faults.cut_watch_after.is_some_and(|n| self.sent >= n)
            || self.shared.chance(faults.cut_watch_probability)
        {
            // Let the connection flush what was already sent, so the cut lands between events.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = self
                .send_raw(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "watch cut by fault injection",
                )))
                .await;
            return Err(Stop);
        }
        if self.shared.chance(faults.malformed_watch_probability) {
            self.send_raw(Ok(Bytes::from_static(
                // A syntax error mid-line (a truncated object would read to a client as
                // an incomplete line and be skipped silently).
                b"{\"type\":\"MODIFIED\",\"object\":{\"kind\":Pod}}\n",
            )))
            .await?;
        }
        let object = match &self.req.table {
            Some(t) if kind != "ERROR" && kind != "BOOKMARK" => {
                table::table_for(&self.req.res, std::slice::from_ref(object), t, None)
            }
            _ => object.clone(),
        };
        self.sent += 1;
        self.send_raw(Ok(Self::line(kind, &object))).await
    }

    async fn bookmark(&mut self, rv: u64) -> Result<(), Stop> {
        let obj = json!({
            "kind": self.req.res.kind,
            "apiVersion": self.req.res.api_version(),
            "metadata": {"resourceVersion": rv.to_string()},
        });
        self.send_raw(Ok(Self::line("BOOKMARK", &obj))).await
    }

    async fn expired(&mut self, requested: u64, oldest: u64) -> Result<(), Stop> {
        let st = status::too_old_resource_version(self.shared.config.generation, requested, oldest);
        self.send_raw(Ok(Self::line("ERROR", &st))).await
    }

    /// Translates a stored change into what this watcher sees, if anything.
    fn translate(&self, e: &LogEvent) -> Option<(&'static str, Value)> {
        if e.resource != self.req.res.key {
            return None;
        }
        let now = self.req.opts.matches(&e.object);
        let before = e.prev.as_deref().is_some_and(|p| self.req.opts.matches(p));
        match e.kind {
            ChangeKind::Added => now.then(|| ("ADDED", (*e.object).clone())),
            ChangeKind::Deleted => before.then(|| ("DELETED", (*e.object).clone())),
            ChangeKind::Modified => match (before, now) {
                (true, true) => Some(("MODIFIED", (*e.object).clone())),
                (false, true) => Some(("ADDED", (*e.object).clone())),
                (true, false) => {
                    let mut last = e.prev.as_deref().cloned().unwrap_or(Value::Null);
                    stamp(&mut last, e.rv);
                    Some(("DELETED", last))
                }
                (false, false) => None,
            },
        }
    }

    async fn run(&mut self) -> Result<(), Stop> {
        let deadline = self.req.timeout.map(|t| Instant::now() + t);
        let mut changes = self.shared.store.subscribe();
        let start: Result<Start, (u64, u64)> = {
            let inner = self.shared.store.lock();
            match self.req.since {
                None => {
                    let mut objs: Vec<(Key, Arc<Value>)> = inner
                        .range(&self.req.res.key, self.req.opts.namespace.as_deref(), None)
                        .into_iter()
                        .filter(|(_, o)| self.req.opts.matches(o))
                        .map(|(k, o)| (k.clone(), o.clone()))
                        .collect();
                    if self.req.res.is_namespaces() {
                        // Implicit namespaces are announced, never changed (`namespaces.rs`).
                        objs.extend(
                            namespaces::implicit_entries(&inner)
                                .into_iter()
                                .filter(|(_, o)| self.req.opts.matches(o)),
                        );
                        objs.sort_by(|a, b| a.0.cmp(&b.0));
                    }
                    Ok((inner.revision(), objs.into_iter().map(|(_, o)| o).collect()))
                }
                Some(n) if n < inner.expired_through() => Err((n, inner.expired_through())),
                // A revision above the store's (etcd restored from a snapshot, or a
                // client that saw another server) is accepted and stays silent until
                // the store passes it, then sends only changes after it: the watch
                // cache finds no event above N and its watcher drops events with
                // `ResourceVersion <= N`; only a `sendInitialEvents` watch waits for
                // freshness. Kubernetes 1.13.12 `Cacher.Watch`, `cacheWatcher.process`
                // (`staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go`) and
                // `GetAllEventsSinceThreadUnsafe` (`watch_cache.go`); 1.33.4
                // `waitUntilWatchCacheFreshAndForceAllEvents`, `getAllEventsSinceLocked`
                // and `cacheWatcher.processInterval` (`cache_watcher.go`).
                Some(n) => Ok((n, Vec::new())),
            }
        };
        let (mut cursor, initial) = match start {
            Ok(s) => s,
            Err((n, oldest)) => return self.expired(n, oldest).await,
        };
        for o in initial {
            self.event("ADDED", &o).await?;
        }
        let period = self
            .shared
            .config
            .bookmark_interval
            .max(Duration::from_millis(10));
        let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let batch = {
                let inner = self.shared.store.lock();
                inner.events_after(cursor, 512)
            };
            match batch {
                Err(oldest) => return self.expired(cursor, oldest).await,
                Ok(events) if !events.is_empty() => {
                    for e in events {
                        cursor = e.rv;
                        if let Some((kind, obj)) = self.translate(&e) {
                            self.event(kind, &obj).await?;
                        }
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return self.finish(cursor).await;
                    }
                    continue;
                }
                Ok(_) => {}
            }
            let sleep_until =
                deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                r = changes.changed() => {
                    if r.is_err() {
                        return Ok(());
                    }
                }
                _ = ticks.tick(), if self.req.bookmarks => {
                    self.bookmark_if_reached(cursor).await?;
                }
                _ = tokio::time::sleep_until(sleep_until) => {
                    if deadline.is_some() {
                        return self.finish(cursor).await;
                    }
                }
                _ = self.tx.closed() => return Err(Stop),
            }
        }
    }

    /// Timeout reached: a last bookmark if asked for, then a clean end of stream.
    async fn finish(&mut self, cursor: u64) -> Result<(), Stop> {
        if self.req.bookmarks {
            self.bookmark_if_reached(cursor).await?;
        }
        Ok(())
    }

    /// No bookmark while the store is still below a watch's future revision N: the real
    /// watcher filters bookmarks like any event (1.13.12 `cacheWatcher.process`: only
    /// `ResourceVersion > N`; 1.33.4 also lets one bookmark at exactly N through).
    async fn bookmark_if_reached(&mut self, cursor: u64) -> Result<(), Stop> {
        if cursor > self.shared.store.lock().revision() {
            return Ok(());
        }
        self.bookmark(cursor).await
    }
}
