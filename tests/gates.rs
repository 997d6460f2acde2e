//! The scheduling-gates mode (Kubernetes 1.26 and later) against the double's modern generation.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

const KUEUE: &str = "kueue.x-k8s.io/admission";
const OTHER: &str = "example.com/quota";
const WAIT: Duration = Duration::from_secs(20);

fn gates_of(bed: &Bed, name: &str) -> Vec<String> {
    gates(
        &bed.double
            .get("pods", "default", name)
            .unwrap_or_else(|| panic!("{name} exists")),
    )
}

fn condition_reason(bed: &Bed, name: &str) -> Option<String> {
    let pod = bed.double.get("pods", "default", name)?;
    pod.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .and_then(|c| c["reason"].as_str().map(String::from))
}

#[tokio::test]
async fn labelled_gated_pods_are_cleared_unlabelled_never_touched() {
    let bed = Bed::modern().await;
    bed.double
        .create("pods", "default", gated_pod("early", true, &[KUEUE, OTHER]))
        .unwrap();
    bed.double
        .create("pods", "default", gated_pod("bystander", false, &[KUEUE]))
        .unwrap();
    assert_eq!(
        condition_reason(&bed, "early").as_deref(),
        Some("SchedulingGated")
    );
    let metainit = bed.metainit(&[]);
    eventually("early ungated", WAIT, || gates_of(&bed, "early").is_empty()).await;
    // Created while metainit watches.
    bed.double
        .create("pods", "default", gated_pod("late", true, &[KUEUE]))
        .unwrap();
    eventually("late ungated", WAIT, || gates_of(&bed, "late").is_empty()).await;
    // The real server keeps PodScheduled=False/SchedulingGated after the last gate goes
    // (PrepareForUpdate copies the status); only a scheduler changes it, and none runs
    // here (kube-double issue 12, row 3).
    assert_eq!(
        condition_reason(&bed, "late").as_deref(),
        Some("SchedulingGated")
    );

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(gates_of(&bed, "bystander"), [KUEUE]);
    let patched = bed.patched();
    assert!(
        !patched.contains(&"default/bystander".to_string()),
        "{patched:?}"
    );
    assert_eq!(patched.len(), 2, "one PATCH per object: {patched:?}");
    let patch = bed
        .double
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH")
        .unwrap();
    let body: serde_json::Value = serde_json::from_str(&patch.body).unwrap();
    let ops = body.as_array().unwrap();
    assert_eq!(
        tested_paths(&body),
        [
            "/metadata/uid",
            "/metadata/labels/k8s.opsani.io~1initializer",
            "/spec/schedulingGates"
        ]
    );
    assert_eq!(
        ops.last().unwrap(),
        &json!({"op": "remove", "path": "/spec/schedulingGates"})
    );
    for r in bed
        .double
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path_and_query.starts_with("/api/v1/pods"))
    {
        assert!(
            r.path_and_query
                .contains("labelSelector=k8s.opsani.io%2Finitializer"),
            "{}",
            r.path_and_query
        );
        assert!(
            !r.path_and_query.contains("includeUninitialized"),
            "{}",
            r.path_and_query
        );
    }
    let log = metainit.log();
    assert!(
        log.iter().any(|l| l.contains("mode=scheduling-gates")),
        "auto picked gates: {log:#?}"
    );
    metainit
        .logged("the cleared line", |l| {
            l.contains("cleared") && l.contains("default/late") && l.contains(KUEUE)
        })
        .await;
    assert!(metainit.problems().is_empty(), "{:#?}", metainit.problems());
    assert!(metainit.stop().await.success());
}

