//! One unit of work tried until it is done, on the newest state each time: what `--once`
//! does for each labelled object and each webhook configuration. The failure table says
//! which failures are worth another try; the wait is the daemon's backoff, the last one cut
//! so that the last try starts early enough to be answered within the budget, so that
//! retries may use all of it. An attempt in flight at the budget's end is cut there
//! (`--request-timeout` may be longer than what is left), and one whose turn comes after
//! it is not started: no request of the run outlives its `--timeout`.

use std::time::Duration;

use tokio::time::Instant;

use crate::{
    budget::{Budget, Spent},
    failure::{Class, Failure},
    shutdown::Shutdown,
};

/// Runs `attempt` until it succeeds, fails for good, `budget` is spent or a stop is
/// requested. `attempt` reads the newest state itself when it is tried again. `report`
/// hears of every failure, with the wait before the next try (`None`: no next try), and
/// how many tries failed. A budget of zero tries once, bounded by `--request-timeout`
/// alone (as `discovery::with_retries` does).
pub async fn until_done<T>(
    budget: Budget,
    stop: &Shutdown,
    mut attempt: impl AsyncFnMut() -> Result<T, Failure>,
    report: impl Fn(&Failure, u32, Option<Duration>),
) -> Result<T, Failure> {
    let mut failures = 0;
    let mut before = None;
    let mut last = false;
    loop {
        // None: not cut (a zero budget); zero: spent, so not sent.
        let cut = (!budget.is_zero()).then(|| budget.left());
        let started = Instant::now();
        let f = match within(budget, cut, attempt(), before.take()).await {
            Ok(done) => return Ok(done),
            Err(f) => f,
        };
        if cut != Some(Duration::ZERO) {
            failures += 1;
        }
        let retry = f.class.policy().retry && !stop.is_requested();
        let next = match retry && !last {
            true => next_wait(f.delay(failures), budget.left(), started.elapsed()),
            false => None,
        };
        let Some((wait, is_last)) = next else {
            report(&f, failures, None);
            if retry {
                // Out of time, not of reasons to try: the object's turn lasts to the end
                // of the budget, as when the last try was made there (nothing is left for
                // the next `--resource`, whose listing is then not sent).
                tokio::select! {
                    _ = tokio::time::sleep_until(budget.end()) => {}
                    _ = stop.requested() => {}
                }
            }
            return Err(f);
        };
        last = is_last;
        report(&f, failures, Some(wait));
        before = Some(f.to_string());
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.requested() => {
                report(&f, failures, None);
                return Err(f);
            }
        }
    }
}

/// The wait before the next try after a failed one that took `took`, with `left` of the
/// budget, and whether that next try is the last: the `backoff`, cut so that the last try
/// starts early enough to be answered before the budget's end (twice what this try took,
/// at least 100 ms; a try at the very end would be cut at once); `None` when not even
/// that fits.
fn next_wait(backoff: Duration, left: Duration, took: Duration) -> Option<(Duration, bool)> {
    let reserve = took.saturating_mul(2).max(Duration::from_millis(100));
    let room = left.checked_sub(reserve)?;
    Some(if backoff < room {
        (backoff, false)
    } else {
        (room, true)
    })
}

