//! What the engine says of a webhook it exempted or restored: the log line, the metric
//! and the Event; in a dry run, once per state, what it would do; and of a patch that
//! failed, what the failure table makes of it.

use std::time::Duration;

use serde_json::Value;
use tracing::{info, warn};

use super::{
    LOG, RBAC_HINT,
    decide::Step,
    engine::{Added, Engine, Seen, lock},
    hook::Hook,
    record::Record,
    slipped,
};
use crate::{
    clear::{self, Counted},
    events,
    failure::{self, Failure},
    text,
};

/// The pods created while a namespace was exempted, or why they could not be listed.
pub(super) type Slipped =
    Result<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>, String>;

/// How long the listing of those pods may take: the restore has been made; its line waits.
const SLIPPED_LIMIT: Duration = Duration::from_secs(10);

/// The namespace an exemption's record names.
fn exempted_namespace(record: &Record) -> String {
    record
        .expression
        .pointer("/values/0")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The `said` entry of a dry-run line on a webhook of configuration `key` (uid `uid`).
fn dry_run_line(key: &str, uid: &str, hook: &str, what: &str) -> String {
    format!("{key}/{uid}/{hook}/{what}")
}

/// The webhook's service as the lines name it (none for a `url` webhook).
fn service_of(h: &Hook) -> String {
    h.service
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default()
}

impl Engine {
    /// Logs, counts and writes the Event for a step the server accepted; a restore's with
    /// the pods created while it was exempted (`slipped`).
    pub(super) fn done(&self, seen: &Seen, h: &Hook, step: &Step, slipped: Option<&Slipped>) {
        match step {
            Step::Exempt {
                namespace,
                down_for,
            } => self.exempted(seen, h, namespace, *down_for),
            Step::Restore { record, up_for } => {
                self.restored(seen, h, record, *up_for, slipped);
            }
            Step::Nothing | Step::Wait(_) => {}
        }
    }

    /// The pods created in the namespace of `record` since it was exempted.
    pub(super) async fn slipped(&self, record: &Record) -> Slipped {
        let namespace = exempted_namespace(record);
        let since = record
            .since
            .parse()
            .map_err(|e| format!("the record's time {:?}: {e}", record.since))?;
        slipped::created_since(&self.client, &namespace, since, SLIPPED_LIMIT).await
    }

    /// An Event on each pod `h` never saw, and the words the restore's line says of them.
    fn say_slipped(&self, h: &Hook, record: &Record, slipped: Option<&Slipped>) -> String {
        match slipped {
            None => "none".into(),
            Some(Ok(pods)) if pods.is_empty() => "none".into(),
            Some(Ok(pods)) => {
                let pod = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
                for p in pods {
                    let event =
                        slipped::event(p, &pod, &h.name, &record.since, &self.settings.node);
                    let key = format!(
                        "{}/{}",
                        p.namespace.as_deref().unwrap_or_default(),
                        p.name.as_deref().unwrap_or_default()
                    );
                    self.events.send(event, key);
                }
                format!(
                    "{} ({}): an Event on each",
                    pods.len(),
                    slipped::named(pods)
                )
            }
            Some(Err(why)) => format!("not listed: {why}"),
        }
    }

    fn exempted(&self, seen: &Seen, h: &Hook, namespace: &str, down_for: Duration) {
        let service = service_of(h);
        let reverts = self.remember_added(seen, h);
        if reverts > 0 {
            warn!(target: LOG, config = %seen.key, webhook = %h.name, namespace = %namespace, reverts,
                  "the exemption was removed by someone else while the service was still down \
                   (a GitOps sync or a Helm upgrade?): added again, at most once per --webhook-grace");
        }
        // `--once` saw the endpoints once: it cannot say for how long they were gone.
        let down_for = if self.services.once() {
            "unknown".to_string()
        } else {
            text::duration(down_for)
        };
        // Counted before it is said: whoever reads the line finds it in the metrics.
        self.metrics.webhook_exemptions.inc();
        info!(target: LOG, config = %seen.key, webhook = %h.name, namespace = %namespace, service = %service,
              %down_for, "exempted the webhook's own namespace: its service has no ready endpoint");
        let how_long = if self.services.once() {
            "had no ready endpoint when `metainit --once` looked".to_string()
        } else {
            format!(
                "has had no ready endpoint for {down_for} (--webhook-grace {})",
                text::duration(self.settings.grace)
            )
        };
        let message = format!(
            "metainit exempted namespace {namespace} from webhook {}: its service {service} {how_long}; every other namespace is still intercepted",
            h.name,
        );
        self.announce(seen, events::Reason::WebhookSelfExempted, message);
    }

    /// Notes the exemption of `h` as made now; how many times someone else took it away
    /// while the service stayed down.
    fn remember_added(&self, seen: &Seen, h: &Hook) -> u32 {
        let now = self.origin.elapsed();
        let mut added = lock(&self.added);
        let entry = added
            .entry((seen.uid.clone(), h.name.clone()))
            .or_insert(Added {
                at: now,
                reverts: 0,
            });
        // Added before (by this process, or by any, says the record), and
        // gone again while the service stayed down: someone took it away.
        if seen.records.contains_key(&h.name) || entry.at != now {
            entry.reverts += 1;
        }
        entry.at = now;
        entry.reverts
    }

    fn restored(
        &self,
        seen: &Seen,
        h: &Hook,
        record: &Record,
        up_for: Option<Duration>,
        slipped: Option<&Slipped>,
    ) {
        let service = service_of(h);
        lock(&self.added).remove(&(seen.uid.clone(), h.name.clone()));
        let namespace = exempted_namespace(record);
        let created_while_exempted = self.say_slipped(h, record, slipped);
        let gone = h
            .service
            .as_ref()
            .and_then(|s| self.services.outage(s))
            .map(text::duration);
        let why = self.why_restored(h, &service, up_for, gone.as_deref());
        self.metrics.webhook_restorations.inc();
        info!(target: LOG, config = %seen.key, webhook = %h.name, namespace = %namespace, service = %service,
              endpoints_gone_for = gone.as_deref().unwrap_or("-"), %created_while_exempted,
              "restored the webhook's namespace selector: {why}");
        let message = format!(
            "metainit restored webhook {} for namespace {namespace}: {why}",
            h.name
        );
        self.announce(seen, events::Reason::WebhookRestored, message);
    }

    /// Why `h` was restored, in words: its service is up again (after an outage `gone`
    /// long), or it no longer deadlocks this namespace.
    fn why_restored(
        &self,
        h: &Hook,
        service: &str,
        up_for: Option<Duration>,
        gone: Option<&str>,
    ) -> String {
        match (up_for, gone) {
            (Some(_), _) if self.services.once() => {
                format!("its service {service} had a ready endpoint when `metainit --once` looked")
            }
            (Some(up), Some(gone)) => format!(
                "its service {service} has had ready endpoints for {} after {gone} without",
                text::duration(up)
            ),
            (Some(up), None) => format!(
                "its service {service} has had ready endpoints for {}",
                text::duration(up)
            ),
            (None, _) => match h.guarded_service() {
                Some(now) => format!(
                    "the webhook now calls {now}, in another namespace: that namespace's exemption, if its service is down, is decided on its own"
                ),
                None => "the webhook no longer fails closed on a service".to_string(),
            },
        }
    }

    /// The Event on the configuration.
    fn announce(&self, seen: &Seen, reason: events::Reason, message: String) {
        self.events.send(
            events::webhook_event(
                &seen.ar,
                &seen.obj.metadata,
                reason,
                message,
                &self.settings.node,
            ),
            seen.key.to_string(),
        );
    }

    /// A webhook with nothing to do now: what a dry run said of it is over, and the next
    /// exemption or restoration it would make is said again.
    pub(super) fn nothing_to_say(&self, key: &str, uid: &str, hook: &str) {
        if self.settings.dry_run {
            let mut said = lock(&self.said);
            said.remove(&dry_run_line(key, uid, hook, "exempt"));
            said.remove(&dry_run_line(key, uid, hook, "restore"));
        }
    }

    /// Says, once per state, what a dry run would do.
    pub(super) fn say_dry_run(&self, seen: &Seen, steps: &[(usize, Step)]) {
        let (key, uid) = (seen.key, seen.uid.as_str());
        for (index, step) in steps {
            let Some(h) = seen.hook(*index) else {
                continue;
            };
            let service = service_of(h);
            match step {
                Step::Exempt {
                    namespace,
                    down_for,
                } => {
                    if lock(&self.said).insert(dry_run_line(key, uid, &h.name, "exempt")) {
                        info!(target: LOG, config = %key, webhook = %h.name, namespace = %namespace, service = %service,
                              down_for = %text::duration(*down_for), "dry run: would exempt the webhook's own namespace");
                    }
                }
                Step::Restore { .. } => {
                    if lock(&self.said).insert(dry_run_line(key, uid, &h.name, "restore")) {
                        info!(target: LOG, config = %key, webhook = %h.name, service = %service,
                              "dry run: would restore the webhook's namespace selector");
                    }
                }
                Step::Nothing | Step::Wait(_) => {}
            }
        }
    }

    /// Logs a failed PATCH: `retry_in` is `None` when this was the last try (`--once`).
    pub(super) fn report(
        &self,
        key: &str,
        failure: &Failure,
        failures: u32,
        retry_in: Option<Duration>,
    ) {
        let Counted {
            error,
            code,
            reason,
            ..
        } = clear::count(&self.metrics, failure);
        let hint = if failure.class == failure::Class::Forbidden {
            Some(RBAC_HINT)
        } else {
            None
        };
        // A race (two replicas, a GitOps sync) is looked at again on the newest state:
        // worth a line only when it keeps happening.
        let Some(retry_in) = retry_in else {
            warn!(target: LOG, config = %key, %error, status.code = code, status.reason = reason.map(tracing::field::display),
                  failures, hint, "could not patch the webhook configuration: giving up");
            return;
        };
        if failure.class.stale() && failures < 5 {
            tracing::debug!(target: LOG, config = %key, %error, failures, retry_in = ?retry_in, "configuration changed meanwhile; looking again");
            return;
        }
        warn!(target: LOG, config = %key, %error, status.code = code, status.reason = reason.map(tracing::field::display),
              failures, retry_in = ?retry_in, hint, "cannot patch the webhook configuration yet; retrying");
    }
}
