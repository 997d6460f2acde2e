//! `--webhooks` on the real control plane behind the fault proxy of tests/common/fuzz.rs: a
//! server that reports Kubernetes 1.20 (the proxy answers `/version`, the rest is the real
//! 1.37 server's), and a new service's first EndpointSlices list held back by the proxy
//! while `/readyz` is probed. Each test is a scene of its own on the shared control plane
//! (tests/common/webhooks.rs); these ran on the double before (tests/webhooks.rs).

mod common;

use std::time::{Duration, Instant};

use common::{
    admin_get,
    control_plane::WAIT,
    fuzz::{Fault, Plan},
    msg,
    webhooks::{Kind, Rights, Scene},
};
use metainit::client::RequestKind;

/// 1.14 to 1.20: no `kubernetes.io/metadata.name` on namespaces (the exemption would
/// exempt nothing) and no EndpointSlice v1: `--webhooks` exits 2 naming the version, as a
/// daemon, with `--once` and in `status`, and writes nothing.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn kubernetes_1_20_refuses_webhooks_naming_the_version() {
    let mut s = Scene::new(&["gk", "team"], Rights::Files).await;
    s.gatekeeper(false).await;
    let proxy = s.behind_version("v1.20.0").await;
    for extra in [&[][..], &["--once"][..]] {
        let mut args = vec!["--webhooks"];
        args.extend_from_slice(extra);
        let (code, _, err) = s.run(&args).await;
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains(msg::WEBHOOKS_TOO_OLD) && err.contains("is v1.20.0: drop --webhooks"),
            "{args:?}: {err}"
        );
    }
    let (code, _, err) = s.run(&["status", "--webhooks"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is v1.20.0: drop --webhooks"), "{err}");
    let seen = proxy.seen();
    assert!(
        seen.iter()
            .filter(|r| r.what.ends_with(" /version"))
            .count()
            >= 3,
        "each run asked /version through the proxy: {seen:#?}"
    );
    assert!(
        seen.iter().all(|r| r.what.starts_with("GET ")),
        "nothing written: {seen:#?}"
    );
    assert!(s.all_writes().is_empty(), "{:#?}", s.all_writes());
}

/// `/readyz` is about the process's own watches having listed once: a second labelled
/// configuration naming a new service starts that service's EndpointSlices watch, whose
/// first list (held 3 s by the proxy) does not make the process unready.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn readyz_stays_ready_while_a_new_services_watch_makes_its_first_list() {
    let mut s = Scene::new(&["gk", "gk2"], Rights::Files).await;
    s.gatekeeper(true).await;
    let slices = format!(
        "/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices",
        s.ns("gk2")
    );
    let slow = Fault::Delay(Duration::from_secs(3), Box::new(Fault::Forward));
    let plan = Plan::Fixed(RequestKind::List, Fault::At(slices.clone(), Box::new(slow)));
    let proxy = s.behind(plan).await;
    // Faulty before metainit starts: no watch of its is cut when the plan takes effect.
    proxy.faulty(true);
    let metainit = s.metainit(&["--webhooks", "--webhook-grace", "1s"]);
    let addr = metainit.admin_addr().await;
    common::until_readyz(&addr, WAIT).await;
    s.serve("gk2", "svc2", true);
    let second = s.config(
        "gk2",
        true,
        "validate.gk2.example.com",
        "Fail",
        "gk2",
        "svc2",
    );
    s.create(Kind::Validating, &second).await;
    // Answered: the server's audit log has the list complete (after the proxy's 3 s).
    let listed = || {
        s.requests().iter().any(|e| {
            e["verb"] == "list"
                && e["objectRef"]["resource"] == "endpointslices"
                && e["objectRef"]["namespace"] == s.ns("gk2")
                && e["responseStatus"]["code"] == 200
        })
    };
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    while !listed() {
        let (code, body) = admin_get(&addr, "/readyz").await;
        assert_eq!(code, 200, "while the new service's first list runs: {body}");
        assert!(
            start.elapsed() < WAIT,
            "the new service's EndpointSlices never listed"
        );
        tick.tick().await;
    }
    let held = proxy
        .seen()
        .iter()
        .filter(|r| r.kind == RequestKind::List && r.what.contains(&slices))
        .count();
    assert!(held >= 1, "the first list went through the proxy's delay");
    assert!(
        start.elapsed() >= Duration::from_millis(2500),
        "probed through the 3 s list: {:?}",
        start.elapsed()
    );
    let problems = metainit.problems();
    assert!(problems.is_empty(), "{problems:#?}");
    metainit.stop().await;
    s.check_network();
}
