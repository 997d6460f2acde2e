// Modern (1.33) scheduling gates: condition at create, only deletion afterwards, the
// condition kept after clearing, create validation, binding, and back-dated creation (`Double::create_created_at`).

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Client, PODS, pod};
use kube_double::state::parse_time;
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

/// Row 3 of issue 12: removing the last gate keeps `PodScheduled=False/SchedulingGated`
/// (1.33.4 `pkg/registry/core/pod/strategy.go`: `PrepareForUpdate` copies the old
/// status, `applySchedulingGatedCondition` runs only in `PrepareForCreate`). The old
/// double removed the condition here.
#[tokio::test]
async fn removing_all_gates_keeps_the_condition() {
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
    assert_eq!(p["status"]["conditions"][0]["reason"], "SchedulingGated");
    assert_eq!(p["status"]["conditions"][0]["status"], "False");
    assert_eq!(p["status"]["phase"], "Pending");
    assert!(p["spec"].get("nodeName").is_none(), "nothing schedules");
    // kubectl judges by the condition: it keeps printing SchedulingGated.
    let t = c
        .get_accept(
            &format!("{PODS}/g"),
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        )
        .await
        .json();
    assert_eq!(t["rows"][0]["cells"][2], "SchedulingGated");
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
    assert!(r.json()["spec"].get("schedulingGates").is_none());
    assert_eq!(
        r.json()["status"]["conditions"][0]["reason"],
        "SchedulingGated"
    );
    // Through the library API too.
    c.post(PODS, gated("l", &["a"])).await;
    let mut cur = d.get("pods", "default", "l").unwrap();
    cur["spec"]["schedulingGates"] = json!([]);
    let out = d.update("pods", "default", cur).unwrap();
    assert_eq!(out["status"]["conditions"][0]["reason"], "SchedulingGated");
}

/// Row 11 of issue 12: create validation refuses duplicate gate names
/// (`validateSchedulingGates`, `field.Duplicate`) and `spec.nodeName` together with gates
/// (`ValidatePodCreate`), 1.33.4 `pkg/apis/core/validation/validation.go`. The old double
/// stored both.
#[tokio::test]
async fn create_refuses_duplicate_gates_and_node_name_with_gates() {
    let (d, c) = start().await;
    let r = c.post(PODS, gated("dup", &["a", "b", "a"])).await;
    assert_eq!(r.status, 422, "{}", r.text);
    let s = r.json();
    assert_eq!(s["reason"], "Invalid");
    assert_eq!(
        s["message"],
        "Pod \"dup\" is invalid: spec.schedulingGates[2]: Duplicate value: \"a\""
    );
    assert_eq!(
        s["details"]["causes"],
        json!([{"reason": "FieldValueDuplicate", "message": "Duplicate value: \"a\"", "field": "spec.schedulingGates[2]"}])
    );
    let mut pinned = gated("pinned", &["a"]);
    pinned["spec"]["nodeName"] = json!("node-1");
    let r = c.post(PODS, pinned).await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(
        r.json()["message"],
        "Pod \"pinned\" is invalid: spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"
    );
    assert!(d.get("pods", "default", "dup").is_none());
    assert!(d.get("pods", "default", "pinned").is_none());
    // nodeName without gates is fine (a pod bound at creation).
    let mut bound = pod("bound");
    bound["spec"]["nodeName"] = json!("node-1");
    assert_eq!(c.post(PODS, bound).await.status, 201);
}

