//! `metainit status` against both generations: what it lists, its formats, its exit codes,
//! and that it only reads.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(30);

async fn status(bed: &Bed, args: &[&str]) -> (i32, String, String) {
    let kc = bed.kubeconfig.display().to_string();
    let mut all = vec!["status", "--kubeconfig", &kc];
    all.extend_from_slice(args);
    run_to_end(&all, LIMIT).await
}

#[tokio::test]
async fn modern_lists_gated_pods_labelled_or_not() {
    let bed = Bed::modern().await;
    let mut owned = gated_pod("kueue-manager-1", true, &["kueue.x-k8s.io/admission"]);
    owned["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "kueue-manager", "uid": "u1", "controller": true
    }]);
    bed.double.create("pods", "kueue-system", owned).unwrap();
    bed.double
        .create(
            "pods",
            "default",
            gated_pod(
                "job-1",
                false,
                &["kueue.x-k8s.io/admission", "example.com/quota"],
            ),
        )
        .unwrap();
    bed.double
        .create("pods", "default", pod("free", true))
        .unwrap();
    bed.double.clear_requests();

    let (code, out, err) = status(&bed, &["-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report["mode"], "scheduling-gates");
    let items = report["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{out}");
    let manager = items
        .iter()
        .find(|i| i["name"] == "kueue-manager-1")
        .unwrap();
    assert_eq!(manager["kind"], "Pod");
    assert_eq!(manager["namespace"], "kueue-system");
    assert_eq!(manager["labelled"], true);
    assert_eq!(manager["owner"], "ReplicaSet/kueue-manager");
    assert_eq!(manager["blockedBy"], json!(["kueue.x-k8s.io/admission"]));
    let job = items.iter().find(|i| i["name"] == "job-1").unwrap();
    assert_eq!(job["labelled"], false);
    assert!(job.get("owner").is_none());
    assert_eq!(
        report["byName"],
        json!({"example.com/quota": 1, "kueue.x-k8s.io/admission": 2})
    );

    // The table, aligned like kubectl's, with its summary line.
    let (code, out, _) = status(&bed, &[]).await;
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[0].starts_with("KIND   NAME"), "{out}");
    let col = |l: &str, w: &str| l.find(w).unwrap_or_else(|| panic!("{w} in {l}"));
    let owner_col = col(lines[0], "OWNER");
    assert!(
        lines[1..3]
            .iter()
            .any(|l| l.find("ReplicaSet/kueue-manager") == Some(owner_col)),
        "{out}"
    );
    assert!(
        lines[1..3]
            .iter()
            .all(|l| col(l, "kueue.x-k8s.io/admission") == col(lines[0], "BLOCKED BY")),
        "{out}"
    );
    assert!(lines[3].starts_with("2 held back (1 labelled k8s.opsani.io/initializer): 1 by example.com/quota, 2 by kueue.x-k8s.io/admission; oldest Pod"), "{out}");

    let (code, out, _) = status(&bed, &["-o", "yaml", "--namespace", "default"]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("name: job-1") && !out.contains("kueue-manager-1"),
        "{out}"
    );

    // It only read.
    let writes: Vec<_> = bed
        .double
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(writes.is_empty(), "status wrote: {writes:?}");
}

#[tokio::test]
async fn legacy_lists_pending_objects_of_every_type() {
    let bed = Bed::legacy(&["podimage.example.com"]).await;
    bed.double
        .create("pods", "default", pod("web", true))
        .unwrap();
    bed.double
        .create("pods", "default", pod("other", false))
        .unwrap();
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}
    });
    bed.double
        .create("deployments.apps", "default", deploy)
        .unwrap();
    bed.double.clear_requests();
    let (code, out, err) = status(&bed, &["-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["mode"], "initializers");
    let mut kinds: Vec<String> = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            format!(
                "{}/{}",
                i["kind"].as_str().unwrap(),
                i["name"].as_str().unwrap()
            )
        })
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["Deployment/d", "Pod/other", "Pod/web"]);
    assert_eq!(report["byName"], json!({"podimage.example.com": 3}));
    assert!(bed.double.requests().iter().all(|r| r.method == "GET"));
}

#[tokio::test]
async fn max_age_exits_1_when_something_is_held_too_long() {
    let bed = Bed::modern().await;
    bed.double
        .create(
            "pods",
            "default",
            gated_pod("old", true, &["example.com/g"]),
        )
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(status(&bed, &["--max-age", "1s"]).await.0, 1);
    assert_eq!(status(&bed, &["--max-age", "1h"]).await.0, 0);
    let empty = Bed::modern().await;
    let (code, out, _) = status(&empty, &["--max-age", "0s"]).await;
    assert_eq!(code, 0);
    assert_eq!(out.trim(), "nothing held back (scheduling-gates mode)");
}
