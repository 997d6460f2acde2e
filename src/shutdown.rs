//! Signals: the first SIGTERM or SIGINT asks for a stop (the daemon stops watching and lets
//! in-flight patches finish; `--once` and `status` finish what they are doing and exit with
//! their own code, never the signal's 143); a second one exits at once (130).

use tokio::sync::watch;

#[derive(Clone)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    /// The daemon's: listens for SIGTERM and SIGINT.
    pub fn on_signals() -> Shutdown {
        Shutdown::on_signals_saying("shutting down: stopped watching, finishing in-flight patches")
    }

    /// Listens for SIGTERM and SIGINT; the first logs `what`.
    pub fn on_signals_saying(what: &'static str) -> Shutdown {
        use tokio::signal::unix::{SignalKind, signal};
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            let (mut term, mut int) = match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(term), Ok(int)) => (term, int),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::error!(error = %e, "cannot listen for signals; stop the process with SIGKILL");
                    // Keep the sender: a dropped one would read as "never requested" anyway.
                    std::future::pending::<()>().await;
                    return;
                }
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            tracing::info!("{what} (signal again to exit at once)");
            let _ = tx.send(true);
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            tracing::warn!("second signal: exiting at once");
            std::process::exit(130);
        });
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

    /// A shutdown requested by hand, through the returned sender (for tests).
    #[cfg(test)]
    pub fn by_hand() -> (watch::Sender<bool>, Shutdown) {
        let (tx, rx) = watch::channel(false);
        (tx, Shutdown(rx))
    }
}
