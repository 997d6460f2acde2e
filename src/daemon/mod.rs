//! The daemon: per watched resource, the watch (`watch::Events`) feeds the engine's store
//! (`store.rs`: newest state by name, so an object re-created under the same name is the
//! one worked on) and a work queue (`queue.rs`: one worker per object at a time, worked on again when
//! a new state arrives meanwhile, at most `--concurrency` at once). A unit of work is one
//! attempt at one object (`work.rs`). It reads its `Settings`, which the command line
//! checked.

mod tracks;
mod work;

use std::{net::SocketAddr, process::ExitCode, sync::Arc, time::Duration};

use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::{
    Error, Result,
    admin::{self, Health},
    blocker::Decision,
    clear::Clearer,
    events::Sink,
    metrics::{GatedPod, Metrics},
    peers::{self, Peers},
    queue::Queue,
    release::{Pace, Rate, Releaser, Rules, Said},
    setup::{self, Run},
    shutdown::Shutdown,
    store::{Key, Store},
    watch::{Selector, Watch},
};
use tracks::Tracks;
use work::{Ctx, work};

/// What the daemon needs, checked by the command line.
pub struct Settings {
    pub run: Run,
    /// Where the admin server listens (`--admin-addr`).
    pub admin: SocketAddr,
    /// This instance among those that share the work (named before anything starts: a bad
    /// `--identity` is bad input, not a late failure).
    pub peers: Arc<Peers>,
    /// Where the instances keep their Leases (`--peers-namespace`).
    pub peers_namespace: String,
    pub gates: Gates,
    /// How often every watch lists everything again (`--resync-period`).
    pub resync: Duration,
}

/// The gates beyond the label: the release rules, their pace, the gates to watch.
#[derive(Clone, Debug, Default)]
pub struct Gates {
    /// `--release-gate` and `--exclude-namespace`.
    pub rules: Rules,
    /// `--release-rate`, or its default.
    pub rate: Rate,
    /// `--watch-gates`.
    pub watch: Vec<String>,
}

