//! A backoff is only real if a test counts the requests: the fault proxy of
//! tests/common/fuzz.rs in front of the real kube-apiserver answers every watch start with an
//! error and refuses one pod's PATCH, and the LISTs, watch starts and PATCHes it saw are
//! counted against bounds derived from the schedule (`src/retry.rs`, `WATCH`: 0.8 s doubling to
//! 30 s, less up to a fifth; a first 410 at once). And the resync never cuts a list: a list
//! slower than `--resync-period` completes. These ran on the double's modern generation
//! before; each test is a scene of its own on the shared control plane.

mod common;

use std::time::{Duration, Instant};

use common::{
    admin_get,
    control_plane::{WAIT, until},
    fuzz::{Fault, Plan, Seen},
    scene::{Rights, Scene},
    until_readyz,
};
use metainit::client::RequestKind;
use serde_json::json;

/// The requests of `kind` the proxy saw whose method and URL hold `part`.
fn of(seen: &[Seen], kind: RequestKind, part: &str) -> usize {
    seen.iter()
        .filter(|s| s.kind == kind && s.what.contains(part))
        .count()
}

/// A 422 with causes, as an admission policy refuses a write.
fn refused() -> String {
    json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422,
        "reason": "Invalid", "message": "a policy refuses it",
        "details": {"causes": [{"reason": "FieldValueForbidden",
            "message": "a policy refuses it", "field": "spec.schedulingGates"}]},
    })
    .to_string()
}

/// Every watch start answered `code`, and the labelled pod's PATCH refused (422 with
/// causes): the relist that each such watch start needs must wait its turn, and the refused
/// pod's retries keep their own backoff across relists.
async fn watch_starts_answered(code: u16) {
    let mut s = Scene::new(&["backoff"], Rights::Files).await;
    let gate = s.gate("g");
    s.add("backoff", &s.gated_pod("refused-1", &gate));
    let pod_path = format!("/api/v1/namespaces/{}/pods/refused-1", s.ns("backoff"));
    let proxy = s
        .behind(Plan::Each(vec![
            (RequestKind::WatchStart, Fault::Status(code, None, None)),
            (
                RequestKind::Patch,
                Fault::At(
                    pod_path,
                    Box::new(Fault::Status(422, None, Some(refused()))),
                ),
            ),
        ]))
        .await;
    proxy.faulty(true);
    let m = s.metainit(&[]);
    let addr = m.admin_addr().await;
    // The window starts at the first list; the fault is seen happening before it is counted.
    until("a first LIST of pods", WAIT, || async {
        (of(&proxy.seen(), RequestKind::List, "/pods?") > 0).then_some(())
    })
    .await;
    let start = Instant::now();
    let window = Duration::from_secs(12);
    until("two watch starts refused", window, || async {
        (of(&proxy.seen(), RequestKind::WatchStart, "/pods?") >= 2).then_some(())
    })
    .await;
    tokio::time::sleep(window.saturating_sub(start.elapsed())).await;
    let seen = proxy.seen();
    let lists = of(&seen, RequestKind::List, "/pods?");
    let watches = of(&seen, RequestKind::WatchStart, "/pods?");
    let patched = of(&seen, RequestKind::Patch, "/pods/refused-1");
    eprintln!(
        "{code} at every watch start, 12 s: {lists} LISTs, {watches} watch starts, {patched} PATCHes"
    );
    // 12 s after the first LIST, the steps (at least 0.64, 1.28, 2.56, 5.12 s: 9.6 s) allow
    // at most 5 more relists, and a 410 one more at once: 7. Before this bound, 15,000.
    assert!(
        lists <= 7 && watches <= 7,
        "{code} at every watch start: {lists} LISTs and {watches} watch starts in 12 s"
    );
    // The pod's own backoff: 100 ms doubling, at least 80 ms, 160 ms, ... (8 attempts in
    // 12 s; one more if a relist finds it while it is being worked on), not cancelled by
    // each relist. Before this bound, one PATCH per relist.
    assert!(
        (1..=10).contains(&patched),
        "{patched} PATCHes of the refused pod in 12 s"
    );
    let (code_now, body) = admin_get(&addr, "/readyz").await;
    assert_eq!(
        code_now, 503,
        "/readyz while every watch start fails: {body}"
    );

    assert!(
        !s.gates("backoff", "refused-1").await.is_empty(),
        "the refused pod kept its gate while its PATCH was refused"
    );

    // Lifted: the watch starts, and the pod is cleared once the policy lets it through.
    proxy.faulty(false);
    until("cleared once the faults are lifted", WAIT, || async {
        s.gates("backoff", "refused-1")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    until_readyz(&addr, WAIT).await;
    m.stop().await;
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn watch_start_504_relists_on_the_backoff_not_in_a_loop() {
    watch_starts_answered(504).await;
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn watch_start_410_relists_at_once_then_on_the_backoff() {
    watch_starts_answered(410).await;
}

/// The resync never cuts a list: a list slower than `--resync-period` completes, and the pod
/// on its last page is cleared (the period once ran from the previous resync's start, and a
/// resync replaced the watch even mid-list: such a list never finished, `/readyz` stayed 503
/// and the pods past the pages reached were never seen).
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_list_slower_than_the_resync_period_completes() {
    let mut s = Scene::new(&["resync"], Rights::Files).await;
    // Three pages of 500; the one gated pod sorts last (etcd lists by name), on the third.
    // No scheduler takes them: kube-scheduler would bind the ungated ones.
    let mut items: Vec<_> = (0..1000)
        .map(|i| s.labelled_pod(&format!("p-{i:04}"), &[]))
        .collect();
    items.push(s.gated_pod("p-9999", &s.gate("g")));
    for item in &mut items {
        item["spec"]["schedulerName"] = json!("none");
    }
    s.add(
        "resync",
        &json!({"apiVersion": "v1", "kind": "List", "items": items}),
    );
    // Each page 600 ms: the list takes 1.8 s, the period is 1 s.
    let proxy = s
        .behind(Plan::Fixed(
            RequestKind::List,
            Fault::Delay(Duration::from_millis(600), Box::new(Fault::Forward)),
        ))
        .await;
    proxy.faulty(true);
    let m = s.metainit(&["--resync-period", "1s"]);
    let addr = m.admin_addr().await;
    until(
        "the pod on the last page cleared",
        Duration::from_secs(60),
        || async { s.gates("resync", "p-9999").await.is_empty().then_some(()) },
    )
    .await;
    until_readyz(&addr, Duration::from_secs(30)).await;
    let continued = of(&proxy.seen(), RequestKind::Continue, "continue=");
    assert!(
        continued >= 2,
        "the list was paged: {continued} continue requests"
    );
    m.stop().await;
}
