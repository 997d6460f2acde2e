//! Every request metainit makes against every answer a server or a proxy can give, each
//! held for a minute (#43 item 1), on the real control plane: for each cell, a scene of its
//! own (tests/common/scene.rs: its namespaces, label key and ServiceAccount), the fault proxy
//! of tests/common/fuzz.rs in front of the real kube-apiserver answering that one request
//! from the cell's answer (`Plan::Fixed`, `Fault::At` for its exact path), and its own
//! metainit process; all cells at once (they mostly sleep in backoff). Asserted per cell:
//! the requests of that kind the proxy received in the minute stay under a bound derived
//! from the schedule (below), nothing panics, `/readyz` tells the truth during the fault,
//! and once the fault is lifted the labelled pods are cleared and `/readyz` is 200 within a
//! bound; or, where metainit must give up (a start-up request refused for good), it exits 2
//! saying what to fix. The answers are a kube-apiserver's Statuses (reason, `details.causes`,
//! `retryAfterSeconds`) written by the proxy; a watch's ERROR event is a watch answered 200
//! with that one event. This ran on the double, one a cell, before.
//!
//! Real time, not tokio's paused clock: the server, the proxy and metainit talk over real
//! sockets, and a paused clock only jumps while every task waits on a timer (a task waiting
//! on I/O lets it run on, so the backoffs would not be what a server sees).
//!
//! ## The bounds (requests of the faulted kind in the 60 s window)
//!
//! The watch's schedule (`src/retry.rs`, `WATCH`), for discovery, LIST, watch start, a watch's ERROR
//! event, the webhook configurations' LIST and the EndpointSlices' LIST: a failure waits
//! 0.8 s doubling to 30 s, less up to a fifth: at least 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
//! 24 s. Attempts start at 0, 0.64, 1.92, 4.48, 9.6, 19.84, 40.32 s (the next at 64.32): **7**
//! in a minute. A 410 relists at once the first time: **8**. A Retry-After of 20 s (the
//! cells' 429 with Retry-After) makes every wait at least 20 s: 0, 20, 40 and at most one at
//! 60: **4**. The 120 s quiet reset is not reached in a minute.
//!
//! Discovery's 401 and 403 are a wait on the refused-connection step (0.8 to 1.2 s) while
//! the server's `/readyz` answers the same, for at most `STARTING` (60 s), each attempt a
//! request and a `/readyz` probe: 60 / 0.8 + 1 = 76 attempts, **152** requests, then exit 2.
//!
//! One object's retries (`retry::PER_OBJECT`, the pod's PATCH and the webhook
//! configuration's): 100 ms doubling to 30 s, less up to a fifth: at least 0.08, 0.16, 0.32,
//! 0.64, 1.28, 2.56, 5.12, 10.24, 20.48 s (cumulative 40.88 s), then 24 s: **10** attempts in a
//! minute. Two pods in the PATCH row (the second created 30 s in, 9 attempts in its 30 s):
//! **19**. With a Retry-After of 20 s: 4 for the first and 2 for the second, **6**.
//! --concurrency's global retry bound (16 at once, 48 a second) does not bind at two keys.
//!
//! An Event (`events/sink.rs`): one POST and at most 3 retries: **4** per Event, one Event per
//! cleared pod: **8**.
//!
//! A request never answered waits --request-timeout (10 s here) before it counts as a
//! failure; the bounds above hold for it too (fewer attempts fit).
//!
//! Once the fault is lifted, the next attempt is at most 30 s away (the longest step, and
//! Retry-After is capped at 30 s), then a LIST, a watch and a PATCH: **50 s** to clear, with
//! --request-timeout for a request left hanging and slack for 150 processes on 2 cores.

#[path = "sweep/cells.rs"]
mod cells;
mod common;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use cells::{Request::*, *};
use common::{
    fuzz::{Fault, Plan, Proxy},
    webhooks::{ANNOTATION, Kind, Rights, Scene},
    *,
};
use k8s_openapi::api::core::v1::Pod;

const GATE: &str = "kueue.x-k8s.io/admission";
const RECOVER: Duration = Duration::from_secs(50);
/// The scene's namespace of the pods (the first: metainit runs with `--namespace` on it).
const NS: &str = "sweep";

/// What a cell saw.
struct Seen {
    requests: usize,
    readyz_during: Option<u16>,
    exited: Option<(i32, String)>,
    cleared_after: Option<Duration>,
    ready_after: Option<Duration>,
    panicked: bool,
    problems: Vec<String>,
}

/// The requests of the faulted kind and path the proxy received in `[from, to]`.
fn matching(c: &Cell, from: Instant, to: Instant) -> usize {
    let (kind, path) = c.request.select(&c.s);
    let prefix = match c.request {
        Patch => Some(format!("/api/v1/namespaces/{}/pods/", c.s.home)),
        Event => Some(format!("/api/v1/namespaces/{}/events", c.s.home)),
        _ => None,
    };
    c.proxy
        .seen()
        .into_iter()
        .filter(|r| r.kind == kind && r.at >= from && r.at <= to)
        .filter(|r| {
            let uri = r.what.split_once(' ').map_or("", |(_, u)| u);
            let p = uri.split('?').next().unwrap_or("");
            path.as_deref().is_none_or(|x| p == x)
                && prefix.as_deref().is_none_or(|x| p.starts_with(x))
        })
        .count()
}

