//! What the entry points share before any clearing: the kubeconfig read and one client
//! built (the daemon, `--once`, `--check-config`, `status`), then for the daemon and
//! `--once` the mode chosen, the flags that need it checked, and the resources found.
//! Their checked settings too (`ClientSettings`, `Selection`, `Clearing`, `Run`), as the
//! command line builds them.

use std::{sync::Arc, time::Duration};

use kube::Client;
use tracing::{info, warn};

use crate::{
    Result,
    blocker::Mode,
    clear::Clearer,
    client::{self, Legacy, Observer},
    discovery::{self, ResourceSpec},
    events, kubeconfig,
    metrics::Metrics,
    webhooks,
};

/// Which server, and how long a request may wait for it.
#[derive(Clone, Debug, Default)]
pub struct ClientSettings {
    /// `--kubeconfig` and `--context`.
    pub kubeconfig: kubeconfig::Settings,
    /// How long one API request (watches excepted) may wait for its answer; zero: no
    /// limit (`--request-timeout`).
    pub request_timeout: Duration,
}

/// Which objects are worked on and which of their blockers are cleared.
#[derive(Clone, Debug)]
pub struct Selection {
    pub label_key: String,
    /// `--mode`; `None`: the server's version decides.
    pub mode: Option<Mode>,
    /// The resources to watch: `pods` when none was named.
    pub resources: Vec<ResourceSpec>,
    /// Whether `--resource` was given at all.
    pub resources_named: bool,
    /// `-n`; `None`: every namespace.
    pub namespace: Option<String>,
    /// `--only`: the blocker names to clear; empty: every one.
    pub only: Vec<String>,
    /// The first flag that asks for gate work beyond the label, if any.
    pub gate_flag: Option<&'static str>,
}

/// How the objects are cleared.
#[derive(Clone, Debug)]
pub struct Clearing {
    /// `--dry-run`: log what would be cleared, change nothing.
    pub dry_run: bool,
    /// This node's name, for Events.
    pub node: String,
    /// How many objects are patched at the same time (`--concurrency`).
    pub concurrency: usize,
}

/// What the daemon and `--once` share.
#[derive(Clone, Debug)]
pub struct Run {
    pub client: ClientSettings,
    pub selection: Selection,
    pub clearing: Clearing,
    /// What `--webhooks` needs; `None` without it.
    pub webhooks: Option<webhooks::Settings>,
    /// On a signal, how long in-flight patches and Events may take (`--shutdown-timeout`).
    pub shutdown_timeout: Duration,
}

/// A client and the server's URL, before the mode is known.
pub struct Connection {
    pub client: Client,
    /// The clearing PATCHes' and their Events' way, over the client's connections.
    pub clearing_path: client::ClearingPath,
    pub url: String,
    pub legacy: Legacy,
}

/// Reads the kubeconfig and builds the process's one client.
pub async fn connect(
    settings: &ClientSettings,
    observer: Option<Arc<dyn Observer>>,
) -> Result<Connection> {
    let config = kubeconfig::load(&settings.kubeconfig).await?;
    let url = config.cluster_url.to_string();
    let legacy = Legacy::default();
    let (client, clearing_path) =
        client::build(config, settings.request_timeout, legacy.clone(), observer)?;
    Ok(Connection {
        client,
        clearing_path,
        url,
        legacy,
    })
}

/// Chooses the mode and finds every resource: one `Clearer` each. No mode and no
/// clearer on a 1.21 to 1.25 server with `--webhooks`: only the webhooks to watch there.
pub async fn clearers(
    run: &Run,
    conn: &Connection,
    metrics: &Arc<Metrics>,
    budget: Option<crate::budget::Budget>,
) -> Result<(Option<Mode>, Vec<Clearer>, Arc<events::Sink>)> {
    let (selection, clearing) = (&run.selection, &run.clearing);
    let Selection {
        label_key,
        resources,
        ..
    } = selection;
    let (node, dry_run) = (&clearing.node, clearing.dry_run);
    let (client, url) = (&conn.client, conn.url.as_str());
    let webhooks = run.webhooks.is_some();
    let mode = discovery::choose_mode(client, url, selection.mode, budget, webhooks).await?;
    conn.legacy.set(mode == Some(Mode::Initializers));
    discovery::check_mode(selection.gate_flag, resources, mode)?;
    // Events get a quarter of the patches' bound: in a burst they trail the clearing.
    let events = events::Sink::new(
        conn.clearing_path.clone(),
        metrics.clone(),
        clearing.concurrency / 4,
    );
    let Some(mode) = mode else {
        if selection.resources_named {
            warn!(resources = %resources.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
                  "--resource has no effect: this server has neither initializers nor scheduling gates");
        }
        info!(mode = "webhooks only", dry_run, %node,
              "running: Kubernetes 1.21 to 1.25 has neither initializers nor scheduling gates to clear; watching the labelled webhooks only");
        return Ok((None, Vec::new(), events));
    };
    let mut clearers = Vec::new();
    for spec in resources {
        let target = discovery::resolve(client, url, spec, budget).await?;
        metrics.known_resource(mode.as_str(), &target.name);
        clearers.push(Clearer {
            client: client.clone(),
            clearing_path: conn.clearing_path.clone(),
            target,
            mode,
            only: selection.only.clone(),
            label_key: label_key.clone(),
            dry_run,
            node: node.clone(),
            metrics: metrics.clone(),
            events: events.clone(),
        });
    }
    info!(%mode, resources = %resources.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
          namespace = selection.namespace.as_deref().unwrap_or("(all)"), dry_run, %node, "running");
    Ok((Some(mode), clearers, events))
}
