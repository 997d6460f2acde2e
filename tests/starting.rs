//! Start-up against a server that is itself starting: kube-apiserver answers every user 403,
//! `/version` included, for about a second after it starts serving (before its RBAC policy is
//! in place), while its `/readyz` answers 500. That is a wait, never an exit (the static pod
//! crash-looped on it); a 403 that persists once `/readyz` is 200 is still the RBAC error.

mod common;

use std::time::Duration;

use common::*;
use kube_double::{Config, Faults};

const GATE: &str = "kueue.x-k8s.io/admission";

fn starting(on: bool) -> Faults {
    Faults {
        starting: on,
        ..Faults::default()
    }
}

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

/// A 403 once the server is ready: RBAC is missing, and the message says what to grant.
#[tokio::test]
async fn a_403_from_a_ready_server_still_exits_2_with_the_rbac_advice() {
    let bed = Bed::as_user(Config::modern(), &["get pods", "watch pods", "patch pods"]).await;
    let args = [
        "--kubeconfig",
        bed.kubeconfig.to_str().unwrap(),
        "--once",
        "--timeout",
        "20s",
    ];
    let (code, _, err) = run_to_end(&args, Duration::from_secs(30)).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("LIST pods: forbidden")
            && err.contains("grant the permissions in manifests/rbac.yaml"),
        "{err}"
    );
}

/// Where RBAC grants list but not watch, `/readyz` stays 503: a LIST answered (each resync
/// lists) ends a failed list, never a failed watch start (it flipped to 200 for each list).
#[tokio::test]
async fn readiness_does_not_flap_when_watch_is_refused() {
    let bed = Bed::as_user(
        Config::modern(),
        &["get pods", "list pods", "patch pods", "create events"],
    )
    .await;
    // Each request 300 ms: a list, then a refused watch start, each long enough to be seen.
    bed.double.set_faults(Faults {
        latency: Duration::from_millis(300),
        ..Faults::default()
    });
    let m = bed.metainit(&["--resync-period", "1s"]);
    let addr = m.admin_addr().await;
    // From the first watch start refused and reported on (before it, the first list done is
    // ready).
    let refused = || {
        bed.double
            .requests()
            .iter()
            .filter(|r| r.path_and_query.contains("watch=true") && r.status == 403)
            .count()
    };
    eventually("a watch start refused", Duration::from_secs(20), || {
        refused() >= 1
    })
    .await;
    // And reported: metainit asks the server's /readyz about a 403 first (is it starting?).
    let mut reported = false;
    for _ in 0..200 {
        if admin_get(&addr, "/readyz").await.0 == 503 {
            reported = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(reported, "the refused watch never made /readyz 503");
    bed.double.clear_requests();
    let start = std::time::Instant::now();
    let (mut answers, mut lists) = (Vec::new(), 0);
    while start.elapsed() < Duration::from_secs(6) {
        answers.push(admin_get(&addr, "/readyz").await.0);
        tokio::time::sleep(Duration::from_millis(50)).await;
        lists = bed
            .double
            .requests()
            .iter()
            .filter(|r| {
                r.method == "GET"
                    && r.path_and_query.starts_with("/api/v1/pods?")
                    && r.status == 200
            })
            .filter(|r| !r.path_and_query.contains("watch=true"))
            .count();
    }
    let refused = refused();
    assert!(
        lists >= 3 && refused >= 1,
        "{lists} lists, {refused} watch starts refused"
    );
    assert!(
        answers.iter().all(|c| *c == 503),
        "/readyz answered {:?} while the watch was refused",
        answers.iter().filter(|c| **c != 503).collect::<Vec<_>>()
    );
    m.stop().await;
}
