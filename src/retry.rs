//! One unit of work tried until it is done, on the newest state each time: what `--once`
//! does for each labelled object and each webhook configuration. The failure table says
//! which failures are worth another try; the wait is the daemon's backoff, the last one cut
//! to what is left of the budget, so that retries may use all of it.

use std::time::Duration;

use tokio::time::Instant;

use crate::{
    failure::{self, Failure},
    shutdown::Shutdown,
};

/// Runs `attempt` until it succeeds, fails for good, `deadline` passes or a stop is
/// requested. `attempt` reads the newest state itself when it is tried again. `report`
/// hears of every failure, with the wait before the next try (`None`: no next try).
pub async fn until_done<T>(
    deadline: Instant,
    stop: &Shutdown,
    mut attempt: impl AsyncFnMut() -> Result<T, Failure>,
    report: impl Fn(&Failure, u32, Option<Duration>),
) -> Result<T, Failure> {
    let mut failures = 0;
    loop {
        let f = match attempt().await {
            Ok(done) => return Ok(done),
            Err(f) => f,
        };
        failures += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        if !f.class.policy().retry || left.is_zero() || stop.is_requested() {
            report(&f, failures, None);
            return Err(f);
        }
        let wait = failure::backoff(failures, failure::retry_after(&f.error)).min(left);
        report(&f, failures, Some(wait));
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.requested() => {
                report(&f, failures, None);
                return Err(f);
            }
        }
    }
}

/// The end of a pass's summary when a stop came before `n` units were tried: nothing if
/// every one was.
pub fn write_not_tried(f: &mut std::fmt::Formatter<'_>, n: usize) -> std::fmt::Result {
    if n > 0 {
        write!(f, ", not tried {n} (interrupted before them)")?;
    }
    Ok(())
}
