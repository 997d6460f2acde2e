//! One attempt at one object, the same for the daemon and `--once`: decide, send the
//! guarded clearing patch, and say what became of it; and the one place a failed
//! request is counted and judged, as the failure table says, for objects and webhook
//! configurations alike.

use std::{sync::Arc, time::Duration};

use kube::Client;
use tracing::{Level, debug, info};

use crate::{
    blocker::{Decision, Leave, Mode, Patch, kept::Answer},
    discovery::Target,
    events,
    failure::{Failure, Policy, describe, status_fields},
    metrics::Metrics,
    object::Held,
    release::Due,
};

/// What became of one object.
#[derive(Debug, Clone, PartialEq)]
pub enum Done {
    Cleared(Vec<String>),
    WouldClear(Vec<String>),
    Left(Leave),
    /// Deleted meanwhile (404).
    Gone,
    /// Gates released by a `--release-gate` rule.
    Released(Vec<String>),
}

/// Everything needed to clear objects of one resource.
pub struct Clearer {
    pub client: Client,
    /// The clearing PATCH's way (`client::ClearingPath`).
    pub clearing_path: crate::client::ClearingPath,
    pub target: Target,
    pub mode: Mode,
    pub only: Vec<String>,
    pub label_key: String,
    pub dry_run: bool,
    pub node: String,
    pub metrics: Arc<Metrics>,
    pub events: Arc<events::Sink>,
}

impl Clearer {
    pub fn decide(&self, obj: &Held) -> Decision {
        self.mode.decide(obj, &self.only, &self.label_key)
    }

    /// One attempt at the object as seen, with the decision `decide` made about it.
    /// `key` is `obj.key()`, which the caller has already written.
    pub async fn attempt(
        &self,
        obj: &Held,
        key: &str,
        decision: Decision,
    ) -> Result<Done, Failure> {
        let (names, patch) = match decision {
            Decision::Clear { names, patch } => (names, patch),
            Decision::Leave(leave) => {
                self.log_left(obj, &leave);
                return Ok(Done::Left(leave));
            }
        };
        let kind = &self.target.resource.kind;
        if self.dry_run {
            info!(kind = %kind, object = %key, names = %names.join(","), "dry run: would clear");
            return Ok(Done::WouldClear(names));
        }
        debug!(object = %key, names = %names.join(","), "patching");
        match self.send(obj, &patch).await? {
            None => Ok(Done::Gone),
            Some(answer) => {
                self.shows(&answer, &names)?;
                // Counted before it is said: whoever reads the line finds it in the metrics.
                self.metrics.cleared(self.mode.as_str(), &self.target.name);
                info!(kind = %kind, object = %key, names = %names.join(","), "cleared");
                self.events.send(
                    events::cleared_event(
                        &self.target.resource,
                        obj,
                        self.mode,
                        &names,
                        &self.node,
                    ),
                    key.to_owned(),
                );
                Ok(Done::Cleared(names))
            }
        }
    }

    /// Releases the `due` gates of a pod with `patch` (see `release::patch`).
    pub async fn release(&self, obj: &Held, due: &[Due], patch: &Patch) -> Result<Done, Failure> {
        debug!(object = %obj.key(), "releasing");
        let Some(answer) = self.send(obj, patch).await? else {
            return Ok(Done::Gone);
        };
        let gates: Vec<String> = due.iter().map(|d| d.gate.clone()).collect();
        self.shows(&answer, &gates)?;
        for d in due {
            self.metrics.released(&d.gate);
            info!(object = %obj.key(), gate = %d.gate, age = %crate::text::age_of(d.age),
                  rule = %d.rule, "released an orphaned gate");
        }
        self.events.send(
            events::released_event(&self.target.resource, obj, due, &self.node),
            obj.key(),
        );
        Ok(Done::Released(gates))
    }

    /// Sends a patch: the answer (the object as stored) once accepted, `None` if the object
    /// is gone (404), or the failure to retry.
    async fn send(&self, obj: &Held, patch: &Patch) -> Result<Option<bytes::Bytes>, Failure> {
        let ns = obj.namespace().filter(|_| self.target.namespaced);
        let url = Held::url(&self.target.resource, ns, obj.name());
        let request = patch_request(url, patch.as_str().as_bytes().to_vec())?;
        let answer = outcome(self.clearing_path.send(request).await)?;
        if answer.is_none() {
            debug!(object = %obj.key(), "deleted before it was patched");
        }
        Ok(answer)
    }

    /// Whether the answer to a PATCH that removed `names` shows them gone: a success whose
    /// object still holds one is a failure (`blocker::kept`), retried on the backoff.
    fn shows(&self, answer: &[u8], names: &[String]) -> Result<(), Failure> {
        match crate::blocker::kept::check(self.mode, answer, names) {
            Ok(()) => Ok(()),
            Err(Answer::Kept(kept)) => Err(Failure::kept(kept)),
            Err(Answer::NotAnObject(e)) => Err(Failure::from(kube::Error::SerdeError(e))),
        }
    }

