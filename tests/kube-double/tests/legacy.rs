// Legacy (1.13) initializers: hiding, admission from rules, blocking POST, update rules, RBAC.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Client, PODS, labelled_pod, pod};
use kube_double::{Config, Double, InitializerRule};
use serde_json::{Value, json};

const INIT: &str = "podimage.example.com";

fn config() -> Config {
    let mut cfg = Config::legacy();
    cfg.initializers = vec![InitializerRule {
        name: INIT.into(),
        resources: vec!["pods".into(), "deployments.apps".into()],
    }];
    cfg.post_timeout = Duration::from_secs(1);
    cfg
}

async fn start_with(cfg: Config) -> (Double, Client) {
    let d = Double::start(cfg).await.unwrap();
    let c = Client::new(&d.url());
    (d, c)
}

/// Starts a blocking POST in the background and waits until the object exists.
async fn blocked_post(d: &Double, c: &Client, name: &str) -> tokio::task::JoinHandle<common::Resp> {
    let c2 = c.clone();
    let body = pod(name);
    let h = tokio::spawn(async move { c2.post(PODS, body).await });
    tokio::time::timeout(common::WAIT, async {
        while d.get("pods", "default", name).is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("object never appeared");
    h
}

#[tokio::test]
async fn uninitialized_objects_are_hidden() {
    let (d, c) = start_with(config()).await;
    let r = c
        .post(
            &format!("{PODS}?includeUninitialized=true"),
            labelled_pod("a", json!({"app": "x"})),
        )
        .await;
    // Row 7 of issue 12: 202 Accepted while the object is still uninitialized.
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(
        r.json()["metadata"]["initializers"],
        json!({"pending": [{"name": INIT}]})
    );
    // Row 4 of issue 12: a GET by name returns it, initialized or not; only LIST and
    // WATCH hide it.
    let got = c.get(&format!("{PODS}/a")).await;
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(
        got.json()["metadata"]["initializers"]["pending"][0]["name"],
        INIT
    );
    assert_eq!(
        c.get(&format!("{PODS}/a?includeUninitialized=true"))
            .await
            .status,
        200
    );
    assert_eq!(c.get(PODS).await.json()["items"], json!([]));
    let l = c
        .get(&format!(
            "{PODS}?includeUninitialized=true&labelSelector=app"
        ))
        .await
        .json();
    assert_eq!(l["items"].as_array().unwrap().len(), 1);
    let l = c
        .get(&format!(
            "{PODS}?includeUninitialized=true&labelSelector=other"
        ))
        .await
        .json();
    assert_eq!(l["items"].as_array().unwrap().len(), 0);
    // The library sees everything.
    assert!(d.get("pods", "default", "a").is_some());
    assert_eq!(d.list("pods").len(), 1);
    // Names are taken even while hidden.
    assert_eq!(
        c.post(&format!("{PODS}?includeUninitialized=true"), pod("a"))
            .await
            .status,
        409
    );
    // Deployments are covered by the rule; events are not.
    let r = c
        .post(
            "/apis/apps/v1/namespaces/default/deployments?includeUninitialized=true",
            json!({"metadata": {"name": "d"}}),
        )
        .await;
    assert_eq!(
        r.json()["metadata"]["initializers"]["pending"][0]["name"],
        INIT
    );
    let r = c
        .post(
            "/api/v1/namespaces/default/events",
            json!({"metadata": {"name": "e"}}),
        )
        .await;
    assert_eq!(r.status, 201);
    assert!(r.json()["metadata"].get("initializers").is_none());
    // Objects the rules do not cover are created initialized: 201 even with the flag.
    let r = c
        .post(
            "/api/v1/namespaces/default/events?includeUninitialized=true",
            json!({"metadata": {"name": "e2"}}),
        )
        .await;
    assert_eq!(r.status, 201);
    // Mirror pods are exempt.
    let mut m = pod("mirror");
    m["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
    assert_eq!(c.post(PODS, m).await.status, 201);
}

/// Row 4 of issue 12: 1.13.12 `Store.Get` has no initialization filter, so a GET by name
/// returns an uninitialized object without `includeUninitialized` (the 1.13 e2e test
/// `test/e2e/apimachinery/initializers.go` does exactly that). The old double said 404.
#[tokio::test]
async fn get_by_name_returns_uninitialized_objects() {
    let (d, c) = start_with(config()).await;
    d.create("pods", "default", pod("u")).unwrap();
    let r = c.get(&format!("{PODS}/u")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json()["metadata"]["initializers"]["pending"][0]["name"],
        INIT
    );
    assert_eq!(c.get(PODS).await.json()["items"], json!([]));
    assert_eq!(c.get(&format!("{PODS}/nope")).await.status, 404);
}

#[tokio::test]
async fn blocking_post_returns_when_initialized() {
    let (d, c) = start_with({
        let mut cfg = config();
        cfg.post_timeout = Duration::from_secs(10);
        cfg
    })
    .await;
    let h = blocked_post(&d, &c, "a").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!h.is_finished());
    let r = c
        .json_patch(
            &format!("{PODS}/a"),
            json!([{"op": "remove", "path": "/metadata/initializers"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let created = tokio::time::timeout(common::WAIT, h)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(created.status, 201);
    assert_eq!(created.json()["metadata"]["name"], "a");
    assert!(created.json()["metadata"].get("initializers").is_none());
    assert_eq!(c.get(&format!("{PODS}/a")).await.status, 200);
}

#[tokio::test]
async fn blocking_post_returns_result_status_on_failure() {
    let (d, c) = start_with({
        let mut cfg = config();
        cfg.post_timeout = Duration::from_secs(10);
        cfg
    })
    .await;
    let h = blocked_post(&d, &c, "a").await;
    let r = c.patch(&format!("{PODS}/a"), "application/merge-patch+json", json!({"metadata": {"initializers": {"result": {"status": "Failure", "code": 403, "reason": "Forbidden", "message": "image not allowed"}}}})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let failed = tokio::time::timeout(common::WAIT, h)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(failed.status, 403);
    let s = failed.json();
    assert_eq!(s["kind"], "Status");
    assert_eq!(s["message"], "image not allowed");
    assert_eq!(s["reason"], "Forbidden");
    assert!(d.get("pods", "default", "a").is_none());
}

#[tokio::test]
async fn blocking_post_fails_when_deleted() {
    let (d, c) = start_with({
        let mut cfg = config();
        cfg.post_timeout = Duration::from_secs(10);
        cfg
    })
    .await;
    let h = blocked_post(&d, &c, "a").await;
    assert_eq!(c.delete(&format!("{PODS}/a")).await.status, 200);
    let r = tokio::time::timeout(common::WAIT, h)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["reason"], "InternalError");
    assert_eq!(
        r.json()["message"],
        "Internal error occurred: object deleted while waiting for creation"
    );
}

/// Row 7 of issue 12: 1.13.12 `finishRequest` (`pkg/endpoints/handlers/rest.go`) says
/// "Timeout: request did not complete within requested timeout 30s", the duration being
/// the request's `?timeout=` (default 30s; here the double's `post_timeout`, 1s).
#[tokio::test]
async fn blocking_post_times_out_and_object_stays() {
    let (d, c) = start_with(config()).await;
    let started = std::time::Instant::now();
    let r = c.post(PODS, pod("a")).await;
    assert!(started.elapsed() >= Duration::from_millis(950));
    assert_eq!(r.status, 504);
    let s = r.json();
    assert_eq!(s["reason"], "Timeout");
    assert_eq!(
        s["message"],
        "Timeout: request did not complete within requested timeout 1s"
    );
    assert_eq!(s["code"], 504);
    assert_eq!(s["details"], json!({}));
    let left = d.get("pods", "default", "a").unwrap();
    assert_eq!(left["metadata"]["initializers"]["pending"][0]["name"], INIT);
    // `?timeout=` sets both the wait and the text.
    let started = std::time::Instant::now();
    let r = c.post(&format!("{PODS}?timeout=300ms"), pod("b")).await;
    assert!(started.elapsed() < Duration::from_millis(900));
    assert_eq!(r.status, 504);
    assert_eq!(
        r.json()["message"],
        "Timeout: request did not complete within requested timeout 300ms"
    );
}

#[tokio::test]
async fn client_given_initializers_and_bypass() {
    let (_d, c) = start_with(Config::legacy()).await;
    let mut p = pod("mine");
    p["metadata"]["initializers"] = json!({"pending": [{"name": "mine.example.com"}]});
    let r = c
        .post(&format!("{PODS}?includeUninitialized=true"), p)
        .await;
    assert_eq!(
        r.json()["metadata"]["initializers"]["pending"][0]["name"],
        "mine.example.com"
    );
    let mut p = pod("bypass");
    p["metadata"]["initializers"] = json!({"pending": []});
    let r = c.post(PODS, p).await;
    assert_eq!(r.status, 201);
    assert!(r.json()["metadata"].get("initializers").is_none());
    // No rules: plain creates never block.
    assert_eq!(c.post(PODS, pod("plain")).await.status, 201);
}

#[tokio::test]
async fn update_rules() {
    let (d, c) = start_with(config()).await;
    // nil -> non-nil is rejected.
    let mut p = pod("done");
    p["metadata"]["initializers"] = json!({"pending": []});
    c.post(PODS, p).await;
    let r = c
        .patch(
            &format!("{PODS}/done"),
            "application/merge-patch+json",
            json!({"metadata": {"initializers": {"pending": [{"name": "late"}]}}}),
        )
        .await;
    assert_eq!(r.status, 422);
    let s = r.json();
    assert_eq!(s["reason"], "Invalid");
    assert_eq!(
        s["message"],
        "Pod \"done\" is invalid: metadata.initializers: Invalid value: \"null\": field is immutable once initialization has completed"
    );
    assert_eq!(s["details"]["causes"][0]["field"], "metadata.initializers");

    // Empty pending with no result becomes nil initializers.
    d.create("pods", "default", pod("two")).unwrap();
    let mut cur = d.get("pods", "default", "two").unwrap();
    cur["metadata"]["initializers"] = json!({"pending": []});
    let r = c.put(&format!("{PODS}/two"), cur).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json()["metadata"].get("initializers").is_none());

    // Removing every pending entry in one JSON patch is legal.
    let mut multi = pod("multi");
    multi["metadata"]["initializers"] = json!({"pending": [{"name": "a"}, {"name": "b"}]});
    d.create("pods", "default", multi).unwrap();
    let r = c
        .json_patch(
            &format!("{PODS}/multi"),
            json!([{"op": "replace", "path": "/metadata/initializers/pending", "value": []}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json()["metadata"].get("initializers").is_none());

    // Strategic merge by name removes one entry.
    let mut sm = pod("sm");
    sm["metadata"]["initializers"] = json!({"pending": [{"name": "a"}, {"name": "b"}]});
    d.create("pods", "default", sm).unwrap();
    let r = c
        .patch(
            &format!("{PODS}/sm"),
            "application/strategic-merge-patch+json",
            json!({"metadata": {"initializers": {"pending": [{"name": "a", "$patch": "delete"}]}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json()["metadata"]["initializers"]["pending"],
        json!([{"name": "b"}])
    );

    // A result that is not Failure is invalid.
    d.create("pods", "default", pod("res")).unwrap();
    let r = c
        .patch(
            &format!("{PODS}/res"),
            "application/merge-patch+json",
            json!({"metadata": {"initializers": {"result": {"status": "Success"}}}}),
        )
        .await;
    assert_eq!(r.status, 422);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("metadata.initializers.result.status")
    );

    // Setting result stores it, then deletes the object.
    let r = c.patch(&format!("{PODS}/res"), "application/merge-patch+json", json!({"metadata": {"initializers": {"result": {"status": "Failure", "message": "no"}}}})).await;
    assert_eq!(r.status, 200);
    assert!(d.get("pods", "default", "res").is_none());
    let kinds: Vec<String> = d
        .history("pods", "default", "res")
        .into_iter()
        .map(|c| c.kind)
        .collect();
    assert_eq!(kinds.last().map(String::as_str), Some("DELETED"));
    assert_eq!(kinds[kinds.len() - 2], "MODIFIED");

    // Modern-only fields are unknown to 1.13 and dropped.
    let mut g = pod("gates");
    g["spec"]["schedulingGates"] = json!([{"name": "x"}]);
    let r = c
        .post(&format!("{PODS}?includeUninitialized=true"), g)
        .await;
    assert!(r.json()["spec"].get("schedulingGates").is_none());
}

#[tokio::test]
async fn library_update_with_result_deletes_the_object() {
    // Through the library the object with a result is deleted at once, so the immutability
    // rule is only reachable by validation; it is covered by unit tests in legacy.rs.
    let (d, _c) = start_with(config()).await;
    d.create("pods", "default", pod("x")).unwrap();
    let mut cur = d.get("pods", "default", "x").unwrap();
    cur["metadata"]["initializers"]["result"] = json!({"status": "Failure", "message": "m"});
    d.update("pods", "default", cur).unwrap();
    assert!(d.get("pods", "default", "x").is_none());
}

#[tokio::test]
async fn initialize_verb_is_checked_with_a_token_table() {
    let mut cfg = config();
    cfg.post_timeout = Duration::from_secs(10);
    let mut tokens = HashMap::new();
    tokens.insert("admin".to_string(), vec!["*".to_string()]);
    tokens.insert(
        "patcher".to_string(),
        vec!["get pods".into(), "patch pods".into(), "create pods".into()],
    );
    tokens.insert(
        "init".to_string(),
        vec![
            "get pods".into(),
            "patch pods".into(),
            "initialize pods".into(),
        ],
    );
    cfg.tokens = Some(tokens);
    let (d, c) = start_with(cfg).await;
    assert_eq!(c.get(PODS).await.status, 401);
    assert_eq!(c.get(PODS).await.json()["reason"], "Unauthorized");
    assert_eq!(c.with_token("wrong").get(PODS).await.status, 401);

    d.create("pods", "default", pod("a")).unwrap();
    let clear = json!([{"op": "remove", "path": "/metadata/initializers"}]);
    let r = c
        .with_token("patcher")
        .json_patch(&format!("{PODS}/a"), clear.clone())
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(r.json()["reason"], "Forbidden");
    // Row 6 of issue 12: `canInitialize` appends the authorizer's reason, which RBAC
    // leaves empty (1.13.12 `plugin/pkg/admission/initialization/initialization.go`).
    assert_eq!(
        r.json()["message"],
        "pods \"a\" is forbidden: update to uninitialized resource denied: "
    );
    assert_eq!(r.json()["details"], json!({"name": "a", "kind": "pods"}));
    let r = c
        .with_token("init")
        .json_patch(&format!("{PODS}/a"), clear)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);

    // Setting initializers at create needs the verb too.
    let mut p = pod("b");
    p["metadata"]["initializers"] = json!({"pending": []});
    let r = c.with_token("patcher").post(PODS, p.clone()).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "pods \"b\" is forbidden: create with initializers denied: "
    );
    assert_eq!(c.with_token("admin").post(PODS, p).await.status, 201);

    // Plain verbs are checked too.
    let r = c.with_token("init").post(PODS, pod("c")).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "pods is forbidden: User \"token:init\" cannot create resource \"pods\" in API group \"\" in the namespace \"default\""
    );
}

#[tokio::test]
async fn plain_watchers_see_added_at_initialization() {
    let (d, c) = start_with(config()).await;
    let rv = d.resource_version();
    let mut plain = c
        .watch(&format!("{PODS}?watch=true&resourceVersion={rv}"))
        .await;
    let mut all = c
        .watch(&format!(
            "{PODS}?watch=true&resourceVersion={rv}&includeUninitialized=true"
        ))
        .await;
    d.create("pods", "default", pod("a")).unwrap();
    let e = all.event().await;
    assert_eq!(e["type"], "ADDED");
    assert!(e["object"]["metadata"]["initializers"].is_object());
    plain.quiet_for(Duration::from_millis(300)).await;
    c.json_patch(
        &format!("{PODS}/a"),
        json!([{"op": "remove", "path": "/metadata/initializers"}]),
    )
    .await;
    let e = plain.event().await;
    assert_eq!(e["type"], "ADDED");
    assert!(e["object"]["metadata"].get("initializers").is_none());
    assert_eq!(all.event().await["type"], "MODIFIED");
    // Deleting an uninitialized object is invisible to plain watchers.
    d.create("pods", "default", pod("b")).unwrap();
    d.delete("pods", "default", "b").unwrap();
    assert_eq!(all.event().await["type"], "ADDED");
    assert_eq!(all.event().await["type"], "DELETED");
    plain.quiet_for(Duration::from_millis(300)).await;
    // Initial state for a plain watcher omits uninitialized objects.
    d.create("pods", "default", pod("c")).unwrap();
    let mut fresh = c.watch(&format!("{PODS}?watch=true")).await;
    let e = fresh.event().await;
    assert_eq!(e["object"]["metadata"]["name"], "a");
    fresh.quiet_for(Duration::from_millis(200)).await;
    let _: Value = e;
}

/// Row 5 of issue 12: 1.13.12 `Store.Update` stores the object with its result first
/// (watchers with the flag see MODIFIED), then deletes it (DELETED), and the update
/// answers 200 with the stored object (`pkg/registry/generic/registry/store.go`,
/// `shouldDeleteForFailedInitialization`, `deleteWithoutFinalizers`). The old double
/// deleted it directly: one DELETED event.
#[tokio::test]
async fn failed_initialization_is_modified_then_deleted() {
    let (d, c) = start_with(config()).await;
    d.create("pods", "default", pod("f")).unwrap();
    let rv = d.resource_version();
    let mut all = c
        .watch(&format!(
            "{PODS}?watch=true&resourceVersion={rv}&includeUninitialized=true"
        ))
        .await;
    let r = c
        .patch(
            &format!("{PODS}/f"),
            "application/merge-patch+json",
            json!({"metadata": {"initializers": {"result": {"status": "Failure", "message": "no"}}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json()["metadata"]["initializers"]["result"]["message"],
        "no"
    );
    let e = all.event().await;
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(
        e["object"]["metadata"]["initializers"]["result"]["message"],
        "no"
    );
    let modified_rv: u64 = e["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let e = all.event().await;
    assert_eq!(e["type"], "DELETED");
    assert_eq!(
        e["object"]["metadata"]["initializers"]["result"]["message"],
        "no"
    );
    let deleted_rv: u64 = e["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(deleted_rv > modified_rv);
    all.quiet_for(Duration::from_millis(200)).await;
    let kinds: Vec<String> = d
        .history("pods", "default", "f")
        .into_iter()
        .map(|c| c.kind)
        .collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);
    assert!(d.get("pods", "default", "f").is_none());
}

/// Row 9 of issue 12: the Initializers plugin returns early for any subresource
/// (1.13.12 `initializer.Admit`), so a `/status` write of an uninitialized pod needs no
/// `initialize` verb. The old double ran the plugin there and answered 403.
#[tokio::test]
async fn status_subresource_skips_the_initializers_plugin() {
    let mut cfg = config();
    let mut tokens = HashMap::new();
    tokens.insert(
        "kubelet".to_string(),
        vec![
            "get pods".into(),
            "update pods/status".into(),
            "patch pods/status".into(),
            "patch pods".into(),
        ],
    );
    cfg.tokens = Some(tokens);
    let (d, c) = start_with(cfg).await;
    let c = c.with_token("kubelet");
    d.create("pods", "default", pod("u")).unwrap();
    let r = c
        .patch(
            &format!("{PODS}/u/status"),
            "application/merge-patch+json",
            json!({"status": {"message": "seen"}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["status"]["message"], "seen");
    assert_eq!(
        r.json()["metadata"]["initializers"]["pending"][0]["name"],
        INIT
    );
    let mut cur = d.get("pods", "default", "u").unwrap();
    cur["status"]["message"] = json!("again");
    let r = c.put(&format!("{PODS}/u/status"), cur).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // The main resource still needs it.
    let r = c
        .patch(
            &format!("{PODS}/u"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
}

/// Row 10 of issue 12: `remainingItemCount` arrived in 1.15 (apimachinery `ListMeta`);
/// 1.13 lists carry only resourceVersion and continue.
#[tokio::test]
async fn legacy_lists_have_no_remaining_item_count() {
    let (d, c) = start_with(Config::legacy()).await;
    for i in 0..3 {
        d.create("pods", "default", pod(&format!("p{i}"))).unwrap();
    }
    let page = c.get(&format!("{PODS}?limit=1")).await.json();
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert!(page["metadata"]["continue"].is_string());
    assert!(
        page["metadata"].get("remainingItemCount").is_none(),
        "{page}"
    );
}

/// Row 2 of issue 12: 1.13 has no watch bookmarks (`allowWatchBookmarks` arrived in
/// 1.15, apimachinery `pkg/apis/meta/v1/types.go`); the unknown parameter is ignored.
#[tokio::test]
async fn legacy_watches_ignore_allow_watch_bookmarks() {
    let mut cfg = Config::legacy();
    cfg.bookmark_interval = Duration::from_millis(50);
    let (d, c) = start_with(cfg).await;
    let rv = d.resource_version();
    let mut w = c
        .watch(&format!(
            "{PODS}?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=1"
        ))
        .await;
    d.create("pods", "default", pod("late")).unwrap();
    let mut kinds = Vec::new();
    loop {
        match w.next_within(Duration::from_secs(3)).await {
            common::Line::Event(e) => kinds.push(e["type"].as_str().unwrap_or("").to_string()),
            common::Line::End => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(kinds, ["ADDED"], "no BOOKMARK on 1.13");
}

/// Row 8 of issue 12: 1.13.12's watch cache says `Gone` (`errors.NewGone`) in the
/// too-old ERROR event; 1.33.4 says `Expired`.
#[tokio::test]
async fn legacy_too_old_watch_event_says_gone() {
    let (d, c) = start_with(Config::legacy()).await;
    d.create("pods", "default", pod("a")).unwrap();
    d.create("pods", "default", pod("b")).unwrap();
    d.expire_versions();
    let mut w = c
        .watch(&format!("{PODS}?watch=true&resourceVersion=1"))
        .await;
    let e = w.event().await;
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["reason"], "Gone");
    assert_eq!(e["object"]["code"], 410);
    assert!(
        e["object"]["message"]
            .as_str()
            .unwrap()
            .starts_with("too old resource version: 1 (")
    );
}
