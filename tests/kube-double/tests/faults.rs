// Faults on demand: outages, injected errors, latency, cut and malformed watches, expiry.

mod common;

use std::time::{Duration, Instant};

use common::{Client, Line, PODS, pod};
use kube_double::{Config, Double, Faults};
use serde_json::json;

async fn start_with(cfg: Config) -> (Double, Client) {
    let d = Double::start(cfg).await.unwrap();
    let c = Client::new(&d.url());
    (d, c)
}

async fn refused(c: &Client) -> bool {
    c.try_request("GET", "/version", None, None, None)
        .await
        .is_err()
}

#[tokio::test]
async fn stop_breaks_watches_refuses_and_resume_keeps_state() {
    let (d, c) = start_with(Config::modern()).await;
    c.post(PODS, pod("a")).await;
    let mut w = c.watch(&format!("{PODS}?watch=true")).await;
    assert_eq!(w.event().await["type"], "ADDED");
    d.stop();
    match w.next().await {
        Line::Broken(_) | Line::End => {}
        other => panic!("watch survived stop: {other:?}"),
    }
    assert!(refused(&c).await);
    d.resume().await.unwrap();
    let r = c.get(&format!("{PODS}/a")).await;
    assert_eq!(r.status, 200);
    assert_eq!(d.url(), format!("http://{}", d.addr()));
}

#[tokio::test]
async fn down_at_start_and_down_for() {
    let mut cfg = Config::modern();
    cfg.down_at_start = Some(Duration::from_millis(500));
    let (d, c) = start_with(cfg).await;
    assert!(refused(&c).await);
    tokio::time::timeout(common::WAIT, async {
        while refused(&c).await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
    d.down_for(Duration::from_millis(400));
    assert!(refused(&c).await);
    let t = Instant::now();
    tokio::time::timeout(common::WAIT, async {
        while refused(&c).await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
    assert!(t.elapsed() >= Duration::from_millis(250));
    // The control route does the same for out-of-process tests.
    assert_eq!(
        c.request("POST", "/_double/down?ms=300", None, None)
            .await
            .status,
        200
    );
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(refused(&c).await);
    tokio::time::timeout(common::WAIT, async {
        while refused(&c).await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn injected_errors_with_retry_after_and_seed() {
    let mut cfg = Config::modern();
    cfg.seed = 7;
    cfg.faults = Faults {
        error_fraction: 0.5,
        retry_after_secs: 3,
        ..Faults::default()
    };
    let run = |cfg: Config| async move {
        let (d, c) = start_with(cfg).await;
        let mut codes = Vec::new();
        for _ in 0..60 {
            let r = c.get(PODS).await;
            match r.status {
                // API Priority and Fairness's rejection, as the real server sends it: the
                // header and Go's plain text, no Status.
                429 => {
                    assert_eq!(r.headers["retry-after"], "3");
                    assert_eq!(r.headers["content-type"], "text/plain; charset=utf-8");
                    assert_eq!(r.text, "Too many requests, please try again later.\n");
                }
                503 => {
                    assert_eq!(r.headers["retry-after"], "3");
                    let s = r.json();
                    assert_eq!(s["reason"], "ServiceUnavailable");
                    assert_eq!(s["details"]["retryAfterSeconds"], 3);
                }
                500 => assert_eq!(r.json()["reason"], "InternalError"),
                200 => {}
                other => panic!("{other}"),
            }
            codes.push(r.status);
        }
        // Control routes are never faulted.
        for _ in 0..10 {
            assert_eq!(c.get("/_double/requests").await.status, 200);
        }
        drop(d);
        codes
    };
    let a = run(cfg.clone()).await;
    let b = run(cfg).await;
    assert_eq!(a, b, "same seed, same faults");
    for code in [200, 500, 503, 429] {
        assert!(a.contains(&code), "{code} never seen in {a:?}");
    }

    // Only the chosen codes, and faults set at run time over the control route.
    let (d, c) = start_with(Config::modern()).await;
    let r = c
        .put(
            "/_double/faults",
            json!({"errorFraction": 1.0, "errorCodes": [429], "retryAfterSecs": 9}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = c.get(PODS).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.headers["retry-after"], "9");
    assert_eq!(r.text, "Too many requests, please try again later.\n");
    d.set_faults(Faults::default());
    assert_eq!(c.get(PODS).await.status, 200);
}

#[tokio::test]
async fn latency_is_added() {
    let (d, c) = start_with(Config::modern()).await;
    d.set_faults(Faults {
        latency: Duration::from_millis(300),
        ..Faults::default()
    });
    let t = Instant::now();
    assert_eq!(c.get(PODS).await.status, 200);
    assert!(t.elapsed() >= Duration::from_millis(300));
    let t = Instant::now();
    c.get("/_double/requests").await;
    assert!(t.elapsed() < Duration::from_millis(300));
}

#[tokio::test]
async fn watch_cut_after_n_events() {
    let (d, c) = start_with(Config::modern()).await;
    for i in 0..5 {
        c.post(PODS, pod(&format!("p{i}"))).await;
    }
    d.set_faults(Faults {
        cut_watch_after: Some(2),
        ..Faults::default()
    });
    let mut w = c.watch(&format!("{PODS}?watch=true")).await;
    assert_eq!(w.event().await["type"], "ADDED");
    assert_eq!(w.event().await["type"], "ADDED");
    match w.next().await {
        Line::Broken(_) => {}
        other => panic!("expected a broken stream, got {other:?}"),
    }
}

#[tokio::test]
async fn watch_cut_with_probability() {
    let (d, c) = start_with(Config::modern()).await;
    for i in 0..5 {
        c.post(PODS, pod(&format!("p{i}"))).await;
    }
    d.set_faults(Faults {
        cut_watch_probability: 1.0,
        ..Faults::default()
    });
    let mut w = c.watch(&format!("{PODS}?watch=true")).await;
    assert!(matches!(w.next().await, Line::Broken(_)));
}

#[tokio::test]
async fn malformed_watch_lines() {
    let (d, c) = start_with(Config::modern()).await;
    c.post(PODS, pod("a")).await;
    d.set_faults(Faults {
        malformed_watch_probability: 1.0,
        ..Faults::default()
    });
    let mut w = c.watch(&format!("{PODS}?watch=true")).await;
    assert!(matches!(w.next().await, Line::Malformed(_)));
    assert_eq!(w.event().await["type"], "ADDED");
}

#[tokio::test]
async fn expire_over_the_control_route() {
    let (d, c) = start_with(Config::modern()).await;
    c.post(PODS, pod("a")).await;
    c.post(PODS, pod("b")).await;
    let page = c.get(&format!("{PODS}?limit=1")).await.json();
    let token = page["metadata"]["continue"].as_str().unwrap().to_string();
    // Compaction spares the current revision: a write makes the token's revision old.
    c.post(PODS, pod("c")).await;
    assert_eq!(
        c.request("POST", "/_double/expire", None, None)
            .await
            .status,
        200
    );
    assert_eq!(
        c.get(&format!("{PODS}?limit=1&continue={token}"))
            .await
            .status,
        410
    );
    // A list started after the expiry pages through.
    let page = c.get(&format!("{PODS}?limit=1")).await.json();
    let token = page["metadata"]["continue"].as_str().unwrap().to_string();
    assert_eq!(
        c.get(&format!("{PODS}?limit=1&continue={token}"))
            .await
            .status,
        200
    );
    let mut w = c
        .watch(&format!("{PODS}?watch=true&resourceVersion=1"))
        .await;
    let e = w.event().await;
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["code"], 410);
    assert_eq!(d.resource_version(), 3);
}