/// Row 11 of issue 12, binding: `BindingREST.assignPod` refuses a gated pod with 409
/// `Operation cannot be fulfilled on pods/binding "p": pod p has non-empty
/// .spec.schedulingGates` and, once the gates are gone, binds it: `spec.nodeName` set and
/// `PodScheduled=True` replacing `SchedulingGated` (`pkg/registry/core/pod/storage/storage.go`).
#[tokio::test]
async fn binding_a_gated_pod_conflicts_then_binds_once_clear() {
    let (_d, c) = start().await;
    c.post(PODS, gated("g", &["a"])).await;
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "g"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}});
    let r = c.post(&format!("{PODS}/g/binding"), binding.clone()).await;
    assert_eq!(r.status, 409, "{}", r.text);
    let s = r.json();
    assert_eq!(s["reason"], "Conflict");
    assert_eq!(
        s["message"],
        "Operation cannot be fulfilled on pods/binding \"g\": pod g has non-empty .spec.schedulingGates"
    );
    assert_eq!(s["details"], json!({"name": "g", "kind": "pods/binding"}));
    c.json_patch(
        &format!("{PODS}/g"),
        json!([{"op": "remove", "path": "/spec/schedulingGates"}]),
    )
    .await;
    let r = c.post(&format!("{PODS}/g/binding"), binding.clone()).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["status"], "Success");
    let p = c.get(&format!("{PODS}/g")).await.json();
    assert_eq!(p["spec"]["nodeName"], "node-1");
    let cond = &p["status"]["conditions"][0];
    assert_eq!(cond["type"], "PodScheduled");
    assert_eq!(cond["status"], "True");
    assert!(cond.get("reason").is_none());
    let r = c.post(&format!("{PODS}/g/binding"), binding).await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json()["message"],
        "Operation cannot be fulfilled on pods/binding \"g\": pod g is already assigned to node \"node-1\""
    );
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

/// `Double::create_created_at`: a pod made as if 2 hours ago, as a server restored from
/// a backup shows it; its creationTimestamp and the SchedulingGated condition's
/// lastTransitionTime are that time, written once (one ADDED, one resourceVersion). A
/// plain create, from the library or over HTTP, gets now, and a client-supplied
/// creationTimestamp is overwritten (`rest.FillObjectMetaSystemFields`).
#[tokio::test]
async fn create_created_at_back_dates_a_pod() {
    let (d, c) = start().await;
    let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    let stamp = |p: &Value| {
        let s = p["metadata"]["creationTimestamp"].as_str().unwrap();
        assert!(s.ends_with('Z') && !s.contains('.'), "{s}");
        secs(parse_time(s).unwrap())
    };
    let created = SystemTime::now() - Duration::from_secs(2 * 3600);
    let rv_before = d.resource_version();
    let p = d
        .create_created_at("pods", "default", gated("old", &["a"]), created)
        .unwrap();
    assert_eq!(stamp(&p), secs(created));
    let cond = &p["status"]["conditions"][0];
    assert_eq!(cond["reason"], "SchedulingGated");
    assert_eq!(
        cond["lastTransitionTime"],
        p["metadata"]["creationTimestamp"]
    );
    assert_eq!(d.resource_version(), rv_before + 1);
    let hist = d.history("pods", "default", "old");
    assert_eq!(hist.len(), 1);
    assert_eq!(hist[0].kind, "ADDED");
    assert_eq!(
        c.get(&format!("{PODS}/old")).await.json()["metadata"]["creationTimestamp"],
        p["metadata"]["creationTimestamp"]
    );
    // Same admission and validation as `create`.
    let mut bad = gated("bad", &["a"]);
    bad["spec"]["nodeName"] = json!("node-1");
    assert_eq!(
        d.create_created_at("pods", "default", bad, created)
            .unwrap_err()["reason"],
        "Invalid"
    );
    assert_eq!(
        d.create_created_at("pods", "default", gated("old", &["a"]), created)
            .unwrap_err()["reason"],
        "AlreadyExists"
    );

    let near_now = |t: i64| (t - secs(SystemTime::now())).abs() <= 5;
    let p = d.create("pods", "default", gated("new", &["a"])).unwrap();
    assert!(near_now(stamp(&p)), "{p}");
    assert_eq!(
        p["status"]["conditions"][0]["lastTransitionTime"],
        p["metadata"]["creationTimestamp"]
    );

    let mut claimed = pod("claimed");
    claimed["metadata"]["creationTimestamp"] = json!("2001-02-03T04:05:06Z");
    let r = c.post(PODS, claimed).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(near_now(stamp(&r.json())), "{}", r.text);
}
