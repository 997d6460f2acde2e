//! metainit at batch-cluster scale (issue 32): the release binary as a process against the
//! in-process double, with 100,000 unbound pods. Prints a Markdown table, median of 3 runs
//! (BENCHMARKS.md, "Orphaned gates at scale"):
//!
//!     cargo bench --bench scale
//!     METAINIT_SCALE_N=5000 METAINIT_BENCH_REPS=1 cargo bench --bench scale   # smoke
//!     METAINIT_BENCH_BIN=/tmp/metainit-before cargo bench --bench scale       # another build
//!
//! The figures, each from a fresh double and a fresh metainit:
//! - held: N unbound pods gated by a watched gate (`--release-gate G=24h`): how long the
//!   first paged list and a resync take (first LIST to the WATCH after it, from the
//!   double's request log), peak and current RSS, and the CPU time of metainit and of the
//!   bench process (the double) over the first list;
//! - unwatched: N unbound pods gated by another gate, same flags: RSS per pod over the
//!   flag's idle figure;
//! - of age: N pods gated by G created two days ago, `--release-rate 60/m`: the PATCHes
//!   of a 20 s window, their count and spacing, and the peak RSS;
//! - labelled: 10,000 labelled pending pods at start, no flag: time until all are cleared
//!   and the peak RSS.
#![forbid(unsafe_code)]

#[path = "bench/bed.rs"]
#[allow(dead_code)]
mod bed;

use std::{
    fmt::Write as _,
    time::{Duration, Instant, SystemTime},
};

use bed::{Bed, GATE, Generation, LIMIT, Memory, Metainit, NAMESPACE};
use serde_json::json;

const OTHER_GATE: &str = "other.example.com/gate";
const LABELLED: usize = 10_000;
const WINDOW: Duration = Duration::from_secs(20);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The bench process's CPU time so far: the double serves from its threads.
fn own_cpu() -> Duration {
    bed::cpu_of("/proc/self")
}

fn log(bed: &Bed, name: &str) -> std::path::PathBuf {
    bed.dir.path().join(format!("{name}.log"))
}

/// `METAINIT_BENCH_LOGS=DIR` keeps metainit's logs there (the bed's directory goes with it).
fn keep_log(bed: &Bed, name: &str) {
    if let Ok(dir) = std::env::var("METAINIT_BENCH_LOGS") {
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::copy(log(bed, name), format!("{dir}/{name}.log"));
    }
}

fn create_gated(bed: &Bed, n: usize, gate: &str, created: Option<SystemTime>) {
    for i in 0..n {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p-{i}"), "namespace": NAMESPACE, "labels": {"app": "bench"}},
            "spec": {"containers": [{"name": "c", "image": "registry.example/c:1"}],
                     "schedulingGates": [{"name": gate}]}
        });
        let made = match created {
            Some(at) => bed.double.create_created_at("pods", NAMESPACE, pod, at),
            None => bed.double.create("pods", NAMESPACE, pod),
        };
        made.unwrap_or_else(|e| panic!("cannot create pod {i}: {e}"));
    }
}

fn is_watch(r: &kube_double::RequestRecord) -> bool {
    r.path_and_query.contains("watch=true")
}

fn is_page(r: &kube_double::RequestRecord) -> bool {
    r.method == "GET"
        && !is_watch(r)
        && !r.path_and_query.contains("limit=1&")
        && !r.path_and_query.ends_with("limit=1")
}

