//! metainit against the real control plane: kube-apiserver 1.37.2 and etcd 3.7.0, built
//! and started by `scripts/control-plane.sh` (kube-scheduler stopped: binding is not what
//! is measured). Each figure beside the real server's own floor, measured in the same run:
//! the same JSON patch sent by a tight client of the bench's own, which watches the
//! namespace and patches each pod the moment it is seen.
//!
//!     cargo bench --bench real                         # 200 one at a time, a burst of 1,000
//!     METAINIT_BENCH_QUICK=1 cargo bench --bench real  # 50 and 200
//!
//! Prints a Markdown table (and writes it to `target/tmp/bench-real.md`); BENCHMARKS.md
//! keeps the last run. metainit runs as the user `metainit` with manifests/rbac.yaml and
//! writes its Events, as in production; the floor writes none.
#![forbid(unsafe_code)]

#[path = "bench/bed.rs"]
#[allow(dead_code)]
mod bed;
// The tests' control plane: scripts/control-plane.sh, started and stopped for this run.
#[path = "../tests/common/mod.rs"]
mod common;

use std::{
    collections::HashMap,
    fmt::Write as _,
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use bed::{LIMIT, Metainit};
use common::control_plane::ControlPlane;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;

const LABEL: &str = "k8s.opsani.io/initializer";
const GATE: &str = "bench.example.com/gate";

fn gated(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {LABEL: "true"}},
        "spec": {"schedulingGates": [{"name": GATE}],
                 "containers": [{"name": "c", "image": "registry.example/c:1"}]},
    }))
    .expect("pod")
}

fn gates(pod: &Pod) -> usize {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .map_or(0, Vec::len)
}

/// When each pod of the namespace was first seen with no gate left, by a watch of the
/// bench's own (the moment a client of the server learns it).
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<HashMap<String, Instant>>>);

impl Seen {
    fn watch(api: Api<Pod>) -> Seen {
        let seen = Seen::default();
        let s = seen.clone();
        tokio::spawn(async move {
            // kube-runtime's watcher: a run can outlast one watch (the server ends each
            // after its timeout), and the count must not stop with it.
            // With the watcher's backoff: errors come as items, and without it a control
            // plane that went away (the run's end) is asked again in a loop that never yields.
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(p) = stream.next().await {
                if let Ok(p) = p
                    && gates(&p) == 0
                {
                    let name = p.metadata.name.unwrap_or_default();
                    s.0.lock().unwrap().entry(name).or_insert_with(Instant::now);
                }
            }
        });
        seen
    }

    fn at(&self, name: &str) -> Option<Instant> {
        self.0.lock().unwrap().get(name).copied()
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

async fn wait(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < LIMIT * 5, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
}

/// The floor: a tight client that patches every gated pod of the namespace as soon as its
/// watch delivers it, `concurrency` at once.
fn tight_clearer(api: Api<Pod>, concurrency: usize) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let patch: Patch<serde_json::Value> = Patch::Json(
            serde_json::from_value(json!([{"op": "remove", "path": "/spec/schedulingGates"}]))
                .unwrap(),
        );
        watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .filter_map(|p| async move {
                match p {
                    Ok(p) if gates(&p) > 0 => p.metadata.name,
                    _ => None,
                }
            })
            .for_each_concurrent(concurrency, |name| {
                let (api, patch) = (api.clone(), patch.clone());
                async move {
                    let _ = api.patch(&name, &PatchParams::default(), &patch).await;
                }
            })
            .await;
    })
}

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// 200 pods created one at a time, each waited for: create → seen cleared.
async fn one_at_a_time(api: &Api<Pod>, seen: &Seen, prefix: &str, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        let start = Instant::now();
        api.create(&PostParams::default(), &gated(&name))
            .await
            .expect("created");
        wait(&name, || seen.at(&name).is_some()).await;
        out.push(seen.at(&name).expect("seen") - start);
    }
    out
}

/// A burst: `n` pods created 32 at a time; from the first create to the last seen cleared.
async fn burst(api: &Api<Pod>, seen: &Seen, prefix: &str, n: usize) -> Duration {
    let before = seen.count();
    let start = Instant::now();
    futures::stream::iter(0..n)
        .for_each_concurrent(32, |i| {
            let api = api.clone();
            let name = format!("{prefix}-{i}");
            async move {
                api.create(&PostParams::default(), &gated(&name))
                    .await
                    .expect("created");
            }
        })
        .await;
    wait("the burst cleared", || seen.count() >= before + n).await;
    start.elapsed()
}

#[tokio::main]
async fn main() {
    let quick = std::env::var("METAINIT_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
        || !std::env::args().any(|a| a == "--bench");
    let (single, many) = if quick { (50, 200) } else { (200, 1_000) };
    let cp = ControlPlane::own();
    cp.stop("kube-scheduler");
    cp.apply_manifest("manifests/rbac.yaml");
    let client = cp.client().await;
    let mut report = String::new();
    let _ = writeln!(
        report,
        "## Against the real control plane (kube-apiserver 1.37.2, etcd 3.7.0): {single} pods one at a time, a burst of {many}\n"
    );
    let _ = writeln!(
        report,
        "| who clears | one at a time p50 | p99 | burst of {many} | per object | CPU per object | peak RSS |"
    );
    let _ = writeln!(report, "|---|---|---|---|---|---|---|");

    // The floor, in a namespace of its own.
    let ns = cp.namespace("floor");
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let seen = Seen::watch(api.clone());
    let clearer = tight_clearer(api.clone(), 16);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let floor = one_at_a_time(&api, &seen, "one", single).await;
    let floor_burst = burst(&api, &seen, "burst", many).await;
    clearer.abort();
    let _ = writeln!(
        report,
        "| the bench's own tight client (the floor) | {} | {} | {} | {} | | |",
        ms(percentile(floor.clone(), 0.5)),
        ms(percentile(floor.clone(), 0.99)),
        ms(floor_burst),
        ms(floor_burst / many as u32),
    );

    // metainit, the release build, as the user metainit.
    let ns = cp.namespace("metainit");
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let seen = Seen::watch(api.clone());
    let log = cp.dir.join("bench-metainit.log");
    let mut metainit = Metainit::spawn_with(
        &cp.metainit,
        "scheduling-gates",
        &log,
        &["--namespace", &ns],
    );
    wait("metainit listening", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("listed; watching"))
    })
    .await;
    metainit.check_alive();
    let lat = one_at_a_time(&api, &seen, "one", single).await;
    let cpu_before = metainit.cpu();
    let took = burst(&api, &seen, "burst", many).await;
    let cpu = metainit.cpu() - cpu_before;
    let memory = metainit.memory();
    let _ = writeln!(
        report,
        "| metainit (release build) | {} | {} | {} ({:.2}x) | {} | {:.0} µs | {:.1} MiB |",
        ms(percentile(lat.clone(), 0.5)),
        ms(percentile(lat.clone(), 0.99)),
        ms(took),
        took.as_secs_f64() / floor_burst.as_secs_f64(),
        ms(took / many as u32),
        cpu.as_secs_f64() * 1e6 / many as f64,
        memory.peak_kib as f64 / 1024.0,
    );
    let problems = metainit.problems();
    metainit.stop().await;
    if !problems.is_empty() {
        let _ = writeln!(report, "\nmetainit's warnings: {problems:?}");
    }
    println!("{report}");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-real.md");
    if let Err(e) = std::fs::write(&out, &report) {
        eprintln!("bench: cannot write {}: {e}", out.display());
    }
}
