//! The scheduling-gates mode on the real control plane (kube-apiserver, etcd and
//! kube-scheduler of Kubernetes 1.37): what the operator sees, the pods on the server
//! cleared or not, bound by the real kube-scheduler once cleared, what kubectl prints, the
//! exit codes and the log; "nothing else written" is read from the API server's audit log.
//! Each test is a scene of its own on the shared control plane (tests/common/scene.rs:
//! its own label key, namespaces and ServiceAccount). These ran on the double's modern
//! generation and its stand-in scheduler before; initializers (Kubernetes 1.13) stay on
//! the double (tests/initializers.rs).

mod common;

use common::{
    control_plane::{WAIT, condition, gate_names, scheduled, until},
    gated_pod,
    scene::{Rights, Scene},
    tested_paths,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const KUEUE: &str = "kueue.x-k8s.io/admission";
const OTHER: &str = "example.com/quota";
const NS: &str = "gates";

fn gated() -> Option<(String, Option<String>)> {
    Some(("False".into(), Some("SchedulingGated".into())))
}

/// What `kubectl get pod NAME --no-headers` shows in its STATUS column, as the admin.
fn kubectl_status(s: &Scene, name: &str) -> String {
    let out =
        s.cp.kubectl_ok(&["get", "pod", name, "-n", s.ns(NS), "--no-headers"]);
    out.split_whitespace()
        .nth(2)
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn labelled_gated_pods_are_cleared_unlabelled_never_touched() {
    let s = Scene::new(&[NS], Rights::RbacOnly).await;
    let ns = s.ns(NS).to_string();
    s.add(NS, &s.labelled_pod("early", &[KUEUE, OTHER]));
    // Labelled with the usual key, not the scene's: not this metainit's.
    s.add(NS, &gated_pod("bystander", true, &[KUEUE]));
    let pods = s.pods(NS);
    let early = pods.get("early").await.expect("early");
    assert_eq!(condition(&early, "PodScheduled"), gated());
    let metainit = s.metainit(&[]);
    scheduled(&pods, "early").await;
    // Created while metainit watches.
    s.add(NS, &s.gated_pod("late", KUEUE));
    // Bound by kube-scheduler once its last gate is gone: PodScheduled=True.
    scheduled(&pods, "late").await;
    metainit
        .logged("the cleared line", |l| {
            l.contains("cleared") && l.contains(&format!("{ns}/late")) && l.contains(KUEUE)
        })
        .await;
    let log = metainit.log();
    assert!(
        log.iter().any(|l| l.contains("mode=scheduling-gates")),
        "auto picked gates: {log:#?}"
    );
    assert!(metainit.problems().is_empty(), "{:#?}", metainit.problems());
    assert!(metainit.stop().await.success());

    assert_eq!(s.gates(NS, "bystander").await, [KUEUE]);
    let mut patched = s.patched();
    patched.sort();
    assert_eq!(
        patched,
        [format!("{ns}/early"), format!("{ns}/late")],
        "one PATCH per object, none to the bystander"
    );
    let writes = s.writes();
    assert_eq!(writes.len(), 2, "nothing else written: {writes:#?}");
    let (_, _, body) = &s.pod_patches()[0];
    let key = s.key.replace('/', "~1");
    assert_eq!(
        tested_paths(body),
        [
            "/metadata/uid".to_string(),
            format!("/metadata/labels/{key}"),
            "/spec/schedulingGates".to_string()
        ],
        "{body}"
    );
    assert_eq!(
        body.as_array().and_then(|ops| ops.last()),
        Some(&json!({"op": "remove", "path": "/spec/schedulingGates"})),
        "{body}"
    );
    // Every LIST and watch of pods selects the scene's label on the server, and never asks
    // for uninitialized objects.
    let reads = s.pod_reads();
    assert!(!reads.is_empty());
    let selector = format!("labelSelector={}", s.key.replace('/', "%2F"));
    for uri in &reads {
        assert!(uri.contains(&selector), "{uri}");
        assert!(!uri.contains("includeUninitialized"), "{uri}");
    }
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn terminating_and_bound_pods_are_skipped() {
    let s = Scene::new(&[NS], Rights::RbacOnly).await;
    let ns = s.ns(NS).to_string();
    let pods = s.pods(NS);
    // A gated pod is never bound: create validation refuses spec.nodeName with gates.
    let mut bound = s.gated_pod("bound", KUEUE);
    bound["spec"]["nodeName"] = json!("node-a");
    let bound: Pod = serde_json::from_value(bound).expect("pod");
    match pods.create(&PostParams::default(), &bound).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 422, "{e:?}"),
        other => panic!("a bound gated pod was not refused: {other:?}"),
    }
    let mut terminating = s.gated_pod("terminating", KUEUE);
    terminating["metadata"]["finalizers"] = json!(["example.com/hold"]);
    s.add(NS, &terminating);
    // A finalizer keeps the deleted pod, terminating.
    pods.delete("terminating", &DeleteParams::default())
        .await
        .expect("deleted");
    let held = pods.get("terminating").await.expect("still there");
    assert!(held.metadata.deletion_timestamp.is_some());
    s.add(NS, &s.gated_pod("ok", KUEUE));
    let metainit = s.metainit(&[]);
    scheduled(&pods, "ok").await;
    assert!(metainit.stop().await.success());
    assert_eq!(s.gates(NS, "terminating").await, [KUEUE]);
    assert_eq!(
        s.writes().len(),
        1,
        "only the pod that is not terminating: {:?}",
        s.writes()
    );
    assert_eq!(s.patched(), [format!("{ns}/ok")]);
    // Let it go.
    let release = json!({"metadata": {"finalizers": null}});
    pods.patch(
        "terminating",
        &PatchParams::default(),
        &Patch::Merge(&release),
    )
    .await
    .expect("finalizer removed");
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn only_removes_the_gates_given() {
    let s = Scene::new(&[NS], Rights::RbacOnly).await;
    let ns = s.ns(NS).to_string();
    s.add(NS, &s.labelled_pod("two", &[KUEUE, OTHER]));
    let metainit = s.metainit(&["--only", OTHER]);
    until("the quota gate removed", WAIT, || async {
        (s.gates(NS, "two").await == [KUEUE]).then_some(())
    })
    .await;
    assert!(metainit.stop().await.success());
    assert_eq!(s.gates(NS, "two").await, [KUEUE]);
    assert_eq!(s.writes().len(), 1, "{:?}", s.writes());
    assert_eq!(s.patched(), [format!("{ns}/two")]);
    // Still gated: kube-scheduler leaves it alone.
    let pod = s.pods(NS).get("two").await.expect("two");
    assert_eq!(condition(&pod, "PodScheduled"), gated());
    assert!(pod.spec.and_then(|s| s.node_name).is_none());
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn dry_run_changes_nothing() {
    let s = Scene::new(&[NS], Rights::RbacOnly).await;
    let ns = s.ns(NS).to_string();
    s.add(NS, &s.gated_pod("p", KUEUE));
    let metainit = s.metainit(&["--dry-run"]);
    metainit
        .logged("the dry run's line", |l| {
            l.contains("would clear") && l.contains(&format!("{ns}/p"))
        })
        .await;
    assert!(metainit.stop().await.success());
    assert_eq!(s.gates(NS, "p").await, [KUEUE]);
    let writes = s.all_writes();
    assert!(writes.is_empty(), "a dry run wrote: {writes:#?}");
    assert!(!s.pod_reads().is_empty(), "it read the pods");
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn once_exits_0_when_all_clear_and_1_when_not() {
    let s = Scene::new(&[NS], Rights::RbacOnly).await;
    let items: Vec<Value> = (0..5)
        .map(|i| s.gated_pod(&format!("p{i}"), KUEUE))
        .collect();
    s.add(
        NS,
        &json!({"apiVersion": "v1", "kind": "List", "items": items}),
    );
    let mut m = s.metainit(&["--once"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(0), "{:#?}", m.log());
    assert!(m.out().contains("cleared 5,"), "{}", m.out());
    for i in 0..5 {
        assert!(s.gates(NS, &format!("p{i}")).await.is_empty(), "p{i}");
    }

    // A ServiceAccount that may not patch pods.
    let s = Scene::new(
        &[NS],
        Rights::Rules(json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
        ])),
    )
    .await;
    let ns = s.ns(NS).to_string();
    s.add(NS, &s.gated_pod("p", KUEUE));
    // Retried within the --timeout budget, then exit 1 naming the object and the error.
    let mut m = s.metainit(&["--once", "--timeout", "2s"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(1), "{:#?}", m.log());
    assert!(m.out().contains("failed 1"), "{}", m.out());
    assert_eq!(s.gates(NS, "p").await, [KUEUE]);
    let last = m.log().into_iter().find(|l| l.contains("could not clear"));
    let last = last.unwrap_or_else(|| panic!("no 'could not clear' line: {:#?}", m.log()));
    assert!(
        last.contains(&format!("{ns}/p"))
            && last.contains("403 Forbidden")
            && last.contains("manifests/rbac.yaml"),
        "{last}"
    );
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn three_replicas_clear_100_pods_quietly() {
    let s = Scene::new(&[NS], Rights::RbacOnly).await;
    let mut args = s.peers();
    args.extend(["--peer-delay".to_string(), "500ms".to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let replicas: Vec<_> = (0..3).map(|_| s.metainit(&args)).collect();
    for r in &replicas {
        r.admin_addr().await;
    }
    let items: Vec<Value> = (0..100)
        .map(|i| s.labelled_pod(&format!("p{i:03}"), &[KUEUE, OTHER]))
        .collect();
    s.add(
        NS,
        &json!({"apiVersion": "v1", "kind": "List", "items": items}),
    );
    let pods = s.pods(NS);
    until("all 100 ungated", WAIT, || async {
        let list = pods.list(&Default::default()).await.ok()?;
        (list.items.len() == 100 && list.items.iter().all(|p| gate_names(p).is_empty()))
            .then_some(())
    })
    .await;
    for r in replicas {
        assert!(r.problems().is_empty(), "{:#?}", r.problems());
        assert!(r.stop().await.success());
    }
    // Gone at once (no kubelet confirms a graceful deletion): the two nodes hold 220 pods,
    // and the suite's other tests need kube-scheduler to find room.
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete_collection(&now, &Default::default())
        .await
        .expect("the 100 pods deleted");
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn auto_picks_scheduling_gates_on_a_modern_server() {
    let s = Scene::new(&[NS], Rights::RbacOnly).await;
    let mut m = s.metainit(&["--once"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(0), "{:#?}", m.log());
    assert!(
        m.log().iter().any(|l| l.contains("mode=scheduling-gates")),
        "{:#?}",
        m.log()
    );
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn gates_mode_refuses_other_resources() {
    let s = Scene::new(&[NS], Rights::RbacOnly).await;
    let mut m = s.metainit(&["--resource", "deployments.apps"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(2), "{:#?}", m.log());
    m.logged("the refusal", |l| {
        l.contains("scheduling gates exist only on pods")
    })
    .await;
    assert!(s.all_writes().is_empty(), "{:?}", s.all_writes());
}

/// kubectl, which nobody here wrote, shows the pod SchedulingGated before and Pending
/// after, bound by kube-scheduler (no kubelet runs it).
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn kubectl_sees_scheduling_gated_then_not() {
    let s = Scene::new(&[NS], Rights::RbacOnly).await;
    s.add(NS, &s.gated_pod("web", KUEUE));
    assert_eq!(kubectl_status(&s, "web"), "SchedulingGated");
    let mut m = s.metainit(&["--once"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(0), "{:#?}", m.log());
    assert!(s.gates(NS, "web").await.is_empty());
    let pod = scheduled(&s.pods(NS), "web").await;
    let node = pod.spec.and_then(|s| s.node_name);
    assert!(
        matches!(node.as_deref(), Some("node-a" | "node-b")),
        "{node:?}"
    );
    assert_eq!(kubectl_status(&s, "web"), "Pending");
}
