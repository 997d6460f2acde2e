//! metainit's benchmarks (issue 7): the release binary as a process against the
//! in-process kube-apiserver double, in both modes, with every speed figure a ratio to a
//! floor measured in the same run. Prints a Markdown table (and writes it to
//! `target/tmp/bench-report.md`); BENCHMARKS.md keeps the last full run.
//!
//!     cargo bench --bench bench                            # full: 5 repetitions
//!     METAINIT_BENCH_QUICK=1 cargo bench --bench bench     # smoke: small counts, 1 repetition
//!
//! `METAINIT_BENCH_REPS=N` overrides the number of repetitions. Targets are reported, never
//! enforced: the run fails only when a measurement itself goes wrong.
#![forbid(unsafe_code)]

// The modules live in `benches/bench/` so that cargo does not take them for bench targets.
#[path = "bench/bed.rs"]
mod bed;
#[path = "bench/scenarios.rs"]
mod scenarios;
#[path = "bench/wire.rs"]
mod wire;

use std::{fmt::Write as _, time::Duration};

use bed::{Generation, Memory};
use scenarios::{Burst, Gated, Latency, Selection, Size, Startup};

/// How much of everything.
struct Plan {
    quick: bool,
    reps: usize,
    latency_objects: usize,
    burst_objects: usize,
    /// metainit's default `--concurrency`, which the burst floor uses too.
    concurrency: usize,
    labelled_objects: usize,
    unlabelled_objects: usize,
    selection_objects: usize,
    /// Figure 7: gated pods waiting for their age; as many bound pods churned.
    gated_objects: usize,
    /// `METAINIT_BENCH_ONLY=latency,burst,memory,startup,selection,gates,size`: a subset.
    only: Option<Vec<String>>,
}

impl Plan {
    fn from_env() -> Plan {
        // `cargo bench` passes `--bench`; without it (`cargo test --all-targets`) this is a
        // test build: run the smoke plan rather than minutes of benchmarks.
        let benching = std::env::args().any(|a| a == "--bench");
        let quick = !benching
            || std::env::var("METAINIT_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let mut plan = if quick {
            Plan {
                quick,
                reps: 1,
                latency_objects: 50,
                burst_objects: 100,
                concurrency: 16,
                labelled_objects: 100,
                unlabelled_objects: 2_000,
                selection_objects: 500,
                gated_objects: 500,
                only: None,
            }
        } else {
            Plan {
                quick,
                reps: 5,
                latency_objects: 500,
                burst_objects: 1_000,
                concurrency: 16,
                labelled_objects: 1_000,
                unlabelled_objects: 100_000,
                selection_objects: 10_000,
                gated_objects: 10_000,
                only: None,
            }
        };
        if let Some(n) = std::env::var("METAINIT_BENCH_REPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| *n > 0)
        {
            plan.reps = n;
        }
        plan.only = std::env::var("METAINIT_BENCH_ONLY")
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
        plan
    }

    fn runs(&self, scenario: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|s| s == scenario))
    }
}

/// Every repetition of one generation.
#[derive(Default)]
struct Runs {
    latency: Vec<Latency>,
    burst: Vec<Burst>,
    idle: Vec<Memory>,
    labelled: Vec<Memory>,
    unlabelled: Vec<Memory>,
    startup: Vec<Startup>,
    selection: Vec<Selection>,
    gated: Vec<Gated>,
}

fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
    assert!(!v.is_empty(), "median of nothing");
    v.sort_by(|a, b| a.partial_cmp(b).expect("comparable"));
    v[v.len() / 2]
}

