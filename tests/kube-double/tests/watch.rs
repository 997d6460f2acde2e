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
