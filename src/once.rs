//! `--once`: no watch. A paged LIST of the labelled objects, then a bounded concurrent
//! loop over them: each object is tried, and after a failure tried again on its newest
//! state (a GET), with the same backoff as the daemon, until it is done or the
//! `--timeout` budget is spent (the last wait is cut so that the last try can be answered
//! before the end, so retries may use all of it). The budget is the whole run's, from its
//! start: discovery, the webhooks pass, every page of every listing, every clearing
//! attempt (its PATCH and GETs: one in flight at the end is cut there, one whose turn comes
//! later is not started) and the Events wait at most what is left of it, and a listing it
//! cuts is the run's last line, after the summary (exit 1).
//! Prints a summary; exit 1 names every object that could not be cleared,
//! with the last error. SIGTERM or SIGINT starts no new object, stops retrying, lets the
//! attempts in flight finish (at most `--shutdown-timeout`) and exits 0 if everything
//! was done, else 1.

use std::{collections::BTreeSet, process::ExitCode, sync::Arc, time::Duration};

use futures::StreamExt;
use kube::api::ListParams;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::{
    Error, Result,
    blocker::{Leave, Mode},
    budget::Budget,
    clear::{Clearer, Done},
    events::Sink,
    failure::Failure,
    list::{self, Bound},
    metrics::Metrics,
    object::Held,
    retry,
    setup::{self, Run},
    shutdown::Shutdown,
    validation::later,
    webhooks::once::Tally,
};

/// Tallies of one run.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Summary {
    pub cleared: usize,
    pub would_clear: usize,
    pub already_clear: usize,
    pub left_alone: usize,
    pub gone: usize,
    pub failed: usize,
    /// Not tried at all: a signal came first.
    pub not_tried: usize,
}

impl Summary {
    fn add(&mut self, result: &Result<Done, Failure>) {
        match result {
            Ok(Done::Cleared(_) | Done::Released(_)) => self.cleared += 1,
            Ok(Done::WouldClear(_)) => self.would_clear += 1,
            Ok(Done::Left(Leave::NotPending)) => self.already_clear += 1,
            Ok(Done::Left(_)) => self.left_alone += 1,
            Ok(Done::Gone) => self.gone += 1,
            Err(_) => self.failed += 1,
        }
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cleared {}, would clear {}, already clear {}, left alone {}, deleted meanwhile {}, failed {}",
            self.cleared,
            self.would_clear,
            self.already_clear,
            self.left_alone,
            self.gone,
            self.failed
        )?;
        retry::write_not_tried(f, self.not_tried)
    }
}

/// What `--once` logs when a signal comes.
pub const ON_SIGNAL: &str = "signal received: starting no new object, letting the ones in flight finish (at most --shutdown-timeout)";

/// Where a run stands.
#[derive(Default)]
struct Pass {
    total: Summary,
    /// When a signal came.
    stopping: Option<Instant>,
    /// Resources not listed: a signal came first, or the budget was spent.
    unlisted: usize,
    /// The listing the budget ran out in (or before): the run's last line, after the summary.
    spent: Option<Error>,
    webhooks: Option<Tally>,
}

/// What `--once` needs, checked by the command line.
#[derive(Clone, Debug)]
pub struct Settings {
    pub run: Run,
    /// The whole run's budget (`--timeout`).
    pub timeout: Duration,
}