fn median_by<R, T: Copy + PartialOrd>(runs: &[R], f: impl Fn(&R) -> T) -> T {
    median(runs.iter().map(f).collect())
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn met(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}

fn command(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| format!("({program} unavailable)"))
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "(unknown)".into());
    let mut s = String::new();
    let _ = writeln!(
        s,
        "- date: {}",
        command("date", &["-u", "+%Y-%m-%d %H:%M:%S UTC"])
    );
    let _ = writeln!(s, "- nproc: {}", command("nproc", &[]));
    let _ = writeln!(s, "- CPU: {cpu}");
    let _ = writeln!(s, "- rustc: {}", command("rustc", &["-V"]));
    let _ = writeln!(
        s,
        "- metainit: {} (git {})",
        env!("CARGO_PKG_VERSION"),
        command("git", &["describe", "--always", "--dirty"])
    );
    let _ = writeln!(
        s,
        "- load average before the run: {}",
        command("cat", &["/proc/loadavg"])
    );
    let _ = writeln!(s, "- `free -h`:\n\n```\n{}\n```", command("free", &["-h"]));
    s
}

async fn measure_generation(plan: &Plan, generation: Generation) -> Runs {
    {
        let mut runs = Runs::default();
        for rep in 0..plan.reps {
            eprintln!("bench: {generation:?} repetition {}/{}", rep + 1, plan.reps);
            if plan.runs("latency") {
                runs.latency
                    .push(scenarios::latency(generation, plan.latency_objects).await);
            }
            if plan.runs("burst") {
                runs.burst
                    .push(scenarios::burst(generation, plan.burst_objects, plan.concurrency).await);
            }
            if plan.runs("startup") {
                runs.startup.push(scenarios::startup(generation).await);
            }
            if plan.runs("selection") {
                runs.selection
                    .push(scenarios::selection(generation, plan.selection_objects).await);
            }
            if plan.runs("gates") && generation == Generation::Modern {
                runs.gated.push(scenarios::gated(plan.gated_objects).await);
            }
            if plan.runs("memory") {
                runs.idle.push(scenarios::memory_idle(generation).await);
                runs.labelled
                    .push(scenarios::memory_labelled(generation, plan.labelled_objects).await);
            }
        }
        if !plan.runs("memory") {
            return runs;
        }
        eprintln!(
            "bench: {generation:?}: {} unlabelled objects on the server",
            plan.unlabelled_objects
        );
        let crowd = scenarios::crowded(generation, plan.unlabelled_objects).await;
        for rep in 0..plan.reps {
            runs.unlabelled
                .push(scenarios::memory_unlabelled(&crowd, rep).await);
        }
        runs
    }
}

/// Latency target: p99 at most twice the floor's p99 plus 5 ms.
fn latency_bound(floor_p99: Duration) -> Duration {
    floor_p99 * 2 + Duration::from_millis(5)
}

/// "Not growing": the peak with the unlabelled crowd within 1 MiB of the idle peak.
const GROWTH_TOLERANCE_KIB: u64 = 1024;
/// Issue "at the floor": metainit's CPU per cleared object in the burst, in µs.
const CPU_PER_OBJECT_US: f64 = 15.0;
/// Issue "at the floor": peak RSS idle, and with 1,000 labelled pending objects (was 16 MiB).
const IDLE_PEAK_MIB: u64 = 6;
const LABELLED_PEAK_MIB: u64 = 12;

