// Failure modes of a real API server that metainit must survive: RBAC changing at run
// time, writes refused by validation or admission, requests never answered, objects
// deleted and re-created under the same name, etcd restored from a snapshot, and
// injected errors scoped to one kind of request.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Client, Line, PODS, pod};
use kube_double::{Config, Double, Faults, InitializerRule, Rejection, Snapshot};
use serde_json::{Value, json};

async fn start_with(cfg: Config) -> (Double, Client) {
    let d = Double::start(cfg).await.unwrap();
    let c = Client::new(&d.url());
    (d, c)
}

fn perms(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

const LABEL: &str = "application/merge-patch+json";

#[tokio::test]
async fn token_table_changes_at_run_time() {
    let mut cfg = Config::modern();
    let mut tokens = HashMap::new();
    tokens.insert("bot".to_string(), perms(&["get pods", "list pods"]));
    tokens.insert("root".to_string(), perms(&["*"]));
    cfg.tokens = Some(tokens);
    let (d, c) = start_with(cfg).await;
    let root = c.with_token("root");
    let bot = c.with_token("bot");
    assert_eq!(root.post(PODS, pod("a")).await.status, 201);
    let path = format!("{PODS}/a");
    let change = json!({"metadata": {"labels": {"x": "1"}}});
    let r = bot.patch(&path, LABEL, change.clone()).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "pods \"a\" is forbidden: User \"token:bot\" cannot patch resource \"pods\" in API group \"\" in the namespace \"default\""
    );

    // RBAC catches up: the same PATCH now succeeds.
    let mut grant = HashMap::new();
    grant.insert("bot".to_string(), perms(&["get pods", "patch pods"]));
    d.set_tokens(Some(grant.clone()));
    assert_eq!(d.tokens(), Some(grant));
    let r = bot.patch(&path, LABEL, change).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["metadata"]["labels"]["x"], "1");
    // A token no longer in the table: 401, as for any unknown token.
    let r = root.get(PODS).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["reason"], "Unauthorized");

    // The control route: a permission removed gives the RBAC 403 again.
    let r = c
        .put(
            "/_double/tokens",
            json!({"bot": ["get pods"], "root": ["*"]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        c.get("/_double/tokens").await.json()["bot"],
        json!(["get pods"])
    );
    let r = bot
        .patch(&path, LABEL, json!({"metadata": {"labels": {"x": "2"}}}))
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(root.get(PODS).await.status, 200);
    // Bad permissions are refused; null disables authentication.
    let r = c.put("/_double/tokens", json!({"bot": ["patch"]})).await;
    assert_eq!(r.status, 400);
    assert_eq!(bot.get(&path).await.status, 200, "table unchanged");
    assert_eq!(c.put("/_double/tokens", json!(null)).await.status, 200);
    assert_eq!(c.get(PODS).await.status, 200);
    assert_eq!(d.tokens(), None);
}

#[tokio::test]
async fn writes_rejected_by_validation_or_admission() {
    let (d, c) = start_with(Config::modern()).await;
    assert_eq!(c.post(PODS, pod("bad-1")).await.status, 201);
    assert_eq!(c.post(PODS, pod("good")).await.status, 201);
    let before = d.get("pods", "default", "bad-1").unwrap();
    let rv = d.resource_version();
    let mut w = c
        .watch(&format!("{PODS}?watch=true&resourceVersion={rv}"))
        .await;
    d.set_faults(Faults {
        reject_writes: Some(Rejection {
            name_prefix: "bad-".into(),
            code: 422,
            message: "refused by policy example.com/deny".into(),
        }),
        ..Faults::default()
    });
    let bad = format!("{PODS}/bad-1");
    let r = c
        .patch(&bad, LABEL, json!({"metadata": {"labels": {"x": "1"}}}))
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json(),
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Pod \"bad-1\" is invalid: spec: Forbidden: refused by policy example.com/deny",
            "reason": "Invalid",
            "details": {
                "name": "bad-1",
                "kind": "Pod",
                "causes": [{
                    "reason": "FieldValueForbidden",
                    "message": "Forbidden: refused by policy example.com/deny",
                    "field": "spec",
                }],
            },
            "code": 422,
        })
    );
    // PUT too, and a PATCH that changes nothing.
    let mut full = before.clone();
    full["metadata"]["labels"] = json!({"y": "1"});
    assert_eq!(c.put(&bad, full).await.status, 422);
    assert_eq!(c.patch(&bad, LABEL, json!({})).await.status, 422);
    // A failed JSON-patch test is still the race-style 422 with empty details: the
    // patch fails before any validation runs.
    let r = c
        .json_patch(
            &bad,
            json!([{"op": "test", "path": "/metadata/name", "value": "other"}]),
        )
        .await;
    assert_eq!(r.status, 422);
    let s = r.json();
    assert_eq!(s["details"], json!({}));
    assert_eq!(
        s["message"],
        "the server rejected our request due to an error in our request"
    );
    // Nothing stored, no event; other objects, /status, create and delete pass.
    assert_eq!(d.get("pods", "default", "bad-1").unwrap(), before);
    w.quiet_for(Duration::from_millis(300)).await;
    let r = c
        .patch(
            &format!("{PODS}/good"),
            LABEL,
            json!({"metadata": {"labels": {"x": "1"}}}),
        )
        .await;
    assert_eq!(r.status, 200);
    let e = w.event().await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("MODIFIED"), Some("good"))
    );
    let r = c
        .patch(
            &format!("{bad}/status"),
            LABEL,
            json!({"status": {"message": "m"}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(c.post(PODS, pod("bad-2")).await.status, 201);
    assert_eq!(c.delete(&format!("{PODS}/bad-2")).await.status, 200);
    // Other groups: the qualified kind in the message, group and Kind in details.
    let deploys = "/apis/apps/v1/namespaces/default/deployments";
    let dep = json!({"metadata": {"name": "bad-d"}, "spec": {"replicas": 1}});
    assert_eq!(c.post(deploys, dep).await.status, 201);
    let s = c
        .patch(
            &format!("{deploys}/bad-d"),
            LABEL,
            json!({"spec": {"replicas": 2}}),
        )
        .await
        .json();
    assert_eq!(
        s["message"],
        "Deployment.apps \"bad-d\" is invalid: spec: Forbidden: refused by policy example.com/deny"
    );
    assert_eq!(
        (
            s["details"]["group"].as_str(),
            s["details"]["kind"].as_str()
        ),
        (Some("apps"), Some("Deployment"))
    );

    // 400 over the control route: BadRequest with the message and no details.
    let r = c
        .put(
            "/_double/faults",
            json!({"rejectWrites": {"namePrefix": "bad-", "code": 400, "message": "no writes to bad- pods"}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = c
        .patch(&bad, LABEL, json!({"metadata": {"labels": {"x": "1"}}}))
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "no writes to bad- pods",
            "reason": "BadRequest",
            "code": 400,
        })
    );
    assert_eq!(
        c.get("/_double/faults").await.json()["rejectWrites"],
        json!({"namePrefix": "bad-", "code": 400, "message": "no writes to bad- pods"})
    );
    // The library handle is not an API request: not refused.
    d.patch(
        "pods",
        "default",
        "bad-1",
        LABEL,
        &json!({"metadata": {"labels": {"lib": "1"}}}),
    )
    .unwrap();
    // Unusable rejections are refused.
    for bad in [
        json!({"rejectWrites": {"namePrefix": "bad-", "code": 403}}),
        json!({"rejectWrites": {"namePrefix": "", "code": 422}}),
    ] {
        assert_eq!(c.put("/_double/faults", bad).await.status, 400);
    }
}

#[tokio::test]
async fn requests_accepted_and_never_answered() {
    let (d, c) = start_with(Config::modern()).await;
    c.post(PODS, pod("a")).await;
    d.clear_requests();
    d.set_faults(Faults {
        hang_method: Some("PATCH".into()),
        hang_count: 1,
        ..Faults::default()
    });
    let path = format!("{PODS}/a");
    let body = json!({"metadata": {"labels": {"x": "1"}}}).to_string();
    let hung = tokio::time::timeout(
        Duration::from_secs(1),
        c.try_request("PATCH", &path, Some(LABEL), None, Some(body.clone())),
    )
    .await;
    assert!(
        hung.is_err(),
        "the PATCH was answered: {:?}",
        hung.map(|r| r.map(|r| r.status))
    );
    assert_eq!(d.faults().hang_count, 0);
    assert!(d.get("pods", "default", "a").unwrap()["metadata"]["labels"].is_null());
    // Other methods were never concerned; the next PATCH is answered.
    assert_eq!(c.get(&path).await.status, 200);
    let r = c.request("PATCH", &path, Some(LABEL), Some(body)).await;
    assert_eq!(r.status, 200);
    // The hung request was never answered, so never logged.
    let methods: Vec<String> = d.requests().iter().map(|r| r.method.clone()).collect();
    assert_eq!(methods, vec!["GET", "PATCH"]);

    // A hung request does not keep the double from stopping: stop aborts it.
    let r = c
        .put(
            "/_double/faults",
            json!({"hangMethod": "get", "hangCount": 1}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let hung = {
        let c = c.clone();
        tokio::spawn(async move { c.try_request("GET", PODS, None, None, None).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!hung.is_finished());
    d.stop();
    let r = tokio::time::timeout(common::WAIT, hung)
        .await
        .expect("stop left the hung request open")
        .unwrap();
    assert!(r.is_err(), "{:?}", r.map(|r| r.status));
    d.resume().await.unwrap();
    assert_eq!(c.get(PODS).await.status, 200);
    assert_eq!(
        c.put("/_double/faults", json!({"hangCount": 1}))
            .await
            .status,
        400,
        "a count without a method"
    );
}

/// `hang_path` and `hang_after`: a server that stops answering halfway through one
/// resource's paged list, the other paths answered.
#[tokio::test]
async fn requests_to_one_path_hang_after_some_were_answered() {
    let (d, c) = start_with(Config::modern()).await;
    for name in ["a", "b", "c"] {
        c.post(PODS, pod(name)).await;
    }
    d.set_faults(Faults {
        hang_method: Some("GET".into()),
        hang_count: 1,
        hang_path: Some("/api/v1/pods".into()),
        hang_after: 1,
        ..Faults::default()
    });
    // Another path, even one the prefix does not start (a namespaced list), is answered.
    assert_eq!(c.get(PODS).await.status, 200);
    assert_eq!(c.get("/api/v1").await.status, 200);
    let first = c.get("/api/v1/pods?limit=2").await;
    assert_eq!(first.status, 200, "{}", first.text);
    let token = first.json()["metadata"]["continue"]
        .as_str()
        .expect("a second page")
        .to_string();
    let second = format!("/api/v1/pods?limit=2&continue={token}");
    let hung = tokio::time::timeout(
        Duration::from_secs(1),
        c.try_request("GET", &second, None, None, None),
    )
    .await;
    assert!(hung.is_err(), "the second page was answered");
    let f = d.faults();
    assert_eq!((f.hang_count, f.hang_after), (0, 0));
    // The wire form carries both.
    let r = c
        .put(
            "/_double/faults",
            json!({"hangMethod": "GET", "hangCount": 1, "hangPath": "/apis/apps", "hangAfter": 2}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let f = d.faults();
    assert_eq!(
        (f.hang_path.as_deref(), f.hang_after),
        (Some("/apis/apps"), 2)
    );
}

#[tokio::test]
async fn recreate_modern_pod_is_gated_again() {
    let (d, c) = start_with(Config::modern()).await;
    let mut p = pod("p");
    p["spec"]["schedulingGates"] = json!([{"name": "a.example.com"}, {"name": "b.example.com"}]);
    p["metadata"]["labels"] = json!({"app": "x"});
    let first = c.post(PODS, p).await.json();
    let r = c
        .json_patch(
            &format!("{PODS}/p"),
            json!([{"op": "remove", "path": "/spec/schedulingGates"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json()["spec"].get("schedulingGates").is_none());
    let rv = d.resource_version();
    let mut w = c
        .watch(&format!("{PODS}?watch=true&resourceVersion={rv}"))
        .await;
    let again = d.recreate("pods", "default", "p").unwrap();
    assert_ne!(again["metadata"]["uid"], first["metadata"]["uid"]);
    assert_eq!(
        again["spec"]["schedulingGates"],
        json!([{"name": "a.example.com"}, {"name": "b.example.com"}])
    );
    assert_eq!(
        again["status"]["conditions"][0]["reason"],
        "SchedulingGated"
    );
    assert_eq!(again["metadata"]["labels"]["app"], "x");
    assert_eq!(again["metadata"]["generation"], 1);
    let e = w.event().await;
    assert_eq!(e["type"], "DELETED");
    assert_eq!(e["object"]["metadata"]["uid"], first["metadata"]["uid"]);
    let e = w.event().await;
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"]["metadata"]["uid"], again["metadata"]["uid"]);
    assert_eq!(rv_of(&e["object"]), rv + 2);
    let kinds: Vec<String> = d
        .history("pods", "default", "p")
        .into_iter()
        .map(|c| c.kind)
        .collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED", "ADDED"]);
    // A pod created without gates comes back without.
    c.post(PODS, pod("plain")).await;
    let plain = d.recreate("pods", "default", "plain").unwrap();
    assert!(plain["spec"].get("schedulingGates").is_none());
    assert_eq!(
        d.recreate("pods", "default", "missing").unwrap_err()["code"],
        404
    );
}

#[tokio::test]
async fn recreate_legacy_object_is_uninitialized_again() {
    let mut cfg = Config::legacy();
    cfg.initializers = vec![InitializerRule {
        name: "podimage.example.com".into(),
        resources: vec!["pods".into()],
    }];
    let (d, c) = start_with(cfg).await;
    let first = d.create("pods", "default", pod("p")).unwrap();
    assert_eq!(
        first["metadata"]["initializers"]["pending"][0]["name"],
        "podimage.example.com"
    );
    d.patch(
        "pods",
        "default",
        "p",
        "application/json-patch+json",
        &json!([{"op": "remove", "path": "/metadata/initializers"}]),
    )
    .unwrap();
    let rv = d.resource_version();
    let mut w = c
        .watch(&format!(
            "{PODS}?watch=true&includeUninitialized=true&resourceVersion={rv}"
        ))
        .await;
    let r = c
        .request("POST", "/_double/recreate/pods/default/p", None, None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let again = r.json();
    assert_ne!(again["metadata"]["uid"], first["metadata"]["uid"]);
    assert_eq!(
        again["metadata"]["initializers"],
        json!({"pending": [{"name": "podimage.example.com"}]})
    );
    assert_eq!(w.event().await["type"], "DELETED");
    let e = w.event().await;
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"]["metadata"]["uid"], again["metadata"]["uid"]);
    // Hidden again from plain LISTs (a GET by name returns it: 1.13.12 `Store.Get`).
    assert_eq!(c.get(PODS).await.json()["items"], json!([]));
    assert_eq!(c.get(&format!("{PODS}/p")).await.status, 200);
    let r = c
        .request("POST", "/_double/recreate/pods/default/nope", None, None)
        .await;
    assert_eq!(r.status, 404);
    let r = c
        .request("POST", "/_double/recreate/widgets/default/p", None, None)
        .await;
    assert_eq!(r.status, 404);
}

async fn broken_or_ended(w: &mut common::Watch) {
    loop {
        match w.next().await {
            Line::Broken(_) | Line::End => return,
            Line::Event(v) if v["type"] == "BOOKMARK" => continue,
            other => panic!("the watch survived the restore: {other:?}"),
        }
    }
}

#[tokio::test]
async fn restore_from_snapshot_goes_back_in_time() {
    let mut cfg = Config::modern();
    cfg.bookmark_interval = Duration::from_millis(100);
    let (d, c) = start_with(cfg).await;
    c.post(PODS, pod("a")).await;
    c.post(PODS, pod("a2")).await;
    let snap = d.snapshot();
    let r = snap.revision();
    assert_eq!((r, snap.len()), (2, 2));
    for n in ["b", "c"] {
        c.post(PODS, pod(n)).await;
    }
    let top = d.resource_version();
    assert_eq!(top, r + 2);
    let mut old = c
        .watch(&format!("{PODS}?watch=true&resourceVersion={top}"))
        .await;
    d.restore(&snap);
    broken_or_ended(&mut old).await;
    assert_eq!(d.resource_version(), r);
    let list = c.get(PODS).await.json();
    assert_eq!(list["metadata"]["resourceVersion"], r.to_string());
    assert_eq!(list["items"].as_array().unwrap().len(), 2);

    // A watch from the future revision is accepted and silent until the store passes it.
    let mut w = c
        .watch(&format!(
            "{PODS}?watch=true&resourceVersion={top}&allowWatchBookmarks=true"
        ))
        .await;
    assert_eq!(w.status, 200);
    c.post(PODS, pod("x")).await;
    // Not even a bookmark while the store is below the requested revision.
    let line = tokio::time::timeout(Duration::from_millis(400), w.next()).await;
    assert!(line.is_err(), "{line:?}");
    c.post(PODS, pod("y")).await;
    assert_eq!(d.resource_version(), top);
    w.quiet_for(Duration::from_millis(300)).await;
    c.post(PODS, pod("z")).await;
    let e = w.event().await;
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"]["metadata"]["name"], "z");
    assert_eq!(rv_of(&e["object"]), top + 1);
    // After another restore, a watch from before the restored revision is too old,
    // one from the restored revision itself is fine.
    d.restore(&snap);
    broken_or_ended(&mut w).await;
    let mut stale = c
        .watch(&format!("{PODS}?watch=true&resourceVersion={}", r - 1))
        .await;
    let e = stale.event().await;
    assert_eq!(e["type"], "ERROR");
    assert_eq!(
        e["object"]["message"],
        format!("too old resource version: {} ({r})", r - 1)
    );
    let mut fresh = c
        .watch(&format!("{PODS}?watch=true&resourceVersion={r}"))
        .await;
    c.post(PODS, pod("after")).await;
    assert_eq!(fresh.event().await["object"]["metadata"]["name"], "after");
}

#[tokio::test]
async fn restore_over_control_routes() {
    let (d, c) = start_with(Config::modern()).await;
    c.post(PODS, pod("a")).await;
    c.post(PODS, pod("b")).await;
    let s = c.request("POST", "/_double/snapshot", None, None).await;
    assert_eq!(s.status, 200);
    let s = s.json();
    assert_eq!(s["resourceVersion"], "2");
    let id = s["id"].as_u64().unwrap();
    c.delete(&format!("{PODS}/a")).await;
    c.post(PODS, pod("c")).await;
    let mut w = c
        .watch(&format!("{PODS}?watch=true&resourceVersion=4"))
        .await;
    let r = c
        .request("POST", &format!("/_double/restore?id={id}"), None, None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    broken_or_ended(&mut w).await;
    // The caller's next requests work at once.
    let names: Vec<String> = c.get(PODS).await.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(d.resource_version(), 2);
    assert_eq!(
        c.request("POST", "/_double/restore?id=99", None, None)
            .await
            .status,
        400
    );

    // An API server restarted on an empty etcd: nothing, revision 0, then "1" again.
    let r = c
        .request("POST", "/_double/restore-empty", None, None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let list = c.get(PODS).await.json();
    assert_eq!(list["metadata"]["resourceVersion"], "0");
    assert!(list["items"].as_array().unwrap().is_empty());
    let mut w = c
        .watch(&format!("{PODS}?watch=true&resourceVersion=1"))
        .await;
    let created = c.post(PODS, pod("n")).await.json();
    assert_eq!(created["metadata"]["resourceVersion"], "1");
    w.quiet_for(Duration::from_millis(200)).await;
    c.post(PODS, pod("m")).await;
    assert_eq!(w.event().await["object"]["metadata"]["name"], "m");
    d.restore(&Snapshot::default());
    assert_eq!(d.resource_version(), 0);
}

#[tokio::test]
async fn injected_errors_scoped_to_watches() {
    let (d, c) = start_with(Config::modern()).await;
    c.post(PODS, pod("a")).await;
    d.set_faults(Faults {
        error_fraction: 1.0,
        error_codes: vec![410],
        error_only: vec!["watch".into()],
        ..Faults::default()
    });
    let r = c.get(&format!("{PODS}?watch=true&resourceVersion=1")).await;
    assert_eq!(r.status, 410);
    assert_eq!(
        r.json(),
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "too old resource version: 1 (1)",
            "reason": "Expired",
            "code": 410,
        })
    );
    assert_eq!(c.get(&format!("{PODS}?watch=1")).await.status, 410);
    assert_eq!(c.get(PODS).await.status, 200);
    assert_eq!(c.get(&format!("{PODS}/a")).await.status, 200);
    assert_eq!(c.get("/api/v1").await.status, 200);
    assert_eq!(c.post(PODS, pod("b")).await.status, 201);

    // 504 on writes only, over the control route.
    let r = c
        .put(
            "/_double/faults",
            json!({"errorFraction": 1.0, "errorCodes": [504], "errorOnly": ["patch", "delete"]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = c
        .patch(
            &format!("{PODS}/a"),
            LABEL,
            json!({"metadata": {"labels": {"x": "1"}}}),
        )
        .await;
    assert_eq!(r.status, 504);
    assert_eq!(
        r.json(),
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Timeout: request did not complete within requested timeout - context deadline exceeded",
            "reason": "Timeout",
            "details": {},
            "code": 504,
        })
    );
    assert_eq!(c.delete(&format!("{PODS}/a")).await.status, 504);
    assert_eq!(c.get(&format!("{PODS}/a")).await.status, 200);
    let mut w = c.watch(&format!("{PODS}?watch=true")).await;
    assert_eq!(w.status, 200);
    assert_eq!(w.event().await["type"], "ADDED");
    for bad in [
        json!({"errorCodes": [418]}),
        json!({"errorOnly": ["deletecollection"]}),
        json!({"hangMethod": "TRACE", "hangCount": 1}),
    ] {
        assert_eq!(c.put("/_double/faults", bad).await.status, 400);
    }
}

#[tokio::test]
async fn injected_410_and_504_in_legacy_wording() {
    let (d, c) = start_with(Config::legacy()).await;
    c.post(PODS, pod("a")).await;
    d.set_faults(Faults {
        error_fraction: 1.0,
        error_codes: vec![410],
        error_only: vec!["watch".into()],
        ..Faults::default()
    });
    let r = c.get(&format!("{PODS}?watch=true&resourceVersion=1")).await;
    assert_eq!(r.status, 410);
    let s = r.json();
    assert_eq!(
        (s["reason"].as_str(), s["message"].as_str()),
        (Some("Gone"), Some("too old resource version: 1 (1)"))
    );
    assert_eq!(c.get(PODS).await.status, 200);
    d.set_faults(Faults {
        error_fraction: 1.0,
        error_codes: vec![504],
        error_only: vec!["create".into(), "list".into()],
        ..Faults::default()
    });
    let r = c.post(PODS, pod("b")).await;
    assert_eq!(r.status, 504);
    assert_eq!(
        r.json()["message"],
        "Timeout: request did not complete within requested timeout 30s"
    );
    let r = c.get(PODS).await;
    assert_eq!(r.status, 504);
    assert_eq!(
        r.json()["message"],
        "Timeout: request did not complete within 1m0s"
    );
    assert_eq!(c.get(&format!("{PODS}/a")).await.status, 200);
}
