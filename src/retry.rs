//! One unit of work tried until it is done, on the newest state each time: what `--once`
//! does for each labelled object and each webhook configuration. The failure table says
//! which failures are worth another try; the wait is the daemon's backoff, the last one cut
//! to what is left of the budget, so that retries may use all of it.

use std::time::Duration;

use tokio::time::Instant;

use crate::{failure::Failure, shutdown::Shutdown};

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
        let wait = f.delay(failures).min(left);
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

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use kube::core::Status;

    use super::*;

    fn failure(code: u16) -> Failure {
        Failure::from(kube::Error::Api(Box::new(Status {
            code,
            ..Status::default()
        })))
    }

    /// Runs `until_done` with attempts that fail with `codes` in turn, then succeed.
    /// Returns the result, how many attempts ran and what was reported.
    async fn run(
        codes: &[u16],
        budget: Duration,
        stop: &Shutdown,
    ) -> (Result<(), Failure>, usize, Vec<(u32, Option<Duration>)>) {
        let reports = RefCell::new(Vec::new());
        let mut tried = 0;
        let result = until_done(
            Instant::now() + budget,
            stop,
            async || {
                tried += 1;
                match codes.get(tried - 1) {
                    Some(&code) => Err(failure(code)),
                    None => Ok(()),
                }
            },
            |_, failures, wait| reports.borrow_mut().push((failures, wait)),
        )
        .await;
        (result.map(|_| ()), tried, reports.into_inner())
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_worth_retrying_is_tried_again_after_the_backoff() {
        let (_tx, stop) = Shutdown::by_hand();
        let (result, tried, reports) = run(&[500, 500], Duration::from_secs(30), &stop).await;
        assert!(result.is_ok());
        assert_eq!(tried, 3);
        let waits: Vec<_> = reports.iter().map(|(n, w)| (*n, w.is_some())).collect();
        assert_eq!(waits, [(1, true), (2, true)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_not_worth_retrying_ends_at_once() {
        let (_tx, stop) = Shutdown::by_hand();
        let (result, tried, reports) = run(&[404, 500], Duration::from_secs(30), &stop).await;
        assert!(result.is_err());
        assert_eq!(tried, 1);
        assert_eq!(reports, [(1, None)]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_bounds_the_retries_and_the_last_wait_is_cut_to_it() {
        let (_tx, stop) = Shutdown::by_hand();
        let start = Instant::now();
        let budget = Duration::from_secs(1);
        let (result, tried, reports) = run(&[500; 100], budget, &stop).await;
        assert!(result.is_err());
        assert_eq!(start.elapsed(), budget);
        assert!(tried > 1 && tried < 100, "{tried}");
        assert_eq!(reports.last(), Some(&(tried as u32, None)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_the_retries() {
        let (tx, stop) = Shutdown::by_hand();
        tx.send(true).unwrap();
        let (result, tried, reports) = run(&[500, 500], Duration::from_secs(30), &stop).await;
        assert!(result.is_err());
        assert_eq!(tried, 1);
        assert_eq!(reports, [(1, None)]);
    }
}
