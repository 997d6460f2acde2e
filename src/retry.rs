//! Every retry of the process: the schedules, as data (`WATCH`, `START_UP`, `PER_OBJECT`,
//! `EVENTS`), the one backoff type that walks them (`Backoff`), and the one loop that tries
//! again (`with_backoff`). The failure table (`crate::failure`) says which failures are
//! worth another try and which step of a schedule each takes; this module only waits.
//!
//! `with_backoff` is our own loop, not backon's: the wait depends on the failure (a
//! refused connection does not grow it and starts the schedule again; the server's
//! Retry-After; the `--timeout` budget's cut), judging a 401 or 403 at start-up needs a look
//! at the server's `/readyz` (async), and a stop must end a wait without a try after it.
//! backon's `when`/`adjust` are synchronous and its schedule cannot be restarted by a failure.
//! The one loop that is backon's is the Events sink's (`Schedule::backon`): a fixed number
//! of tries, judged by the same table, in a spawned task, where rustc cannot yet prove the
//! futures of `with_backoff`'s async closures `Send`. The watch is a stream, not a loop: it
//! walks its `Backoff` itself.
//!
//! `until_done` is `--once`'s loop over it, for each labelled object and each webhook
//! configuration: the wait is the per-object schedule, the last one cut so that the last try
//! starts early enough to be answered within the budget, so that retries may use all of it.
//! An attempt in flight at the budget's end is cut there (`--request-timeout` may be longer
//! than what is left), and one whose turn comes after it is not started: no request of the
//! run outlives its `--timeout`.

use std::{cell::Cell, time::Duration};

use tokio::time::Instant;

use crate::{
    budget::{Budget, Spent},
    failure::{Class, Failure, RETRY_AFTER_MAX, Wait, classify, retry_after},
    shutdown::Shutdown,
};

/// A retry schedule: step `n` (from 1) is `first * factor^(n-1)`, at most `max`, less up to
/// `jitter` of it (so that replicas and objects spread out); `soon` is the wait of
/// `Wait::Soon` (give or take `jitter`), `None` where it is the next step like any other.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    pub first: Duration,
    pub factor: u32,
    pub max: Duration,
    pub jitter: f64,
    pub soon: Option<Duration>,
}

/// A watch's list and watch starts, across relists: kube-runtime's and client-go's
/// reflector's 0.8 s doubling to 30 s; a refused connection about once a second, so that a
/// server coming back is met at once (a control-plane boot should not wait half a minute
/// for a server that has been up for 29 s).
pub const WATCH: Schedule = Schedule {
    first: Duration::from_millis(800),
    factor: 2,
    max: Duration::from_secs(30),
    jitter: 0.2,
    soon: Some(Duration::from_secs(1)),
};

/// The start-up requests (`/version`, discovery, `--once`'s LISTs): the watch's schedule,
/// so that both meet a server coming back alike.
pub const START_UP: Schedule = WATCH;

/// Each object's (and each webhook configuration's) attempts: 100 ms doubling to 30 s, its
/// count kept per object (`daemon::tracks`), so one failing object never slows another.
pub const PER_OBJECT: Schedule = Schedule {
    first: Duration::from_millis(100),
    factor: 2,
    max: Duration::from_secs(30),
    jitter: 0.2,
    soon: None,
};

/// An Event's POST, tried again `EVENT_RETRIES` times: 200 ms doubling to 5 s. An Event is
/// only a record: it never holds the work up for long. Walked by backon (`Schedule::backon`).
pub const EVENTS: Schedule = Schedule {
    first: Duration::from_millis(200),
    factor: 2,
    max: Duration::from_secs(5),
    jitter: 0.2,
    soon: None,
};

/// How many times a failed Event is tried again.
pub const EVENT_RETRIES: u32 = 3;

impl Schedule {
    /// Step `n` (from 1).
    pub fn step(&self, n: u32) -> Duration {
        let growth = self.factor.saturating_pow(n.saturating_sub(1).min(31));
        let base = self.first.saturating_mul(growth).min(self.max);
        base - base.mul_f64(random_fraction() * self.jitter)
    }

    /// The wait before attempt `failures + 1`, never before `retry_after`.
    pub fn delay(&self, failures: u32, retry_after: Duration) -> Duration {
        self.step(failures).max(retry_after.min(RETRY_AFTER_MAX))
    }

    /// The wait before attempt `failures + 1` after `e`: never before its Retry-After.
    pub fn after(&self, failures: u32, e: &kube::Error) -> Duration {
        self.delay(failures, retry_after(e))
    }