/// Waits for the `nth` WATCH of pods since `since` (1-based); returns the list before it:
/// from its first page to the WATCH.
async fn listed(bed: &Bed, since: SystemTime, nth: usize, m: &mut Metainit) -> Duration {
    let start = Instant::now();
    loop {
        let reqs = bed.pod_requests(since);
        let watches: Vec<usize> = (0..reqs.len()).filter(|&i| is_watch(&reqs[i])).collect();
        if watches.len() >= nth {
            let w = watches[nth - 1];
            let from = if nth == 1 { 0 } else { watches[nth - 2] + 1 };
            let first = (from..w)
                .find(|&i| is_page(&reqs[i]))
                .expect("a LIST before the WATCH");
            return reqs[w]
                .at
                .duration_since(reqs[first].at)
                .unwrap_or_default();
        }
        m.check_alive();
        assert!(start.elapsed() < 3 * LIMIT, "no WATCH number {nth}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[derive(Clone, Copy, Default)]
struct Held {
    list: Duration,
    resync: Duration,
    after_list: Memory,
    after_resync: Memory,
    metainit_cpu: Duration,
    double_cpu: Duration,
}

async fn held(n: usize) -> Held {
    let bed = Bed::start(Generation::Modern).await;
    create_gated(&bed, n, GATE, None);
    let rule = format!("{GATE}=24h");
    let flags = ["--release-gate", &rule, "--resync-period", "25s"];
    let (cpu0, double0) = (Duration::ZERO, own_cpu());
    let mut m = Metainit::spawn_with(
        &bed.kubeconfig,
        "scheduling-gates",
        &log(&bed, "held"),
        &flags,
    );
    let list = listed(&bed, m.spawned, 1, &mut m).await;
    // Said at once: a build that lists slowly may not resync within the bench's bound.
    eprintln!("scale: held: first list {:.2} s", list.as_secs_f64());
    let (metainit_cpu, double_cpu) = (m.cpu() - cpu0, own_cpu() - double0);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after_list = m.memory();
    let resync = listed(&bed, m.spawned, 2, &mut m).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after_resync = m.memory();
    assert!(m.problems().is_empty(), "held: {:?}", m.problems());
    m.stop().await;
    Held {
        list,
        resync,
        after_list,
        after_resync,
        metainit_cpu,
        double_cpu,
    }
}

/// Idle with the flag, and with `n` pods of a gate no rule names.
async fn unwatched(n: usize) -> (Memory, Memory) {
    let rule = format!("{GATE}=24h");
    let flags = ["--release-gate", rule.as_str()];
    let bed = Bed::start(Generation::Modern).await;
    let mut m = Metainit::spawn_with(
        &bed.kubeconfig,
        "scheduling-gates",
        &log(&bed, "idle"),
        &flags,
    );
    listed(&bed, m.spawned, 1, &mut m).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let idle = m.memory();
    m.stop().await;
    create_gated(&bed, n, OTHER_GATE, None);
    let mut m = Metainit::spawn_with(
        &bed.kubeconfig,
        "scheduling-gates",
        &log(&bed, "unwatched"),
        &flags,
    );
    listed(&bed, m.spawned, 1, &mut m).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let with = m.memory();
    assert!(m.problems().is_empty(), "unwatched: {:?}", m.problems());
    m.stop().await;
    (idle, with)
}

#[derive(Clone, Default)]
struct OfAge {
    /// PATCHes in the window from the first one.
    patches: usize,
    /// Shortest and longest gap between two PATCHes.
    gaps: (Duration, Duration),
    peak: Memory,
}

async fn of_age(n: usize) -> OfAge {
    let bed = Bed::start(Generation::Modern).await;
    let two_days_ago = SystemTime::now() - Duration::from_secs(48 * 3600);
    create_gated(&bed, n, GATE, Some(two_days_ago));
    let rule = format!("{GATE}=24h");
    let flags = ["--release-gate", rule.as_str(), "--release-rate", "60/m"];
    let mut m = Metainit::spawn_with(
        &bed.kubeconfig,
        "scheduling-gates",
        &log(&bed, "of-age"),
        &flags,
    );
    let spawned = m.spawned;
    let patches = |bed: &Bed| -> Vec<SystemTime> {
        bed.double
            .requests()
            .into_iter()
            .filter(|r| r.at >= spawned && r.method == "PATCH")
            .map(|r| r.at)
            .collect()
    };
    let start = Instant::now();
    let first = loop {
        if let Some(&t) = patches(&bed).first() {
            break t;
        }
        m.check_alive();
        assert!(start.elapsed() < 3 * LIMIT, "no release");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    while SystemTime::now() < first + WINDOW + Duration::from_secs(1) {
        m.check_alive();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all: Vec<SystemTime> = patches(&bed)
        .into_iter()
        .filter(|&t| t < first + WINDOW + Duration::from_millis(500))
        .collect();
    let gaps: Vec<Duration> = all
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).unwrap_or_default())
        .collect();
    let peak = m.memory();
    assert!(m.problems().is_empty(), "of age: {:?}", m.problems());
    m.stop().await;
    OfAge {
        patches: all.len(),
        gaps: (
            gaps.iter().copied().min().unwrap_or_default(),
            gaps.iter().copied().max().unwrap_or_default(),
        ),
        peak,
    }
}

/// 10,000 labelled pending pods at start: until all are cleared, and the peak RSS.
async fn labelled() -> (Duration, Memory) {
    let bed = Bed::start(Generation::Modern).await;
    for i in 0..LABELLED {
        bed.create(&format!("l-{i}"), true);
    }
    let mut m = Metainit::spawn(&bed.kubeconfig, "scheduling-gates", &log(&bed, "labelled"));
    let start = Instant::now();
    let mut next = 0;
    while next < LABELLED {
        if bed.is_clear(&format!("l-{next}")) {
            next += 1;
            continue;
        }
        m.check_alive();
        assert!(start.elapsed() < 3 * LIMIT, "labelled pods not cleared");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = start.elapsed();
    let peak = m.memory();
    assert!(m.problems().is_empty(), "labelled: {:?}", m.problems());
    m.stop().await;
    keep_log(&bed, "labelled");
    (took, peak)
}

fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).expect("comparable"));
    v[v.len() / 2]
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --all-targets` builds this; it runs only under `cargo bench`.
    }
    let n = env_usize("METAINIT_SCALE_N", 100_000);
    let reps = env_usize("METAINIT_BENCH_REPS", 3);
    let only = std::env::var("METAINIT_BENCH_ONLY").unwrap_or_default();
    let runs = |s: &str| only.is_empty() || only.split(',').any(|o| o == s);
    let mut t = String::new();
    let _ = writeln!(
        t,
        "binary: {}; N = {n}; median of {reps}\n",
        bed::metainit_bin()
    );
    let _ = writeln!(t, "| figure | metainit | target |\n| --- | --- | --- |");
    if runs("held") {
        let mut r = Vec::new();
        for rep in 0..reps {
            eprintln!("scale: held {}/{reps}", rep + 1);
            r.push(held(n).await);
        }
        let by = |f: &dyn Fn(&Held) -> f64| median(r.iter().map(f).collect());
        let _ = writeln!(
            t,
            "| first list of {n} unbound gated pods (paged), first LIST to WATCH | {} | ≤ 10 s |",
            secs(Duration::from_secs_f64(by(&|h| h.list.as_secs_f64())))
        );
        let _ = writeln!(
            t,
            "| resync of {n} (LIST to WATCH) | {} | ≤ 10 s |",
            secs(Duration::from_secs_f64(by(&|h| h.resync.as_secs_f64())))
        );
        let _ = writeln!(
            t,
            "| peak RSS with {n} gated by a watched gate (`--release-gate G=24h`), after the list (VmRSS {}) | {} | ≤ 48 MiB |",
            mib(by(&|h| h.after_list.now_kib as f64) as u64),
            mib(by(&|h| h.after_list.peak_kib as f64) as u64)
        );
        let _ = writeln!(
            t,
            "| peak RSS after a resync (VmRSS {}) | {} | ≤ 48 MiB |",
            mib(by(&|h| h.after_resync.now_kib as f64) as u64),
            mib(by(&|h| h.after_resync.peak_kib as f64) as u64)
        );
        let _ = writeln!(
            t,
            "| CPU over the first list: metainit / the double (bench process) | {} / {} | the double not dominating |",
            secs(Duration::from_secs_f64(by(&|h| h
                .metainit_cpu
                .as_secs_f64()))),
            secs(Duration::from_secs_f64(by(&|h| h.double_cpu.as_secs_f64())))
        );
    }
    if runs("unwatched") {
        let mut r = Vec::new();
        for rep in 0..reps {
            eprintln!("scale: unwatched {}/{reps}", rep + 1);
            r.push(unwatched(n).await);
        }
        let idle = median(r.iter().map(|(i, _)| i.peak_kib).collect());
        let peak = median(r.iter().map(|(_, w)| w.peak_kib).collect());
        let now = median(r.iter().map(|(_, w)| w.now_kib).collect());
        let per = |kib: u64| (kib.saturating_sub(idle)) as f64 * 1024.0 / n as f64;
        let _ = writeln!(
            t,
            "| {n} unbound pods without a watched gate: peak RSS {} (VmRSS {}) over idle with the flag {} | {:.0} B/pod peak, {:.0} B/pod now | ≤ 400 B/pod |",
            mib(peak),
            mib(now),
            mib(idle),
            per(peak),
            per(now)
        );
    }
    if runs("age") {
        let mut r = Vec::new();
        for rep in 0..reps {
            eprintln!("scale: of age {}/{reps}", rep + 1);
            r.push(of_age(n).await);
        }
        let patches = median(r.iter().map(|a| a.patches).collect());
        let min_gap = median(r.iter().map(|a| a.gaps.0).collect());
        let max_gap = median(r.iter().map(|a| a.gaps.1).collect());
        let peak = median(r.iter().map(|a| a.peak.peak_kib).collect());
        let _ = writeln!(
            t,
            "| {n} pods of age at once, `--release-rate 60/m`: releases in the {}.5 s from the first (gaps {:.3} to {:.3} s) | {patches} | {} (exactly 1 a second) |",
            WINDOW.as_secs(),
            min_gap.as_secs_f64(),
            max_gap.as_secs_f64(),
            WINDOW.as_secs() + 1
        );
        let _ = writeln!(t, "| peak RSS then | {} | ≤ 48 MiB |", mib(peak));
    }
    if runs("labelled") {
        let mut r = Vec::new();
        for rep in 0..reps {
            eprintln!("scale: labelled {}/{reps}", rep + 1);
            r.push(labelled().await);
        }
        let took = median(r.iter().map(|(d, _)| *d).collect());
        let peak = median(r.iter().map(|(_, m)| m.peak_kib).collect());
        let _ = writeln!(
            t,
            "| {LABELLED} labelled pending pods at start: all cleared in | {} | |",
            secs(took)
        );
        let _ = writeln!(t, "| peak RSS then | {} | ≤ 24 MiB |", mib(peak));
    }
    println!("{t}");
}
