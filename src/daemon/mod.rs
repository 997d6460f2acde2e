//! The daemon: per watched resource, the watch (`watch::Events`) feeds the engine's store
//! (`store.rs`: newest state by name, so an object re-created under the same name is the
//! one worked on) and a work queue (`queue.rs`: one worker per object at a time, worked on again when
//! a new state arrives meanwhile, at most `--concurrency` at once). A unit of work is one
//! attempt at one object (`work.rs`).

mod tracks;
mod work;

use std::{process::ExitCode, sync::Arc};

use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::{
    Error, Result,
    admin::{self, Health},
    blocker::Decision,
    clear::Clearer,
    cli::RunArgs,
    events::Sink,
    metrics::{GatedPod, Metrics},
    peers::{self, Peers},
    queue::Queue,
    release::{Pace, Releaser, Rules, Said},
    setup,
    shutdown::Shutdown,
    store::{Key, Store},
    watch::{Selector, Watch},
};
use tracks::Tracks;
use work::{Ctx, work};

/// Runs until SIGTERM; then lets in-flight patches and Events finish.
pub async fn run(args: RunArgs) -> Result<ExitCode> {
    // Checked before anything starts: a bad --identity is bad input, not a late failure.
    let peers = args.peers()?;
    let shutdown = Shutdown::on_signals();
    let Some((started, clearers)) = start(&args, &shutdown).await? else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut queues = Vec::new();
    let mut engines = Vec::new();
    if args.webhooks {
        let stop = shutdown.clone();
        engines.push(tokio::spawn(crate::webhooks::run(
            started.conn.client.clone(),
            args.webhook_settings()?,
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
            args.peers_namespace.clone(),
            started.metrics.clone(),
            async move { stop.requested().await },
        )));
    }
    for clearer in clearers {
        let (queue, engine) = start_engine(clearer, &args, &started, &shutdown, peers.clone());
        queues.push(queue);
        engines.push(engine);
    }
    shut_down(&args, engines, &queues, &started.events, &shutdown).await;
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
async fn start(args: &RunArgs, shutdown: &Shutdown) -> Result<Option<(Started, Vec<Clearer>)>> {
    let health = Arc::new(Health::new());
    let metrics = Arc::new(Metrics::default());
    let conn = setup::connect(
        &args.common.kubeconfig(),
        args.common.request_timeout,
        Some(health.clone()),
    )
    .await?;
    let listener = admin::bind(args.admin_addr)?;
    let addr = listener.local_addr().map_err(|source| Error::Admin {
        addr: args.admin_addr,
        source,
    })?;
    info!(%addr, "admin server listening");
    tokio::spawn(admin::serve(listener, health.clone(), metrics.clone()));
    info!(version = env!("CARGO_PKG_VERSION"), url = %conn.url, label_key = %args.label_key()?, "starting");
    let settings = args.setup_settings()?;
    let (_, clearers, events) = tokio::select! {
        setup = setup::clearers(&settings, &conn, &metrics, None) => setup?,
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
    args: &RunArgs,
    started: &Started,
    shutdown: &Shutdown,
    peers: Arc<Peers>,
) -> (Arc<Queue<Key>>, JoinHandle<()>) {
    let store = Arc::new(Store::default());
    let rules = Rules {
        rules: args.rules.release_gate.clone(),
        exclude: args.rules.exclude_namespace.clone(),
    };
    // Gates to watch or release: then the store holds every unbound pod.
    let gated = args.gate_flag().is_some();
    gauges(&started.metrics, &store, &clearer, args, &rules, gated);
    let watch = watch(&clearer, args, started, rules.clone(), gated);
    let release = (!rules.is_empty()).then(|| Releaser {
        rules,
        pace: Pace::new(args.release_rate.unwrap_or_default()),
        said: Said::default(),
    });
    let queue = Queue::new(usize::from(args.concurrency));
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
        usize::from(args.concurrency),
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
fn gauges(
    metrics: &Metrics,
    store: &Arc<Store>,
    clearer: &Clearer,
    args: &RunArgs,
    rules: &Rules,
    gated: bool,
) {
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
    let watched = watched_gates(rules, args);
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
    let rate = args.release_rate.unwrap_or_default();
    info!(release_gates = %rules.rules.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
          release_rate = %rate, exclude_namespaces = %rules.exclude.join(","),
          watch_gates = %args.watch_gates.join(","), "watching every unbound pod for its gates");
}

/// The watch of the clearer's resource: labelled objects or, when `gated`, every unbound
/// pod.
fn watch(clearer: &Clearer, args: &RunArgs, started: &Started, rules: Rules, gated: bool) -> Watch {
    let (mode, label_key) = (clearer.mode, clearer.label_key.clone());
    let (keep_mode, keep_key) = (mode, label_key.clone());
    let watched = watched_gates(&rules, args);
    Watch {
        api: clearer
            .target
            .api(&clearer.client, args.common.namespace.as_deref()),
        label_key: clearer.label_key.clone(),
        selector: if gated {
            Selector::Unbound
        } else {
            Selector::Labelled
        },
        resource: clearer.target.name.clone(),
        resync: args.resync_period,
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
fn watched_gates(rules: &Rules, args: &RunArgs) -> Vec<String> {
    let mut watched: Vec<String> = rules.rules.iter().map(|r| r.gate.clone()).collect();
    for g in &args.watch_gates {
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
    args: &RunArgs,
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
    let finished = tokio::time::timeout(args.shutdown_timeout, &mut all)
        .await
        .is_ok();
    let left = args.shutdown_timeout.saturating_sub(stopping.elapsed());
    if !finished || !events.drained(left).await {
        warn!(timeout = ?args.shutdown_timeout, "in-flight patches or Events did not finish in time");
    }
}
