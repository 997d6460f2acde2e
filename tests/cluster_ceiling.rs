//! A proxy with a short idle timeout in front of the real kube-apiserver (#49 item 6): our
//! proxy (tests/common/fuzz.rs) forwards every request to the real server, as metainit's
//! user (manifests/rbac.yaml), and for a minute ends each watch's stream, at once or after
//! 300 ms, as an HTTP proxy or load balancer with a short idle timeout does. Before #49
//! kube-runtime's watcher started a new watch each time at once, without a word: about 1,170
//! watch starts a minute with `/readyz` 200. Asserted: at most 20 watch starts and 20 LISTs
//! in the minute (the backoff gives 7 and 1), `/readyz` 503 saying why, and once the proxy
//! stops ending them a labelled gated pod created then is cleared and `/readyz` is 200.

mod common;

use std::time::{Duration, Instant};

use common::{control_plane::*, fuzz::*, *};
use metainit::client::RequestKind;
use serde_json::json;

const HELD: Duration = Duration::from_secs(60);
const RECOVER: Duration = Duration::from_secs(60);
const MOST: usize = 20;

async fn hold(cp: &'static ControlPlane, lasting: Duration) -> (usize, usize, u16, String) {
    let ns = cp.namespace("ceiling");
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan::Fixed(RequestKind::WatchStart, Fault::ForwardFor(lasting));
    let proxy = Proxy::start(&cp.metainit, plan).await;
    let kubeconfig = dir.path().join("proxied");
    proxy.write_kubeconfig(&cp.metainit, &kubeconfig);
    proxy.faulty(true);
    let start = Instant::now();
    let m = cp.metainit(&kubeconfig, &["--namespace", &ns]);
    let addr = m.admin_addr().await;
    tokio::time::sleep(HELD.saturating_sub(start.elapsed())).await;
    let (readyz, why) = admin_get(&addr, "/readyz").await;
    let count = |kind| proxy.received(kind, start + HELD);
    let lists = count(RequestKind::List) + count(RequestKind::Continue);
    let watches = count(RequestKind::WatchStart);
    proxy.faulty(false);
    cp.create(
        &ns,
        &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "after", "labels": {LABEL: "true"}},
                "spec": {"schedulingGates": [{"name": "example.com/g"}],
                         "containers": [{"name": "c", "image": "registry.invalid/c"}]}}),
    );
    let pods = cp.pods(&ns).await;
    until(
        "the pod created after the fault cleared",
        RECOVER,
        || async {
            pods.get("after")
                .await
                .ok()
                .filter(|p| gate_names(p).is_empty())
        },
    )
    .await;
    until_readyz(&addr, RECOVER).await;
    m.stop().await;
    (lists, watches, readyz, why)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_proxy_that_ends_every_watch_does_not_make_metainit_loop() {
    let cp = ControlPlane::shared().with_rbac();
    let rows = [Duration::ZERO, Duration::from_millis(300)];
    let results = futures::future::join_all(rows.iter().map(|d| hold(cp, *d))).await;
    let mut wrong = Vec::new();
    for (lasting, (lists, watches, readyz, why)) in rows.iter().zip(&results) {
        eprintln!(
            "each watch ended after {lasting:?} for a minute: {lists} LISTs, {watches} watch \
             starts, /readyz {readyz} ({why})"
        );
        if *lists > MOST || *watches > MOST {
            wrong.push(format!(
                "{lasting:?}: {lists} LISTs, {watches} watch starts"
            ));
        }
        if *readyz != 503 || !why.contains("watch ended at once") {
            wrong.push(format!("{lasting:?}: /readyz {readyz}: {why}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
