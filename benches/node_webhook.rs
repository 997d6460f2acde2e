//! The webhook deadlock broken on the real node, timed (tests/node_webhook.rs plays it once):
//! the guard of tests/common/node/guard.rs (two replicas on the pod network, fail-closed
//! Validating and Mutating configurations on its own namespace) under metainit's static pod
//! with `--webhooks --webhook-grace=G`. Each run: the guard scaled to zero, its pods gone,
//! scaled to two (its ReplicaSet's creates refused from then on); timed from the scale-up
//! (the first refusal follows within milliseconds) to both replicas Ready, and from then to
//! both configurations restored byte for byte.
//!
//!     cargo bench --bench node_webhook                          # 10 runs, G = 10s
//!     METAINIT_BENCH_RUNS=3 METAINIT_BENCH_GRACE=30s cargo bench --bench node_webhook
//!
//! Expected: refusal to Ready about G (the exemption) plus the ReplicaSet's create and the
//! pods' start, which metainit's wake-up of the refused controller keeps to seconds; Ready to
//! restored about G. Prints a Markdown table and writes it to
//! `target/tmp/bench-node-webhook.md`; BENCHMARKS.md keeps the last run.
#![forbid(unsafe_code)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::{fmt::Write as _, path::Path, time::Duration};

use common::node::{Node, guard};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn row(name: &str, mut all: Vec<Duration>) -> String {
    all.sort();
    format!(
        "| {name} | {:.1} s | {:.1} s | {:.1} s | {:.1} s |\n",
        percentile(&all, 0.5).as_secs_f64(),
        percentile(&all, 0.99).as_secs_f64(),
        all[0].as_secs_f64(),
        all[all.len() - 1].as_secs_f64(),
    )
}

fn main() {
    let runs: usize = std::env::var("METAINIT_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let grace = std::env::var("METAINIT_BENCH_GRACE").unwrap_or_else(|_| "10s".into());
    let node = Node::up();
    guard::install(&node, true);
    let before = guard::configs(&node);
    guard::with_webhooks(&node, &grace);
    let (mut to_ready, mut to_restored) = (Vec::new(), Vec::new());
    for i in 1..=runs {
        let (ready, restored) = guard::cycle(&node, &before);
        eprintln!("run {i}/{runs}: Ready {ready:?}, restored {restored:?} after");
        to_ready.push(ready);
        to_restored.push(restored);
    }
    let mut table = format!(
        "Kubernetes {}, `--webhook-grace {grace}`, {runs} runs\n\n| from → to | p50 | p99 | min | max |\n| --- | --- | --- | --- | --- |\n",
        node.get("NODE_KUBERNETES")
    );
    table += &row("refusal (scale-up) → both replicas Ready", to_ready);
    table += &row("Ready → configurations restored", to_restored);
    let _ = writeln!(table);
    println!("{table}");
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tmp/bench-node-webhook.md");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    std::fs::write(&out, &table).unwrap();
}
