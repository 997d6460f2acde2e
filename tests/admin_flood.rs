//! A hostile neighbour floods the admin port (issue #34): thousands of connections that
//! send half a request and then a byte every couple of seconds, reconnecting when closed.
//! metainit's memory and file descriptors must stay bounded, a fresh probe must still be
//! answered within a second, and a labelled pod must still be cleared as fast.
//!
//! metainit runs on the real control plane, as a scene of its own (it ran on the double
//! before). `cargo test --test admin_flood -- --ignored --nocapture` prints the figures
//! RELIABILITY.md quotes; `METAINIT_FLOOD=10000` runs a larger flood.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use common::{
    admin_get,
    control_plane::until,
    eventually,
    scene::{Rights, Scene},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

const KUEUE: &str = "kueue.x-k8s.io/admission";
const NS: &str = "flood";
const FLOOD: usize = 3000;
const PROBES: usize = 10;
const MIB: u64 = 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_flood_of_half_requests_bounds_memory_and_leaves_probes_and_clearing_alone() {
    let count = flood_size();
    let s = Scene::new(&[NS], Rights::Files).await;
    let m = s.metainit(&[]);
    let addr = m.admin_addr().await;
    let pid = m.child.id().expect("running");
    eventually_ready(&addr).await;
    let calm = clear_time(&s, "calm").await;
    for _ in 0..5 {
        admin_get(&addr, "/metrics").await;
    }
    let (idle_rss, idle_fds) = (rss(pid), fds(pid));

    let flood = Flood::start(&addr, count);
    let opened = flood.opened.clone();
    eventually(
        "the flood's connections opened",
        Duration::from_secs(60),
        || opened.load(Ordering::Relaxed) >= count,
    )
    .await;
    let peak = Arc::new(Peak::default());
    let sampler = tokio::spawn(sample(pid, peak.clone()));
    let mut answered = 0;
    let mut slowest = Duration::ZERO;
    for _ in 0..PROBES {
        let start = Instant::now();
        if probe(&addr).await == Some(200) {
            answered += 1;
            slowest = slowest.max(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let flooded = clear_time(&s, "flooded").await;
    // Two more seconds of a byte every two seconds: the head deadline's work.
    tokio::time::sleep(Duration::from_secs(2)).await;
    sampler.abort();
    let reconnects = flood.stop();
    let (peak_rss, peak_fds) = (peak.rss(), peak.fds());

    println!(
        "flood of {count} connections ({reconnects} opened in all): RSS idle {} KiB, peak {} KiB; \
         fds idle {idle_fds}, peak {peak_fds}; probes answered {answered}/{PROBES}, slowest \
         {slowest:?}; clearing calm {calm:?}, flooded {flooded:?}",
        idle_rss / 1024,
        peak_rss / 1024,
    );
    assert!(
        peak_rss <= idle_rss + 8 * MIB,
        "RSS grew from {idle_rss} to {peak_rss} bytes"
    );
    // A few more for the client's own connections to the server, which come and go.
    assert!(
        peak_fds <= idle_fds + metainit::admin::MAX_SOCKETS + 4,
        "fds grew from {idle_fds} to {peak_fds}"
    );
    assert!(
        peak_fds >= idle_fds + metainit::admin::MAX_CONNECTIONS / 2,
        "the flood never reached the bound: fds {idle_fds} to {peak_fds}"
    );
    assert!(
        answered >= 9,
        "{answered} of {PROBES} probes answered in 1 s"
    );
    assert!(
        flooded <= calm * 3 + Duration::from_secs(1),
        "clearing took {flooded:?} under the flood, {calm:?} without"
    );
    let said = m
        .log()
        .iter()
        .filter(|l| l.contains("admin server at its connection limit"))
        .count();
    assert!(
        (1..=3).contains(&said),
        "the limit was logged {said} times: once per flood, not per connection"
    );
    assert!(m.stop().await.success());
}

/// The flood's size, within what this process may open (the soft limit raised to the hard
/// one, less `SPARE` for the scene's clients, the pipes and the probes): the count must stay well
/// above the admin server's bound to prove it.
fn flood_size() -> usize {
    use rustix::process::{Resource, getrlimit, setrlimit};
    const SPARE: usize = 256;
    let want = std::env::var("METAINIT_FLOOD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(FLOOD);
    let mut limit = getrlimit(Resource::Nofile);
    let needed = (want + SPARE) as u64;
    if limit.current.is_some_and(|c| c < needed) {
        limit.current = match limit.maximum {
            Some(max) => Some(max.min(needed)),
            None => Some(needed),
        };
        setrlimit(Resource::Nofile, limit).expect("raise RLIMIT_NOFILE");
    }
    let allowed = getrlimit(Resource::Nofile)
        .current
        .map_or(want, |c| (c as usize).saturating_sub(SPARE));
    let count = want.min(allowed);
    assert!(
        count >= 2 * metainit::admin::MAX_SOCKETS,
        "the fd limit (ulimit -Hn) allows a flood of only {count} connections"
    );
    count
}

async fn eventually_ready(addr: &str) {
    let start = Instant::now();
    while probe(addr).await != Some(200) {
        assert!(start.elapsed() < Duration::from_secs(20), "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How long a labelled gated pod waits to be cleared.
async fn clear_time(s: &Scene, name: &str) -> Duration {
    let start = Instant::now();
    s.add(NS, &s.gated_pod(name, KUEUE));
    until("cleared", Duration::from_secs(20), || async {
        s.gates(NS, name).await.is_empty().then_some(())
    })
    .await;
    start.elapsed()
}

/// A fresh `GET /readyz`, as the kubelet's probe makes it, with its 1 s timeout; the status.
async fn probe(addr: &str) -> Option<u16> {
    let ask = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        let req = format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        String::from_utf8_lossy(&buf)
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    tokio::time::timeout(Duration::from_secs(1), ask)
        .await
        .ok()
        .flatten()
}

fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    kib * 1024
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[derive(Default)]
struct Peak {
    rss: std::sync::atomic::AtomicU64,
    fds: AtomicUsize,
}

impl Peak {
    fn rss(&self) -> u64 {
        self.rss.load(Ordering::Relaxed)
    }
    fn fds(&self) -> usize {
        self.fds.load(Ordering::Relaxed)
    }
}

async fn sample(pid: u32, peak: Arc<Peak>) {
    loop {
        peak.rss.fetch_max(rss(pid), Ordering::Relaxed);
        peak.fds.fetch_max(fds(pid), Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The hostile neighbour, on a thread and runtime of its own.
struct Flood {
    stop: Arc<AtomicBool>,
    /// Connections that have connected at least once.
    opened: Arc<AtomicUsize>,
    /// Connections opened in all, reconnections included.
    connects: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

impl Flood {
    fn start(addr: &str, count: usize) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let opened = Arc::new(AtomicUsize::new(0));
        let connects = Arc::new(AtomicUsize::new(0));
        let (addr, s, o, c) = (
            addr.to_string(),
            stop.clone(),
            opened.clone(),
            connects.clone(),
        );
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let tasks: Vec<_> = (0..count)
                    .map(|_| tokio::spawn(attacker(addr.clone(), s.clone(), o.clone(), c.clone())))
                    .collect();
                for t in tasks {
                    let _ = t.await;
                }
            });
        });
        Flood {
            stop,
            opened,
            connects,
            thread,
        }
    }

    /// Stops the flood and returns how many connections it opened in all.
    fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("flood thread");
        self.connects.load(Ordering::Relaxed)
    }
}

/// Half a request, then a byte every two seconds; when the server closes, again a second
/// later.
async fn attacker(
    addr: String,
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
    connects: Arc<AtomicUsize>,
) {
    let mut first = true;
    while !stop.load(Ordering::Relaxed) {
        if let Ok(mut s) = TcpStream::connect(&addr).await {
            connects.fetch_add(1, Ordering::Relaxed);
            if std::mem::take(&mut first) {
                opened.fetch_add(1, Ordering::Relaxed);
            }
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").await;
            drip(&mut s, &stop).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A byte every two seconds until the server closes the connection or the flood stops.
async fn drip(s: &mut TcpStream, stop: &AtomicBool) {
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        tokio::select! {
            n = s.read(&mut buf) => if !matches!(n, Ok(n) if n > 0) { return },
            _ = tokio::time::sleep(Duration::from_secs(2)) => {
                if s.write_all(b"x").await.is_err() {
                    return;
                }
            }
        }
    }
}
