//! Signals and `--once`'s ending, on the real control plane: SIGTERM lets the PATCHes in
//! flight finish, a second signal exits at once, SIGTERM during `--once` finishes what is
//! in flight and says what was not done, SIGTERM before the server answers; `--once`
//! waits for every Event, retries for its whole `--timeout` budget, and exits quietly into
//! a closed pipe. Each test is a scene of its own on the shared control plane
//! (tests/common/scene.rs); a slow PATCH, a 422 on one pod's PATCH and a server that does
//! not answer are the fault proxy of tests/common/fuzz.rs in front of it. These ran on the
//! double's modern generation before (tests/operations.rs).

mod common;

use std::time::{Duration, Instant};

use common::{
    Metainit, admin_until,
    control_plane::{WAIT, until},
    fuzz::{Fault, Plan, Proxy},
    msg, run_into_closed_pipe,
    scene::{Rights, Scene},
};
use metainit::client::RequestKind;
use serde_json::json;

const KUEUE: &str = "kueue.x-k8s.io/admission";
const NS: &str = "sig";

/// The scene's labelled pods `names`, gated by Kueue.
fn gated(s: &Scene, names: &[String]) {
    let items: Vec<_> = names.iter().map(|n| s.gated_pod(n, KUEUE)).collect();
    s.add(
        NS,
        &json!({"apiVersion": "v1", "kind": "List", "items": items}),
    );
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

/// Every PATCH held `wait` by the proxy, then forwarded.
fn slow_patches(wait: Duration) -> Plan {
    Plan::Fixed(
        RequestKind::Patch,
        Fault::Delay(wait, Box::new(Fault::Forward)),
    )
}

/// The PATCH of the scene's pod `stuck` answered 422 (the server refusing it) by the proxy.
fn stuck_refused(s: &Scene) -> Plan {
    let path = format!("/api/v1/namespaces/{}/pods/stuck", s.home);
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                      "code": 422, "reason": "Invalid", "message": "no"});
    let refused = Fault::Status(422, None, Some(body.to_string()));
    Plan::Fixed(RequestKind::Patch, Fault::At(path, Box::new(refused)))
}

/// How many PATCHes reached the proxy.
fn patches_sent(proxy: &Proxy) -> usize {
    proxy.received(RequestKind::Patch, Instant::now())
}

/// Waits until `n` PATCHes reached the proxy.
async fn until_sent(proxy: &Proxy, n: usize) {
    until(&format!("{n} PATCHes sent"), WAIT, || async {
        (patches_sent(proxy) >= n).then_some(())
    })
    .await;
}

