//! Signals: the first SIGTERM or SIGINT asks for a graceful stop (stop watching, let
//! in-flight patches finish); a second one exits at once.

use tokio::sync::watch;

#[derive(Clone)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    /// Listens for SIGTERM and SIGINT.
    pub fn on_signals() -> Shutdown {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            signal().await;
            tracing::info!(
                "shutting down: stopped watching, finishing in-flight patches (signal again to exit at once)"
            );
            let _ = tx.send(true);
            signal().await;
            tracing::warn!("second signal: exiting at once");
            std::process::exit(130);
        });
        Shutdown(rx)
    }

    /// A shutdown that never comes (for `--once` and tests).
    pub fn never() -> Shutdown {
        let (tx, rx) = watch::channel(false);
        std::mem::forget(tx);
        Shutdown(rx)
    }

    pub fn is_requested(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once shutdown is requested.
    pub async fn requested(&self) {
        let mut rx = self.0.clone();
        // An error means the sender is gone: no shutdown can come any more.
        if rx.wait_for(|v| *v).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

async fn signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (term, int) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "cannot listen for signals; stop the process with SIGKILL");
            std::future::pending::<()>().await;
        }
    }
}
