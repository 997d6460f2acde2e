//! metainit's entry point: command line, logging, admin server, watch loops, shutdown.
#![forbid(unsafe_code)]

use std::{process::ExitCode, sync::Arc};

use clap::Parser;
use metainit::{
    Error, Result,
    admin::{self, Health},
    blocker::Mode,
    clear::{Clearer, Queue, Summary},
    cli::{Cli, Command, RunArgs},
    connect, events, logging,
    metrics::Metrics,
    shutdown::Shutdown,
    status, watch,
};
use tokio::sync::Semaphore;
use tracing::info;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::try_parse().unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Some(Command::Status(args)) => {
            logging::init(args.common.log_format);
            status::run(args).await
        }
        None => {
            logging::init(cli.run.common.log_format);
            run(cli.run).await
        }
    };
    result.unwrap_or_else(|e: Error| {
        eprintln!("error: {e}");
        ExitCode::from(e.exit_code() as u8)
    })
}

async fn run(args: RunArgs) -> Result<ExitCode> {
    let label_key = args.label_key()?;
    let resources = args.resources()?;
    let config = connect::load_config(&args.common).await?;
    if args.check_config {
        connect::client(config, None, None)?;
        println!("configuration OK");
        return Ok(ExitCode::SUCCESS);
    }
    let url = config.cluster_url.to_string();
    let shutdown = if args.once {
        Shutdown::never()
    } else {
        Shutdown::on_signals()
    };
    let deadline = args.once.then_some(args.common.timeout);
    let health = Arc::new(Health::new(resources.len()));
    let metrics = Arc::new(Metrics::default());
    if !args.once {
        let listener = admin::bind(args.admin_addr).await?;
        let addr = listener.local_addr().map_err(|source| Error::Admin {
            addr: args.admin_addr,
            source,
        })?;
        info!(%addr, "admin server listening");
        tokio::spawn(admin::serve(listener, health.clone(), metrics.clone()));
    }
    info!(version = env!("CARGO_PKG_VERSION"), %url, %label_key, "starting");

    let setup = async {
        let probe = connect::client(config.clone(), None, Some(health.clone()))?;
        let mode = connect::choose_mode(&probe, &url, args.common.mode, deadline).await?;
        if mode == Mode::SchedulingGates
            && let Some(r) = resources.iter().find(|r| !r.is_pods())
        {
            return Err(Error::Config(format!(
                "--resource {r}: scheduling gates exist only on pods; in scheduling-gates mode the resource must be pods"
            )));
        }
        let mut targets = Vec::new();
        for spec in &resources {
            targets.push(connect::resolve(&probe, &url, spec, deadline).await?);
        }
        Ok((mode, targets))
    };
    let (mode, targets) = tokio::select! {
        setup = setup => setup?,
        _ = shutdown.requested() => return Ok(ExitCode::SUCCESS),
    };
    let client = connect::client(config, Some(mode), Some(health.clone()))?;
    let node = events::node_name(args.node_name.as_deref());
    let permits = Arc::new(Semaphore::new(usize::from(args.concurrency)));
    // Events get a quarter of the patches' bound: in a burst they trail the clearing.
    let events = events::Sink::new(
        client.clone(),
        metrics.clone(),
        usize::from(args.concurrency) / 4,
    );
    info!(%mode, resources = %resources.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
          namespace = args.common.namespace.as_deref().unwrap_or("(all)"), dry_run = args.dry_run, %node, "running");

    let attempts = args.once.then_some(5);
    let mut queues = Vec::new();
    for target in targets {
        let clearer = Clearer {
            client: client.clone(),
            target,
            mode,
            only: args.only.clone(),
            dry_run: args.dry_run,
            node: node.clone(),
            metrics: metrics.clone(),
            events: events.clone(),
        };
        let api = watch::api(&clearer, args.common.namespace.as_deref());
        let name = clearer.target.name.clone();
        queues.push((
            Queue::new(clearer, permits.clone(), attempts, shutdown.clone()),
            api,
            name,
        ));
    }

    if args.once {
        let mut total = Summary::default();
        for (queue, api, _) in &queues {
            watch::once(queue, api, &label_key, &url, args.common.timeout).await?;
            let s = queue.summary();
            total.cleared += s.cleared;
            total.would_clear += s.would_clear;
            total.already_clear += s.already_clear;
            total.left_alone += s.left_alone;
            total.gone += s.gone;
            total.failed += s.failed;
        }
        if !events.drained(args.common.timeout).await {
            tracing::warn!("some Events were not written before the timeout");
        }
        println!(
            "cleared {}, would clear {}, already clear {}, left alone {}, deleted meanwhile {}, failed {}",
            total.cleared,
            total.would_clear,
            total.already_clear,
            total.left_alone,
            total.gone,
            total.failed
        );
        return Ok(if total.failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }

    let mut loops = tokio::task::JoinSet::new();
    for (queue, api, name) in &queues {
        let (queue, api, name, label_key) =
            (queue.clone(), api.clone(), name.clone(), label_key.clone());
        let (health, metrics, shutdown) = (health.clone(), metrics.clone(), shutdown.clone());
        loops.spawn(async move {
            watch::run(queue, api, &label_key, &name, health, metrics, shutdown).await
        });
    }
    shutdown.requested().await;
    health.shutting_down();
    while loops.join_next().await.is_some() {}
    let deadline = tokio::time::Instant::now() + args.shutdown_timeout;
    let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
    let mut finished = true;
    for (queue, _, _) in &queues {
        let in_flight = queue.in_flight();
        if in_flight > 0 {
            info!(in_flight, "waiting for in-flight patches");
        }
        finished &= queue.drained(left()).await;
    }
    finished &= events.drained(left()).await;
    if !finished {
        tracing::warn!(timeout = ?args.shutdown_timeout, "in-flight patches or Events did not finish in time");
    }
    info!("stopped");
    Ok(ExitCode::SUCCESS)
}
