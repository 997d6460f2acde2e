//! The measurements, one function each; every function is one repetition on a fresh
//! double, and measures its floor in the same repetition.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use crate::{
    bed::{Bed, GATE, Generation, Memory, Metainit, metainit_bin, until},
    wire::{Conn, Proxy, RawWatch, Tally},
};

const JSON_PATCH: &str = "application/json-patch+json";

/// Nearest-rank percentile of an ascending slice.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    assert!(!sorted.is_empty(), "percentile of nothing");
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn since(later: SystemTime, earlier: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or_default()
}

/// Fails the run if metainit logged a warning or an error: a figure from a run that
/// went wrong is no figure.
fn no_problems(m: &Metainit, what: &str) {
    let problems = m.problems();
    assert!(
        problems.is_empty(),
        "{what}: metainit logged problems:\n{}",
        problems.join("\n")
    );
}

/// PATCHes `names` in a tight loop on one keep-alive connection; each round trip.
async fn patch_loop(bed: &Bed, names: &[String]) -> Vec<Duration> {
    let mut conn = Conn::connect(bed.double.addr()).await.expect("connects");
    let mut times = Vec::with_capacity(names.len());
    for name in names {
        let body = bed.clearing_patch(name);
        let path = Bed::pod_path(name);
        let start = Instant::now();
        let (status, answer) = conn
            .send("PATCH", &path, JSON_PATCH, &body)
            .await
            .expect("PATCH answered");
        times.push(start.elapsed());
        assert_eq!(
            status,
            200,
            "floor PATCH of {name}: {}",
            String::from_utf8_lossy(&answer)
        );
    }
    times
}

pub struct Latency {
    pub floor_p50: Duration,
    pub floor_p99: Duration,
    pub p50: Duration,
    pub p99: Duration,
}

/// Figure 1: Clear latency, objects created one at a time; floor: one PATCH's round trip.
pub async fn latency(generation: Generation, n: usize) -> Latency {
    let bed = Bed::start(generation).await;
    let floor_names: Vec<String> = (0..n).map(|i| format!("floor-{i}")).collect();
    for name in &floor_names {
        bed.create(name, false);
    }
    let mut floor = patch_loop(&bed, &floor_names).await;
    floor.sort();

    let mut m = Metainit::spawn(
        &bed.kubeconfig,
        generation.mode(),
        &bed.dir.path().join("latency.log"),
    );
    bed.watching(m.spawned, &mut m).await;
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("lat-{i}");
        bed.create(&name, true);
        let mut span = None;
        until(&format!("{name} cleared"), &mut m, || {
            span = bed.cleared_span(&name);
            span.is_some()
        })
        .await;
        let (added, cleared) = span.expect("cleared");
        assert!(bed.is_clear(&name), "{name} was modified but is not clear");
        times.push(since(cleared, added));
    }
    no_problems(&m, "latency");
    m.stop().await;
    times.sort();
    Latency {
        floor_p50: percentile(&floor, 50.0),
        floor_p99: percentile(&floor, 99.0),
        p50: percentile(&times, 50.0),
        p99: percentile(&times, 99.0),
    }
}

pub struct Burst {
    pub floor: Duration,
    pub time: Duration,
    /// How long creating the objects took (part of `time`).
    pub creating: Duration,
    /// CPU of the harness process (the double, and the tight client or the creates)
    /// during the floor, and from the first create to all clear.
    pub floor_server_cpu: Duration,
    pub server_cpu: Duration,
    /// CPU of metainit from the first create to all clear.
    pub metainit_cpu: Duration,
    /// Sockets metainit holds once all are clear, less its admin listener.
    pub connections: usize,
    /// metainit's CPU per object in a burst of `10 n` after it, user and system time.
    pub split_user: Duration,
    pub split_system: Duration,
    /// One loopback request and answer, both ends (`bed::loopback_round_trip`), measured
    /// just before metainit starts.
    pub round_trip: Duration,
}