async fn cleared(s: &Scene, names: &[&str]) -> bool {
    for n in names {
        if !s.gates(NS, n).await.is_empty() {
            return false;
        }
    }
    true
}

async fn exempted(s: &Scene) -> bool {
    s.get(Kind::Validating, "gk").await["metadata"]["annotations"][ANNOTATION].is_string()
}

/// One cell, made ready: its scene (pod `p-1` gated; with `--webhooks`, the labelled
/// configuration `gk` failing closed on pod creation in `gk` with no ready endpoint, which
/// metainit exempts after the grace) and the proxy, faulty already, in front of the real
/// server. Made before any cell's metainit starts (the scene's kubectl runs block).
struct Cell {
    request: Request,
    reply: Reply_,
    s: Scene,
    proxy: Proxy,
}

async fn prepare(request: Request, reply: Reply_) -> Cell {
    let namespaces: &[&str] = if request.webhooks() {
        &[NS, "gk"]
    } else {
        &[NS]
    };
    let mut s = Scene::new(namespaces, Rights::Files).await;
    s.add(NS, &s.gated_pod("p-1", GATE));
    if request.webhooks() {
        s.gatekeeper(false).await;
    }
    let (kind, path) = request.select(&s);
    let f = fault(request, reply);
    let f = match path {
        Some(p) => Fault::At(p, Box::new(f)),
        None => f,
    };
    let proxy = s.behind(Plan::Fixed(kind, f)).await;
    proxy.faulty(true);
    Cell {
        request,
        reply,
        s,
        proxy,
    }
}

