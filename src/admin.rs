//! The admin HTTP server: `/healthz` (the process is alive), `/readyz` (every watched
//! resource listed, its watch running and the server answering its LIST and WATCH, not
//! shutting down) and `/metrics`.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use tokio::net::TcpListener;

use crate::{Error, Result, client::Observer, metrics::Metrics};

/// What `/readyz` reports. Only the watches count: a PATCH failing on one object (a
/// broken webhook) is that object's problem, counted and retried, not the process's.
#[derive(Debug, Default)]
pub struct Health {
    watches: Mutex<Vec<WatchHealth>>,
    shutting_down: AtomicBool,
}

#[derive(Debug)]
struct WatchHealth {
    /// The collection path its LIST and WATCH use.
    path: String,
    name: String,
    synced: bool,
    /// The last failure, until the server answers again.
    failed: Option<String>,
    /// No longer watched (a webhook's service no configuration names any more).
    retired: bool,
}

impl Health {
    pub fn new() -> Self {
        Health::default()
    }

    fn watches(&self) -> std::sync::MutexGuard<'_, Vec<WatchHealth>> {
        self.watches.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a watched resource; returns its index.
    pub fn add_watch(&self, name: &str, path: &str) -> usize {
        let mut w = self.watches();
        w.push(WatchHealth {
            path: path.to_string(),
            name: name.to_string(),
            synced: false,
            failed: None,
            retired: false,
        });
        w.len() - 1
    }

    /// A watch's list is done.
    pub fn synced(&self, index: usize) {
        if let Some(w) = self.watches().get_mut(index) {
            w.synced = true;
            w.failed = None;
        }
    }

    /// A watch delivered an event: it runs.
    pub fn watch_ok(&self, index: usize) {
        if let Some(w) = self.watches().get_mut(index) {
            w.failed = None;
        }
    }

    /// A watch failed, and why.
    pub fn watch_failed(&self, index: usize, why: String) {
        if let Some(w) = self.watches().get_mut(index) {
            w.failed = Some(why);
        }
    }

    /// A watch that stopped on purpose: it no longer counts.
    pub fn retire(&self, index: usize) {
        if let Some(w) = self.watches().get_mut(index) {
            w.retired = true;
        }
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
        if watches.is_empty() {
            return Some("not watching yet".into());
        }
        let why: Vec<String> = watches
            .iter()
            .filter(|w| !w.retired)
            .filter_map(|w| match (&w.failed, w.synced) {
                (Some(f), _) => Some(format!("watch of {} failed: {f}", w.name)),
                (None, false) => Some(format!("first list of {} not done", w.name)),
                (None, true) => None,
            })
            .collect();
        (!why.is_empty()).then(|| why.join("; "))
    }
}

impl Observer for Health {
    fn answered(&self, path: &str) {
        for w in self.watches().iter_mut() {
            if w.path == path {
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
pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Admin { addr, source })
}

/// Serves until the process ends.
pub async fn serve(listener: TcpListener, health: Arc<Health>, metrics: Arc<Metrics>) {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AdminState { health, metrics });
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "admin server stopped");
    }
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
        h.answered("/api/v1/namespaces/default/pods/p");
        assert!(
            h.not_ready().is_some(),
            "a GET of one object is not the watch"
        );
        h.answered("/api/v1/pods");
        assert_eq!(h.not_ready(), None);
        h.shutting_down();
        assert_eq!(h.not_ready().as_deref(), Some("shutting down"));
    }
}