#[tokio::test]
async fn terminating_and_bound_pods_are_skipped() {
    let bed = Bed::modern().await;
    // A gated pod is never bound on a real server: create validation refuses
    // spec.nodeName together with gates, and binding a gated pod is a 409; the double now
    // does the same (kube-double issue 12, row 11), so only the terminating case remains.
    let mut bound = gated_pod("bound", true, &[KUEUE]);
    bound["spec"]["nodeName"] = json!("node-1");
    let refused = bed.double.create("pods", "default", bound).unwrap_err();
    assert_eq!(refused["code"], 422, "{refused}");
    let mut terminating = gated_pod("terminating", true, &[KUEUE]);
    terminating["metadata"]["finalizers"] = json!(["example.com/hold"]);
    bed.double.create("pods", "default", terminating).unwrap();
    // A finalizer keeps a deleted pod, terminating, as on a real server.
    bed.double.delete("pods", "default", "terminating").unwrap();
    assert!(
        bed.double
            .get("pods", "default", "terminating")
            .unwrap()
            .pointer("/metadata/deletionTimestamp")
            .is_some()
    );
    bed.double
        .create("pods", "default", gated_pod("ok", true, &[KUEUE]))
        .unwrap();
    let metainit = bed.metainit(&[]);
    eventually("ok ungated", WAIT, || gates_of(&bed, "ok").is_empty()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(gates_of(&bed, "terminating"), [KUEUE]);
    let patched = bed.patched();
    assert_eq!(
        patched,
        ["default/ok"],
        "only the pod that is not terminating"
    );
    assert!(metainit.stop().await.success());
}

#[tokio::test]
async fn only_removes_the_gates_given() {
    let bed = Bed::modern().await;
    bed.double
        .create("pods", "default", gated_pod("two", true, &[KUEUE, OTHER]))
        .unwrap();
    let metainit = bed.metainit(&["--only", OTHER]);
    eventually("quota gate removed", WAIT, || {
        gates_of(&bed, "two") == [KUEUE]
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(gates_of(&bed, "two"), [KUEUE]);
    assert_eq!(
        condition_reason(&bed, "two").as_deref(),
        Some("SchedulingGated")
    );
    assert!(metainit.stop().await.success());
}

#[tokio::test]
async fn dry_run_changes_nothing() {
    let bed = Bed::modern().await;
    bed.double
        .create("pods", "default", gated_pod("p", true, &[KUEUE]))
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
    assert_eq!(gates_of(&bed, "p"), [KUEUE]);
    assert!(bed.double.requests().iter().all(|r| r.method == "GET"));
    assert!(metainit.stop().await.success());
}

#[tokio::test]
async fn once_exits_0_when_all_clear_and_1_when_not() {
    let bed = Bed::modern().await;
    for i in 0..5 {
        bed.double
            .create(
                "pods",
                "default",
                gated_pod(&format!("p{i}"), true, &[KUEUE]),
            )
            .unwrap();
    }
    let mut m = bed.metainit(&["--once"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(0), "{:#?}", m.log());
    assert!(m.out().contains("cleared 5,"), "{}", m.out());
    assert!((0..5).all(|i| gates_of(&bed, &format!("p{i}")).is_empty()));

    // A user who may not patch pods.
    let bed = Bed::as_user(
        kube_double::Config::modern(),
        &["get pods", "list pods", "watch pods"],
    )
    .await;
    bed.double
        .create("pods", "default", gated_pod("p", true, &[KUEUE]))
        .unwrap();
    // Retried within the --timeout budget, then exit 1 naming the object and the error.
    let mut m = bed.metainit(&["--once", "--timeout", "2s"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(1), "{:#?}", m.log());
    assert!(m.out().contains("failed 1"), "{}", m.out());
    assert_eq!(gates_of(&bed, "p"), [KUEUE]);
    let last = m.log().into_iter().find(|l| l.contains("could not clear"));
    let last = last.unwrap_or_else(|| panic!("no 'could not clear' line: {:#?}", m.log()));
    assert!(
        last.contains("default/p")
            && last.contains("403 Forbidden")
            && last.contains("manifests/rbac.yaml"),
        "{last}"
    );
}

#[tokio::test]
async fn three_replicas_clear_100_pods_quietly() {
    let bed = Bed::modern().await;
    let replicas: Vec<_> = (0..3)
        .map(|_| bed.metainit(&["--peer-delay", "500ms"]))
        .collect();
    for r in &replicas {
        r.admin_addr().await;
    }
    for i in 0..100 {
        bed.double
            .create(
                "pods",
                "default",
                gated_pod(&format!("p{i:03}"), true, &[KUEUE, OTHER]),
            )
            .unwrap();
    }
    eventually("all 100 ungated", Duration::from_secs(60), || {
        (0..100).all(|i| gates_of(&bed, &format!("p{i:03}")).is_empty())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for r in replicas {
        assert!(r.problems().is_empty(), "{:#?}", r.problems());
        assert!(r.stop().await.success());
    }
}

#[tokio::test]
async fn auto_picks_the_mode_of_each_generation() {
    for (bed, want) in [
        (Bed::legacy(&[]).await, "mode=initializers"),
        (Bed::modern().await, "mode=scheduling-gates"),
    ] {
        let mut m = bed.metainit(&["--once"]);
        assert_eq!(m.wait(WAIT).await.code(), Some(0));
        assert!(
            m.log().iter().any(|l| l.contains(want)),
            "{want}: {:#?}",
            m.log()
        );
    }
}

#[tokio::test]
async fn gates_mode_refuses_other_resources() {
    let bed = Bed::modern().await;
    let mut m = bed.metainit(&["--resource", "deployments.apps"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(2));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let log = m.log().join("\n");
    assert!(log.contains("scheduling gates exist only on pods"), "{log}");
}

/// kubectl, which nobody here wrote, shows the pod SchedulingGated before and not after
/// (once a scheduler has bound it: without one the real server keeps the condition and
/// kubectl keeps printing SchedulingGated, so the double's stand-in scheduler runs here).
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_sees_scheduling_gated_then_not() {
    if std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        panic!("kubectl is needed for this test");
    }
    let bed = Bed::modern().await;
    bed.double
        .create("pods", "default", gated_pod("web", true, &[KUEUE]))
        .unwrap();
    let kubectl_status = || {
        let out = std::process::Command::new("kubectl")
            .args([
                "--kubeconfig",
                &bed.kubeconfig.display().to_string(),
                "get",
                "pod",
                "web",
                "-n",
                "default",
                "--no-headers",
            ])
            .output()
            .expect("kubectl runs");
        assert!(
            out.status.success(),
            "kubectl failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .nth(2)
            .unwrap_or_default()
            .to_string()
    };
    bed.double.set_scheduler(Some("node-1"));
    let before = tokio::task::block_in_place(kubectl_status);
    assert_eq!(before, "SchedulingGated");
    let mut m = bed.metainit(&["--once"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(0));
    assert!(gates_of(&bed, "web").is_empty());
    eventually("bound by the scheduler", WAIT, || {
        bed.double
            .get("pods", "default", "web")
            .is_some_and(|p| p["spec"]["nodeName"] == "node-1")
    })
    .await;
    let after = tokio::task::block_in_place(kubectl_status);
    assert_eq!(after, "Pending");
}