    /// The schedule as backon's, for at most `times` retries (the Events sink's loop: a task
    /// of its own, where `with_backoff`'s async closures cannot be proven `Send` by rustc
    /// yet). backon's jitter adds up to one more step instead of taking up to `jitter` off.
    pub fn backon(&self, times: u32) -> backon::ExponentialBuilder {
        backon::ExponentialBuilder::default()
            .with_min_delay(self.first)
            .with_factor(self.factor as f32)
            .with_max_delay(self.max)
            .with_max_times(times as usize)
            .with_jitter()
    }

    /// `d`, give or take `jitter` of it.
    fn jittered(&self, d: Duration) -> Duration {
        d.mul_f64(1.0 - self.jitter + random_fraction() * 2.0 * self.jitter)
    }
}

/// A quiet time after which a `Backoff` starts again (as client-go's backoff manager does).
pub const QUIET: Duration = Duration::from_secs(120);

/// A schedule walked by one request that stands for the process (a watch, start-up): its
/// failures in a row and when the last one was. It starts again after a success (`reset`),
/// a refused connection (`Wait::Soon`), or `QUIET` without a failure.
#[derive(Clone, Debug)]
pub struct Backoff {
    schedule: Schedule,
    /// Failures taking a step (and expired ones after the first) in a row.
    failures: u32,
    /// `Wait::AtOnce` failures (410) in a row.
    expired: u32,
    last: Option<std::time::Instant>,
}

impl Backoff {
    pub fn new(schedule: Schedule) -> Backoff {
        Backoff {
            schedule,
            failures: 0,
            expired: 0,
            last: None,
        }
    }

    /// The wait before the next attempt after a failure whose class waits `wait`;
    /// `retry_after` is the server's (zero when it gave none).
    pub fn next(&mut self, wait: Wait, retry_after: Duration) -> Duration {
        let now = std::time::Instant::now();
        if self.last.is_some_and(|l| now.duration_since(l) > QUIET) {
            self.reset();
        }
        self.last = Some(now);
        let retry_after = retry_after.min(RETRY_AFTER_MAX);
        match (wait, self.schedule.soon) {
            (Wait::Soon, Some(soon)) => {
                self.reset();
                self.schedule.jittered(soon).max(retry_after)
            }
            (Wait::AtOnce, _) => {
                self.expired = self.expired.saturating_add(1);
                if self.expired == 1 {
                    return Duration::ZERO;
                }
                self.failures = self.failures.saturating_add(1);
                self.schedule.step(self.failures)
            }
            (Wait::Step | Wait::Soon, _) => {
                self.failures = self.failures.saturating_add(1);
                self.schedule.step(self.failures).max(retry_after)
            }
        }
    }

    /// The wait before the next attempt after `e`, as the failure table sorts it.
    pub fn after(&mut self, e: &kube::Error) -> Duration {
        self.next(classify(e).policy().wait, retry_after(e))
    }

    /// A success: the next failure starts the schedule again.
    pub fn reset(&mut self) {
        self.failures = 0;
        self.expired = 0;
    }

    /// The failures counted now, for a success that may not hold (`restore`).
    pub fn save(&self) -> (u32, u32) {
        (self.failures, self.expired)
    }

    /// Takes back a `reset`: what looked like a success was not one.
    pub fn restore(&mut self, (failures, expired): (u32, u32)) {
        self.failures = self.failures.max(failures);
        self.expired = self.expired.max(expired);
    }
}

/// A cheap pseudo-random fraction in [0, 1), good enough for jitter.
pub fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// How `with_backoff` ended without a success: with the last failure.
#[derive(Debug)]
pub enum Ended<E> {
    /// The judge gave up on it.
    GaveUp(E),
    /// A stop was requested in the wait after it.
    Stopped(E),
}

impl<E> Ended<E> {
    pub fn into_inner(self) -> E {
        match self {
            Ended::GaveUp(e) | Ended::Stopped(e) => e,
        }
    }
}

/// What the judge of `with_backoff` says of a failure, which it hands back.
pub enum Next<E> {
    /// Try again after the wait.
    After(Duration, E),
    GiveUp(E),
}

