// WATCH: initial state, resumption, bookmarks, timeouts, 410, selector transitions, tables.

mod common;

use std::time::Duration;

use common::{Client, Line, PODS, labelled_pod, pod};
use kube_double::{Config, Double};
use serde_json::json;

async fn start_with(cfg: Config) -> (Double, Client) {
    let d = Double::start(cfg).await.unwrap();
    let c = Client::new(&d.url());
    (d, c)
}

#[tokio::test]
async fn initial_added_then_changes() {
    let (_d, c) = start_with(Config::modern()).await;
    c.post(PODS, pod("a")).await;
    c.post(PODS, pod("b")).await;
    let mut w = c.watch(&format!("{PODS}?watch=true")).await;
    assert_eq!(w.status, 200);
    assert_eq!(w.headers["content-type"], "application/json");
    assert_eq!(w.headers["transfer-encoding"], "chunked");
    let e = w.event().await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("a"))
    );
    assert_eq!(w.event().await["object"]["metadata"]["name"], "b");
    c.json_patch(
        &format!("{PODS}/a"),
        json!([{"op": "add", "path": "/metadata/labels", "value": {"x": "1"}}]),
    )
    .await;
    let e = w.event().await;
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(e["object"]["metadata"]["labels"]["x"], "1");
    c.delete(&format!("{PODS}/b")).await;
    let e = w.event().await;
    assert_eq!(e["type"], "DELETED");
    assert_eq!(e["object"]["metadata"]["name"], "b");
    assert_eq!(e["object"]["metadata"]["resourceVersion"], "4");
}

#[tokio::test]
async fn resume_from_resource_version() {
    let (_d, c) = start_with(Config::modern()).await;
    for n in ["a", "b", "c"] {
        c.post(PODS, pod(n)).await;
    }
    let mut w = c.watch(&format!("{PODS}?watch=1&resourceVersion=1")).await;
    let e = w.event().await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("b"))
    );
    assert_eq!(w.event().await["object"]["metadata"]["name"], "c");
    w.quiet_for(Duration::from_millis(300)).await;
}

#[tokio::test]
async fn bookmarks_and_timeout() {
    let mut cfg = Config::modern();
    cfg.bookmark_interval = Duration::from_millis(200);
    let (d, c) = start_with(cfg).await;
    c.post(PODS, pod("a")).await;
    let rv = d.resource_version();
    let started = std::time::Instant::now();
    let mut w = c
        .watch(&format!(
            "{PODS}?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=1"
        ))
        .await;
    let mut bookmarks = 0;
    loop {
        match w.next().await {
            Line::Event(e) => {
                assert_eq!(e["type"], "BOOKMARK", "{e}");
                assert_eq!(
                    e["object"],
                    json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": rv.to_string()}})
                );
                bookmarks += 1;
            }
            Line::End => break,
            other => panic!("{other:?}"),
        }
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_secs(3),
        "{took:?}"
    );
    // Interval bookmarks (about four) plus the one before closing.
    assert!(bookmarks >= 3, "{bookmarks}");

    // Without allowWatchBookmarks: no bookmark at all, clean end.
    let mut w = c
        .watch(&format!(
            "{PODS}?watch=true&resourceVersion={rv}&timeoutSeconds=1"
        ))
        .await;
    match w.next_within(Duration::from_secs(3)).await {
        Line::End => {}
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn too_old_resource_version_is_410_error_event() {
    let mut cfg = Config::modern();
    cfg.history_window = 3;
    let (d, c) = start_with(cfg).await;
    for i in 0..5 {
        c.post(PODS, pod(&format!("p{i}"))).await;
    }
    let mut w = c
        .watch(&format!("{PODS}?watch=true&resourceVersion=1"))
        .await;
    assert_eq!(w.status, 200);
    let e = w.event().await;
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["kind"], "Status");
    assert_eq!(e["object"]["code"], 410);
    assert_eq!(e["object"]["reason"], "Expired");
    assert_eq!(e["object"]["message"], "too old resource version: 1 (2)");
    assert!(matches!(w.next().await, Line::End));
    // Within the window: fine.
    let mut w = c
        .watch(&format!("{PODS}?watch=true&resourceVersion=2"))
        .await;
    assert_eq!(w.event().await["object"]["metadata"]["name"], "p2");
    // expire_versions makes everything before now too old.
    d.expire_versions();
    let mut w = c
        .watch(&format!("{PODS}?watch=true&resourceVersion=4"))
        .await;
    assert_eq!(
        w.event().await["object"]["message"],
        "too old resource version: 4 (5)"
    );
    let mut w = c
        .watch(&format!("{PODS}?watch=true&resourceVersion=5"))
        .await;
    c.post(PODS, pod("later")).await;
    assert_eq!(w.event().await["object"]["metadata"]["name"], "later");
}

#[tokio::test]
async fn selectors_drive_added_and_deleted() {
    let (_d, c) = start_with(Config::modern()).await;
    c.post(PODS, labelled_pod("a", json!({"role": "x"}))).await;
    c.post(PODS, pod("b")).await;
    let mut w = c
        .watch(&format!("{PODS}?watch=true&labelSelector=role%3Dx"))
        .await;
    assert_eq!(w.event().await["object"]["metadata"]["name"], "a");
    // b starts matching: ADDED.
    c.patch(
        &format!("{PODS}/b"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"role": "x"}}}),
    )
    .await;
    let e = w.event().await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("b"))
    );
    // a stops matching: DELETED carrying its last matching state.
    c.patch(
        &format!("{PODS}/a"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"role": "y"}}}),
    )
    .await;
    let e = w.event().await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("DELETED"), Some("a"))
    );
    assert_eq!(e["object"]["metadata"]["labels"]["role"], "x");
    // Changes to non-matching objects are invisible.
    c.patch(
        &format!("{PODS}/a"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"other": "1"}}}),
    )
    .await;
    w.quiet_for(Duration::from_millis(300)).await;

    let mut f = c
        .watch(&format!(
            "{PODS}?watch=true&fieldSelector=metadata.name%3Db"
        ))
        .await;
    assert_eq!(f.event().await["object"]["metadata"]["name"], "b");
    c.post(PODS, pod("c")).await;
    c.delete(&format!("{PODS}/b")).await;
    let e = f.event().await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("DELETED"), Some("b"))
    );

    let r = c
        .get(&format!("{PODS}?watch=true&labelSelector=a%20b"))
        .await;
    assert_eq!(r.status, 400);
}

