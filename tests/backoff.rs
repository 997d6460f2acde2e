//! A backoff is only real if a test counts the requests: faults held against the double,
//! and the LISTs, watch starts and PATCHes it saw counted against bounds derived from the
//! schedule (`src/retry.rs`, `WATCH`: 0.8 s doubling to 30 s, less up to a fifth; a first 410 at
//! once; a refused connection about once a second).

mod common;

use std::time::{Duration, Instant};

use common::*;
use kube_double::{Faults, Rejection};

const GATE: &str = "kueue.x-k8s.io/admission";

/// Requests for the pods' collection: LISTs, and watch starts.
fn pods_requests(bed: &Bed, watch: bool) -> Vec<kube_double::RequestRecord> {
    bed.double
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET")
        .filter(|r| {
            r.path_and_query
                .split('?')
                .next()
                .is_some_and(|p| p.ends_with("/pods"))
        })
        .filter(|r| r.path_and_query.contains("watch=true") == watch)
        .collect()
}

fn patches(bed: &Bed) -> usize {
    bed.double.arrived("PATCH")
}

/// Every watch start answered `code`, and the labelled pod's PATCH refused (422 with
/// causes): the relist that each such watch start needs must wait its turn, and the refused
/// pod's retries keep their own backoff across relists.
async fn watch_starts_answered(code: u16) {
    let bed = Bed::modern().await;
    bed.double
        .create("pods", "default", gated_pod("refused-1", true, &[GATE]))
        .unwrap();
    bed.double.set_faults(Faults {
        error_fraction: 1.0,
        error_codes: vec![code],
        error_only: vec!["watch".into()],
        reject_writes: Some(Rejection {
            name_prefix: "refused-".into(),
            code: 422,
            message: "a policy refuses it".into(),
        }),
        ..Faults::default()
    });
    let m = bed.metainit(&[]);
    let addr = m.admin_addr().await;
    // The window starts at the first list; the fault is seen happening before it is counted.
    eventually("a first LIST", Duration::from_secs(20), || {
        !pods_requests(&bed, false).is_empty()
    })
    .await;
    let start = Instant::now();
    let window = Duration::from_secs(12);
    eventually("two watch starts refused", window, || {
        pods_requests(&bed, true)
            .iter()
            .filter(|r| r.status == code)
            .count()
            >= 2
    })
    .await;
    tokio::time::sleep(window.saturating_sub(start.elapsed())).await;
    let (lists, watches, patched) = (
        pods_requests(&bed, false).len(),
        pods_requests(&bed, true).len(),
        patches(&bed),
    );
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

    // Lifted: the watch starts, and the pod is cleared once the policy lets it through.
    bed.double.set_faults(Faults::default());
    eventually(
        "cleared once the faults are lifted",
        Duration::from_secs(40),
        || {
            bed.double
                .get("pods", "default", "refused-1")
                .is_some_and(|p| gates(&p).is_empty())
        },
    )
    .await;
    until_readyz(&addr, Duration::from_secs(40)).await;
    m.stop().await;
}

#[tokio::test]
async fn watch_start_504_relists_on_the_backoff_not_in_a_loop() {
    watch_starts_answered(504).await;
}

#[tokio::test]
async fn watch_start_410_relists_at_once_then_on_the_backoff() {
    watch_starts_answered(410).await;
}

/// A server that went away and came back is met within about a second: a refused
/// connection is retried about once a second however long the outage, not on a step that
/// grew to 12.8 s over 20 s of refusals.
#[tokio::test]
async fn a_server_back_after_20s_is_met_within_about_a_second() {
    let bed = Bed::modern().await;
    let m = bed.metainit(&[]);
    let addr = m.admin_addr().await;
    until_readyz(&addr, Duration::from_secs(20)).await;
    bed.double.stop();
    let outage = Duration::from_secs(20);
    tokio::time::sleep(outage).await;
    bed.double.clear_requests();
    bed.double.resume().await.expect("the double listens again");
    let back = std::time::SystemTime::now();
    bed.double
        .create("pods", "default", gated_pod("after-1", true, &[GATE]))
        .unwrap();
    eventually(
        "the pod created at the restart cleared",
        Duration::from_secs(30),
        || {
            bed.double
                .get("pods", "default", "after-1")
                .is_some_and(|p| gates(&p).is_empty())
        },
    )
    .await;
    let first = bed
        .double
        .requests()
        .into_iter()
        .map(|r| r.at)
        .min()
        .expect("a request after the restart");
    let lag = first.duration_since(back).unwrap_or_default();
    eprintln!("the first request {lag:?} after the server was back");
    // About a second (1.2 s at most, plus the time to connect); the exponential step after
    // 20 s of failures would be 12.8 s.
    assert!(
        lag < Duration::from_millis(2500),
        "the first request came {lag:?} after the server was back"
    );
    m.stop().await;
}
