//! `--webhooks`: the deadlock of an admission webhook that intercepts its own pods. A
//! webhook that fails closed cannot get its own pods created once its service has no
//! endpoints: every pod creation in its namespace calls it, and nothing answers. On each
//! webhook configuration that carries the label key, metainit watches the service of every
//! webhook that fails closed (`endpoints.rs`); when one has had no ready endpoint for
//! `--webhook-grace`, it exempts that service's own namespace from that webhook alone
//! (`decide.rs`), and once the service has had ready endpoints for the grace again, it
//! removes exactly what it added (`patch.rs`, as `record.rs` remembers it). Patches to
//! webhook configurations are never sent to webhooks, so this always works; every other
//! namespace keeps failing closed.
//!
//! Shape: the two configuration kinds are watched by label (`configs.rs`, on the one watch
//! of `watch.rs`, and a reflector store each) and feed one work queue (`queue.rs`) keyed by
//! `plural/name`; a service's change of state queues the configurations that name it; a
//! grace period still running is a timer on the queue. What one look at a configuration
//! does is `engine.rs`; what it says of it, `announce.rs`. This file wires the daemon's
//! engine.

mod announce;
mod configs;
pub mod decide;
pub mod endpoints;
mod engine;
pub mod hook;
mod nudge;
pub mod once;
pub mod patch;
pub mod record;
pub mod slipped;

use std::{sync::Arc, time::Duration};

use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject},
    runtime::reflector::{Store, store::Writer},
};
use tokio::time::Instant;
use tracing::info;

use crate::{admin::Health, events::Sink, metrics::Metrics, queue::Queue, text, watch};
use configs::follow;
pub use configs::{ConfigKind, GROUP, kinds, list_labelled};
use endpoints::{Services, Source, Watches};
use engine::{Engine, Look};
use record::records_of;

/// The target of the feature's log lines, whichever of its files writes them: the name
/// `RUST_LOG` filters and log queries know it by.
const LOG: &str = "metainit::webhooks";

/// What the engine needs from the command line.
#[derive(Clone, Debug)]
pub struct Settings {
    pub label_key: String,
    pub grace: Duration,
    pub dry_run: bool,
    pub node: String,
    pub concurrency: usize,
    /// How often every watch lists everything again (`--resync-period`).
    pub resync: Duration,
}

/// The queue's key of a configuration: `plural/name`.
fn key_of(ar: &ApiResource, name: &str) -> String {
    format!("{}/{name}", ar.plural)
}

/// Runs the engine until `stop` resolves.
pub async fn run(
    client: Client,
    settings: Settings,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    events: Arc<Sink>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let queue: Arc<Queue<String>> = Queue::new(settings.concurrency);
    let wake = {
        let queue = queue.clone();
        Arc::new(move |key: &str| queue.add(key.to_string())) as Arc<dyn Fn(&str) + Send + Sync>
    };
    let origin = Instant::now();
    let services = Services::new(Watches {
        client: client.clone(),
        origin,
        health: health.clone(),
        metrics: metrics.clone(),
        resync: settings.resync,
        wake,
    });
    let (stores, sources) = watch_configs(&client, &settings, &health, &metrics);
    count_exempted(&metrics, &stores);
    info!(label_key = %settings.label_key, grace = %text::duration(settings.grace), dry_run = settings.dry_run,
          "watching labelled webhook configurations and their services' endpoints");
    let concurrency = settings.concurrency;
    let engine = Arc::new(Engine {
        client,
        settings,
        metrics,
        events,
        stores,
        services: Source::Watch(services),
        origin,
        added: Default::default(),
        failures: Default::default(),
        said: Default::default(),
    });
    let source = futures::stream::select_all(sources);
    let worker_queue = queue.clone();
    queue
        .run(
            source,
            concurrency,
            move |key| {
                let engine = engine.clone();
                let queue = worker_queue.clone();
                async move { engine.work(&queue, key).await }
            },
            stop,
        )
        .await;
}

type Stores = Vec<(ApiResource, Store<DynamicObject>)>;

/// The watch of each configuration kind, by label: its store, and the keys it yields.
fn watch_configs(
    client: &Client,
    settings: &Settings,
    health: &Arc<Health>,
    metrics: &Arc<Metrics>,
) -> (Stores, Vec<configs::Keys>) {
    let mut stores = Vec::new();
    let mut sources = Vec::new();
    for ar in kinds() {
        let writer: Writer<DynamicObject> = Writer::new(ar.clone());
        stores.push((ar.clone(), writer.as_reader()));
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let spec = watch::Spec {
            name: ar.plural.clone(),
            filter: watch::Filter::labels(&settings.label_key),
            resync: settings.resync,
            rbac_hint: RBAC_HINT,
            health: health.clone(),
            index: health.add_watch(&ar.plural, api.resource_url()),
            metrics: metrics.clone(),
        };
        sources.push(follow(api, ar, settings.label_key.clone(), writer, spec));
    }
    (stores, sources)
}

/// The exemptions gauge, read from the stores' records when scraped.
fn count_exempted(metrics: &Metrics, stores: &Stores) {
    let stores: Vec<Store<DynamicObject>> = stores.iter().map(|(_, s)| s.clone()).collect();
    metrics.exempted_from(Box::new(move || {
        stores
            .iter()
            .flat_map(|s| s.state())
            .map(|o| records_of(&o).map_or(0, |r| r.len()))
            .sum()
    }));
}

/// What to do about a 403 on a webhook configuration.
pub const RBAC_HINT: &str = "grant patch on mutatingwebhookconfigurations and validatingwebhookconfigurations, and list and watch on endpointslices, to metainit's user: manifests/rbac-webhooks.yaml";

#[cfg(test)]
mod fixtures;
