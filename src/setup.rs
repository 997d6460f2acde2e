//! What the entry points share before any clearing: the kubeconfig read and one client
//! built (the daemon, `--once`, `status`), then for the daemon and `--once` the mode
//! chosen, the flags that need it checked, and the resources found.

use std::{sync::Arc, time::Duration};

use kube::Client;
use tracing::{info, warn};

use crate::{
    Result,
    blocker::Mode,
    clear::Clearer,
    cli::Settings,
    client::{self, Legacy, Observer},
    discovery, events, kubeconfig,
    metrics::Metrics,
};

/// A client and the server's URL, before the mode is known.
pub struct Connection {
    pub client: Client,
    /// The per-object requests' way, over the client's connections.
    pub direct: client::Direct,
    pub url: String,
    pub legacy: Legacy,
}

/// Reads the kubeconfig and builds the process's one client.
pub async fn connect(
    kubeconfig: &kubeconfig::Settings,
    request_timeout: Duration,
    observer: Option<Arc<dyn Observer>>,
) -> Result<Connection> {
    let config = kubeconfig::load(kubeconfig).await?;
    let url = config.cluster_url.to_string();
    let legacy = Legacy::default();
    let (client, direct) = client::build(config, request_timeout, legacy.clone(), observer)?;
    Ok(Connection {
        client,
        direct,
        url,
        legacy,
    })
}

/// Chooses the mode and finds every resource: one `Clearer` each. No mode and no
/// clearer on a 1.21 to 1.25 server with `--webhooks`: only the webhooks to watch there.
pub async fn clearers(
    settings: &Settings,
    conn: &Connection,
    metrics: &Arc<Metrics>,
    budget: Option<crate::budget::Budget>,
) -> Result<(Option<Mode>, Vec<Clearer>, Arc<events::Sink>)> {
    let Settings {
        label_key,
        resources,
        node,
        ..
    } = settings;
    let (client, url) = (&conn.client, conn.url.as_str());
    let mode =
        discovery::choose_mode(client, url, settings.mode, budget, settings.webhooks).await?;
    conn.legacy.set(mode == Some(Mode::Initializers));
    settings.check_mode(mode)?;
    // Events get a quarter of the patches' bound: in a burst they trail the clearing.
    let events = events::Sink::new(
        conn.direct.clone(),
        metrics.clone(),
        settings.concurrency / 4,
    );
    let Some(mode) = mode else {
        if settings.resources_named {
            warn!(resources = %resources.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
                  "--resource has no effect: this server has neither initializers nor scheduling gates");
        }
        info!(mode = "webhooks only", dry_run = settings.dry_run, %node,
              "running: Kubernetes 1.21 to 1.25 has neither initializers nor scheduling gates to clear; watching the labelled webhooks only");
        return Ok((None, Vec::new(), events));
    };
    let mut clearers = Vec::new();
    for spec in resources {
        let target = discovery::resolve(client, url, spec, budget).await?;
        metrics.known_resource(mode.as_str(), &target.name);
        clearers.push(Clearer {
            client: client.clone(),
            direct: conn.direct.clone(),
            target,
            mode,
            only: settings.only.clone(),
            label_key: label_key.clone(),
            dry_run: settings.dry_run,
            node: node.clone(),
            metrics: metrics.clone(),
            events: events.clone(),
        });
    }
    info!(%mode, resources = %resources.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
          namespace = settings.namespace.as_deref().unwrap_or("(all)"), dry_run = settings.dry_run, %node, "running");
    Ok((Some(mode), clearers, events))
}