/// Creates labelled pending objects named `names` at once and waits until metainit has
/// cleared them all; returns how long creating them took.
async fn create_until_cleared(
    bed: &Bed,
    m: &mut Metainit,
    names: &[String],
    what: &str,
) -> Duration {
    let created = Instant::now();
    for name in names {
        bed.create(name, true);
    }
    let creating = created.elapsed();
    // Objects clear roughly in order: move a cursor instead of scanning all each time.
    let mut cursor = 0;
    until(&format!("the {what} cleared"), m, || {
        while cursor < names.len() && bed.cleared_span(&names[cursor]).is_some() {
            cursor += 1;
        }
        cursor == names.len()
    })
    .await;
    no_problems(m, what);
    creating
}

/// Figure 2: Burst: `n` labelled objects created at once, time until all are clear (first
/// ADDED to last clearing MODIFIED, server side); floor: the same PATCHes from a tight
/// client on `concurrency` connections (first send to last answer).
pub async fn burst(generation: Generation, n: usize, concurrency: usize) -> Burst {
    let bed = Arc::new(Bed::start(generation).await);
    let floor_names: Arc<Vec<String>> = Arc::new((0..n).map(|i| format!("floor-{i}")).collect());
    for name in floor_names.iter() {
        bed.create(name, false);
    }
    let bodies: Arc<Vec<Vec<u8>>> =
        Arc::new(floor_names.iter().map(|n| bed.clearing_patch(n)).collect());
    let mut conns = Vec::new();
    for _ in 0..concurrency {
        conns.push(Conn::connect(bed.double.addr()).await.expect("connects"));
    }
    let next = Arc::new(AtomicUsize::new(0));
    let self_cpu = crate::bed::cpu_of("/proc/self");
    let start = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for mut conn in conns {
        let (next, names, bodies) = (next.clone(), floor_names.clone(), bodies.clone());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(name) = names.get(i) else { return };
                let (status, _) = conn
                    .send("PATCH", &Bed::pod_path(name), JSON_PATCH, &bodies[i])
                    .await
                    .expect("PATCH answered");
                assert_eq!(status, 200, "floor PATCH of {name}");
            }
        });
    }
    while let Some(r) = workers.join_next().await {
        r.expect("a floor worker");
    }
    let floor = start.elapsed();
    let floor_cpu = crate::bed::cpu_of("/proc/self") - self_cpu;

    // The sizes of a clearing PATCH as metainit sends it and of the pod in the answer.
    let round_trip = std::thread::spawn(|| crate::bed::loopback_round_trip(600, 1500, 20_000))
        .join()
        .expect("the loopback measurement");

    let mut m = Metainit::spawn(
        &bed.kubeconfig,
        generation.mode(),
        &bed.dir.path().join("burst.log"),
    );
    bed.watching(m.spawned, &mut m).await;
    let names: Vec<String> = (0..n).map(|i| format!("burst-{i}")).collect();
    let (m_cpu, self_cpu) = (m.cpu(), crate::bed::cpu_of("/proc/self"));

    let creating = create_until_cleared(&bed, &mut m, &names, "burst").await;
    let metainit_cpu = m.cpu() - m_cpu;
    let server_cpu = crate::bed::cpu_of("/proc/self") - self_cpu;
    let connections = m.sockets().saturating_sub(1);
    // The split of metainit's CPU between user and system time, which the kernel keeps in
    // clock ticks of 10 ms: read over a burst ten times larger.
    let split: Vec<String> = (0..10 * n).map(|i| format!("split-{i}")).collect();
    let (ticks, split_cpu) = (m.user_system_ticks(), m.cpu());
    create_until_cleared(&bed, &mut m, &split, "split burst").await;
    let (split_cpu, (user, system)) = (m.cpu() - split_cpu, m.user_system_ticks());
    let system_share =
        (system - ticks.1) as f64 / ((user - ticks.0) + (system - ticks.1)).max(1) as f64;
    let per_object = split_cpu / split.len() as u32;
    m.stop().await;
    let spans: Vec<(SystemTime, SystemTime)> = names
        .iter()
        .map(|n| bed.cleared_span(n).expect("cleared"))
        .collect();
    assert!(
        names.iter().all(|n| bed.is_clear(n)),
        "burst left a pod held"
    );
    let first = spans.iter().map(|s| s.0).min().expect("objects");
    let last = spans.iter().map(|s| s.1).max().expect("objects");
    Burst {
        floor,
        time: since(last, first),
        creating,
        floor_server_cpu: floor_cpu,
        server_cpu,
        metainit_cpu,
        connections,
        split_user: per_object.mul_f64(1.0 - system_share),
        split_system: per_object.mul_f64(system_share),
        round_trip,
    }
}

