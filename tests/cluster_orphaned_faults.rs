//! Orphaned gates under faults on the real control plane: the release PATCHes refused by
//! the fault proxy of tests/common/fuzz.rs in front of the real kube-apiserver
//! (`Scene::behind`), and what the operator sees of it (the log's failure count per pod,
//! the gate gone on the server once they are not). A pod's age is the server's
//! creationTimestamp, so the rule is seconds, not the minutes of a back-dated pod. Apart
//! from tests/cluster_orphaned.rs, which is at the 400 lines a file may hold; the
//! 2,000 back-dated pods under 20 % random errors stay on the double
//! (tests/orphaned_gates.rs).

mod common;

use std::time::Duration;

use common::{
    control_plane::until,
    fuzz::{Fault, Plan},
    gated_pod,
    scene::{Rights, Scene},
};
use metainit::client::RequestKind;

const NS: &str = "orphans";
const WAIT: Duration = Duration::from_secs(30);

/// The failures of a release are counted per pod for its backoff and its log line; a pod
/// released at last, then gone and back under the same name, starts from no failure.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn release_failures_start_afresh_after_a_release_and_for_a_new_pod() {
    let mut s = Scene::new(&[NS], Rights::RbacOnly).await;
    let (a, keep) = (
        s.gate("a.example.com/orphaned"),
        s.gate("kueue.x-k8s.io/admission"),
    );
    // A broken webhook: every PATCH refused with 500 while the proxy is faulty.
    let refuse = Fault::Status(500, None, None);
    let proxy = s.behind(Plan::Fixed(RequestKind::Patch, refuse)).await;
    proxy.faulty(true);
    let p = gated_pod("p", false, &[&a, &keep]);
    s.add(NS, &p);
    let metainit = s.metainit(&["--release-gate", &format!("{a}=2s")]);
    let object = format!("object={}/p", s.home);
    let failed = |n: u32| {
        let object = object.clone();
        move |l: &str| l.contains(&object) && l.contains(&format!("failures={n} "))
    };
    metainit.logged("three failures in a row", failed(3)).await;
    proxy.faulty(false);
    until("released", WAIT, || async {
        (s.gates(NS, "p").await == [keep.as_str()]).then_some(())
    })
    .await;

    // Gone and back under the same name (unbound: deleted at once), and refused again.
    let before = metainit.log().len();
    proxy.faulty(true);
    s.cp.kubectl_ok(&["delete", "pod", "p", "-n", &s.home, "--wait"]);
    s.add(NS, &p);
    let first = || {
        metainit.log()[before..]
            .iter()
            .find(|l| l.contains(&object) && l.contains("failures="))
            .cloned()
    };
    common::eventually("the new pod's first failure", WAIT, || first().is_some()).await;
    let first = first().unwrap_or_default();
    assert!(first.contains("failures=1 "), "{first}");
    proxy.faulty(false);
    assert!(metainit.stop().await.success());
}
