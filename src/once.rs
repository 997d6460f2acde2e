//! `--once`: no watch. A paged LIST of the labelled objects, then a bounded concurrent
//! loop over them: each object is tried, and after a failure tried again on its newest
//! state (a GET), with the same backoff as the daemon, until it is done or the
//! `--timeout` budget would be overrun. Prints a summary; exit 1 names every object that
//! could not be cleared, with the last error.

use std::{process::ExitCode, sync::Arc, time::Duration};

use futures::StreamExt;
use kube::api::ListParams;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::{
    Result,
    blocker::Leave,
    clear::{Clearer, Done},
    cli::RunArgs,
    discovery,
    failure::{self, Failure},
    metrics::Metrics,
    object::Held,
    setup,
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
}

impl Summary {
    fn add(&mut self, result: &Result<Done, Failure>) {
        match result {
            Ok(Done::Cleared(_)) => self.cleared += 1,
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
        )
    }
}

pub async fn run(args: RunArgs) -> Result<ExitCode> {
    let timeout = args.common.timeout;
    let metrics = Arc::new(Metrics::default());
    let conn = setup::connect(&args.common, None).await?;
    info!(version = env!("CARGO_PKG_VERSION"), url = %conn.url, label_key = %args.label_key()?, "starting");
    let (_, clearers, events) = setup::clearers(&args, &conn, &metrics, Some(timeout)).await?;
    let mut total = Summary::default();
    for clearer in &clearers {
        let objects = list(clearer, &args, &conn.url, timeout).await?;
        let deadline = Instant::now() + timeout;
        let results: Vec<_> = futures::stream::iter(objects)
            .map(|obj| clear(clearer, obj, deadline))
            .buffer_unordered(usize::from(args.concurrency))
            .collect()
            .await;
        for r in &results {
            total.add(r);
        }
    }
    if !events.drained(timeout).await {
        warn!("some Events were not written before the timeout");
    }
    println!("{total}");
    Ok(if total.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Every labelled object, page by page; an expired continue token lists again.
async fn list(
    clearer: &Clearer,
    args: &RunArgs,
    url: &str,
    timeout: Duration,
) -> Result<Vec<Held>> {
    let api = clearer
        .target
        .api(&clearer.client, args.common.namespace.as_deref());
    let first = ListParams::default().labels(&clearer.label_key).limit(500);
    let mut params = first.clone();
    let mut restarts = 0;
    let mut out = Vec::new();
    loop {
        let page =
            match discovery::with_retries("LIST", url, Some(timeout), || api.list(&params)).await {
                Ok(page) => page,
                Err(crate::Error::Kube(kube::Error::Api(s))) if s.code == 410 && restarts < 5 => {
                    restarts += 1;
                    info!("list continue token expired; listing again");
                    params = first.clone();
                    out.clear();
                    continue;
                }
                Err(e) => return Err(e),
            };
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// Clears one object, retrying on its newest state until `deadline`.
async fn clear(clearer: &Clearer, obj: Held, deadline: Instant) -> Result<Done, Failure> {
    let key = obj.key();
    let api = clearer.target.api(&clearer.client, obj.namespace());
    let name = obj.name().to_string();
    let mut current = Some(obj);
    let mut failures = 0;
    loop {
        let result = match current.take() {
            Some(obj) => clearer.attempt(&obj, clearer.decide(&obj)).await,
            None => match api.get_opt(&name).await {
                Ok(Some(fresh)) => {
                    current = Some(fresh);
                    continue;
                }
                Ok(None) => Ok(Done::Gone),
                Err(e) => Err(Failure::from(e)),
            },
        };
        let Err(f) = result else {
            return result;
        };
        failures += 1;
        let wait = failure::backoff(failures, failure::retry_after(&f.error));
        if !f.class.policy().retry || Instant::now() + wait > deadline {
            clearer.report(&key, &f, failures, None);
            return Err(f);
        }
        clearer.report(&key, &f, failures, Some(wait));
        tokio::time::sleep(wait).await;
    }
}