/// A pod created during the fault, with the admin's client (no kubectl: cells run at once).
async fn create_pod(s: &Scene, name: &str) {
    let pod: Pod = serde_json::from_value(s.gated_pod(name, GATE)).expect("a pod");
    s.pods(NS)
        .create(&Default::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
}

async fn cell(c: Cell) -> Seen {
    let (request, reply) = (c.request, c.reply);
    let mut args = vec!["--request-timeout", "10s"];
    if resyncs(request, reply) {
        args.extend(["--resync-period", "20s"]);
    }
    if request.webhooks() {
        args.extend(["--webhooks", "--webhook-grace", "1s"]);
    }
    let mut m = c.s.metainit(&args);
    let start = Instant::now();
    let addr = m.admin_addr().await;
    let (mut exited, mut readyz_during, mut requests) = (None, None, None);
    let mut names = vec!["p-1"];
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    while start.elapsed() < held(request, reply) {
        if requests.is_none() && start.elapsed() >= HELD {
            requests = Some(matching(&c, start, Instant::now()));
        }
        if m.child.try_wait().expect("try_wait").is_some() {
            let status = m.wait(Duration::from_secs(5)).await;
            exited = Some((status.code().unwrap_or(-1), m.log().join("\n")));
            break;
        }
        // A pod created during the fault, where the webhook lets pods in (not `gk`'s rows:
        // one pod is enough there).
        if names.len() == 1 && start.elapsed() >= HELD / 2 && !request.webhooks() {
            create_pod(&c.s, "p-2").await;
            names.push("p-2");
        }
        if readyz_during.is_none() && start.elapsed() >= HELD - Duration::from_secs(5) {
            readyz_during = Some(admin_get(&addr, "/readyz").await.0);
        }
        tick.tick().await;
    }
    let requests = requests.unwrap_or_else(|| matching(&c, start, start + HELD));
    c.proxy.faulty(false);
    let (mut cleared_after, mut ready_after) = (None, None);
    if exited.is_none() {
        let lifted = Instant::now();
        while lifted.elapsed() < RECOVER && (cleared_after.is_none() || ready_after.is_none()) {
            if cleared_after.is_none()
                && cleared(&c.s, &names).await
                && (!request.webhooks() || exempted(&c.s).await)
            {
                cleared_after = Some(lifted.elapsed());
            }
            if ready_after.is_none() && admin_get(&addr, "/readyz").await.0 == 200 {
                ready_after = Some(lifted.elapsed());
            }
            if m.child.try_wait().expect("try_wait").is_some() {
                let status = m.wait(Duration::from_secs(5)).await;
                exited = Some((status.code().unwrap_or(-1), "exited after the fault".into()));
                break;
            }
            tick.tick().await;
        }
    }
    let panicked = m.log().iter().any(|l| l.contains("panicked"));
    let problems = m.problems();
    if exited.is_none() {
        m.stop().await;
    }
    Seen {
        requests,
        readyz_during,
        exited,
        cleared_after,
        ready_after,
        panicked,
        problems,
    }
}

/// What is wrong with a cell, if anything.
fn verdict(request: Request, reply: Reply_, s: &Seen) -> Vec<String> {
    let mut wrong = Vec::new();
    let bound = bound(request, reply);
    if s.requests > bound {
        wrong.push(format!("{} requests, bound {bound}", s.requests));
    }
    if s.panicked {
        wrong.push("panicked".into());
    }
    match (expected_exit(request, reply), &s.exited) {
        (Some((want, says)), Some((code, log))) => {
            if *code != want || !log.contains(says) {
                let last = log.lines().last().unwrap_or_default();
                wrong.push(format!("exit {code}, not {want} saying {says:?}: {last}"));
            }
        }
        (Some((want, _)), None) => wrong.push(format!("still running; must exit {want}")),
        (None, Some((code, log))) => {
            let last = log.lines().last().unwrap_or_default();
            wrong.push(format!("exited {code}: {last}"));
        }
        (None, None) => {
            let want = if request.unready_while_failing() {
                503
            } else {
                200
            };
            if s.readyz_during != Some(want) {
                wrong.push(format!(
                    "/readyz {:?} during the fault, want {want}",
                    s.readyz_during
                ));
            }
            if s.cleared_after.is_none() {
                wrong.push(format!("not cleared within {RECOVER:?} of the lift"));
            }
            if s.ready_after.is_none() {
                wrong.push(format!("/readyz not 200 within {RECOVER:?} of the lift"));
            }
        }
    }
    wrong
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn every_request_against_every_answer_for_a_minute() {
    use futures::StreamExt;
    let started = Instant::now();
    let only = std::env::var("SWEEP_ONLY").ok();
    let cells: Vec<_> = cells()
        .into_iter()
        .filter(|(r, a)| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|c| c == format!("{r:?}/{a}")))
        })
        .collect();
    // Every scene first, three at a time (their kubectl runs block a worker each), then
    // every cell at once.
    let prepared: Vec<Cell> = futures::stream::iter(cells)
        .map(|(r, a)| tokio::spawn(prepare(r, a)))
        .buffered(3)
        .map(|c| c.expect("a scene made"))
        .collect()
        .await;
    let made = started.elapsed();
    let cpu_before = children_cpu();
    let results = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = prepared
        .into_iter()
        .map(|c| {
            let results = results.clone();
            tokio::spawn(async move {
                let (r, a) = (c.request, c.reply);
                let seen = cell(c).await;
                results.lock().unwrap().push((r, a, seen));
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a cell's task panicked");
    }
    let mut results = std::mem::take(&mut *results.lock().unwrap());
    results.sort_by_key(|(r, a, _)| {
        (
            REQUESTS.iter().position(|x| x == r),
            ANSWERS.iter().position(|x| x == a),
        )
    });
    let failures = report(&results);
    let cpu = children_cpu().saturating_sub(cpu_before);
    eprintln!(
        "{} cells in {:.0?} wall ({made:.0?} making the scenes), metainit processes' CPU {:.0?}, this process's CPU {:.0?}",
        results.len(),
        started.elapsed(),
        cpu,
        own_cpu()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Prints the cells' table (`--nocapture`) and returns what is wrong, a line a cell.
fn report(results: &[(Request, Reply_, Seen)]) -> Vec<String> {
    let mut failures = Vec::new();
    eprintln!(
        "{:<13} {:<11} {:>5} {:>5} {:>6} {:>8} {:>8}  outcome",
        "request", "answer", "seen", "bound", "readyz", "cleared", "ready"
    );
    for (r, a, s) in results {
        let wrong = verdict(*r, *a, s);
        let secs =
            |d: Option<Duration>| d.map_or("-".into(), |d| format!("{:.1}s", d.as_secs_f64()));
        eprintln!(
            "{:<13} {:<11} {:>5} {:>5} {:>6} {:>8} {:>8}  {}",
            format!("{r:?}"),
            a.to_string(),
            s.requests,
            bound(*r, *a),
            s.readyz_during.map_or("-".into(), |c| c.to_string()),
            secs(s.cleared_after),
            secs(s.ready_after),
            match (&s.exited, wrong.is_empty()) {
                (Some((c, _)), true) => format!("exit {c} as due"),
                (_, true) => "ok".into(),
                (_, false) => format!("WRONG: {}", wrong.join("; ")),
            }
        );
        if !wrong.is_empty() {
            failures.push(format!(
                "{r:?} answered {a}: {}\n  problems logged: {:?}",
                wrong.join("; "),
                s.problems.iter().rev().take(3).collect::<Vec<_>>()
            ));
        }
    }
    failures
}

/// CPU time of the children waited for (the metainit processes), from getrusage.
fn children_cpu() -> Duration {
    rusage("RUSAGE_CHILDREN")
}

fn own_cpu() -> Duration {
    rusage("RUSAGE_SELF")
}

/// User and system time from /proc (self) or, for children, from /proc/self/stat's cutime
/// and cstime fields.
fn rusage(which: &str) -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, s)| s).unwrap_or("");
    let fields: Vec<u64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // After the `)`: state is field 3; utime 14, stime 15, cutime 16, cstime 17 (1-based).
    let at = |n: usize| fields.get(n - 3).copied().unwrap_or(0);
    let ticks = match which {
        "RUSAGE_CHILDREN" => at(16) + at(17),
        _ => at(14) + at(15),
    };
    Duration::from_millis(ticks * 10)
}