/// `fieldSelector=spec.nodeName=` (the unbound pods, as a scheduler watches them): LIST
/// returns only pods without a node; the watch sends ADDED for a new unbound pod,
/// MODIFIED while it stays unbound, and DELETED when it is bound, carrying the pod's
/// last unbound state with the binding's resourceVersion (1.33.4 k8s.io/apiserver
/// `cacheWatcher.convertToWatchEvent`, `pkg/storage/cacher/cache_watcher.go`: "return a
/// delete event with the previous object content, but with the event's resource
/// version"; the etcd3 `watchChan.transform` in `pkg/storage/etcd3/watcher.go` sends
/// `oldObj` decoded at the event's revision the same way). A pod created already bound
/// (a mirror pod) never matches, so its create, updates and delete are all invisible.
#[tokio::test]
async fn unbound_pods_field_selector() {
    let (_d, c) = start_with(Config::modern()).await;
    let bound_pod = |name: &str| {
        let mut p = pod(name);
        p["spec"]["nodeName"] = json!("node-0");
        p["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "abc"});
        p
    };
    assert_eq!(c.post(PODS, bound_pod("pre-bound")).await.status, 201);
    assert_eq!(c.post(PODS, pod("pre-free")).await.status, 201);
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    for sel in ["spec.nodeName%3D", "spec.nodeName%3D%3D", "spec.nodeName="] {
        let r = c.get(&format!("{PODS}?fieldSelector={sel}")).await;
        assert_eq!(r.status, 200, "{sel}: {}", r.text);
        assert_eq!(names(&r.json()), vec!["pre-free"], "{sel}");
    }
    let r = c
        .get(&format!("{PODS}?fieldSelector=spec.nodeName!%3D"))
        .await;
    assert_eq!(names(&r.json()), vec!["pre-bound"]);

    let mut w = c
        .watch(&format!("{PODS}?watch=true&fieldSelector=spec.nodeName%3D"))
        .await;
    assert_eq!(w.status, 200);
    let e = w.event().await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("pre-free"))
    );

    // Created already bound: no event; nor for its updates or its deletion.
    assert_eq!(c.post(PODS, bound_pod("mirror")).await.status, 201);
    let r = c
        .patch(
            &format!("{PODS}/mirror"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"x": "1"}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(c.delete(&format!("{PODS}/mirror")).await.status, 200);
    w.quiet_for(Duration::from_millis(300)).await;

    // A new unbound pod: ADDED, then MODIFIED while it stays unbound.
    c.post(PODS, pod("free")).await;
    let e = w.event().await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("free"))
    );
    c.patch(
        &format!("{PODS}/free"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"x": "1"}}}),
    )
    .await;
    let e = w.event().await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("MODIFIED"), Some("free"))
    );
    assert_eq!(e["object"]["metadata"]["labels"]["x"], "1");

    // Bound through the binding subresource: DELETED with the last unbound state and
    // the binding's resourceVersion.
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "free"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}});
    let r = c.post(&format!("{PODS}/free/binding"), binding).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let now = c.get(&format!("{PODS}/free")).await.json();
    assert_eq!(now["spec"]["nodeName"], "node-1");
    let e = w.event().await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("DELETED"), Some("free"))
    );
    assert!(e["object"]["spec"].get("nodeName").is_none(), "{e}");
    assert_eq!(e["object"]["metadata"]["labels"]["x"], "1");
    assert_eq!(
        e["object"]["metadata"]["resourceVersion"],
        now["metadata"]["resourceVersion"]
    );
    // Bound now: its updates and deletion are invisible too.
    c.patch(
        &format!("{PODS}/free"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"x": "2"}}}),
    )
    .await;
    c.delete(&format!("{PODS}/free")).await;
    w.quiet_for(Duration::from_millis(300)).await;

    // The unbound pod from before the watch is still seen being deleted.
    c.delete(&format!("{PODS}/pre-free")).await;
    let e = w.event().await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("DELETED"), Some("pre-free"))
    );
}

