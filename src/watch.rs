//! The watch loop, the same for both modes: LIST and WATCH the labelled objects of one
//! resource (selection on the server, by label key), with kube-runtime's watcher, which
//! pages the list, resumes from the last resourceVersion, relists on 410 Gone and, with
//! its default backoff, retries a failing server with jittered exponential delays.
//! Every object it sees goes to the clearing queue.

use std::{collections::HashSet, sync::Arc};

use futures::StreamExt;
use kube::{
    Api,
    api::ListParams,
    runtime::{WatchStreamExt, watcher},
};
use tracing::{info, warn};

use crate::{
    Result,
    admin::Health,
    clear::{Clearer, Queue},
    metrics::Metrics,
    object::Held,
    shutdown::Shutdown,
};

/// The API of the watched objects: in one namespace or all.
pub fn api(clearer: &Clearer, namespace: Option<&str>) -> Api<Held> {
    match namespace {
        Some(ns) if clearer.target.namespaced => {
            Api::namespaced_with(clearer.client.clone(), ns, &clearer.target.resource)
        }
        _ => Api::all_with(clearer.client.clone(), &clearer.target.resource),
    }
}

/// Why the watch restarted, for the metric.
fn cause(e: &watcher::Error) -> &'static str {
    match e {
        watcher::Error::InitialListFailed(_) => "list_failed",
        watcher::Error::WatchStartFailed(_) => "watch_start_failed",
        watcher::Error::WatchError(s) if s.code == 410 => "expired",
        watcher::Error::WatchError(_) => "watch_error",
        watcher::Error::WatchFailed(_) => "stream_failed",
        watcher::Error::NoResourceVersion => "no_resource_version",
    }
}

/// Watches until shutdown.
pub async fn run(
    queue: Arc<Queue>,
    api: Api<Held>,
    label_key: &str,
    resource: &str,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
) {
    let config = watcher::Config::default().labels(label_key);
    let stream = watcher(api, config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut synced = false;
    let mut listed: Option<HashSet<String>> = None;
    loop {
        let event = tokio::select! {
            biased;
            _ = shutdown.requested() => return,
            event = stream.next() => event,
        };
        let Some(event) = event else { return };
        match event {
            Ok(watcher::Event::Init) => listed = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(obj)) => {
                if let Some(l) = listed.as_mut() {
                    l.insert(obj.key());
                }
                queue.offer(obj.slim());
            }
            Ok(watcher::Event::Apply(obj)) => queue.offer(obj.slim()),
            Ok(watcher::Event::Delete(obj)) => queue.forget(&obj),
            Ok(watcher::Event::InitDone) => {
                if let Some(l) = listed.take() {
                    queue.retain(&l);
                    info!(resource, labelled = l.len(), label_key, "listed; watching");
                }
                if !synced {
                    synced = true;
                    health.synced_one();
                }
            }
            Err(e) => {
                let cause = cause(&e);
                metrics.watch_restart(cause);
                if cause == "expired" {
                    info!(resource, "resource version expired; listing again");
                } else {
                    warn!(resource, error = %e, "watch failed; retrying with backoff");
                }
            }
        }
    }
}

/// `--once`: lists the labelled objects (paginated), offers each to the queue, and
/// waits until every one has been dealt with.
pub async fn once(
    queue: &Arc<Queue>,
    api: &Api<Held>,
    label_key: &str,
    url: &str,
    timeout: std::time::Duration,
) -> Result<()> {
    let first = ListParams::default().labels(label_key).limit(500);
    let mut params = first.clone();
    let mut restarts = 0;
    loop {
        let page =
            match crate::connect::with_retries("LIST", url, Some(timeout), || api.list(&params))
                .await
            {
                Ok(page) => page,
                // The continue token expired (410): list again from the start; offering an
                // object twice is harmless.
                Err(crate::Error::Kube(kube::Error::Api(s))) if s.code == 410 && restarts < 5 => {
                    restarts += 1;
                    info!("list continue token expired; listing again");
                    params = first.clone();
                    continue;
                }
                Err(e) => return Err(e),
            };
        for obj in page.items {
            queue.offer(obj.slim());
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    // Each object's retries are bounded, so this ends; the limit is a backstop.
    queue.drained(std::time::Duration::from_secs(3600)).await;
    Ok(())
}