/// One attempt, cut after `cut` (`None`: not cut) and not started when that is zero: the
/// failure then says that `budget` was spent, and `before`, the failure of the try before.
async fn within<T>(
    budget: Budget,
    cut: Option<Duration>,
    attempt: impl Future<Output = Result<T, Failure>>,
    before: Option<String>,
) -> Result<T, Failure> {
    let cut = match cut {
        None => return attempt.await,
        Some(cut) if cut.is_zero() => None,
        Some(cut) => match tokio::time::timeout(cut, attempt).await {
            Ok(done) => return done,
            Err(_) => Some(cut),
        },
    };
    let spent = Spent {
        length: budget.length(),
        cut,
        before,
    };
    Err(Failure {
        class: Class::Spent,
        error: kube::Error::Service(Box::new(spent)),
    })
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
            Budget::from_now(budget),
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

    #[test]
    fn the_last_wait_leaves_the_last_try_time_to_be_answered() {
        let ms = Duration::from_millis;
        // The backoff fits: waited whole, and more tries may follow.
        assert_eq!(next_wait(ms(800), ms(3000), ms(5)), Some((ms(800), false)));
        // It does not: cut to start the last try 100 ms before the end, or twice what
        // the try before took.
        assert_eq!(next_wait(ms(1600), ms(900), ms(5)), Some((ms(800), true)));
        assert_eq!(next_wait(ms(1600), ms(900), ms(300)), Some((ms(300), true)));
        // Not even that fits: no next try.
        assert_eq!(next_wait(ms(100), ms(90), ms(5)), None);
        assert_eq!(next_wait(ms(100), ms(500), ms(300)), None);
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
    async fn the_budget_bounds_the_retries_and_they_use_it_to_its_end() {
        let (_tx, stop) = Shutdown::by_hand();
        let start = Instant::now();
        let budget = Duration::from_secs(1);
        let (result, tried, reports) = run(&[500; 100], budget, &stop).await;
        assert_eq!(start.elapsed(), budget);
        assert!(tried > 1 && tried < 100, "{tried}");
        assert_eq!(reports.last(), Some(&(tried as u32, None)));
        // The last try is made early enough to be answered within the budget: its own
        // failure, not the budget's end, is the last word.
        assert_eq!(result.unwrap_err().class, Class::ServerError);
    }

    /// An attempt that fails with `code` the first time, then is never answered.
    async fn hangs_after(code: u16, budget: Duration) -> (Result<(), Failure>, Duration, u32) {
        let (_tx, stop) = Shutdown::by_hand();
        let start = Instant::now();
        let mut tried = 0;
        let result = until_done(
            Budget::from_now(budget),
            &stop,
            async || {
                tried += 1;
                if tried == 1 && code > 0 {
                    return Err(failure(code));
                }
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(())
            },
            |_, _, _| {},
        )
        .await;
        (result, start.elapsed(), tried)
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_in_flight_is_cut_at_the_budgets_end() {
        let (result, took, _) = hangs_after(0, Duration::from_secs(3)).await;
        assert_eq!(took, Duration::from_secs(3));
        let f = result.unwrap_err();
        assert_eq!(f.class, Class::Spent);
        assert_eq!(
            f.to_string(),
            "ServiceError: no answer within 3s: --timeout spent (3s)"
        );
        // After a failure, the next try is cut too, and the failure before is said.
        let (result, took, tried) = hangs_after(409, Duration::from_secs(3)).await;
        assert_eq!((took, tried), (Duration::from_secs(3), 2));
        let f = result.unwrap_err().to_string();
        assert!(
            f.contains(": --timeout spent (3s); the try before: 409 Failure"),
            "{f}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_budget_tries_once_and_does_not_cut_it() {
        let (result, took, tried) = hangs_after(0, Duration::ZERO).await;
        assert!(result.is_ok());
        assert_eq!((took, tried), (Duration::from_secs(30), 1));
    }

    #[tokio::test(start_paused = true)]
    async fn no_attempt_starts_once_the_budget_is_spent() {
        let (_tx, stop) = Shutdown::by_hand();
        let budget = Budget::from_now(Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(2)).await;
        let mut tried = 0;
        let attempt = async || {
            tried += 1;
            Ok(())
        };
        let result = until_done(budget, &stop, attempt, |_, _, _| {}).await;
        assert_eq!(tried, 0);
        let f = result.unwrap_err();
        assert_eq!(f.class, Class::Spent);
        assert_eq!(
            f.to_string(),
            "ServiceError: not tried: --timeout spent (1s)"
        );
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
