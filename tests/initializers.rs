//! The initializers mode (Kubernetes 1.7 to 1.13) against the double's legacy generation.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

const INIT: &str = "podimage.example.com";
const OTHER: &str = "sidecar.example.com";
const WAIT: Duration = Duration::from_secs(20);

fn pending(bed: &Bed, resource: &str, name: &str) -> Vec<String> {
    let obj = bed
        .double
        .get(resource, "default", name)
        .unwrap_or_else(|| panic!("{name} exists"));
    pending_initializers(&obj)
}

#[tokio::test]
async fn labelled_pod_is_cleared_and_its_blocked_create_returns() {
    let bed = Bed::legacy(&[INIT]).await;
    // Created before metainit starts: found by the first LIST.
    bed.double
        .create("pods", "default", pod("early", true))
        .expect("early created");
    bed.double
        .create("pods", "default", pod("bystander", false))
        .expect("bystander created");
    assert_eq!(pending(&bed, "pods", "early"), [INIT]);
    let metainit = bed.metainit(&[]);

    // A user's create blocks until the pod is initialized; metainit must unblock it.
    let pods: Api<Pod> = Api::namespaced(client(&bed), "default");
    let new: Pod = serde_json::from_value(pod("deadlocked", true)).unwrap();
    let created = tokio::time::timeout(WAIT, pods.create(&PostParams::default(), &new))
        .await
        .expect("the blocked create returned")
        .expect("the create succeeded");
    assert_eq!(created.metadata.name.as_deref(), Some("deadlocked"));
    assert!(
        bed.double
            .get("pods", "default", "deadlocked")
            .unwrap()
            .pointer("/metadata/initializers")
            .is_none()
    );
    eventually("early is initialized", WAIT, || {
        pending(&bed, "pods", "early").is_empty()
    })
    .await;

    // The unlabelled pod was never patched and is still pending.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(pending(&bed, "pods", "bystander"), [INIT]);
    let patched = bed.patched();
    assert!(
        !patched.contains(&"default/bystander".to_string()),
        "unlabelled pod patched: {patched:?}"
    );
    assert_eq!(
        patched
            .iter()
            .filter(|p| *p == "default/deadlocked")
            .count(),
        1,
        "one PATCH per object"
    );

    // Selection happened on the server: every LIST and WATCH named the label and included uninitialized objects.
    let reads: Vec<_> = bed
        .double
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path_and_query.starts_with("/api/v1/pods"))
        .collect();
    assert!(!reads.is_empty());
    for r in &reads {
        assert!(
            r.path_and_query
                .contains("labelSelector=k8s.opsani.io%2Finitializer"),
            "{}",
            r.path_and_query
        );
        assert!(
            r.path_and_query.contains("includeUninitialized=true"),
            "{}",
            r.path_and_query
        );
    }
    // The clearing patch tests what it saw and removes the whole field.
    let patch = bed
        .double
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH")
        .unwrap();
    assert_eq!(
        patch.content_type.as_deref(),
        Some("application/json-patch+json")
    );
    let body: serde_json::Value = serde_json::from_str(&patch.body).unwrap();
    let ops = body.as_array().unwrap();
    assert_eq!(
        tested_paths(&body),
        [
            "/metadata/uid",
            "/metadata/labels/k8s.opsani.io~1initializer",
            "/metadata/initializers"
        ]
    );
    assert_eq!(
        ops.last().unwrap(),
        &json!({"op": "remove", "path": "/metadata/initializers"})
    );

    metainit
        .logged("the cleared line", |l| {
            l.contains("cleared")
                && l.contains("default/deadlocked")
                && l.contains(INIT)
                && l.contains("Pod")
        })
        .await;
    assert!(metainit.problems().is_empty(), "{:#?}", metainit.problems());
    assert!(metainit.stop().await.success());
}

#[tokio::test]
async fn result_set_objects_are_left_alone() {
    let bed = Bed::legacy(&[]).await;
    let mut failed = pod("failed", true);
    failed["metadata"]["initializers"] = json!({"pending": [{"name": INIT}], "result": {"status": "Failure", "message": "rejected"}});
    bed.double
        .create("pods", "default", failed)
        .expect("created with a result");
    let mut ok = pod("ok", true);
    ok["metadata"]["initializers"] = json!({"pending": [{"name": INIT}]});
    bed.double.create("pods", "default", ok).expect("created");
    let metainit = bed.metainit(&[]);
    eventually("ok is initialized", WAIT, || {
        pending(&bed, "pods", "ok").is_empty()
    })
    .await;
    metainit
        .logged("failed left alone", |l| {
            l.contains("default/failed") && l.contains("left alone")
        })
        .await;
    assert!(!bed.patched().contains(&"default/failed".to_string()));
    assert!(metainit.stop().await.success());
}

