//! Instances that share the work (src/peers/) on Kubernetes 1.13, which has no Lease API
//! and no real server here runs: the double. Each instance clears every pod at once, says
//! so, and asks for the API again in minutes, not at every renewal. Sharing itself (one
//! PATCH a pod, an instance killed, the missing right, a Lease not renewed for an hour) runs
//! on the real control plane: tests/cluster_peers.rs (tests/control_plane_ha.rs plays it on
//! three real API servers, and `cargo bench --bench peers` measures it).

mod common;

use std::time::Duration;

use common::*;

const SHARING: &[&str] = &["--peer-delay", "500ms"];

#[tokio::test]
async fn before_the_lease_api_each_instance_clears_at_once() {
    let bed = Bed::legacy(&["example.com/init"]).await;
    let m = bed.metainit(SHARING);
    m.logged("no Lease API said", |l| {
        l.contains("INFO") && l.contains("no Lease API")
    })
    .await;
    assert!(m.problems().is_empty(), "{:#?}", m.problems());
}

/// How long the absent Lease API is held: a round every renewal (2 s) is 15 rounds in it,
/// a round every five minutes one.
const ABSENT_WINDOW: Duration = Duration::from_secs(30);

/// Without the Lease API (Kubernetes 1.13 answers 404), the Lease is asked for again in
/// minutes, not at every renewal (#58: 60 requests a minute, for ever), and the log says
/// when: one round in the window, at most a few requests.
#[tokio::test]
async fn an_absent_lease_api_is_asked_again_in_minutes() {
    let bed = Bed::legacy(&["example.com/init"]).await;
    let said = "no Lease API";
    let start = std::time::SystemTime::now();
    let began = std::time::Instant::now();
    let m = bed.metainit(SHARING);
    m.logged(said, |l| l.contains(said)).await;
    tokio::time::sleep(ABSENT_WINDOW.saturating_sub(began.elapsed())).await;
    let until = start + ABSENT_WINDOW;
    let seen: Vec<String> = bed
        .double
        .requests()
        .into_iter()
        .filter(|r| r.path_and_query.contains("/leases") && r.at >= start && r.at <= until)
        .map(|r| format!("{} {} {}", r.method, r.path_and_query, r.status))
        .collect();
    let line = m
        .log()
        .into_iter()
        .find(|l| l.contains(said))
        .unwrap_or_default();
    eprintln!("in {ABSENT_WINDOW:?}: {} Lease requests", seen.len());
    assert!(!seen.is_empty(), "never asked");
    assert!(seen.len() <= 4, "{} Lease requests: {seen:#?}", seen.len());
    assert!(seen.iter().all(|r| r.ends_with(" 404")), "{seen:#?}");
    assert!(line.contains(msg::LOOKING_AGAIN), "{line}");
}