pub async fn run(settings: Settings) -> Result<ExitCode> {
    // Fixed here, once: a budget that started at the first clearing, or anew for each
    // request, let a slow or hanging server keep `--once` running well past `--timeout`.
    let budget = Budget::from_now(settings.timeout);
    let run = &settings.run;
    let stop = Shutdown::on_signals_saying(ON_SIGNAL);
    let metrics = Arc::new(Metrics::default());
    let conn = setup::connect(&run.client, None).await?;
    info!(version = env!("CARGO_PKG_VERSION"), url = %conn.url, label_key = %run.selection.label_key, "starting");
    let (mode, clearers, events) = tokio::select! {
        setup = setup::clearers(run, &conn, &metrics, Some(budget)) => setup?,
        _ = stop.requested() => return Ok(interrupted("the server answered")),
    };
    let mut pass = Pass::default();
    // Webhooks first: no right to list them stops the run before anything is written, and a
    // webhook that blocks pod creation is what keeps the labelled pods from existing.
    if let Some(webhooks) = &run.webhooks {
        let tally = crate::webhooks::once::run(
            conn.client.clone(),
            webhooks.clone(),
            metrics.clone(),
            events.clone(),
            &conn.url,
            budget,
            stop.clone(),
        )
        .await?;
        if stop.is_requested() {
            pass.stopping = Some(Instant::now());
        }
        pass.webhooks = Some(tally);
    }
    for clearer in &clearers {
        if pass.stopping.is_some() || pass.spent.is_some() {
            pass.unlisted += 1;
            continue;
        }
        let api = clearer
            .target
            .api(&clearer.client, run.selection.namespace.as_deref());
        let labelled = ListParams::default().labels(&clearer.label_key);
        let objects = tokio::select! {
            objects = list::all(&conn.client, &api, labelled, &conn.url, Bound::Run(budget)) => objects,
            _ = stop.requested() => return Ok(interrupted("every labelled object was listed")),
        };
        let objects = match objects {
            Ok(objects) => objects,
            // The budget ended it: what was done so far is still summed up.
            Err(e @ Error::Unreachable(_)) if budget.left().is_zero() => {
                pass.unlisted += 1;
                pass.spent = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        warn_unused_only(clearer, &run.selection.only, &objects);
        pass.clear_all(clearer, objects, budget, run, &stop).await;
    }
    pass.finish(mode.is_some(), budget, run, &events).await
}

impl Pass {
    /// Logs what a signal or the budget left undone, waits for the Events (at most what is
    /// left of the budget, and of the signal's `--shutdown-timeout`) and prints the summaries;
    /// then the listing the budget ran out in is the error that ends the run.
    async fn finish(
        self,
        mode_known: bool,
        budget: Budget,
        run: &Run,
        events: &Sink,
    ) -> Result<ExitCode> {
        let all_done = self.all_done(run.webhooks.is_some());
        if self.spent.is_some() {
            warn!(summary = %self.total, resources_not_listed = self.unlisted, "the --timeout budget was spent before every labelled object was listed");
        } else if self.stopping.is_some() && !all_done {
            // The objects of resources not reached are not counted: they were never listed.
            warn!(summary = %self.total, resources_not_listed = self.unlisted, "interrupted before every labelled object was done");
        }
        // A signal shortens the wait, never lengthens the run past `--timeout`.
        let events_wait = match self.stopping {
            Some(since) => later(since, run.shutdown_timeout)
                .saturating_duration_since(Instant::now())
                .min(budget.left()),
            None => budget.left(),
        };
        if !events.drained(events_wait).await {
            warn!("some Events were not written before the timeout");
        }
        // No mode: a 1.21 to 1.25 server, with nothing to clear; only the webhooks' tallies.
        if mode_known {
            crate::output::print(&format!("{}\n", self.total))?;
        }
        if let Some(w) = &self.webhooks {
            crate::output::print(&format!("{w}\n"))?;
        }
        if let Some(e) = self.spent {
            return Err(e);
        }
        Ok(if all_done {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    }

    /// Clears `objects`, `--concurrency` at a time, until every one is done, `budget` is
    /// spent (an attempt in flight is cut, one not started fails unsent) or a signal's
    /// `--shutdown-timeout` is spent.
    async fn clear_all(
        &mut self,
        clearer: &Clearer,
        objects: Vec<Held>,
        budget: Budget,
        run: &Run,
        stop: &Shutdown,
    ) {
        let count = objects.len();
        let mut results = futures::stream::iter(objects)
            .map(|obj| async move {
                if stop.is_requested() {
                    return None;
                }
                Some(clear(clearer, obj, budget, stop).await)
            })
            .buffer_unordered(run.clearing.concurrency);
        let mut seen = 0;
        loop {
            let grace = self
                .stopping
                .map(|since| later(since, run.shutdown_timeout));
            tokio::select! {
                r = results.next() => match r {
                    Some(Some(r)) => { seen += 1; self.total.add(&r) }
                    Some(None) => { seen += 1; self.total.not_tried += 1 }
                    None => break,
                },
                _ = stop.requested(), if self.stopping.is_none() => {
                    self.stopping = Some(Instant::now());
                }
                _ = tokio::time::sleep_until(grace.unwrap_or_else(Instant::now)), if grace.is_some() => {
                    warn!(timeout = ?run.shutdown_timeout, "attempts in flight did not finish in time");
                    self.total.failed += count - seen;
                    break;
                }
            }
        }
    }

    fn all_done(&self, webhooks_asked: bool) -> bool {
        // Asked for and never looked at (a signal came first) is not done.
        let webhooks_done = match &self.webhooks {
            Some(w) => w.all_done(),
            None => !webhooks_asked,
        };
        self.total.failed == 0 && self.total.not_tried == 0 && self.unlisted == 0 && webhooks_done
    }
}

/// A signal came before any object was tried: nothing was done, exit 1.
fn interrupted(before: &str) -> ExitCode {
    warn!("interrupted before {before}: nothing was cleared");
    ExitCode::from(1)
}

/// Warns about each `--only` name that no labelled object has pending: a typo, or a
/// controller that is not what holds them back (`metainit status` says what does).
fn warn_unused_only(clearer: &Clearer, only: &[String], objects: &[Held]) {
    let (unused, pending) = unused_only(clearer.mode, only, objects);
    let pending = if pending.is_empty() {
        "none".to_string()
    } else {
        pending.into_iter().collect::<Vec<_>>().join(",")
    };
    for name in unused {
        warn!(
            resource = %clearer.target.name,
            pending = %pending,
            "--only {name} is pending on no labelled object: check the name (`metainit status` lists what holds objects back)"
        );
    }
}

/// The `--only` names that none of `objects` has pending, and the names that are
/// pending. Pure, so that the daemon can use it after a watch's first list too.
pub fn unused_only<'a, 'o>(
    mode: Mode,
    only: &'a [String],
    objects: impl IntoIterator<Item = &'o Held>,
) -> (Vec<&'a str>, BTreeSet<String>) {
    if only.is_empty() {
        return (Vec::new(), BTreeSet::new());
    }
    let pending: BTreeSet<String> = objects
        .into_iter()
        .flat_map(|o| mode.blocking_names(o))
        .collect();
    let unused = only
        .iter()
        .filter(|n| !pending.contains(*n))
        .map(String::as_str)
        .collect();
    (unused, pending)
}

/// Clears one object, retrying on its newest state until `budget` is spent or a signal.
async fn clear(
    clearer: &Clearer,
    obj: Held,
    budget: Budget,
    stop: &Shutdown,
) -> Result<Done, Failure> {
    let key = obj.key();
    let api = clearer.target.api(&clearer.client, obj.namespace());
    let name = obj.name().to_string();
    let mut current = Some(obj);
    let attempt = async || {
        let obj = match current.take() {
            Some(obj) => obj,
            None => match api.get_opt(&name).await {
                Ok(Some(fresh)) => fresh,
                Ok(None) => return Ok(Done::Gone),
                Err(e) => return Err(Failure::from(e)),
            },
        };
        clearer
            .attempt(&obj, &obj.key(), clearer.decide(&obj))
            .await
    };
    retry::until_done(budget, stop, attempt, |f, failures, wait| {
        clearer.report(&key, f, failures, wait)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unused_only_names_are_found() {
        let pod: Held = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"schedulingGates": [{"name": "example.com/a"}]}
        }))
        .unwrap();
        let only = vec!["example.com/a".to_string(), "typo.example.com".to_string()];
        let (unused, pending) = unused_only(Mode::SchedulingGates, &only, [&pod]);
        assert_eq!(unused, ["typo.example.com"]);
        assert_eq!(pending.into_iter().collect::<Vec<_>>(), ["example.com/a"]);
        assert!(unused_only(Mode::SchedulingGates, &[], [&pod]).0.is_empty());
    }

    #[test]
    fn summary_names_what_was_not_tried() {
        let mut s = Summary {
            cleared: 2,
            failed: 1,
            ..Summary::default()
        };
        assert_eq!(
            s.to_string(),
            "cleared 2, would clear 0, already clear 0, left alone 0, deleted meanwhile 0, failed 1"
        );
        s.not_tried = 3;
        assert!(
            s.to_string()
                .ends_with("failed 1, not tried 3 (interrupted before them)")
        );
    }
}