#[tokio::test]
async fn only_clears_the_names_given() {
    let bed = Bed::legacy(&[INIT, OTHER]).await;
    bed.double
        .create("pods", "default", pod("two", true))
        .unwrap();
    assert_eq!(pending(&bed, "pods", "two"), [INIT, OTHER]);
    let metainit = bed.metainit(&["--only", OTHER]);
    eventually("sidecar removed", WAIT, || {
        pending(&bed, "pods", "two") == [INIT]
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(pending(&bed, "pods", "two"), [INIT], "the other name stays");
    assert_eq!(bed.patched().len(), 1);
    assert!(metainit.stop().await.success());
}

#[tokio::test]
async fn dry_run_changes_nothing() {
    let bed = Bed::legacy(&[INIT]).await;
    bed.double
        .create("pods", "default", pod("p", true))
        .unwrap();
    let metainit = bed.metainit(&["--dry-run"]);
    eventually("dry run logged", WAIT, || {
        metainit
            .log()
            .iter()
            .any(|l| l.contains("would clear") && l.contains("default/p"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(pending(&bed, "pods", "p"), [INIT]);
    assert!(
        bed.double.requests().iter().all(|r| r.method == "GET"),
        "only reads in a dry run"
    );
    assert!(metainit.stop().await.success());
}

#[tokio::test]
async fn once_exits_0_when_all_clear_and_1_when_not() {
    let bed = Bed::legacy(&[INIT]).await;
    for i in 0..5 {
        bed.double
            .create("pods", "default", pod(&format!("p{i}"), true))
            .unwrap();
    }
    let mut m = bed.metainit(&["--once"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(0), "{:#?}", m.log());
    assert!(m.out().contains("cleared 5,"), "{}", m.out());
    for i in 0..5 {
        assert!(pending(&bed, "pods", &format!("p{i}")).is_empty());
    }
    // Again, with nothing left to do.
    let mut m = bed.metainit(&["--once"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(0));
    assert!(
        m.out().contains("cleared 0,") && m.out().contains("already clear 5"),
        "{}",
        m.out()
    );
}

#[tokio::test]
async fn once_exits_1_when_the_server_refuses() {
    let mut config = kube_double::Config::legacy();
    config.initializers = vec![kube_double::InitializerRule {
        name: INIT.into(),
        resources: vec!["pods".into()],
    }];
    // This user may read pods but not initialize them.
    let bed = Bed::as_user(
        config,
        &["get pods", "list pods", "watch pods", "patch pods"],
    )
    .await;
    bed.double
        .create("pods", "default", pod("p", true))
        .unwrap();
    let mut m = bed.metainit(&["--once", "--mode", "initializers", "--timeout", "2s"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(1), "{:#?}", m.log());
    assert!(m.out().contains("failed 1"), "{}", m.out());
    // Retried within the budget, then named with the last error and what to do.
    assert!(
        m.log().iter().any(|l| l.contains("could not clear")
            && l.contains("default/p")
            && l.contains("403 Forbidden")
            && l.contains("update to uninitialized resource denied")
            && l.contains("initialize")),
        "{:#?}",
        m.log()
    );
    let attempts = bed.patched().len();
    assert!(
        (2..=20).contains(&attempts),
        "bounded retries, not a tight loop: {attempts}"
    );
    assert_eq!(pending(&bed, "pods", "p"), [INIT]);
}

#[tokio::test]
async fn labelled_deployment_with_resource_deployments_apps() {
    let bed = Bed::legacy(&[INIT]).await;
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "podimage-initializer", "labels": {LABEL: "true"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "podimage"}},
            "template": {"metadata": {"labels": {"app": "podimage"}},
                         "spec": {"containers": [{"name": "c", "image": "x"}]}}
        }
    });
    bed.double
        .create("deployments.apps", "default", deploy)
        .unwrap();
    let metainit = bed.metainit(&["--resource", "deployments.apps"]);
    eventually("deployment initialized", WAIT, || {
        pending(&bed, "deployments.apps", "podimage-initializer").is_empty()
    })
    .await;
    metainit
        .logged("the Deployment's cleared line", |l| {
            l.contains("Deployment") && l.contains("cleared")
        })
        .await;
    assert!(metainit.stop().await.success());
}

#[tokio::test]
async fn three_replicas_clear_100_pods_quietly() {
    let bed = Bed::legacy(&[INIT, OTHER]).await;
    let replicas: Vec<_> = (0..3).map(|_| bed.metainit(&[])).collect();
    for r in &replicas {
        r.admin_addr().await;
    }
    for i in 0..100 {
        bed.double
            .create("pods", "default", pod(&format!("p{i:03}"), true))
            .unwrap();
    }
    eventually("all 100 initialized", Duration::from_secs(60), || {
        (0..100).all(|i| pending(&bed, "pods", &format!("p{i:03}")).is_empty())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for r in replicas {
        assert!(
            r.problems().is_empty(),
            "a replica logged problems: {:#?}",
            r.problems()
        );
        assert!(r.stop().await.success());
    }
}

/// `--mode auto` (the default) picks initializers on a 1.13 server (scheduling gates on a
/// modern one: tests/cluster_gates.rs).
#[tokio::test]
async fn auto_picks_initializers_on_kubernetes_1_13() {
    let bed = Bed::legacy(&[]).await;
    let mut m = bed.metainit(&["--once"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(0), "{:#?}", m.log());
    m.logged("the mode", |l| l.contains("mode=initializers"))
        .await;
}
