//! `metainit status` against a Kubernetes 1.13 server (the double's legacy generation):
//! the pending initializers of every type, and `--webhooks` refused. On a modern server
//! (gated pods, the table and JSON, `--max-age`, `--webhooks`) it is tested on the real
//! control plane: tests/cluster_status.rs.

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

/// A 1.7 to 1.13 server under `--mode auto` has no webhooks to list: exit 2 saying why,
/// nothing printed (initializers forced on a modern server: tests/cluster_status.rs).
#[tokio::test]
async fn webhooks_on_kubernetes_1_13_exits_2() {
    let legacy = Bed::legacy(&["podimage.example.com"]).await;
    let (code, out, err) = status(&legacy, &["--webhooks"]).await;
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains(msg::WEBHOOKS_TOO_OLD) && err.contains("is v1.13.12: drop --webhooks"),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
}