/// The one retry loop: runs `attempt` (given the failure of the try before, if any) until
/// it succeeds, or `judge`, told each failure and how long its try took, gives up rather
/// than naming the wait before the next try; a `stop` requested in a wait ends it. Each
/// failure is handed on by value: to the judge, back from it, to the next attempt.
pub async fn with_backoff<T, E>(
    stop: Option<&Shutdown>,
    mut attempt: impl AsyncFnMut(Option<E>) -> Result<T, E>,
    mut judge: impl AsyncFnMut(E, Duration) -> Next<E>,
) -> Result<T, Ended<E>> {
    let mut before = None;
    loop {
        let started = Instant::now();
        let e = match attempt(before.take()).await {
            Ok(done) => return Ok(done),
            Err(e) => e,
        };
        let (wait, e) = match judge(e, started.elapsed()).await {
            Next::After(wait, e) => (wait, e),
            Next::GiveUp(e) => return Err(Ended::GaveUp(e)),
        };
        match stop {
            Some(stop) => tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.requested() => return Err(Ended::Stopped(e)),
            },
            None if wait.is_zero() => {}
            None => tokio::time::sleep(wait).await,
        }
        before = Some(e);
    }
}

/// Runs `attempt` until it succeeds, fails for good, `budget` is spent or a stop is
/// requested, on the `PER_OBJECT` schedule. `attempt` reads the newest state itself when it
/// is tried again. `report` hears of every failure, with the wait before the next try
/// (`None`: no next try), and how many tries failed. A budget of zero tries once, bounded by
/// `--request-timeout` alone (as `discovery::with_retries` does).
pub async fn until_done<T>(
    budget: Budget,
    stop: &Shutdown,
    mut attempt: impl AsyncFnMut() -> Result<T, Failure>,
    report: impl Fn(&Failure, u32, Option<Duration>),
) -> Result<T, Failure> {
    let failures = Cell::new(0);
    // The cut of the try in flight: `None`, not cut (a zero budget); zero, not sent.
    let cut = Cell::new(None);
    let last = Cell::new(false);
    let tried = with_backoff(
        Some(stop),
        async |before: Option<Failure>| {
            cut.set((!budget.is_zero()).then(|| budget.left()));
            let before = before.map(|f| f.to_string());
            within(budget, cut.get(), attempt(), before).await
        },
        async |f: Failure, took| {
            if cut.get() != Some(Duration::ZERO) {
                failures.set(failures.get() + 1);
            }
            let n = failures.get();
            let retry = f.class.policy().retry && !stop.is_requested();
            let next = match retry && !last.get() {
                true => next_wait(PER_OBJECT.after(n, &f.error), budget.left(), took),
                false => None,
            };
            let Some((wait, is_last)) = next else {
                report(&f, n, None);
                if retry {
                    // Out of time, not of reasons to try: the object's turn lasts to the end
                    // of the budget, as when the last try was made there (nothing is left for
                    // the next `--resource`, whose listing is then not sent).
                    tokio::select! {
                        _ = tokio::time::sleep_until(budget.end()) => {}
                        _ = stop.requested() => {}
                    }
                }
                return Next::GiveUp(f);
            };
            last.set(is_last);
            report(&f, n, Some(wait));
            Next::After(wait, f)
        },
    )
    .await;
    match tried {
        Ok(done) => Ok(done),
        Err(Ended::GaveUp(f)) => Err(f),
        Err(Ended::Stopped(f)) => {
            report(&f, failures.get(), None);
            Err(f)
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

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn other_failures_double_from_0_8s_to_30s() {
        let mut b = Backoff::new(WATCH);
        let steps: Vec<Duration> = (0..8).map(|_| b.next(Wait::Step, Duration::ZERO)).collect();
        for (d, max) in steps
            .iter()
            .zip([0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0])
        {
            let max = Duration::from_secs_f64(max);
            assert!(
                *d <= max && *d >= max.mul_f64(0.8),
                "{d:?} for {max:?}: {steps:?}"
            );
        }
        b.reset();
        assert!(b.next(Wait::Step, Duration::ZERO) <= WATCH.first);
    }

    #[test]
    fn refused_connections_wait_about_a_second_and_start_the_steps_again() {
        let mut b = Backoff::new(WATCH);
        for _ in 0..5 {
            b.next(Wait::Step, Duration::ZERO);
        }
        b.next(Wait::AtOnce, Duration::ZERO);
        for _ in 0..50 {
            let d = b.next(Wait::Soon, Duration::ZERO);
            assert!(
                d >= SECOND.mul_f64(0.8) && d <= SECOND.mul_f64(1.2),
                "{d:?}"
            );
        }
        assert_eq!(b.next(Wait::AtOnce, Duration::ZERO), Duration::ZERO);
        assert!(b.next(Wait::Step, Duration::ZERO) <= WATCH.first);
    }

    #[test]
    fn an_expired_version_relists_at_once_the_first_time_only() {
        let mut b = Backoff::new(WATCH);
        assert_eq!(b.next(Wait::AtOnce, Duration::ZERO), Duration::ZERO);
        let second = b.next(Wait::AtOnce, Duration::ZERO);
        assert!(
            second >= WATCH.first.mul_f64(0.8) && second <= WATCH.first,
            "{second:?}"
        );
        let third = b.next(Wait::AtOnce, Duration::ZERO);
        assert!(third >= WATCH.first * 2 * 4 / 5, "{third:?}");
        b.reset();
        assert_eq!(b.next(Wait::AtOnce, Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let mut b = Backoff::new(WATCH);
        assert_eq!(b.next(Wait::Step, 5 * SECOND), 5 * SECOND);
        assert_eq!(b.next(Wait::Step, 3600 * SECOND), WATCH.max);
        assert_eq!(b.next(Wait::Soon, 7 * SECOND), 7 * SECOND);
    }

    #[test]
    fn a_restored_reset_keeps_counting() {
        let mut b = Backoff::new(WATCH);
        b.next(Wait::AtOnce, Duration::ZERO);
        b.next(Wait::Step, Duration::ZERO);
        b.next(Wait::Step, Duration::ZERO);
        let saved = b.save();
        b.reset();
        b.restore(saved);
        let d = b.next(Wait::AtOnce, Duration::ZERO);
        assert!(
            d >= WATCH.first * 4 * 4 / 5,
            "the fourth failure in a row: {d:?}"
        );
    }

    #[test]
    fn the_waits_of_the_classes() {
        let api = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        let mut b = Backoff::new(WATCH);
        assert_eq!(b.after(&api(410)), Duration::ZERO, "a first 410: at once");
        assert!(b.after(&api(504)) >= WATCH.first.mul_f64(0.8));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let d = b.after(&kube::Error::Service(Box::new(refused)));
        assert!(
            d >= SECOND.mul_f64(0.8) && d <= SECOND.mul_f64(1.2),
            "{d:?}"
        );
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let d = b.after(&kube::Error::Service(Box::new(reset)));
        assert!(d <= WATCH.first && d >= WATCH.first.mul_f64(0.8), "{d:?}");
        // A schedule with no `soon` (each object's) takes a step for a refused connection.
        let mut b = Backoff::new(PER_OBJECT);
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let first = b.after(&kube::Error::Service(Box::new(refused)));
        assert!(first <= PER_OBJECT.first, "{first:?}");
    }

    #[test]
    fn per_object_steps_double_from_100ms_to_30s_and_honour_retry_after() {
        let d = |n| PER_OBJECT.delay(n, Duration::ZERO);
        assert!(d(1) <= Duration::from_millis(100) && d(1) >= Duration::from_millis(80));
        assert!(d(4) <= Duration::from_millis(800) && d(4) >= Duration::from_millis(640));
        assert!(d(30) <= Duration::from_secs(30) && d(30) >= Duration::from_secs(24));
        assert!(d(u32::MAX) <= Duration::from_secs(30), "no overflow");
        assert_eq!(
            PER_OBJECT.delay(1, Duration::from_secs(5)),
            Duration::from_secs(5)
        );
        let e = |n| EVENTS.delay(n, Duration::ZERO);
        assert!(e(1) <= Duration::from_millis(200) && e(1) >= Duration::from_millis(160));
        assert!(e(10) <= Duration::from_secs(5) && e(10) >= Duration::from_secs(4));
    }

    #[tokio::test(start_paused = true)]
    async fn with_backoff_waits_what_the_judge_says_and_hands_on_the_failure_before() {
        let mut seen = Vec::new();
        let start = Instant::now();
        let result = with_backoff(
            None,
            async |before: Option<u32>| {
                seen.push(before);
                match before {
                    Some(n) if n >= 3 => Ok(n),
                    Some(n) => Err(n + 1),
                    None => Err(1),
                }
            },
            async |n: u32, _| Next::After(Duration::from_secs(u64::from(n)), n),
        )
        .await;
        assert_eq!(result.ok(), Some(3));
        assert_eq!(seen, [None, Some(1), Some(2), Some(3)]);
        assert_eq!(start.elapsed(), Duration::from_secs(1 + 2 + 3));
        let gave_up = with_backoff(
            None,
            async |_| Err::<(), _>(7),
            async |e, _| Next::GiveUp(e),
        )
        .await;
        assert!(matches!(gave_up, Err(Ended::GaveUp(7))));
        let (tx, stop) = Shutdown::by_hand();
        let stopped = with_backoff(
            Some(&stop),
            async |_| {
                let _ = tx.send(true);
                Err::<(), _>(8)
            },
            async |e, _| Next::After(Duration::from_secs(60), e),
        )
        .await;
        assert!(matches!(stopped, Err(Ended::Stopped(8))));
    }

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
