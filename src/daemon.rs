//! The daemon: one kube-runtime `Controller` per watched resource. The Controller keeps
//! the store (newest state by name, so an object re-created under the same name is the
//! one worked on), runs one reconcile per object at a time, re-runs it when a new state
//! arrives meanwhile, and bounds concurrent reconciles. A reconcile is one attempt at one
//! object; `error_policy` asks again later with a per-object backoff (100 ms doubling to
//! 30 s, never before the server's Retry-After), so no failure is ever final while the
//! server can be reached.

use std::{
    collections::HashMap,
    process::ExitCode,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use futures::StreamExt;
use kube::runtime::{
    Controller,
    controller::{self, Action},
    reflector::store::Writer,
};
use tracing::{debug, info, warn};

use crate::{
    Error, Result,
    admin::{self, Health},
    blocker::Decision,
    clear::{Clearer, Done},
    cli::RunArgs,
    failure::{self, Failure},
    metrics::Metrics,
    object::Held,
    setup,
    shutdown::Shutdown,
    watch::Watch,
};

/// What a reconcile knows about the objects it has seen pending.
struct Ctx {
    clearer: Clearer,
    tracks: Mutex<HashMap<String, Track>>,
    in_flight: Arc<AtomicUsize>,
}

/// One pending object: since when, and how many attempts failed in a row.
struct Track {
    uid: Option<String>,
    first_seen: Instant,
    failures: u32,
}

impl Ctx {
    fn tracks(&self) -> std::sync::MutexGuard<'_, HashMap<String, Track>> {
        self.tracks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts tracking a pending object; a new uid under the same name starts afresh.
    fn track(&self, key: &str, uid: Option<&str>) {
        let mut tracks = self.tracks();
        match tracks.get(key) {
            Some(t) if t.uid.as_deref() == uid => {}
            _ => {
                tracks.insert(
                    key.to_string(),
                    Track {
                        uid: uid.map(str::to_string),
                        first_seen: Instant::now(),
                        failures: 0,
                    },
                );
            }
        }
    }

    fn untrack(&self, key: &str) -> Option<Track> {
        self.tracks().remove(key)
    }

    /// Counts a failure; returns how many in a row.
    fn failed(&self, key: &str) -> u32 {
        let mut tracks = self.tracks();
        let t = tracks.entry(key.to_string()).or_insert_with(|| Track {
            uid: None,
            first_seen: Instant::now(),
            failures: 0,
        });
        t.failures = t.failures.saturating_add(1);
        t.failures
    }
}

async fn reconcile(obj: Arc<Held>, ctx: Arc<Ctx>) -> Result<Action, Failure> {
    let key = obj.key();
    let decision = ctx.clearer.decide(&obj);
    if matches!(decision, Decision::Clear { .. }) {
        ctx.track(&key, obj.uid());
    }
    ctx.in_flight.fetch_add(1, Ordering::SeqCst);
    let done = ctx.clearer.attempt(&obj, decision).await;
    ctx.in_flight.fetch_sub(1, Ordering::SeqCst);
    let done = done?;
    if let (Done::Cleared(_), Some(t)) = (&done, ctx.untrack(&key)) {
        ctx.clearer
            .metrics
            .clear_latency
            .observe(t.first_seen.elapsed().as_secs_f64());
    }
    Ok(Action::await_change())
}

fn error_policy(obj: Arc<Held>, f: &Failure, ctx: Arc<Ctx>) -> Action {
    let key = obj.key();
    let failures = ctx.failed(&key);
    let wait = failure::backoff(failures, failure::retry_after(&f.error));
    ctx.clearer.report(&key, f, failures, Some(wait));
    Action::requeue(wait)
}

/// Runs until SIGTERM; then lets in-flight patches and Events finish.
pub async fn run(args: RunArgs) -> Result<ExitCode> {
    let shutdown = Shutdown::on_signals();
    let health = Arc::new(Health::new());
    let metrics = Arc::new(Metrics::default());
    let conn = setup::connect(&args.common, Some(health.clone())).await?;
    let listener = admin::bind(args.admin_addr).await?;
    let addr = listener.local_addr().map_err(|source| Error::Admin {
        addr: args.admin_addr,
        source,
    })?;
    info!(%addr, "admin server listening");
    tokio::spawn(admin::serve(listener, health.clone(), metrics.clone()));
    info!(version = env!("CARGO_PKG_VERSION"), url = %conn.url, label_key = %args.label_key()?, "starting");
    let (_, clearers, events) = tokio::select! {
        setup = setup::clearers(&args, &conn, &metrics, None) => setup?,
        _ = shutdown.requested() => return Ok(ExitCode::SUCCESS),
    };
    {
        let (health, shutdown) = (health.clone(), shutdown.clone());
        tokio::spawn(async move {
            shutdown.requested().await;
            health.shutting_down();
        });
    }
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut controllers = Vec::new();
    for clearer in clearers {
        let api = clearer
            .target
            .api(&clearer.client, args.common.namespace.as_deref());
        let writer = Writer::new(clearer.target.resource.clone());
        let store = writer.as_reader();
        let (mode, only, label_key) = (
            clearer.mode,
            clearer.only.clone(),
            clearer.label_key.clone(),
        );
        let pending = store.clone();
        metrics.pending_from(Box::new(move || {
            pending
                .state()
                .iter()
                .filter(|o| matches!(mode.decide(o, &only, &label_key), Decision::Clear { .. }))
                .count()
        }));
        let watch = Watch {
            api,
            label_key: clearer.label_key.clone(),
            resource: clearer.target.name.clone(),
            resync: args.resync_period,
            health: health.clone(),
            metrics: metrics.clone(),
        };
        let dyntype = clearer.target.resource.clone();
        let ctx = Arc::new(Ctx {
            clearer,
            tracks: Mutex::default(),
            in_flight: in_flight.clone(),
        });
        let stop = shutdown.clone();
        let controller = Controller::for_stream_with(watch.stream(writer), store, dyntype)
            .with_config(controller::Config::default().concurrency(args.concurrency))
            .graceful_shutdown_on(async move { stop.requested().await })
            .run(reconcile, error_policy, ctx)
            .for_each(|r| {
                if let Err(e) = r {
                    debug!(error = %e, "reconcile skipped");
                }
                std::future::ready(())
            });
        controllers.push(controller);
    }
    let all = futures::future::join_all(controllers);
    tokio::pin!(all);
    tokio::select! {
        _ = &mut all => {}
        _ = shutdown.requested() => {}
    }
    let stopping = tokio::time::Instant::now();
    info!(
        in_flight = in_flight.load(Ordering::SeqCst),
        events_queued = events.queued(),
        "waiting for in-flight patches and Events"
    );
    let finished = tokio::time::timeout(args.shutdown_timeout, &mut all)
        .await
        .is_ok();
    let left = args.shutdown_timeout.saturating_sub(stopping.elapsed());
    if !finished || !events.drained(left).await {
        warn!(timeout = ?args.shutdown_timeout, "in-flight patches or Events did not finish in time");
    }
    info!("stopped");
    Ok(ExitCode::SUCCESS)
}