fn table(plan: &Plan, all: &[(Generation, Runs)], size: Option<&Size>) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| # | figure | mode | metainit | floor | ratio | target | met |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for (generation, r) in all {
        let mode = generation.mode();
        if !r.latency.is_empty() {
            let floor50 = median_by(&r.latency, |l| l.floor_p50);
            let floor99 = median_by(&r.latency, |l| l.floor_p99);
            let p50 = median_by(&r.latency, |l| l.p50);
            let p99 = median_by(&r.latency, |l| l.p99);
            let r50 = median_by(&r.latency, |l| ratio(l.p50, l.floor_p50));
            let r99 = median_by(&r.latency, |l| ratio(l.p99, l.floor_p99));
            let bound = latency_bound(floor99);
            let _ = writeln!(
                t,
                "| 1 | clear latency p50 ({} objects, one at a time) | {mode} | {} | {} | {r50:.1}x | | |",
                plan.latency_objects,
                ms(p50),
                ms(floor50)
            );
            let _ = writeln!(
                t,
                "| 1 | clear latency p99 | {mode} | {} | {} | {r99:.1}x | ≤ 2x floor + 5 ms = {} | {} |",
                ms(p99),
                ms(floor99),
                ms(bound),
                met(p99 <= bound)
            );
        }
        if !r.burst.is_empty() {
            let time = median_by(&r.burst, |b| b.time);
            let floor = median_by(&r.burst, |b| b.floor);
            let br = median_by(&r.burst, |b| ratio(b.time, b.floor));
            let creating = median_by(&r.burst, |b| b.creating);
            let _ = writeln!(
                t,
                "| 2 | burst: {} created at once, all clear (creating took {}) | {mode} | {} | {} | {br:.2}x | ≤ 1.5x | {} |",
                plan.burst_objects,
                ms(creating),
                ms(time),
                ms(floor),
                met(br <= 1.5)
            );
            let per_object = median_by(&r.burst, |b| b.metainit_cpu).as_secs_f64() * 1e6
                / plan.burst_objects as f64;
            let _ = writeln!(
                t,
                "| 2 | burst CPU: double + creates during it (floor: double + tight client); metainit's, per object; connections metainit holds after | {mode} | {} + metainit {} ({per_object:.0} µs/object); {} connections | {} | {:.1}x | metainit ≤ {CPU_PER_OBJECT_US} µs/object | {} |",
                ms(median_by(&r.burst, |b| b.server_cpu)),
                ms(median_by(&r.burst, |b| b.metainit_cpu)),
                median_by(&r.burst, |b| b.connections),
                ms(median_by(&r.burst, |b| b.floor_server_cpu)),
                median_by(&r.burst, |b| ratio(
                    b.server_cpu + b.metainit_cpu,
                    b.floor_server_cpu
                )),
                met(per_object <= CPU_PER_OBJECT_US),
            );
            let user = median_by(&r.burst, |b| b.split_user).as_secs_f64() * 1e6;
            let system = median_by(&r.burst, |b| b.split_system).as_secs_f64() * 1e6;
            let round_trip = median_by(&r.burst, |b| b.round_trip).as_secs_f64() * 1e6;
            // Two requests per object (the PATCH and the Event), about half of a round
            // trip's kernel work on the client's side of each.
            let _ = writeln!(
                t,
                "| 2 | CPU per object, user + system, in a burst of {} after it (the kernel splits them by 10 ms ticks); floor: the kernel's work for two requests, one loopback round trip of 600 B and 1,500 B with both ends counted (a write and a read at each end) | {mode} | {user:.0} + {system:.0} = {:.0} µs | {round_trip:.1} µs | {:.1}x | | |",
                10 * plan.burst_objects,
                user + system,
                (user + system) / round_trip.max(0.001),
            );
        }
        if !r.idle.is_empty() {
            let idle_peak = median_by(&r.idle, |m| m.peak_kib);
            let idle_now = median_by(&r.idle, |m| m.now_kib);
            let lab_peak = median_by(&r.labelled, |m| m.peak_kib);
            let lab_now = median_by(&r.labelled, |m| m.now_kib);
            let _ = writeln!(
                t,
                "| 3 | peak RSS idle (VmHWM; VmRSS {}) | {mode} | {} | | | ≤ {IDLE_PEAK_MIB} MiB | {} |",
                mib(idle_now),
                mib(idle_peak),
                met(idle_peak <= IDLE_PEAK_MIB * 1024)
            );
            let _ = writeln!(
                t,
                "| 3 | peak RSS, {} labelled pending objects (VmRSS after {}) | {mode} | {} | | | ≤ {LABELLED_PEAK_MIB} MiB | {} |",
                plan.labelled_objects,
                mib(lab_now),
                mib(lab_peak),
                met(lab_peak <= LABELLED_PEAK_MIB * 1024)
            );
            if !r.unlabelled.is_empty() {
                let unl_peak = median_by(&r.unlabelled, |m| m.peak_kib);
                let unl_now = median_by(&r.unlabelled, |m| m.now_kib);
                let growth = unl_peak as i64 - idle_peak as i64;
                let _ = writeln!(
                    t,
                    "| 3 | peak RSS, {} unlabelled objects (VmRSS {}) | {mode} | {} | idle {} | {:+.1} MiB | not growing (≤ idle + 1 MiB) | {} |",
                    plan.unlabelled_objects,
                    mib(unl_now),
                    mib(unl_peak),
                    mib(idle_peak),
                    growth as f64 / 1024.0,
                    met(unl_peak <= idle_peak + GROWTH_TOLERANCE_KIB)
                );
            }
        }
        if !r.startup.is_empty() {
            let floor = median_by(&r.startup, |s| s.floor);
            for (label, took, requests, ratio_v) in [
                (
                    format!("--mode {mode}"),
                    median_by(&r.startup, |s| s.explicit),
                    median_by(&r.startup, |s| s.explicit_requests),
                    median_by(&r.startup, |s| ratio(s.explicit, s.floor)),
                ),
                (
                    "--mode auto".to_string(),
                    median_by(&r.startup, |s| s.auto),
                    median_by(&r.startup, |s| s.auto_requests),
                    median_by(&r.startup, |s| ratio(s.auto, s.floor)),
                ),
            ] {
                let _ = writeln!(
                    t,
                    "| 4 | start-up to first LIST, `{label}` ({requests} requests before it) | {mode} | {} | {} | {ratio_v:.1}x | ≤ 50 ms | {} |",
                    ms(took),
                    ms(floor),
                    met(took <= Duration::from_millis(50))
                );
            }
            for (label, took, requests) in [
                (
                    format!("--mode {mode}"),
                    median_by(&r.startup, |s| s.patch_explicit),
                    None,
                ),
                (
                    "--mode auto".to_string(),
                    median_by(&r.startup, |s| s.patch_auto),
                    Some(median_by(&r.startup, |s| s.patch_auto_requests)),
                ),
            ] {
                let requests = requests
                    .map(|n| format!(" ({n} requests before it)"))
                    .unwrap_or_default();
                let (target, verdict) = if label == "--mode auto" {
                    ("≤ 5 ms", met(took <= Duration::from_millis(5)))
                } else {
                    ("", "")
                };
                let _ = writeln!(
                    t,
                    "| 4 | exec → first clearing PATCH, `{label}`, one labelled pending pod on the server{requests} | {mode} | {} | {} | {:.1}x | {target} | {verdict} |",
                    ms(took),
                    ms(floor),
                    ratio(took, floor)
                );
            }
        }
        if !r.selection.is_empty() {
            let events = median_by(&r.selection, |s| s.seen.events);
            let bookmarks = median_by(&r.selection, |s| s.seen.bookmarks);
            let bytes = median_by(&r.selection, |s| s.seen.bytes);
            let bookkeeping = median_by(&r.selection, |s| {
                s.seen.bookmark_bytes + s.seen.framing_bytes
            });
            let other = median_by(&r.selection, |s| s.seen.other_bytes + s.seen.event_bytes);
            let requests = median_by(&r.selection, |s| s.requests);
            let window = median_by(&r.selection, |s| s.window);
            let ref_events = median_by(&r.selection, |s| s.unselected.events);
            let ref_bytes = median_by(&r.selection, |s| s.unselected.bytes);
            let _ = writeln!(
                t,
                "| 5 | watch events reaching metainit, {n} unlabelled created + deleted ({} window; an unselected watch got {ref_events}) | {mode} | {events} | | | 0 | {} |",
                ms(window),
                met(events == 0),
                n = plan.selection_objects
            );
            let _ = writeln!(
                t,
                "| 5 | bytes reaching metainit in that window ({bookmarks} bookmarks = {bookkeeping} B with chunk framing; other {other} B; {requests} requests sent; an unselected watch got {ref_bytes} B) | {mode} | {bytes} B | | | bookmarks only | {} |",
                met(other == 0 && bytes == bookkeeping && requests == 0)
            );
        }
        if !r.gated.is_empty() {
            let n = plan.gated_objects;
            let idle = median_by(&r.gated, |g| g.idle.peak_kib);
            let held = median_by(&r.gated, |g| g.held.peak_kib);
            let held_now = median_by(&r.gated, |g| g.held.now_kib);
            let per_pod = (held as f64 - idle as f64) * 1024.0 / n as f64;
            let _ = writeln!(
                t,
                "| 7 | orphaned gates: peak RSS with {n} unbound gated pods, each on a timer (`--release-gate G=24h`; VmRSS {}) | {mode} | {} | idle with the flag {} | {:+.1} MiB ({per_pod:.0} B/pod) | grows with unbound pods only | |",
                mib(held_now),
                mib(held),
                mib(idle),
                (held as f64 - idle as f64) / 1024.0
            );
            let events = median_by(&r.gated, |g| g.churn.events);
            let bytes = median_by(&r.gated, |g| g.churn.bytes);
            let bookkeeping =
                median_by(&r.gated, |g| g.churn.bookmark_bytes + g.churn.framing_bytes);
            let all_events = median_by(&r.gated, |g| g.churn_all.events);
            let all_bytes = median_by(&r.gated, |g| g.churn_all.bytes);
            let window = median_by(&r.gated, |g| g.churn_window);
            let _ = writeln!(
                t,
                "| 7 | orphaned gates: watch events and bytes reaching metainit while {n} bound pods are created, relabelled and deleted ({} window; a watch of all pods got {all_events} events, {all_bytes} B) | {mode} | {events} events, {bytes} B ({bookkeeping} B bookmarks and framing) | | | 0 events | {} |",
                ms(window),
                met(events == 0)
            );
        }
    }
    if let Some(size) = size {
        let mib_f = |b: u64| b as f64 / (1024.0 * 1024.0);
        let _ = writeln!(
            t,
            "| 6 | binary size ({}) | both | {:.2} MiB | | | ≤ 10 MiB | {} |",
            size.what,
            mib_f(size.bytes),
            met(size.bytes <= 10 * 1024 * 1024)
        );
        if let Some(ca) = size.ca_bytes {
            let _ = writeln!(
                t,
                "| 6 | image size = binary + CA bundle ({:.2} MiB) | both | {:.2} MiB | | | | |",
                mib_f(ca),
                mib_f(size.bytes + ca)
            );
        }
    }
    t
}