/// Runs until SIGTERM; then lets in-flight patches and Events finish.
pub async fn run(settings: Settings) -> Result<ExitCode> {
    let peers = settings.peers.clone();
    let shutdown = Shutdown::on_signals();
    let Some((started, clearers)) = start(&settings, &shutdown).await? else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut queues = Vec::new();
    let mut engines = Vec::new();
    if let Some(webhooks) = &settings.run.webhooks {
        let stop = shutdown.clone();
        engines.push(tokio::spawn(crate::webhooks::run(
            started.conn.client.clone(),
            webhooks.clone(),
            started.health.clone(),
            started.metrics.clone(),
            started.events.clone(),
            async move { stop.requested().await },
        )));
    }
    if peers.shares() {
        let stop = shutdown.clone();
        engines.push(tokio::spawn(peers::run(
            peers.clone(),
            started.conn.client.clone(),
            settings.peers_namespace.clone(),
            started.metrics.clone(),
            async move { stop.requested().await },
        )));
    }
    for clearer in clearers {
        let (queue, engine) = start_engine(clearer, &settings, &started, &shutdown, peers.clone());
        queues.push(queue);
        engines.push(engine);
    }
    let timeout = settings.run.shutdown_timeout;
    shut_down(timeout, engines, &queues, &started.events, &shutdown).await;
    info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// What the engines share, once set up.
struct Started {
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    conn: setup::Connection,
    events: Arc<Sink>,
}

/// The set-up: the connection, the admin server, the clearers and the Event sink; `None`
/// when a signal came first.
async fn start(
    settings: &Settings,
    shutdown: &Shutdown,
) -> Result<Option<(Started, Vec<Clearer>)>> {
    let health = Arc::new(Health::new());
    let metrics = Arc::new(Metrics::default());
    let run = &settings.run;
    let conn = setup::connect(&run.client, Some(health.clone())).await?;
    let listener = admin::bind(settings.admin)?;
    let addr = listener.local_addr().map_err(|source| Error::Admin {
        addr: settings.admin,
        source,
    })?;
    info!(%addr, "admin server listening");
    tokio::spawn(admin::serve(listener, health.clone(), metrics.clone()));
    info!(version = env!("CARGO_PKG_VERSION"), url = %conn.url, label_key = %run.selection.label_key, "starting");
    let (_, clearers, events) = tokio::select! {
        setup = setup::clearers(run, &conn, &metrics, None) => setup?,
        _ = shutdown.requested() => return Ok(None),
    };
    {
        let (health, shutdown) = (health.clone(), shutdown.clone());
        tokio::spawn(async move {
            shutdown.requested().await;
            health.shutting_down();
        });
    }
    let started = Started {
        health,
        metrics,
        conn,
        events,
    };
    Ok(Some((started, clearers)))
}

/// Starts the watch and the queue of one resource, in a task of its own; returns its queue
/// and the task.
fn start_engine(
    clearer: Clearer,
    settings: &Settings,
    started: &Started,
    shutdown: &Shutdown,
    peers: Arc<Peers>,
) -> (Arc<Queue<Key>>, JoinHandle<()>) {
    let store = Arc::new(Store::default());
    let gates = &settings.gates;
    let rules = gates.rules.clone();
    // Gates to watch or release: then the store holds every unbound pod.
    let gated = settings.run.selection.gate_flag.is_some();
    gauges(&started.metrics, &store, &clearer, gates, gated);
    let watch = watch(&clearer, settings, started, gated);
    let release = (!rules.is_empty()).then(|| Releaser {
        rules,
        pace: Pace::new(gates.rate),
        said: Said::default(),
    });
    let concurrency = settings.run.clearing.concurrency;
    let queue = Queue::new(concurrency);
    let ctx = Arc::new(Ctx {
        clearer,
        store: store.clone(),
        tracks: Tracks::default(),
        queue: queue.clone(),
        release,
        peers,
    });
    let stop = shutdown.clone();
    let engine = queue.clone().run(
        watch.stream(store),
        concurrency,
        move |key| work(key, ctx.clone()),
        async move { stop.requested().await },
    );
    // A task of its own, on the runtime's workers: polled from `main`'s `block_on`,
    // every watch event would wake the main thread first (a futex wake and a context
    // switch per event, measured under strace).
    (queue, tokio::spawn(engine))
}

/// The gauges read from the store when scraped: the objects pending and, with gates to
/// watch or release (`gated`), the unbound pods each gate holds.
fn gauges(metrics: &Metrics, store: &Arc<Store>, clearer: &Clearer, gates: &Gates, gated: bool) {
    let rules = &gates.rules;
    let (mode, only, key) = (
        clearer.mode,
        clearer.only.clone(),
        clearer.label_key.clone(),
    );
    let pending = store.clone();
    metrics.pending_from(Box::new(move || {
        pending
            .filter(|o| o.labelled)
            .iter()
            .filter(|o| matches!(mode.decide(o, &only, &key), Decision::Clear { .. }))
            .count()
    }));
    if !gated {
        return;
    }
    let watched = watched_gates(gates);
    let released: Vec<String> = rules.rules.iter().map(|r| r.gate.clone()).collect();
    let pods = store.clone();
    metrics.gated_from(
        watched,
        &released,
        Box::new(move |f| {
            pods.visit(|o| {
                if let Some(gates) = o.gates {
                    f(GatedPod {
                        gates,
                        created: o.created,
                        terminating: o.terminating,
                    })
                }
            })
        }),
    );
    info!(release_gates = %rules.rules.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
          release_rate = %gates.rate, exclude_namespaces = %rules.exclude.join(","),
          watch_gates = %gates.watch.join(","), "watching every unbound pod for its gates");
}

/// The watch of the clearer's resource: labelled objects or, when `gated`, every unbound
/// pod.
fn watch(clearer: &Clearer, settings: &Settings, started: &Started, gated: bool) -> Watch {
    let (mode, label_key) = (clearer.mode, clearer.label_key.clone());
    let (keep_mode, keep_key) = (mode, label_key.clone());
    let watched = watched_gates(&settings.gates);
    let rules = settings.gates.rules.clone();
    let namespace = settings.run.selection.namespace.as_deref();
    Watch {
        api: clearer.target.api(&clearer.client, namespace),
        label_key: clearer.label_key.clone(),
        selector: if gated {
            Selector::Unbound
        } else {
            Selector::Labelled
        },
        resource: clearer.target.name.clone(),
        resync: settings.resync,
        health: started.health.clone(),
        metrics: started.metrics.clone(),
        // Objects that hold nothing back (most often the state after metainit's own
        // patch) are not queued; the ones left alone on purpose are, to be logged.
        // Unlabelled pods are queued only when a rule names one of their gates.
        wanted: Box::new(move |o| {
            if !gated || o.has_label(&label_key) {
                mode.needs_reconcile(o)
            } else {
                rules.applies(o)
            }
        }),
        // The store keeps what is wanted and the pods the gauges count, nothing else: a
        // labelled object that needs work, and a pod with a watched gate (a rule's gates
        // are watched, so every unlabelled pod a rule wants is one; the gates are read
        // once).
        keep: Box::new(move |o| {
            (o.has_label(&keep_key) && keep_mode.needs_reconcile(o))
                || (!o.is_terminating()
                    && crate::blocker::gates::names_of(o)
                        .iter()
                        .any(|g| watched.contains(g)))
        }),
    }
}

/// The gates of the gauges: those of the rules, then `--watch-gates`.
fn watched_gates(gates: &Gates) -> Vec<String> {
    let mut watched: Vec<String> = gates.rules.rules.iter().map(|r| r.gate.clone()).collect();
    for g in &gates.watch {
        if !watched.contains(g) {
            watched.push(g.clone());
        }
    }
    watched
}

/// The shutdown sequence: once the engines end or a signal comes, gives in-flight patches
/// and queued Events `--shutdown-timeout` to finish; what is queued is left for the next
/// start.
async fn shut_down(
    timeout: Duration,
    engines: Vec<JoinHandle<()>>,
    queues: &[Arc<Queue<Key>>],
    events: &Sink,
    shutdown: &Shutdown,
) {
    let all = futures::future::join_all(engines);
    tokio::pin!(all);
    tokio::select! {
        _ = &mut all => {}
        _ = shutdown.requested() => {}
    }
    let stopping = tokio::time::Instant::now();
    let (in_flight, queued) = queues
        .iter()
        .map(|q| q.counts())
        .fold((0, 0), |a, c| (a.0 + c.0, a.1 + c.1));
    let events_queued = events.queued();
    info!(
        in_flight,
        queued,
        events_queued,
        "waiting for in-flight patches: {in_flight} in flight, {queued} queued (left for the next start), {events_queued} Events to write"
    );
    let finished = tokio::time::timeout(timeout, &mut all).await.is_ok();
    let left = timeout.saturating_sub(stopping.elapsed());
    if !finished || !events.drained(left).await {
        warn!(timeout = ?timeout, "in-flight patches or Events did not finish in time");
    }
}
