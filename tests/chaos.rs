//! Fault injection ("chaos"): the real `metainit` binary, as a process, against the double
//! with seeded faults, in both modes. Every scenario creates labelled pending objects among
//! many unlabelled ones, over time, while faults come and go; then checks liveness (every
//! labelled pending object cleared of the names it should be, within a bound after the last
//! fault ends), safety (the request log and the final state show no unlabelled object
//! PATCHed, no refused object touched, no name outside `--only` removed), that the process
//! never exits or panics, its peak RSS, and that a failing or absent server is not
//! hammered. It prints a table (run with `--nocapture`) and writes it to
//! `<target dir>/chaos-report.md`.
//!
//! The webhooks scenario (`--webhooks`, modern only) runs on the real control plane behind
//! the fault proxy: tests/cluster_chaos_webhooks.rs.
//!
//! Every scenario draws from one seed (tests/common/fuzz.rs's `Rng`), the FNV-1a hash of its
//! `name/mode`, printed with its failures: the same name replays the same choices.
//!
//! The grid's parts, one file each under tests/chaos/: the scenarios and sizes
//! (`scenarios.rs`), the plan of objects (`objects.rs`), each scenario's timeline
//! (`steps.rs`) and how its steps are applied (`apply.rs`), the writes that make faults
//! (`writer.rs`), one run (`run.rs`), metainit's processes (`procs.rs`), outages and
//! refusals counted (`outages.rs`), the end of a run (`verdict.rs`: liveness), safety
//! (`safety.rs`) and each fault's evidence (`checks.rs`).
//!
//! `METAINIT_CHAOS=full` runs the full sizes (see RELIABILITY.md); the default is the short
//! run for CI. `METAINIT_CHAOS_ONLY=substring` runs only the scenarios whose
//! `name/mode` contains it.

#[path = "chaos/apply.rs"]
mod apply;
#[path = "chaos/checks.rs"]
mod checks;
mod common;
#[path = "chaos/objects.rs"]
mod objects;
#[path = "chaos/outages.rs"]
mod outages;
#[path = "chaos/procs.rs"]
mod procs;
#[path = "chaos/run.rs"]
mod run;
#[path = "chaos/safety.rs"]
mod safety;
#[path = "chaos/scenarios.rs"]
mod scenarios;
#[path = "chaos/steps.rs"]
mod steps;
#[path = "chaos/verdict.rs"]
mod verdict;
#[path = "chaos/writer.rs"]
mod writer;

use std::{
    collections::{HashMap, HashSet},
    fmt::Write as _,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use checks::*;
use common::{fuzz::Rng, *};
use kube_double::{Config, Double, Faults, InitializerRule, Rejection};
use objects::*;
use outages::*;
use procs::*;
use run::*;

use scenarios::*;
use serde_json::{Value, json};
use steps::*;
use writer::*;

// ---------------------------------------------------------------------------------------
// The table

fn table(rows: &[Row], size: &Size, wall: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Chaos suite, {} run: {} labelled / {} unlabelled objects per scenario, liveness bound {}s after the last fault, outage bound {} req/s per process, RSS bound {} MiB; wall time {:.0}s.\n",
        if size.full { "FULL" } else { "SHORT" },
        size.labelled,
        size.unlabelled,
        size.bound.as_secs(),
        OUTAGE_RPS_BOUND,
        RSS_BOUND_KIB / 1024,
        wall.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "| scenario | mode | objects (labelled pending/labelled/unlabelled) | faults injected | cleared | missed | wrongly touched | worst time-to-clear after recovery | worst time-to-clear from create | peak RSS | peak req/s during outage | result |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {}/{}/{} | {} | {}/{}{} | {} | {} | {:.1}s | {:.1}s | {:.1} MiB | {} | {} |",
            r.scenario,
            r.mode,
            r.labelled_pending,
            r.labelled,
            r.unlabelled,
            r.faults,
            r.cleared,
            r.must_clear,
            if r.deleted > 0 {
                format!(" (+{} deleted)", r.deleted)
            } else {
                String::new()
            },
            r.missed,
            r.wrong,
            r.worst_after_recovery.as_secs_f64(),
            r.worst_from_create.as_secs_f64(),
            r.peak_rss_kib as f64 / 1024.0,
            r.outage_rps.map_or("-".to_string(), |v| format!("{v:.0}")),
            if r.problems.is_empty() { "ok" } else { "FAIL" },
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn chaos() {
    let size = Arc::new(Size::from_env());
    let only = std::env::var("METAINIT_CHAOS_ONLY").unwrap_or_default();
    let started = Instant::now();
    let permits = Arc::new(tokio::sync::Semaphore::new(size.parallel));
    let mut runs = Vec::new();
    for s in Scenario::ALL {
        for g in [Gen::Legacy, Gen::Modern] {
            if !format!("{}/{}", s.name(), g.mode()).contains(&only) {
                continue;
            }
            let (size, permits) = (size.clone(), permits.clone());
            runs.push(tokio::spawn(async move {
                let _permit = permits.acquire_owned().await.expect("semaphore");
                run(s, g, &size).await
            }));
        }
    }
    let mut rows = Vec::new();
    for r in runs {
        rows.push(r.await.expect("scenario task"));
    }
    let wall = started.elapsed();
    let report = table(&rows, &size, wall);
    println!("\n{report}");
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("chaos-report.md");
    std::fs::write(&target, &report).expect("report written");
    println!("written to {}", target.display());
    let failures: Vec<String> = rows
        .iter()
        .filter(|r| !r.problems.is_empty())
        .map(|r| {
            format!(
                "{} / {} (seed {}):\n  {}",
                r.scenario,
                r.mode,
                r.seed,
                r.problems.join("\n  ")
            )
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
