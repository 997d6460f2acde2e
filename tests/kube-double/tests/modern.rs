// Modern (1.33) scheduling gates: condition at create, only deletion afterwards, clearing.

mod common;

use common::{Client, PODS, pod};
use kube_double::{Config, Double};
use serde_json::{Value, json};

fn gated(name: &str, gates: &[&str]) -> Value {
    let mut p = pod(name);
    p["spec"]["schedulingGates"] = gates.iter().map(|g| json!({"name": g})).collect();
    p
}

async fn start() -> (Double, Client) {
    let d = Double::start(Config::modern()).await.unwrap();
    let c = Client::new(&d.url());
    (d, c)
}

#[tokio::test]
async fn gated_pod_gets_the_condition() {
    let (_d, c) = start().await;
    let r = c
        .post(PODS, gated("g", &["example.com/a", "example.com/b"]))
        .await;
    assert_eq!(r.status, 201);
    let p = r.json();
    assert_eq!(p["status"]["phase"], "Pending");
    let cond = &p["status"]["conditions"][0];
    assert_eq!(cond["type"], "PodScheduled");
    assert_eq!(cond["status"], "False");
    assert_eq!(cond["reason"], "SchedulingGated");
    assert_eq!(
        cond["message"],
        "Scheduling is blocked due to non-empty scheduling gates"
    );
    let r = c.post(PODS, pod("free")).await;
    assert!(r.json()["status"].get("conditions").is_none());
}

#[tokio::test]
async fn gates_can_only_be_removed() {
    let (_d, c) = start().await;
    c.post(PODS, gated("g", &["a", "b"])).await;
    let r = c
        .json_patch(
            &format!("{PODS}/g"),
            json!([{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "X"}}]),
        )
        .await;
    assert_eq!(r.status, 422);
    let s = r.json();
    assert_eq!(s["reason"], "Invalid");
    assert_eq!(
        s["message"],
        "Pod \"g\" is invalid: spec.schedulingGates[2].name: Forbidden: only deletion is allowed, but found new scheduling gate 'X'"
    );
    assert_eq!(s["details"]["name"], "g");
    assert_eq!(s["details"]["kind"], "Pod");
    assert_eq!(
        s["details"]["causes"],
        json!([{"reason": "FieldValueForbidden", "message": "Forbidden: only deletion is allowed, but found new scheduling gate 'X'", "field": "spec.schedulingGates[2].name"}])
    );
    // Replacing b by X at index 1: the example from the notes.
    let r = c
        .json_patch(
            &format!("{PODS}/g"),
            json!([{"op": "replace", "path": "/spec/schedulingGates/1", "value": {"name": "X"}}]),
        )
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "Pod \"g\" is invalid: spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate 'X'"
    );
    // Adding gates to an ungated pod.
    c.post(PODS, pod("free")).await;
    let r = c
        .patch(
            &format!("{PODS}/free"),
            "application/merge-patch+json",
            json!({"spec": {"schedulingGates": [{"name": "late"}]}}),
        )
        .await;
    assert_eq!(r.status, 422);
    // Removing one gate, in any order, is fine and keeps the condition.
    let r = c
        .json_patch(
            &format!("{PODS}/g"),
            json!([{"op": "remove", "path": "/spec/schedulingGates/0"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["spec"]["schedulingGates"], json!([{"name": "b"}]));
    assert_eq!(
        r.json()["status"]["conditions"][0]["reason"],
        "SchedulingGated"
    );
}

#[tokio::test]
async fn removing_all_gates_clears_the_condition() {
    let (d, c) = start().await;
    c.post(PODS, gated("g", &["a", "b"])).await;
    let r = c
        .json_patch(
            &format!("{PODS}/g"),
            json!([{"op": "remove", "path": "/spec/schedulingGates"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let p = r.json();
    assert!(p["spec"].get("schedulingGates").is_none());
    assert!(p["status"].get("conditions").is_none());
    assert_eq!(p["status"]["phase"], "Pending");
    // Again: the path is gone, so the patch fails with 422.
    let r = c
        .json_patch(
            &format!("{PODS}/g"),
            json!([{"op": "remove", "path": "/spec/schedulingGates"}]),
        )
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "the server rejected our request due to an error in our request"
    );
    // Strategic merge removal by name also works.
    c.post(PODS, gated("s", &["a"])).await;
    let r = c
        .patch(
            &format!("{PODS}/s"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"schedulingGates": [{"name": "a", "$patch": "delete"}]}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json()["status"].get("conditions").is_none());
    // Through the library API too.
    c.post(PODS, gated("l", &["a"])).await;
    let mut cur = d.get("pods", "default", "l").unwrap();
    cur["spec"]["schedulingGates"] = json!([]);
    let out = d.update("pods", "default", cur).unwrap();
    assert!(out["status"].get("conditions").is_none());
}

#[tokio::test]
async fn initializers_are_dropped_silently() {
    let (_d, c) = start().await;
    let mut p = pod("i");
    p["metadata"]["initializers"] = json!({"pending": [{"name": "x"}]});
    let r = c.post(PODS, p).await;
    assert_eq!(r.status, 201);
    assert!(r.json()["metadata"].get("initializers").is_none());
    assert_eq!(c.get(&format!("{PODS}/i")).await.status, 200);
    let r = c
        .patch(
            &format!("{PODS}/i"),
            "application/merge-patch+json",
            json!({"metadata": {"initializers": {"pending": [{"name": "x"}]}}}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(r.json()["metadata"].get("initializers").is_none());
}

#[tokio::test]
async fn status_subresource_and_main_resource_ignore() {
    let (_d, c) = start().await;
    c.post(PODS, pod("p")).await;
    let r = c
        .patch(
            &format!("{PODS}/p"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Running"}}),
        )
        .await;
    assert_eq!(r.json()["status"]["phase"], "Pending");
    let r = c
        .patch(
            &format!("{PODS}/p/status"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Running"}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["status"]["phase"], "Running");
}

#[tokio::test]
async fn pods_track_generation_on_spec_changes() {
    let (_d, c) = start().await;
    let r = c.post(PODS, gated("g", &["a"])).await;
    assert_eq!(r.json()["metadata"]["generation"], 1);
    let r = c
        .patch(
            &format!("{PODS}/g"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"x": "1"}}}),
        )
        .await;
    assert_eq!(r.json()["metadata"]["generation"], 1);
    let r = c
        .json_patch(
            &format!("{PODS}/g"),
            json!([{"op": "remove", "path": "/spec/schedulingGates"}]),
        )
        .await;
    assert_eq!(r.json()["metadata"]["generation"], 2);
}
