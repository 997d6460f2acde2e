//! Start-up against a server that is itself starting: kube-apiserver answers every user 403,
//! `/version` included, for about a second after it starts serving (before its RBAC policy is
//! in place), while its `/readyz` answers 500. That is a wait, never an exit (the static pod
//! crash-looped on it). A 403 that persists once `/readyz` is 200 is still the RBAC error:
//! tests/cluster_starting.rs, on kube-apiserver.

mod common;

use std::time::Duration;

use common::*;
use kube_double::Faults;

const GATE: &str = "kueue.x-k8s.io/admission";

fn starting(on: bool) -> Faults {
    Faults {
        starting: on,
        ..Faults::default()
    }
}

// The double: no proxy answers every request 403 and `/readyz` 500 at once.
#[tokio::test]
async fn a_403_while_the_server_starts_is_a_wait_not_an_exit() {
    let bed = Bed::modern().await;
    bed.double
        .create("pods", "default", gated_pod("early-1", true, &[GATE]))
        .unwrap();
    bed.double.set_faults(starting(true));
    let mut m = bed.metainit(&[]);
    m.logged("the wait said why", |l| {
        l.contains("the API server is starting") && l.contains("readyz=500")
    })
    .await;
    // Held a while: the process waits, and asks about once a second.
    bed.double.clear_requests();
    let held = Duration::from_secs(5);
    tokio::time::sleep(held).await;
    assert!(
        m.child.try_wait().expect("try_wait").is_none(),
        "metainit exited while the server was starting: {:#?}",
        m.log()
    );
    let versions = bed
        .double
        .requests()
        .iter()
        .filter(|r| r.path_and_query == "/version" && r.status == 403)
        .count();
    // About one a second (0.8 to 1.2 s apart): at most 7 in 5 s, and at least 3.
    assert!(
        (3..=7).contains(&versions),
        "{versions} GET /version answered 403 in 5 s"
    );
    bed.double.set_faults(starting(false));
    eventually(
        "cleared once the server is up",
        Duration::from_secs(10),
        || {
            bed.double
                .get("pods", "default", "early-1")
                .is_some_and(|p| gates(&p).is_empty())
        },
    )
    .await;
    assert!(
        !m.log().iter().any(|l| l.contains("grant the permissions")),
        "the RBAC advice is not the cause here: {:#?}",
        m.log()
    );
    assert!(m.stop().await.success());
}

/// An API server restarted under a running metainit denies it the same way for its first
/// second (#52): the watch's failure says the server is starting, from its `/readyz`, never
/// "grant" (nothing needs granting), in the log and in metainit's own `/readyz`; and once the
/// server is up, the watch recovers and clears again.
// The double: no proxy restarts the server under metainit, 403 and `/readyz` 500 after.
#[tokio::test]
async fn a_restarted_server_s_403_is_its_start_up_not_missing_rbac() {
    let bed = Bed::modern().await;
    let m = bed.metainit(&[]);
    let addr = m.admin_addr().await;
    bed.double
        .create("pods", "default", gated_pod("before", true, &[GATE]))
        .unwrap();
    let double = &bed.double;
    let cleared = |name: &'static str| {
        move || {
            double
                .get("pods", "default", name)
                .is_some_and(|p| gates(&p).is_empty())
        }
    };
    eventually(
        "cleared before the restart",
        Duration::from_secs(10),
        cleared("before"),
    )
    .await;
    bed.double.set_faults(starting(true));
    bed.double.stop();
    bed.double.resume().await.expect("the double listens again");
    let denied = |l: &str| l.contains("watch failed; retrying") && l.contains("403");
    m.logged("the watch's 403 while the server starts", denied)
        .await;
    let line = m.log().into_iter().find(|l| denied(l)).unwrap();
    assert!(
        line.contains("the API server is starting")
            && line.contains("bootstrap-roles")
            && !line.contains("manifests/rbac.yaml")
            && !line.contains("grant"),
        "{line}"
    );
    let (code, body) = admin_get(&addr, "/readyz").await;
    assert!(
        code == 503 && body.contains("the API server is starting") && !body.contains("grant"),
        "{code} {body}"
    );
    bed.double.set_faults(starting(false));
    bed.double
        .create("pods", "default", gated_pod("after", true, &[GATE]))
        .unwrap();
    eventually(
        "cleared once the server is up",
        Duration::from_secs(15),
        cleared("after"),
    )
    .await;
    assert!(m.stop().await.success());
}
