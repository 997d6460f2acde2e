//! Every request metainit makes against every answer a server or a proxy can give, each
//! held for a minute (#43 item 1): for each cell, its own double and its own metainit
//! process, all cells at once (they mostly sleep in backoff). Asserted per cell: the
//! requests of that kind the server saw in the minute stay under a bound derived from the
//! schedule (below), nothing panics, `/readyz` tells the truth during the fault, and once
//! the fault is lifted the labelled pods are cleared and `/readyz` is 200 within a bound; or,
//! where metainit must give up (a start-up request refused for good), it exits 2 saying what
//! to fix.
//!
//! Real time, not tokio's paused clock: the double and metainit talk over real sockets in two
//! processes, and a paused clock only jumps while every task waits on a timer (a task waiting
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

mod common;

use std::{
    collections::HashMap,
    fmt,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use common::*;
use kube_double::{Answer, Faults, NONRESOURCE, Reply};
use serde_json::json;

const GATE: &str = "kueue.x-k8s.io/admission";
const VWC: &str = "validatingwebhookconfigurations.admissionregistration.k8s.io";
const ANNOTATION: &str = "k8s.opsani.io/metainit-exempted";
const HELD: Duration = Duration::from_secs(60);
const RECOVER: Duration = Duration::from_secs(50);
const RETRY_AFTER: u64 = 20;

/// A request of metainit's, as the fault rule selects it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Request {
    Discovery,
    List,
    WatchStart,
    WatchError,
    Patch,
    Event,
    WebhookList,
    WebhookPatch,
    SliceList,
}

use Request::*;

const REQUESTS: [Request; 9] = [
    Discovery,
    List,
    WatchStart,
    WatchError,
    Patch,
    Event,
    WebhookList,
    WebhookPatch,
    SliceList,
];

impl Request {
    /// The rule's kind and path prefix.
    fn select(self) -> (&'static str, &'static str) {
        match self {
            Discovery => (NONRESOURCE, "/"),
            List => ("list", "/api/v1/pods"),
            WatchStart | WatchError => ("watch", "/api/v1/pods"),
            Patch => ("patch", "/api/v1/namespaces/default/pods/"),
            Event => ("create", "/api/v1/namespaces/default/events"),
            WebhookList => (
                "list",
                "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            ),
            WebhookPatch => (
                "patch",
                "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            ),
            SliceList => ("list", "/apis/discovery.k8s.io/v1/namespaces/"),
        }
    }

    fn webhooks(self) -> bool {
        matches!(self, WebhookList | WebhookPatch | SliceList)
    }

    /// Whether `/readyz` must say 503 while this request fails: only the watches count
    /// (`src/admin/mod.rs`); before discovery ends nothing is watched yet.
    fn unready_while_failing(self) -> bool {
        matches!(
            self,
            Discovery | List | WatchStart | WatchError | WebhookList | SliceList
        )
    }
}

/// An answer of the server, or of a proxy in front of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reply_ {
    Code(u16),
    Invalid,
    RetryAfter,
    Reset,
    Hang,
    NotJson,
}

use Reply_::*;

const ANSWERS: [Reply_; 17] = [
    Code(400),
    Code(401),
    Code(403),
    Code(404),
    Code(409),
    Code(410),
    Invalid,
    Code(422),
    RetryAfter,
    Code(429),
    Code(500),
    Code(502),
    Code(503),
    Code(504),
    Reset,
    Hang,
    NotJson,
];

impl fmt::Display for Reply_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Code(c) => write!(f, "{c}"),
            Invalid => f.write_str("422+causes"),
            RetryAfter => write!(f, "429+RA{RETRY_AFTER}"),
            Reset => f.write_str("reset"),
            Hang => f.write_str("hang"),
            NotJson => f.write_str("not-json"),
        }
    }
}

fn rule(request: Request, reply: Reply_) -> Answer {
    let (kind, prefix) = request.select();
    let (r, code) = match (request, reply) {
        (WatchError, Code(c)) => (Reply::WatchError, c),
        (WatchError, Invalid) => (Reply::WatchError, 422),
        (WatchError, RetryAfter) => (Reply::WatchError, 429),
        (_, Code(c)) => (Reply::Status, c),
        (_, Invalid) => (Reply::Status, 422),
        (_, RetryAfter) => (Reply::Status, 429),
        (_, Reset) => (Reply::Reset, 0),
        (_, Hang) => (Reply::Hang, 0),
        (_, NotJson) => (Reply::NotJson, 0),
    };
    let mut a = Answer::new(Some(kind), Some(prefix), r, code);
    a.causes = reply == Invalid;
    if reply == RetryAfter {
        a.retry_after_secs = Some(RETRY_AFTER);
    }
    a
}

