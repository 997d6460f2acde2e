//! A refused connection is retried about once a second (`src/retry.rs`), on the double: a
//! server that stops listening and listens again, which the fault proxy cannot make (it
//! accepts every connection). The watch starts' backoff, counted against the real server
//! behind the proxy, is in tests/cluster_backoff.rs.

mod common;

use std::time::Duration;

use common::*;

const GATE: &str = "kueue.x-k8s.io/admission";

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
