//! The admin HTTP server: `/healthz` (the process is alive), `/readyz` (first list done,
//! the API server answering, not shutting down) and `/metrics`.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use tokio::net::TcpListener;

use crate::{Error, Result, connect::Reachability, metrics::Metrics};

/// What `/readyz` reports.
#[derive(Debug)]
pub struct Health {
    targets: usize,
    synced: AtomicUsize,
    reachable: AtomicBool,
    shutting_down: AtomicBool,
}

impl Health {
    pub fn new(targets: usize) -> Self {
        Health {
            targets,
            synced: AtomicUsize::new(0),
            reachable: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
        }
    }

    /// One watched resource finished its first list.
    pub fn synced_one(&self) {
        self.synced.fetch_add(1, Ordering::SeqCst);
    }

    pub fn shutting_down(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    /// Why the process is not ready, or `None` when it is.
    pub fn not_ready(&self) -> Option<&'static str> {
        if self.shutting_down.load(Ordering::SeqCst) {
            Some("shutting down")
        } else if !self.reachable.load(Ordering::SeqCst) {
            Some("API server not reachable")
        } else if self.synced.load(Ordering::SeqCst) < self.targets {
            Some("first list not done")
        } else {
            None
        }
    }
}

impl Reachability for Health {
    fn observed(&self, reachable: bool) {
        self.reachable.store(reachable, Ordering::SeqCst);
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
    fn readiness() {
        let h = Health::new(2);
        assert_eq!(h.not_ready(), Some("API server not reachable"));
        h.observed(true);
        assert_eq!(h.not_ready(), Some("first list not done"));
        h.synced_one();
        h.synced_one();
        assert_eq!(h.not_ready(), None);
        h.observed(false);
        assert!(h.not_ready().is_some());
        h.observed(true);
        h.shutting_down();
        assert_eq!(h.not_ready(), Some("shutting down"));
    }
}