    fn log_left(&self, obj: &Held, leave: &Leave) {
        match leave {
            Leave::Failed => {
                info!(object = %obj.key(), "initialization failed on purpose (initializers.result is set): left alone")
            }
            Leave::NotSelected(names) => {
                debug!(object = %obj.key(), pending = %names.join(","), "no --only name is pending")
            }
            _ => {}
        }
    }

    /// Logs and counts a failed attempt, as the failure table says; `failures` counts
    /// this one. Transient classes become loud once they persist.
    pub fn report(&self, key: &str, failure: &Failure, failures: u32, retry_in: Option<Duration>) {
        let Counted {
            policy,
            error,
            code,
            reason,
        } = count(&self.metrics, failure);
        let level = if policy.level == Level::DEBUG && failures >= 5 {
            Level::WARN
        } else {
            policy.level
        };
        let hint = policy.hint;
        let kind = &self.target.resource.kind;
        // Kept: told on the object too, at the 1st, 2nd, 4th, 8th... failure in a row (the
        // log says each).
        if let Some(kept) = failure.as_kept()
            && failures.is_power_of_two()
        {
            let event = events::kept_event(&self.target.resource, kept, &self.node);
            self.events.send(event, key.to_owned());
        }
        macro_rules! line {
            ($lvl:ident, $wait:expr) => {
                tracing::$lvl!(kind = %kind, object = %key, %error, status.code = code, status.reason = reason.map(tracing::field::display), failures, retry_in = ?$wait, hint, "cannot clear yet; retrying")
            };
        }
        match (level, retry_in) {
            (Level::WARN | Level::ERROR, Some(wait)) => line!(warn, wait),
            (Level::INFO, Some(wait)) => line!(info, wait),
            (_, Some(wait)) => line!(debug, wait),
            (_, None) => {
                tracing::error!(kind = %kind, object = %key, %error, status.code = code, status.reason = reason.map(tracing::field::display), failures, hint, "could not clear")
            }
        }
    }
}

/// `PATCH` of `url` with a JSON patch as the body, as `Api::patch` with `Patch::Json`
/// sends it, without its round trip of the patch through `json_patch::Patch`.
pub fn patch_request(url: String, body: Vec<u8>) -> Result<http::Request<Vec<u8>>, Failure> {
    http::Request::patch(url)
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        // The verb kube's own requests carry, for its tracing layer.
        .extension("patch")
        .body(body)
        .map_err(|e| Failure::from(kube::Error::HttpError(e)))
}

/// What became of a request that changes an object: its answer once accepted, `None` if
/// the object is gone (nothing is left to change), or the failure to retry, as the failure
/// table says.
pub fn outcome<T>(answer: Result<T, kube::Error>) -> Result<Option<T>, Failure> {
    match answer {
        Ok(answer) => Ok(Some(answer)),
        Err(e) => {
            let failure = Failure::from(e);
            if failure.class.policy().retry {
                Err(failure)
            } else {
                Ok(None)
            }
        }
    }
}

/// A failed request once counted: the failure table's word on it, and what every log
/// line about it shows. The line itself is the caller's, since tracing fixes a line's
/// fields, level and message where it is written.
pub struct Counted<'a> {
    pub policy: Policy,
    /// The error, as `describe` words it.
    pub error: String,
    /// The server's answer, for log queries (`error` has it all).
    pub code: Option<u16>,
    pub reason: Option<&'a str>,
}

/// Counts a failed request in the failures metric, under the failure table's label for
/// its class (none: not a failure), before the caller says it: whoever reads the line
/// finds it in the metrics.
pub fn count<'a>(metrics: &Metrics, failure: &'a Failure) -> Counted<'a> {
    let policy = failure.class.policy();
    if let Some(reason) = policy.reason {
        metrics.failure(reason);
    }
    let (code, reason) = status_fields(&failure.error);
    Counted {
        policy,
        error: describe(&failure.error),
        code,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::Class;

    fn answer(code: u16) -> Result<(), kube::Error> {
        Err(kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..kube::core::Status::default()
        })))
    }

    #[test]
    fn an_answer_is_accepted_gone_or_a_failure_to_retry() {
        assert!(matches!(outcome(Ok(())), Ok(Some(()))));
        assert!(matches!(outcome(answer(404)), Ok(None)));
        for (code, class) in [
            (409, Class::Race),
            (403, Class::Forbidden),
            (503, Class::ServerError),
        ] {
            match outcome(answer(code)) {
                Err(f) => assert_eq!(f.class, class, "{code}"),
                Ok(accepted) => panic!("{code}: Ok({accepted:?})"),
            }
        }
    }
}