/// Figure 3a: Memory idle: synced on an empty server, one bookmark later.
pub async fn memory_idle(generation: Generation) -> Memory {
    let bed = Bed::start(generation).await;
    let mut m = Metainit::spawn(
        &bed.kubeconfig,
        generation.mode(),
        &bed.dir.path().join("idle.log"),
    );
    bed.watching(m.spawned, &mut m).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mem = m.memory();
    no_problems(&m, "idle");
    m.stop().await;
    mem
}

/// Figure 3b: Memory with `n` labelled pending objects on the server at start, once all are clear.
pub async fn memory_labelled(generation: Generation, n: usize) -> Memory {
    let bed = Bed::start(generation).await;
    let names: Vec<String> = (0..n).map(|i| format!("held-{i}")).collect();
    for name in &names {
        bed.create(name, true);
    }
    let mut m = Metainit::spawn(
        &bed.kubeconfig,
        generation.mode(),
        &bed.dir.path().join("labelled.log"),
    );
    let mut cursor = 0;
    until("the labelled objects cleared", &mut m, || {
        while cursor < names.len() && bed.is_clear(&names[cursor]) {
            cursor += 1;
        }
        cursor == names.len()
    })
    .await;
    // Let the Events and the watch's echo of every patch settle.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let mem = m.memory();
    no_problems(&m, "labelled");
    m.stop().await;
    mem
}

/// A double holding `n` unlabelled pending objects, for 3c.
pub async fn crowded(generation: Generation, n: usize) -> Bed {
    let bed = Bed::start(generation).await;
    for i in 0..n {
        bed.create(&format!("crowd-{i}"), false);
    }
    bed
}

/// Figure 3c: Memory with the crowd of unlabelled objects on the server: synced, one
/// bookmark later.
pub async fn memory_unlabelled(bed: &Bed, rep: usize) -> Memory {
    let mut m = Metainit::spawn(
        &bed.kubeconfig,
        bed.generation.mode(),
        &bed.dir.path().join(format!("crowd-{rep}.log")),
    );
    bed.watching(m.spawned, &mut m).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mem = m.memory();
    no_problems(&m, "unlabelled");
    m.stop().await;
    mem
}

pub struct Startup {
    /// Spawn to the first LIST with `--mode` given.
    pub explicit: Duration,
    /// The same with `--mode auto`.
    pub auto: Duration,
    /// Requests before the first LIST, with `auto`.
    pub auto_requests: usize,
    pub explicit_requests: usize,
    /// Spawn to exit of `metainit --version`: the cost of starting the process at all.
    pub floor: Duration,
    /// Spawn to the first clearing PATCH, the server already holding one labelled pending
    /// pod: with `--mode` given, and with `--mode auto`.
    pub patch_explicit: Duration,
    pub patch_auto: Duration,
    /// Requests before that PATCH, with `auto`.
    pub patch_auto_requests: usize,
}

/// Figure 4: Start-up: process start to the first LIST received by the server.
pub async fn startup(generation: Generation) -> Startup {
    let bed = Bed::start(generation).await;
    // Each run finds one labelled pending pod of its own on the server (the runs before
    // cleared theirs), and is timed to its first LIST and to the PATCH that clears the pod.
    let run = async |mode: &str| {
        let pod = format!("startup-{mode}");
        bed.create(&pod, true);
        let log = bed.dir.path().join(format!("startup-{mode}.log"));
        let mut m = Metainit::spawn(&bed.kubeconfig, mode, &log);
        let (at, before) = bed.first_list(m.spawned, &mut m).await;
        let (patched, before_patch) = bed.first_patch(m.spawned, &pod, &mut m).await;
        let took = since(at, m.spawned);
        let to_patch = since(patched, m.spawned);
        m.stop().await;
        (took, before, to_patch, before_patch)
    };
    let (explicit, explicit_requests, patch_explicit, _) = run(generation.mode()).await;
    let (auto, auto_requests, patch_auto, patch_auto_requests) = run("auto").await;

    let start = Instant::now();
    let out = tokio::process::Command::new(metainit_bin())
        .arg("--version")
        .output()
        .await
        .expect("metainit --version runs");
    let floor = start.elapsed();
    assert!(out.status.success(), "metainit --version failed");
    Startup {
        explicit,
        auto,
        auto_requests,
        explicit_requests,
        floor,
        patch_explicit,
        patch_auto,
        patch_auto_requests,
    }
}

