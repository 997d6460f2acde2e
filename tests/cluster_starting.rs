//! A 403 from a ready kube-apiserver, on the real control plane: RBAC is missing (the
//! server's own `/readyz` is 200), and metainit says what to grant; where RBAC grants list
//! but not watch, metainit's `/readyz` stays 503 and never flaps. Each test is a scene of its
//! own whose ServiceAccount has only the rules it names; the latency is the fault proxy of
//! tests/common/fuzz.rs. These ran as the double's users before (tests/starting.rs keeps
//! the server in its start-up window).

mod common;

use std::time::{Duration, Instant, SystemTime};

use common::{
    admin_get, admin_until,
    control_plane::{WAIT, until},
    fuzz::{Fault, Plan},
    scene::{Rights, Scene, received},
};
use metainit::client::RequestKind;
use serde_json::{Value, json};

const NS: &str = "start";

/// A ClusterRole's rules: the `verbs` on pods, and `create events` if `events`.
fn rules(verbs: &[&str], events: bool) -> Value {
    let mut rules = vec![json!({"apiGroups": [""], "resources": ["pods"], "verbs": verbs})];
    if events {
        rules.push(json!({"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}));
    }
    json!(rules)
}

/// A 403 once the server is ready: RBAC is missing, and the message says what to grant.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_403_from_a_ready_server_still_exits_2_with_the_rbac_advice() {
    let rights = Rights::Rules(rules(&["get", "watch", "patch"], false));
    let s = Scene::new(&[NS], rights).await;
    let (code, _, err) = s.run(&["--once", "--timeout", "20s"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("LIST pods: forbidden")
            && err.contains("grant the permissions in manifests/rbac.yaml"),
        "{err}"
    );
}

/// The scene's answered requests of pods with `verb` and `code`, received since `since`.
fn pod_requests(s: &Scene, verb: &str, code: u64, since: SystemTime) -> usize {
    s.requests()
        .iter()
        .filter(|e| e["verb"] == verb && e["objectRef"]["resource"] == "pods")
        .filter(|e| e["responseStatus"]["code"].as_u64() == Some(code))
        .filter(|e| received(e) >= since)
        .count()
}

/// Where RBAC grants list but not watch, `/readyz` stays 503: a LIST answered (each resync
/// lists) ends a failed list, never a failed watch start (it flipped to 200 for each list).
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn readiness_does_not_flap_when_watch_is_refused() {
    let rights = Rights::Rules(rules(&["get", "list", "patch"], true));
    let mut s = Scene::new(&[NS], rights).await;
    // Each request 300 ms: a list, then a refused watch start, each long enough to be seen.
    let slow = |kind| {
        (
            kind,
            Fault::Delay(Duration::from_millis(300), Box::new(Fault::Forward)),
        )
    };
    let proxy = s
        .behind(Plan::Each(RequestKind::ALL.map(slow).to_vec()))
        .await;
    proxy.faulty(true);
    let begun = SystemTime::now();
    let m = s.metainit(&["--resync-period", "1s"]);
    let addr = m.admin_addr().await;
    // From the first watch start refused and reported on (before it, the first list done is
    // ready).
    until("a watch start refused", WAIT, || async {
        (pod_requests(&s, "watch", 403, begun) >= 1).then_some(())
    })
    .await;
    // And reported: metainit asks the server's /readyz about a 403 first (is it starting?).
    admin_until(&addr, "/readyz", 503, &[], Duration::from_secs(10)).await;
    let since = SystemTime::now();
    let start = Instant::now();
    let mut answers = Vec::new();
    while start.elapsed() < Duration::from_secs(6) {
        answers.push(admin_get(&addr, "/readyz").await.0);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let lists = pod_requests(&s, "list", 200, since);
    let refused = pod_requests(&s, "watch", 403, begun);
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
