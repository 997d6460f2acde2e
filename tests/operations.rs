//! Events on Kubernetes 1.13 (initializers), which no real server here runs: the double.
//! Everything else an operator relies on (/healthz, /readyz, /metrics, the modern Events,
//! SIGTERM, `--once`'s ending) runs on the real control plane: tests/cluster_operations.rs
//! and tests/cluster_signals.rs.

mod common;

use std::time::Duration;

use common::*;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn events_are_written_for_cleared_initializers() {
    let bed = Bed::legacy(&["podimage.example.com"]).await;
    bed.double
        .create("pods", "default", pod("web", true))
        .unwrap();
    let m = bed.metainit(&["--node-name", "cp-1"]);
    eventually("an event", WAIT, || !bed.double.events().is_empty()).await;
    let events = bed.double.events();
    assert_eq!(events.len(), 1, "{events:#?}");
    let e = &events[0];
    assert_eq!(e["reason"], "InitializersCleared");
    assert_eq!(e["type"], "Normal");
    assert_eq!(e["involvedObject"]["kind"], "Pod");
    assert_eq!(e["involvedObject"]["name"], "web");
    assert_eq!(e["involvedObject"]["namespace"], "default");
    assert_eq!(e["reportingComponent"], "metainit");
    assert_eq!(e["reportingInstance"], "cp-1");
    assert_eq!(e["source"]["host"], "cp-1");
    let message = e["message"].as_str().unwrap();
    assert!(message.contains("podimage.example.com"), "{message}");
    assert!(m.stop().await.success());
}