#[tokio::main]
async fn main() {
    wire::self_check();
    let plan = Plan::from_env();
    let bin = bed::metainit_bin();
    if !bin.contains("/release/") && std::env::var_os("METAINIT_BENCH_BIN").is_none() {
        eprintln!("bench: WARNING: {bin} is not a release build; run with `cargo bench`");
    }
    eprintln!(
        "bench: {} run, {} repetition(s), metainit at {bin}",
        if plan.quick { "quick" } else { "full" },
        plan.reps
    );
    let machine = machine();
    let started = std::time::Instant::now();
    let mut all = Vec::new();
    for generation in Generation::ALL {
        let runs = measure_generation(&plan, generation).await;
        all.push((generation, runs));
    }
    let size = if plan.runs("size") {
        let build = !plan.quick;
        Some(
            tokio::task::spawn_blocking(move || scenarios::size(build))
                .await
                .expect("size measured"),
        )
    } else {
        None
    };
    let mut report = String::new();
    let _ = writeln!(
        report,
        "## {} run: median of {} repetition(s), measured in {:.0} s\n",
        if plan.quick { "Quick" } else { "Full" },
        plan.reps,
        started.elapsed().as_secs_f64()
    );
    let _ = writeln!(report, "{machine}");
    let _ = writeln!(report, "{}", table(&plan, &all, size.as_ref()));
    println!("{report}");
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-report.md");
    match std::fs::write(&out, &report) {
        Ok(()) => eprintln!("bench: report written to {}", out.display()),
        Err(e) => eprintln!("bench: cannot write {}: {e}", out.display()),
    }
}
