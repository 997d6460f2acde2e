//! The admin HTTP server: `/healthz` (the process is alive), `/readyz` (every watched
//! resource listed, its watch running and the server answering its LIST and WATCH, not
//! shutting down) and `/metrics`.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use tokio::net::{TcpListener, TcpSocket};

use crate::{Error, Result, client::Observer, metrics::Metrics};

mod listen;

pub use listen::{HEAD_TIMEOUT, MAX_CONNECTIONS, MAX_SOCKETS};

/// What `/readyz` reports. Only the watches count: a PATCH failing on one object (a
/// broken webhook) is that object's problem, counted and retried, not the process's.
#[derive(Debug, Default)]
pub struct Health {
    watches: Mutex<Watches>,
    shutting_down: AtomicBool,
}

/// The watches by the id `add_watch` gave them, in the order they were added.
#[derive(Debug, Default)]
struct Watches {
    next: usize,
    by_id: BTreeMap<usize, WatchHealth>,
}

#[derive(Debug)]
struct WatchHealth {
    /// The collection path its LIST and WATCH use.
    path: String,
    name: String,
    /// One of the process's own watches, whose first list readiness waits for.
    core: bool,
    synced: bool,
    /// The last failure of a list, until a list is answered or the watch runs.
    failed: Option<String>,
    /// The last failure of the watch, until it runs again (an event, or a second of it): a
    /// watch start answered 200 proves nothing (a proxy that ends every watch at once
    /// answers them all 200), and neither does a list.
    broken: Option<String>,
}

impl Health {
    pub fn new() -> Self {
        Health::default()
    }

    fn watches(&self) -> std::sync::MutexGuard<'_, Watches> {
        self.watches.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add(&self, name: &str, path: &str, core: bool) -> usize {
        let mut w = self.watches();
        let id = w.next;
        w.next += 1;
        w.by_id.insert(
            id,
            WatchHealth {
                path: path.to_string(),
                name: name.to_string(),
                core,
                synced: false,
                failed: None,
                broken: None,
            },
        );
        id
    }

    /// Registers one of the process's own watches (the labelled objects, the webhook
    /// configurations); returns its id. Not ready until it has listed once.
    pub fn add_watch(&self, name: &str, path: &str) -> usize {
        self.add(name, path, true)
    }

    /// Registers a watch started on the way (a webhook's service); returns its id. Its
    /// failures count, its first list does not: readiness says whether the process does
    /// its work, and a configuration naming a new service does not stop it doing that.
    pub fn add_later_watch(&self, name: &str, path: &str) -> usize {
        self.add(name, path, false)
    }

    fn with(&self, id: usize, f: impl FnOnce(&mut WatchHealth)) {
        if let Some(w) = self.watches().by_id.get_mut(&id) {
            f(w);
        }
    }

    /// A watch's list is done: a failed list is over, not a failed watch start.
    pub fn synced(&self, id: usize) {
        self.with(id, |w| (w.synced, w.failed) = (true, None));
    }

    /// A watch delivered an event, or has run for a second: it runs.
    pub fn watch_ok(&self, id: usize) {
        self.with(id, |w| (w.failed, w.broken) = (None, None));
    }

    /// A watch or its list failed, and why (a list's reason begins "list failed").
    pub fn watch_failed(&self, id: usize, why: String) {
        self.with(id, |w| {
            if why.starts_with("list failed") {
                w.failed = Some(why);
            } else {
                w.broken = Some(why);
            }
        });
    }

    /// A watch that stopped on purpose (a service no configuration names any more): it no
    /// longer counts, and is forgotten.
    pub fn retire(&self, id: usize) {
        self.watches().by_id.remove(&id);
    }