/// The cells: every request against every answer; a watch's ERROR event carries a Status,
/// so its row has the codes only (a reset mid-watch, a line that is not JSON and a silent
/// watch are `tests/chaos.rs`'s cut and malformed watches and `tests/never_stuck.rs`).
fn cells() -> Vec<(Request, Reply_)> {
    REQUESTS
        .iter()
        .flat_map(|r| ANSWERS.iter().map(move |a| (*r, *a)))
        .filter(|(r, a)| *r != WatchError || !matches!(a, Reset | Hang | NotJson))
        .collect()
}

/// The most requests of the faulted kind a minute may see (derivation at the top).
fn bound(request: Request, reply: Reply_) -> usize {
    let watch = match reply {
        RetryAfter => 4,
        Code(410) => 8,
        _ => 7,
    };
    match request {
        Discovery if matches!(reply, Code(401 | 403)) => 152,
        Discovery | List | WatchStart | WatchError | WebhookList | SliceList => watch,
        Patch if reply == RetryAfter => 6,
        Patch => 19,
        WebhookPatch if reply == RetryAfter => 4,
        WebhookPatch => 10,
        Event => 8,
    }
}

/// What metainit must do in a cell, where it is not "runs, bounded, recovers": exit with
/// this code, having said this.
fn expected_exit(request: Request, reply: Reply_) -> Option<(i32, &'static str)> {
    match (request, reply) {
        // Refused for good once the server's own `/readyz` has said the same for `STARTING`
        // (60 s): exit 2 with what to fix (tests/starting.rs).
        (Discovery, Code(401)) => Some((2, "refused the kubeconfig's credentials")),
        (Discovery, Code(403)) => Some((2, "forbidden")),
        // Not a Kubernetes API server: exit 2 saying so.
        (Discovery, NotJson) => Some((2, "does not look like a Kubernetes API server")),
        // A start-up request answered with a client error no retry mends: exit 1 with the
        // server's answer; the restarts are the kubelet's backoff (10 s doubling to 5 min).
        (Discovery, Code(c @ (400 | 404 | 409 | 410 | 422))) => Some((1, code_text(c))),
        (Discovery, Invalid) => Some((1, "422 Invalid")),
        _ => None,
    }
}

fn code_text(c: u16) -> &'static str {
    match c {
        400 => "400 BadRequest",
        404 => "404 NotFound",
        409 => "409 Conflict",
        410 => "410 Expired",
        _ => "422 Invalid",
    }
}

/// How long the fault is held: a minute, or until the exit that is due (`STARTING` runs a
/// minute from the first 401 or 403, so a little longer there). Requests are counted over
/// the first minute.
fn held(request: Request, reply: Reply_) -> Duration {
    if expected_exit(request, reply).is_some() {
        HELD + Duration::from_secs(20)
    } else {
        HELD
    }
}

/// A PATCH answered 404 is the object gone (`failure.rs`: not retried; the watch says
/// when it comes back): only the next relist finds it again. Those cells resync every 20 s.
fn resyncs(request: Request, reply: Reply_) -> bool {
    matches!(request, Patch | WebhookPatch) && reply == Code(404)
}

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

fn query_map(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn matching(bed: &Bed, rule: &Answer, from: SystemTime, to: SystemTime) -> usize {
    bed.double
        .requests()
        .into_iter()
        .filter(|r| r.at >= from && r.at <= to)
        .filter(|r| {
            let (path, q) = r
                .path_and_query
                .split_once('?')
                .unwrap_or((r.path_and_query.as_str(), ""));
            let method: http::Method = r.method.parse().unwrap_or(http::Method::GET);
            let kind = kube_double::routes::request_kind(&method, path, &query_map(q));
            rule.matches(&r.method, path, kind)
        })
        .count()
}

fn cleared(bed: &Bed, names: &[&str]) -> bool {
    names.iter().all(|n| {
        bed.double
            .get("pods", "default", n)
            .is_some_and(|p| gates(&p).is_empty())
    })
}

fn exempted(bed: &Bed) -> bool {
    bed.double
        .get(VWC, "", "gk")
        .is_some_and(|c| c["metadata"]["annotations"][ANNOTATION].is_string())
}

/// The labelled configuration `gk` failing closed on pod creation, calling `gk/gk-svc` with
/// no ready endpoint: after --webhook-grace, metainit exempts `gk`.
fn gatekeeper(bed: &Bed) {
    serve(&bed.double, "gk", "gk-svc", false);
    let config = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "gk", "labels": {LABEL: ""}},
        "webhooks": [{
            "name": "validate.gk.example.com",
            "clientConfig": {"service": {"namespace": "gk", "name": "gk-svc", "path": "/v"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gk"}},
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
        }],
    });
    bed.double.create(VWC, "", config).expect("configuration");
}