#[tokio::test]
async fn table_watch_for_kubectl() {
    let (_d, c) = start_with(Config::modern()).await;
    let mut p = pod("g");
    p["spec"]["schedulingGates"] = json!([{"name": "x"}]);
    c.post(PODS, p).await;
    let mut w = c
        .watch_accept(
            &format!("{PODS}?watch=true"),
            Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"),
        )
        .await;
    let e = w.event().await;
    assert_eq!(e["object"]["kind"], "Table");
    assert_eq!(e["object"]["rows"][0]["cells"][2], "SchedulingGated");
}

#[tokio::test]
async fn many_creates_and_deletes_stream_in_order() {
    let (d, c) = start_with(Config::modern()).await;
    let rv = d.resource_version();
    let mut w = c
        .watch(&format!("/api/v1/pods?watch=true&resourceVersion={rv}"))
        .await;
    let n = 10_000;
    let small = json!({"metadata": {"name": "x"}});
    let writer = {
        let d = d.clone();
        tokio::task::spawn_blocking(move || {
            for i in 0..n {
                let mut o = small.clone();
                o["metadata"]["name"] = json!(format!("p{i}"));
                d.create("pods", "bulk", o).unwrap();
                d.delete("pods", "bulk", &format!("p{i}")).unwrap();
            }
        })
    };
    let mut last = rv;
    for i in 0..(2 * n) {
        let e = w.event().await;
        let want = if i % 2 == 0 { "ADDED" } else { "DELETED" };
        assert_eq!(e["type"], want);
        let erv: u64 = e["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(erv > last);
        last = erv;
    }
    tokio::time::timeout(common::WAIT, writer)
        .await
        .unwrap()
        .unwrap();
    assert!(d.list("pods").is_empty());
}

#[tokio::test]
async fn holds_a_hundred_thousand_objects() {
    let (d, c) = start_with(Config::modern()).await;
    let base = json!({"metadata": {"name": "x", "labels": {"k": "v"}}});
    let d2 = d.clone();
    tokio::time::timeout(
        Duration::from_secs(120),
        tokio::task::spawn_blocking(move || {
            for i in 0..100_000 {
                let mut o = base.clone();
                o["metadata"]["name"] = json!(format!("o{i}"));
                d2.create("pods", "big", o).unwrap();
            }
        }),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(d.resource_version(), 100_000);
    let page = c.get("/api/v1/namespaces/big/pods?limit=500").await.json();
    assert_eq!(page["items"].as_array().unwrap().len(), 500);
    assert_eq!(page["metadata"]["remainingItemCount"], 99_500);
}