    pub fn shutting_down(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    /// Why the process is not ready, or `None` when it is.
    pub fn not_ready(&self) -> Option<String> {
        if self.shutting_down.load(Ordering::SeqCst) {
            return Some("shutting down".into());
        }
        let watches = self.watches();
        if watches.by_id.is_empty() {
            return Some("not watching yet".into());
        }
        let why: Vec<String> = watches
            .by_id
            .values()
            .filter_map(
                |w| match (w.failed.as_ref().or(w.broken.as_ref()), w.synced) {
                    (Some(f), _) => Some(format!("watch of {} failed: {f}", w.name)),
                    (None, false) if w.core => Some(format!("first list of {} not done", w.name)),
                    (None, _) => None,
                },
            )
            .collect();
        (!why.is_empty()).then(|| why.join("; "))
    }
}

impl Observer for Health {
    /// A LIST answered ends a failed list; a failed watch ends only when the watch runs
    /// (`watch_ok`): where RBAC grants list and not watch, each resync's list made `/readyz`
    /// 200 for its length.
    fn answered(&self, path: &str, watch: bool) {
        for w in self.watches().by_id.values_mut() {
            if w.path == path && !watch {
                w.failed = None;
            }
        }
    }
}

#[derive(Clone)]
struct AdminState {
    health: Arc<Health>,
    metrics: Arc<Metrics>,
}

/// Binds the admin address now, so a bad or busy address stops the process at start.
pub fn bind(addr: SocketAddr) -> Result<TcpListener> {
    let failed = |source| Error::Admin { addr, source };
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(failed)?;
    // What TcpListener::bind sets too: a restarted process binds while old connections linger.
    socket.set_reuseaddr(true).map_err(failed)?;
    socket.bind(addr).map_err(failed)?;
    socket.listen(listen::BACKLOG).map_err(failed)
}

/// Serves until the process ends, with its connections bounded (`listen`).
pub async fn serve(listener: TcpListener, health: Arc<Health>, metrics: Arc<Metrics>) {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AdminState { health, metrics });
    listen::run(listener, app).await;
}

async fn readyz(State(s): State<AdminState>) -> impl IntoResponse {
    match s.health.not_ready() {
        None => (StatusCode::OK, "ok\n".to_string()),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}

async fn metrics_text(State(s): State<AdminState>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_the_watches_only() {
        let h = Health::new();
        assert_eq!(h.not_ready().as_deref(), Some("not watching yet"));
        let pods = h.add_watch("pods", "/api/v1/pods");
        let deps = h.add_watch("deployments.apps", "/apis/apps/v1/deployments");
        assert_eq!(
            h.not_ready().as_deref(),
            Some("first list of pods not done; first list of deployments.apps not done")
        );
        h.synced(pods);
        h.synced(deps);
        assert_eq!(h.not_ready(), None);
        h.watch_failed(pods, "list failed: 403 Forbidden: no".into());
        assert_eq!(
            h.not_ready().as_deref(),
            Some("watch of pods failed: list failed: 403 Forbidden: no")
        );
        h.answered("/api/v1/namespaces/default/pods/p", false);
        assert!(
            h.not_ready().is_some(),
            "a GET of one object is not the watch"
        );
        h.answered("/api/v1/pods", false);
        assert_eq!(h.not_ready(), None, "a LIST ends a failed list");
        h.watch_failed(pods, "watch start failed: 403 Forbidden: no".into());
        h.answered("/api/v1/pods", false);
        h.synced(pods);
        assert!(
            h.not_ready().is_some(),
            "neither a LIST nor a list's end ends a failed watch start"
        );
        h.answered("/api/v1/pods", true);
        assert!(
            h.not_ready().is_some(),
            "nor does a WATCH answered: a proxy that ends every watch at once answers them 200"
        );
        h.watch_ok(pods);
        assert_eq!(h.not_ready(), None, "a watch that runs does");
        h.watch_failed(pods, "watch ended at once: after 5ms".into());
        h.watch_failed(pods, "list failed: 500".into());
        h.synced(pods);
        assert_eq!(
            h.not_ready().as_deref(),
            Some("watch of pods failed: watch ended at once: after 5ms"),
            "a list after a failed watch ends the list's failure, not the watch's"
        );
        h.watch_ok(pods);
        h.shutting_down();
        assert_eq!(h.not_ready().as_deref(), Some("shutting down"));
    }

    #[test]
    fn a_later_watch_counts_by_its_failures_and_a_retired_one_not_at_all() {
        let h = Health::new();
        let pods = h.add_watch("pods", "/api/v1/pods");
        h.synced(pods);
        let svc = h.add_later_watch("endpointslices of gk/svc", "/apis/x");
        assert_eq!(h.not_ready(), None, "its first list is not waited for");
        h.watch_failed(svc, "403 Forbidden".into());
        assert_eq!(
            h.not_ready().as_deref(),
            Some("watch of endpointslices of gk/svc failed: 403 Forbidden")
        );
        h.retire(svc);
        assert_eq!(h.not_ready(), None);
        assert_eq!(h.watches().by_id.len(), 1, "its entry is gone");
        h.watch_failed(svc, "late".into());
        assert_eq!(h.not_ready(), None, "a retired id stays retired");
    }
}