pub struct Selection {
    /// What reached metainit, through the counting proxy, during the window.
    pub seen: Tally,
    /// What a watch without the label selector received in the same window.
    pub unselected: Tally,
    /// Requests metainit made during the window.
    pub requests: usize,
    pub window: Duration,
}

/// Figure 5: Selection cost: `n` unlabelled pending objects created then deleted while metainit
/// watches through a counting proxy; the window ends 1.5 bookmark intervals after the
/// last delete.
pub async fn selection(generation: Generation, n: usize) -> Selection {
    let bed = Bed::start(generation).await;
    let proxy = Proxy::start(bed.double.addr()).await.expect("proxy starts");
    let kubeconfig = bed.kubeconfig_for(&format!("http://{}", proxy.addr));
    let mut m = Metainit::spawn(
        &kubeconfig,
        generation.mode(),
        &bed.dir.path().join("selection.log"),
    );
    bed.watching(m.spawned, &mut m).await;
    let mut query = format!(
        "/api/v1/pods?watch=true&allowWatchBookmarks=true&resourceVersion={}",
        bed.double.resource_version()
    );
    if generation == Generation::Legacy {
        query.push_str("&includeUninitialized=true");
    }
    let unselected = RawWatch::start(bed.double.addr(), &query)
        .await
        .expect("raw watch starts");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (seen_before, unselected_before) = (proxy.tally(), unselected.tally());
    let opened = SystemTime::now();
    let start = Instant::now();
    let names: Vec<String> = (0..n).map(|i| format!("crowd-{i}")).collect();
    for name in &names {
        bed.create(name, false);
    }
    for name in &names {
        bed.delete(name);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let seen = proxy.tally().since(&seen_before);
    let unselected = unselected.tally().since(&unselected_before);
    let window = start.elapsed();
    // The raw watch is not logged by the double as a request in the window (it started
    // before); everything logged in the window came from metainit.
    let requests = bed
        .double
        .requests()
        .iter()
        .filter(|r| r.at >= opened)
        .count();
    no_problems(&m, "selection");
    m.stop().await;
    Selection {
        seen,
        unselected,
        requests,
        window,
    }
}

pub struct Size {
    pub bytes: u64,
    pub what: String,
    pub ca_bytes: Option<u64>,
}

/// Figure 6: The stripped static binary: built with the musl target into a directory of its own
/// (the outer `cargo bench` holds the lock of its target directory); when that cannot be
/// built, the glibc release binary being measured, and says so.
pub fn size(build: bool) -> Size {
    const TARGET: &str = "x86_64-unknown-linux-musl";
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("musl");
    let bin = dir.join(TARGET).join("release").join("metainit");
    let mut why_not = String::from("quick run: musl build skipped");
    if build {
        eprintln!(
            "bench: building the static binary ({TARGET}) into {}",
            dir.display()
        );
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args([
                "build",
                "--release",
                "--locked",
                "--target",
                TARGET,
                "-p",
                "metainit",
            ])
            .env("CARGO_TARGET_DIR", &dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(std::process::Stdio::null())
            .status();
        why_not = match status {
            Ok(s) if s.success() => String::new(),
            Ok(s) => format!(
                "musl build failed ({s}); install musl-tools and `rustup target add {TARGET}`"
            ),
            Err(e) => format!("cannot run cargo: {e}"),
        };
    }
    let ca_bytes = std::fs::metadata("/etc/ssl/certs/ca-certificates.crt")
        .ok()
        .map(|m| m.len());
    let file_kind = |path: &std::path::Path| {
        std::process::Command::new("file")
            .arg("-b")
            .arg(path)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    if why_not.is_empty() && bin.exists() {
        let kind = file_kind(&bin);
        let linkage = if kind.is_empty() {
            "musl, linkage unknown (no `file` command)"
        } else if kind.contains("static") {
            "static musl"
        } else {
            "musl, NOT static"
        };
        let stripped = if kind.contains("not stripped") {
            "NOT stripped"
        } else if kind.contains("stripped") {
            "stripped"
        } else {
            "stripping unknown"
        };
        return Size {
            bytes: std::fs::metadata(&bin).map(|m| m.len()).unwrap_or(0),
            what: format!("{linkage}, {stripped}"),
            ca_bytes,
        };
    }
    let glibc = std::path::PathBuf::from(env!("CARGO_BIN_EXE_metainit"));
    let kind = file_kind(&glibc);
    let stripped = if kind.contains("not stripped") {
        "NOT stripped"
    } else {
        "stripped"
    };
    Size {
        bytes: std::fs::metadata(&glibc).map(|m| m.len()).unwrap_or(0),
        what: format!(
            "glibc {} binary, {stripped} ({why_not})",
            if glibc.to_string_lossy().contains("/release/") {
                "release"
            } else {
                "debug"
            }
        ),
        ca_bytes,
    }
}

/// Figure 7: orphaned gates (`--release-gate`), scheduling-gates mode only.
pub struct Gated {
    /// Idle with the flag: synced on an empty server.
    pub idle: Memory,
    /// With `n` unlabelled gated pods whose gate's age is a day away: each stored, each
    /// on a timer.
    pub held: Memory,
    /// What reached metainit while `n` bound pods were created, changed and deleted.
    pub churn: Tally,
    /// What a watch of all pods received in the same window.
    pub churn_all: Tally,
    pub churn_window: Duration,
}

/// Figure 7: memory with `n` gated pods waiting for their age, and what `n` running pods'
/// churn costs a metainit that watches unbound pods.
pub async fn gated(n: usize) -> Gated {
    let rule = format!("{GATE}=24h");
    let flags = ["--release-gate", rule.as_str()];
    let mode = Generation::Modern.mode();
    let bed = Bed::start(Generation::Modern).await;
    let mut m = Metainit::spawn_with(
        &bed.kubeconfig,
        mode,
        &bed.dir.path().join("gated-idle.log"),
        &flags,
    );
    bed.watching(m.spawned, &mut m).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let idle = m.memory();
    no_problems(&m, "gated idle");
    m.stop().await;

    for i in 0..n {
        bed.create(&format!("gated-{i}"), false);
    }
    let mut m = Metainit::spawn_with(
        &bed.kubeconfig,
        mode,
        &bed.dir.path().join("gated.log"),
        &flags,
    );
    bed.watching(m.spawned, &mut m).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let held = m.memory();
    no_problems(&m, "gated");
    m.stop().await;

    let bed = Bed::start(Generation::Modern).await;
    let proxy = Proxy::start(bed.double.addr()).await.expect("proxy starts");
    let kubeconfig = bed.kubeconfig_for(&format!("http://{}", proxy.addr));
    let mut m = Metainit::spawn_with(&kubeconfig, mode, &bed.dir.path().join("churn.log"), &flags);
    bed.watching(m.spawned, &mut m).await;
    let query = format!(
        "/api/v1/pods?watch=true&allowWatchBookmarks=true&resourceVersion={}",
        bed.double.resource_version()
    );
    let all = RawWatch::start(bed.double.addr(), &query)
        .await
        .expect("raw watch starts");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (seen_before, all_before) = (proxy.tally(), all.tally());
    let start = Instant::now();
    let names: Vec<String> = (0..n).map(|i| format!("running-{i}")).collect();
    for name in &names {
        bed.create_bound(name);
    }
    for name in &names {
        bed.relabel(name);
    }
    for name in &names {
        bed.delete(name);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let churn = proxy.tally().since(&seen_before);
    let churn_all = all.tally().since(&all_before);
    let churn_window = start.elapsed();
    no_problems(&m, "churn");
    m.stop().await;
    Gated {
        idle,
        held,
        churn,
        churn_all,
        churn_window,
    }
}
