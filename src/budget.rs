//! The `--timeout` budget: one end, fixed when it starts (for `--once`, right after the
//! command line is read), that every request and retry of the run shares, and its length
//! for the message that says it was spent.

use std::time::Duration;

use tokio::time::Instant;

use crate::validation::later;

/// A budget of time with a fixed end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    end: Instant,
    length: Duration,
}

impl Budget {
    /// A budget of `length` from now (the end as far as the clock goes, never a panic).
    pub fn from_now(length: Duration) -> Budget {
        Budget::from(Instant::now(), length)
    }

    /// A budget of `length` from `start`.
    pub fn from(start: Instant, length: Duration) -> Budget {
        Budget {
            end: later(start, length),
            length,
        }
    }

    /// When it is spent.
    pub fn end(&self) -> Instant {
        self.end
    }

    /// What is left of it now: zero once it is spent.
    pub fn left(&self) -> Duration {
        self.end.saturating_duration_since(Instant::now())
    }

    /// `--timeout 0s`: try once, never wait (as `kubectl wait --timeout=0`).
    pub fn is_zero(&self) -> bool {
        self.length.is_zero()
    }

    /// Its length as a flag's value is written: `3s`, `1m30s`.
    pub fn length(&self) -> String {
        crate::text::duration(self.length)
    }
}

/// What an attempt the budget ended says: cut after `cut` in flight (what was left of the
/// budget when it started), or not started; and the failure of the try before, if any.
#[derive(Debug)]
pub struct Spent {
    pub length: String,
    pub cut: Option<Duration>,
    pub before: Option<String>,
}

impl std::fmt::Display for Spent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cut {
            Some(cut) => write!(f, "no answer within {}", crate::text::duration(cut))?,
            None if self.before.is_some() => write!(f, "not tried again")?,
            None => write!(f, "not tried")?,
        }
        write!(f, ": --timeout spent ({})", self.length)?;
        match &self.before {
            Some(before) => write!(f, "; the try before: {before}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for Spent {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn what_is_left_shrinks_to_zero_and_stays_there() {
        let b = Budget::from_now(Duration::from_secs(3));
        assert_eq!(b.left(), Duration::from_secs(3));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(b.left(), Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(b.left(), Duration::ZERO);
        assert_eq!((b.length(), b.is_zero()), ("3s".to_string(), false));
        assert!(Budget::from_now(Duration::ZERO).is_zero());
    }

    #[test]
    fn spent_says_what_was_cut_and_what_came_before() {
        let spent = |cut, before: Option<&str>| Spent {
            length: "3s".into(),
            cut,
            before: before.map(String::from),
        };
        assert_eq!(
            spent(Some(Duration::from_millis(2870)), None).to_string(),
            "no answer within 2.87s: --timeout spent (3s)"
        );
        assert_eq!(
            spent(Some(Duration::from_millis(800)), Some("422 Invalid: no")).to_string(),
            "no answer within 800ms: --timeout spent (3s); the try before: 422 Invalid: no"
        );
        assert_eq!(
            spent(None, None).to_string(),
            "not tried: --timeout spent (3s)"
        );
        assert_eq!(
            spent(None, Some("500 Failure: x")).to_string(),
            "not tried again: --timeout spent (3s); the try before: 500 Failure: x"
        );
    }

    #[test]
    fn a_budget_beyond_the_clock_does_not_panic() {
        let b = Budget::from(Instant::now(), Duration::MAX);
        assert!(b.end() > Instant::now());
    }
}