async fn cell(request: Request, reply: Reply_) -> Seen {
    let bed = Bed::modern().await;
    let rule = rule(request, reply);
    bed.double
        .create("pods", "default", gated_pod("p-1", true, &[GATE]))
        .expect("p-1");
    if request.webhooks() {
        gatekeeper(&bed);
    }
    bed.double.set_faults(Faults {
        answers: vec![rule.clone()],
        ..Faults::default()
    });
    let mut args = vec!["--request-timeout", "10s"];
    if resyncs(request, reply) {
        args.extend(["--resync-period", "20s"]);
    }
    if request.webhooks() {
        args.extend(["--webhooks", "--webhook-grace", "1s"]);
    }
    let mut m = bed.metainit(&args);
    let from = SystemTime::now();
    let start = Instant::now();
    let addr = m.admin_addr().await;
    let mut exited = None;
    let mut readyz_during = None;
    let mut names = vec!["p-1"];
    let mut created = false;
    let mut requests = None;
    while start.elapsed() < held(request, reply) {
        if requests.is_none() && start.elapsed() >= HELD {
            requests = Some(matching(&bed, &rule, from, SystemTime::now()));
        }
        if let Some(status) = m.child.try_wait().expect("try_wait") {
            tokio::time::sleep(Duration::from_millis(200)).await;
            exited = Some((status.code().unwrap_or(-1), m.log().join("\n")));
            break;
        }
        // A pod created during the fault, where the webhook lets pods in (not `gk`'s rows:
        // its namespace only, but one pod is enough there).
        if !created && start.elapsed() >= HELD / 2 && !request.webhooks() {
            bed.double
                .create("pods", "default", gated_pod("p-2", true, &[GATE]))
                .expect("p-2");
            names.push("p-2");
            created = true;
        }
        if readyz_during.is_none() && start.elapsed() >= HELD - Duration::from_secs(5) {
            readyz_during = Some(admin_get(&addr, "/readyz").await.0);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let window = from + HELD;
    let requests = requests.unwrap_or_else(|| matching(&bed, &rule, from, window));
    bed.double.set_faults(Faults::default());
    let (mut cleared_after, mut ready_after) = (None, None);
    if exited.is_none() {
        let lifted = Instant::now();
        while lifted.elapsed() < RECOVER && (cleared_after.is_none() || ready_after.is_none()) {
            if cleared_after.is_none()
                && cleared(&bed, &names)
                && (!request.webhooks() || exempted(&bed))
            {
                cleared_after = Some(lifted.elapsed());
            }
            if ready_after.is_none() && admin_get(&addr, "/readyz").await.0 == 200 {
                ready_after = Some(lifted.elapsed());
            }
            if let Some(status) = m.child.try_wait().expect("try_wait") {
                exited = Some((status.code().unwrap_or(-1), "exited after the fault".into()));
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_against_every_answer_for_a_minute() {
    let started = Instant::now();
    let cpu_before = children_cpu();
    let only = std::env::var("SWEEP_ONLY").ok();
    let cells: Vec<_> = cells()
        .into_iter()
        .filter(|(r, a)| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|c| c == format!("{r:?}/{a}")))
        })
        .collect();
    let results = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = cells
        .iter()
        .map(|&(r, a)| {
            let results = results.clone();
            tokio::spawn(async move {
                let seen = cell(r, a).await;
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
    let mut failures = Vec::new();
    eprintln!(
        "{:<13} {:<11} {:>5} {:>5} {:>6} {:>8} {:>8}  outcome",
        "request", "answer", "seen", "bound", "readyz", "cleared", "ready"
    );
    for (r, a, s) in &results {
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
    let cpu = children_cpu().saturating_sub(cpu_before);
    eprintln!(
        "{} cells in {:.0?} wall, metainit processes' CPU {:.0?}, this process's CPU {:.0?}",
        results.len(),
        started.elapsed(),
        cpu,
        own_cpu()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
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