/// Waits until `n` log lines contain `what`.
async fn logged(m: &Metainit, what: &str, n: usize) {
    until(what, WAIT, || async {
        (m.log().iter().filter(|l| l.contains(what)).count() >= n).then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn sigterm_lets_in_flight_patches_finish() {
    let mut s = Scene::new(&[NS], Rights::Files).await;
    let proxy = s.behind(slow_patches(Duration::from_millis(1500))).await;
    let mut m = s.metainit(&[]);
    let addr = m.admin_addr().await;
    admin_until(&addr, "/readyz", 200, &[], WAIT).await;
    proxy.faulty(true);
    let pods = names("p", 10);
    gated(&s, &pods);
    until_sent(&proxy, 10).await;
    assert_eq!(patches_sent(&proxy), 10);
    assert_eq!(s.patched().len(), 0, "no patch has reached the server yet");
    m.signal("TERM");
    let status = m.wait(WAIT).await;
    assert_eq!(status.code(), Some(0), "{:#?}", m.log());
    let done = until("the PATCHes audited", WAIT, || async {
        let p = s.patched();
        (p.len() >= 10).then_some(p)
    })
    .await;
    assert_eq!(done.len(), 10, "all in-flight patches completed: {done:#?}");
    for name in &pods {
        assert!(s.gates(NS, name).await.is_empty(), "{name}");
    }
    assert!(
        m.log()
            .iter()
            .any(|l| l.contains("waiting for in-flight patches: 10 in flight, 0 queued")),
        "{:#?}",
        m.log()
    );
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_second_signal_exits_at_once() {
    let mut s = Scene::new(&[NS], Rights::Files).await;
    let proxy = s.behind(slow_patches(Duration::from_secs(30))).await;
    let mut m = s.metainit(&["--shutdown-timeout", "60s"]);
    let addr = m.admin_addr().await;
    admin_until(&addr, "/readyz", 200, &[], WAIT).await;
    proxy.faulty(true);
    gated(&s, &["slow".into()]);
    until_sent(&proxy, 1).await;
    m.signal("TERM");
    logged(&m, "waiting for in-flight patches: 1 in flight", 1).await;
    m.signal("INT");
    let started = Instant::now();
    let status = m.wait(Duration::from_secs(5)).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(status.code(), Some(130));
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn once_waits_for_every_event() {
    let mut s = Scene::new(&[NS], Rights::Files).await;
    // Slow Event writes would be cut off if --once exited without waiting for them.
    let slow = Fault::Delay(Duration::from_millis(50), Box::new(Fault::Forward));
    let proxy = s.behind(Plan::Fixed(RequestKind::Write, slow)).await;
    proxy.faulty(true);
    gated(&s, &names("p", 60));
    let mut m = s.metainit(&["--once", "--concurrency", "4"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(0), "{:#?}", m.log());
    assert!(m.out().contains("cleared 60,"), "{}", m.out());
    // As the server has them the moment metainit has exited.
    let list = format!("/api/v1/namespaces/{}/events", s.home);
    let events = s
        .send(http::Request::get(list).body(Vec::new()).expect("request"))
        .await
        .expect("events listed");
    let cleared = events["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|e| e["reason"] == "SchedulingGatesCleared")
        .count();
    assert_eq!(
        cleared, 60,
        "one Event per cleared pod, all written before exit"
    );
}

/// All in flight: finished, exit 0.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn sigterm_during_once_finishes_what_is_in_flight() {
    let mut s = Scene::new(&[NS], Rights::Files).await;
    let proxy = s.behind(slow_patches(Duration::from_millis(1500))).await;
    proxy.faulty(true);
    gated(&s, &names("a", 2));
    let mut m = s.metainit(&["--once", "--concurrency", "2"]);
    logged(&m, "patching", 2).await;
    m.signal("TERM");
    assert_eq!(m.wait(WAIT).await.code(), Some(0), "{:#?}", m.log());
    assert!(m.out().starts_with("cleared 2,"), "{}", m.out());
    assert!(m.log().iter().any(|l| l.contains(msg::ONCE_SIGNAL)));
    for name in names("a", 2) {
        assert!(s.gates(NS, &name).await.is_empty(), "{name}");
    }
}

/// More than the concurrency: the ones not started are not tried, exit 1.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn sigterm_during_once_says_what_was_not_tried() {
    let mut s = Scene::new(&[NS], Rights::Files).await;
    let proxy = s.behind(slow_patches(Duration::from_millis(1500))).await;
    proxy.faulty(true);
    gated(&s, &names("b", 4));
    let mut m = s.metainit(&["--once", "--concurrency", "2"]);
    logged(&m, "patching", 2).await;
    m.signal("TERM");
    assert_eq!(m.wait(WAIT).await.code(), Some(1), "{:#?}", m.log());
    assert!(
        m.out().starts_with("cleared 2,")
            && m.out().ends_with(&format!(
                "failed 0, not tried 2 ({} them)",
                msg::INTERRUPTED
            )),
        "{}",
        m.out()
    );
    assert_eq!(patches_sent(&proxy), 2, "the two not tried were not sent");
}

/// An object waiting to be retried is not waited for: exit 1 at once, naming it.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn sigterm_during_once_does_not_wait_for_a_retry() {
    let mut s = Scene::new(&[NS], Rights::Files).await;
    let proxy = s.behind(stuck_refused(&s)).await;
    proxy.faulty(true);
    gated(&s, &["stuck".into()]);
    let mut m = s.metainit(&["--once", "--timeout", "60s"]);
    logged(&m, msg::RETRYING, 2).await;
    let signalled = Instant::now();
    m.signal("TERM");
    assert_eq!(m.wait(WAIT).await.code(), Some(1), "{:#?}", m.log());
    assert!(signalled.elapsed() < Duration::from_secs(10));
    assert!(m.out().ends_with("failed 1"), "{}", m.out());
    let named = format!("{}/stuck", s.home);
    assert!(
        m.log()
            .iter()
            .any(|l| l.contains(msg::COULD_NOT_CLEAR) && l.contains(&named)),
        "{:#?}",
        m.log()
    );
}

/// `--once` and `status`, signalled while the server has not answered yet: each exits 1
/// and says what it did not do; the server dropping the connections or answering 503.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn sigterm_before_the_server_answers_ends_once_and_status_with_a_message() {
    for fault in [Fault::Reset, Fault::Status(503, None, None)] {
        let mut s = Scene::new(&[NS], Rights::Files).await;
        let plan = Plan::Each(
            RequestKind::ALL
                .iter()
                .map(|k| (*k, fault.clone()))
                .collect(),
        );
        let proxy = s.behind(plan).await;
        proxy.faulty(true);
        let kc = s.kubeconfig.display().to_string();
        let scope = ["--label-key", &s.key, "--namespace", &s.home];
        let once = [&["--kubeconfig", &kc, "--once"][..], &scope].concat();
        let status = [&["status", "--kubeconfig", &kc][..], &scope].concat();
        for (args, said) in [
            (
                once,
                format!(
                    "{} the server answered: nothing was cleared",
                    msg::INTERRUPTED
                ),
            ),
            (
                status,
                format!(
                    "error: {} before every object was listed: nothing printed",
                    msg::STATUS_SIGNAL
                ),
            ),
        ] {
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            let mut m = Metainit::spawn(&args);
            logged(&m, msg::NOT_REACHABLE_YET, 1).await;
            m.signal("TERM");
            let code = m.wait(WAIT).await.code();
            assert_eq!(code, Some(1), "{fault:?} {args:?}: {:#?}", m.log());
            assert!(
                m.log().iter().any(|l| l.contains(&said)),
                "{fault:?} {args:?}: {said:?} not in {:#?}",
                m.log()
            );
        }
        assert!(s.requests().is_empty(), "nothing reached the server");
    }
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn once_retries_for_the_whole_timeout_budget() {
    let mut s = Scene::new(&[NS], Rights::Files).await;
    let proxy = s.behind(stuck_refused(&s)).await;
    proxy.faulty(true);
    gated(&s, &["stuck".into()]);
    let mut m = s.metainit(&["--once", "--timeout", "4s"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(1), "{:#?}", m.log());
    let patches: Vec<Instant> = proxy
        .seen()
        .into_iter()
        .filter(|r| r.kind == RequestKind::Patch)
        .map(|r| r.at)
        .collect();
    assert!(!patches.is_empty(), "no PATCH sent: {:#?}", m.log());
    let spread = patches[patches.len() - 1] - patches[0];
    // 100 ms doubling: stopping when the next wait would overrun ends near 3.1 s; using
    // the budget to its end tries a last time near 4 s.
    assert!(
        spread >= Duration::from_millis(3600) && spread <= Duration::from_millis(4500),
        "PATCHes from first to last: {spread:?} ({} of them)",
        patches.len()
    );
    assert_eq!(s.gates(NS, "stuck").await, [KUEUE]);
}

/// `metainit --once | head -1`: once the reader of its summary is gone, `--once` exits as
/// it would have, quietly, without a panic.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn once_into_a_closed_pipe_exits_quietly() {
    let s = Scene::new(&[NS], Rights::Files).await;
    gated(&s, &["p".into()]);
    let kc = s.kubeconfig.display().to_string();
    let args = [
        "--kubeconfig",
        &kc,
        "--label-key",
        &s.key,
        "--namespace",
        &s.home,
        "--once",
    ];
    let (code, err) = run_into_closed_pipe(&args, WAIT).await;
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(s.gates(NS, "p").await.is_empty());
}
