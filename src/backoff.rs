//! The retry schedule of a request that stands for the whole process: a watch (its list and
//! its watch starts, across relists) and the start-up requests. One schedule, so that no
//! path of the watch can skip it (a relist once restarted the watcher with a fresh backoff
//! and ran at 1,250 LISTs a second), and so that a server coming back is met at once:
//!
//! - a refused connection is retried about once a second, never on a longer step: nothing
//!   listens, so an attempt costs the server nothing, and a control-plane boot should not
//!   wait half a minute for a server that has been up for 29 s. It starts the schedule
//!   again: what a server answered before it went away says nothing of the next one;
//! - an expired resourceVersion (410) relists at once the first time, then backs off: a
//!   server that answers 410 to every watch start must not be listed in a loop;
//! - anything else waits 0.8 s doubling to 30 s (kube-runtime's and client-go's schedule),
//!   jittered, never before the server's Retry-After (itself capped at 30 s);
//! - the schedule starts again after a success (`reset`) or 120 s without a failure (as
//!   client-go's backoff manager does).

use std::time::{Duration, Instant};

/// What a failure was, for the schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Nothing listens at the server's address.
    Refused,
    /// A resourceVersion too old (410): a relist is due.
    Expired,
    /// Anything else: an error answer, a timeout, a broken connection.
    Other,
}

/// The first step of the exponential schedule.
pub const FIRST: Duration = Duration::from_millis(800);
/// Its last step.
pub const MAX: Duration = Duration::from_secs(30);
/// The wait after a refused connection.
pub const REFUSED: Duration = Duration::from_secs(1);
/// A quiet time after which the schedule starts again.
pub const QUIET: Duration = Duration::from_secs(120);

/// Failures in a row and when the last one was.
#[derive(Clone, Debug, Default)]
pub struct Backoff {
    /// Failures of kind `Other` (and expired ones after the first) in a row.
    failures: u32,
    /// Expired resourceVersions in a row.
    expired: u32,
    last: Option<Instant>,
}

impl Backoff {
    /// The wait before the next attempt after a failure of `kind`; `retry_after` is the
    /// server's (zero when it gave none).
    pub fn next(&mut self, kind: Kind, retry_after: Duration) -> Duration {
        let now = Instant::now();
        if self.last.is_some_and(|l| now.duration_since(l) > QUIET) {
            self.reset();
        }
        self.last = Some(now);
        match kind {
            Kind::Refused => {
                self.reset();
                jittered(REFUSED).max(retry_after.min(MAX))
            }
            Kind::Expired => {
                self.expired = self.expired.saturating_add(1);
                if self.expired == 1 {
                    return Duration::ZERO;
                }
                self.failures = self.failures.saturating_add(1);
                step(self.failures)
            }
            Kind::Other => {
                self.failures = self.failures.saturating_add(1);
                step(self.failures).max(retry_after.min(MAX))
            }
        }
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

/// Step `n` (from 1) of the exponential schedule: 0.8 s doubling to 30 s, less up to a fifth.
fn step(n: u32) -> Duration {
    let base = FIRST
        .saturating_mul(1u32 << n.saturating_sub(1).min(6))
        .min(MAX);
    base - base.mul_f64(crate::failure::random_fraction() * 0.2)
}

/// `d`, give or take a fifth, so that replicas restarted together spread out.
fn jittered(d: Duration) -> Duration {
    d.mul_f64(0.8 + crate::failure::random_fraction() * 0.4)
}

/// What a failed request says for the schedule: a refused connection, an expired
/// resourceVersion, or something else; and the server's Retry-After.
pub fn kind_of(e: &kube::Error) -> (Kind, Duration) {
    match e {
        kube::Error::Api(s) if s.code == 410 => (Kind::Expired, Duration::ZERO),
        kube::Error::Api(_) => (Kind::Other, crate::failure::retry_after(e)),
        other if refused(other) => (Kind::Refused, Duration::ZERO),
        _ => (Kind::Other, Duration::ZERO),
    }
}

/// Whether a connection was refused (nothing listens at the address).
pub fn refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        cur = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn other_failures_double_from_0_8s_to_30s() {
        let mut b = Backoff::default();
        let steps: Vec<Duration> = (0..8)
            .map(|_| b.next(Kind::Other, Duration::ZERO))
            .collect();
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
        assert!(b.next(Kind::Other, Duration::ZERO) <= FIRST);
    }

    #[test]
    fn refused_connections_wait_about_a_second_and_start_the_steps_again() {
        let mut b = Backoff::default();
        for _ in 0..5 {
            b.next(Kind::Other, Duration::ZERO);
        }
        b.next(Kind::Expired, Duration::ZERO);
        for _ in 0..50 {
            let d = b.next(Kind::Refused, Duration::ZERO);
            assert!(
                d >= SECOND.mul_f64(0.8) && d <= SECOND.mul_f64(1.2),
                "{d:?}"
            );
        }
        assert_eq!(b.next(Kind::Expired, Duration::ZERO), Duration::ZERO);
        assert!(b.next(Kind::Other, Duration::ZERO) <= FIRST);
    }

    #[test]
    fn an_expired_version_relists_at_once_the_first_time_only() {
        let mut b = Backoff::default();
        assert_eq!(b.next(Kind::Expired, Duration::ZERO), Duration::ZERO);
        let second = b.next(Kind::Expired, Duration::ZERO);
        assert!(
            second >= FIRST.mul_f64(0.8) && second <= FIRST,
            "{second:?}"
        );
        let third = b.next(Kind::Expired, Duration::ZERO);
        assert!(third >= FIRST * 2 * 4 / 5, "{third:?}");
        b.reset();
        assert_eq!(b.next(Kind::Expired, Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let mut b = Backoff::default();
        assert_eq!(b.next(Kind::Other, 5 * SECOND), 5 * SECOND);
        assert_eq!(b.next(Kind::Other, 3600 * SECOND), MAX);
        assert_eq!(b.next(Kind::Refused, 7 * SECOND), 7 * SECOND);
    }

    #[test]
    fn a_restored_reset_keeps_counting() {
        let mut b = Backoff::default();
        b.next(Kind::Expired, Duration::ZERO);
        b.next(Kind::Other, Duration::ZERO);
        b.next(Kind::Other, Duration::ZERO);
        let saved = b.save();
        b.reset();
        b.restore(saved);
        let d = b.next(Kind::Expired, Duration::ZERO);
        assert!(d >= FIRST * 4 * 4 / 5, "the fourth failure in a row: {d:?}");
    }

    #[test]
    fn kinds_of_errors() {
        let api = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        assert_eq!(kind_of(&api(410)).0, Kind::Expired);
        assert_eq!(kind_of(&api(504)).0, Kind::Other);
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            kind_of(&kube::Error::Service(Box::new(refused))).0,
            Kind::Refused
        );
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(
            kind_of(&kube::Error::Service(Box::new(reset))).0,
            Kind::Other
        );
    }
}
