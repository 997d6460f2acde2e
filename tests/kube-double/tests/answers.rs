// `Faults::answers`: requests chosen by method, path prefix and kind answered with a chosen
// answer: the real server's Status for each code, a reset, no answer, a body that is not
// JSON, a watch's ERROR event.

mod common;

use std::time::Duration;

use common::{Client, Line, PODS, pod};
use kube_double::{Answer, Config, Double, Faults, NONRESOURCE, Reply};

async fn with_answers(answers: Vec<Answer>) -> (Double, Client) {
    let d = Double::start(Config::modern()).await.unwrap();
    d.set_faults(Faults {
        answers,
        ..Faults::default()
    });
    let c = Client::new(&d.url());
    (d, c)
}

fn status(kind: &str, prefix: &str, code: u16) -> Answer {
    Answer::new(Some(kind), Some(prefix), Reply::Status, code)
}

#[tokio::test]
async fn each_code_is_the_real_servers_status_and_only_matching_requests_get_it() {
    let mut invalid = status("patch", PODS, 422);
    invalid.causes = true;
    let mut throttled = status("list", "/api/v1/namespaces/default/events", 429);
    throttled.retry_after_secs = Some(7);
    let (d, c) = with_answers(vec![
        status("watch", PODS, 504),
        status("list", PODS, 403),
        invalid,
        throttled,
        status("create", "/api/v1/namespaces/default/events", 409),
        status(NONRESOURCE, "/version", 401),
        status("get", "/api/v1/namespaces/default/configmaps", 502),
    ])
    .await;
    d.create("pods", "default", pod("a")).unwrap();

    let list = c.get(PODS).await;
    assert_eq!(list.status, 403);
    let s = list.json();
    assert_eq!(
        (
            s["kind"].as_str(),
            s["apiVersion"].as_str(),
            s["status"].as_str()
        ),
        (Some("Status"), Some("v1"), Some("Failure"))
    );
    assert_eq!(s["reason"], "Forbidden");
    assert_eq!(s["code"], 403);
    let message = s["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("pods is forbidden: User \"")
            && message.ends_with(
                "cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
            ),
        "RBAC's words: {message}"
    );

    let w = c.watch(&format!("{PODS}?watch=true")).await;
    assert_eq!(w.status, 504, "a watch start, not the LIST rule");
    assert_eq!(
        c.get(&format!("{PODS}/a")).await.status,
        200,
        "a GET: no rule"
    );

    let p = c
        .json_patch(&format!("{PODS}/a"), serde_json::json!([]))
        .await;
    assert_eq!(p.status, 422);
    let s = p.json();
    assert_eq!(s["reason"], "Invalid");
    assert_eq!(s["details"]["causes"][0]["reason"], "FieldValueForbidden");
    assert_eq!(
        s["message"],
        "Pod \"a\" is invalid: spec: Forbidden: a policy refuses it"
    );

    let t = c.get("/api/v1/namespaces/default/events").await;
    assert_eq!(t.status, 429);
    assert_eq!(t.headers["retry-after"], "7");
    assert!(t.text.starts_with("Too many requests"), "{}", t.text);

    let e = c
        .post("/api/v1/namespaces/default/events", serde_json::json!({}))
        .await;
    assert_eq!(e.status, 409);
    assert_eq!(e.json()["reason"], "Conflict");

    let v = c.get("/version").await;
    assert_eq!(
        (v.status, v.json()["reason"].clone()),
        (401, "Unauthorized".into())
    );
    assert_eq!(c.get("/api").await.status, 200, "only /version");

    let g = c.get("/api/v1/namespaces/default/configmaps/x").await;
    assert_eq!(g.status, 502);
    assert!(
        g.text.contains("502 Bad Gateway"),
        "a proxy's page: {}",
        g.text
    );

    let logged: Vec<u16> = d.requests().iter().map(|r| r.status).collect();
    assert!(logged.contains(&403) && logged.contains(&504), "{logged:?}");
}

#[tokio::test]
async fn a_422_without_causes_and_a_429_without_retry_after_are_statuses() {
    let (_d, c) = with_answers(vec![
        status("list", PODS, 422),
        status("list", "/api/v1/namespaces/default/events", 429),
    ])
    .await;
    let s = c.get(PODS).await;
    assert_eq!(s.status, 422);
    assert_eq!(s.json()["details"], serde_json::json!({}));
    let t = c.get("/api/v1/namespaces/default/events").await;
    assert_eq!(t.status, 429);
    assert_eq!(t.json()["reason"], "TooManyRequests");
    assert!(t.headers.get("retry-after").is_none());
}

#[tokio::test]
async fn a_watch_error_is_one_error_event_then_the_end() {
    let (_d, c) = with_answers(vec![Answer::new(
        Some("watch"),
        Some(PODS),
        Reply::WatchError,
        500,
    )])
    .await;
    let mut w = c.watch(&format!("{PODS}?watch=true")).await;
    assert_eq!(w.status, 200);
    match w.next().await {
        Line::Event(e) => {
            assert_eq!(e["type"], "ERROR");
            assert_eq!(e["object"]["kind"], "Status");
            assert_eq!(e["object"]["code"], 500);
            assert_eq!(e["object"]["reason"], "InternalError");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(w.next().await, Line::End));
}

#[tokio::test]
async fn a_reset_a_hang_and_a_body_that_is_not_json() {
    let (d, c) = with_answers(vec![
        Answer::new(Some("list"), Some(PODS), Reply::Reset, 0),
        Answer::new(Some("get"), Some(PODS), Reply::Hang, 0),
        Answer::new(Some(NONRESOURCE), Some("/api"), Reply::NotJson, 0),
    ])
    .await;
    let e = match c.try_request("GET", PODS, None, None, None).await {
        Ok(r) => panic!("a reset is no answer, not {}", r.status),
        Err(e) => e,
    };
    assert!(
        e.contains("reset") || e.contains("Reset") || e.contains("IncompleteMessage"),
        "{e}"
    );
    let api = c.get("/api").await;
    assert_eq!(api.status, 200);
    assert_eq!(api.headers["content-type"], "text/html");
    assert!(serde_json::from_str::<serde_json::Value>(&api.text).is_err());
    let hung = tokio::time::timeout(Duration::from_secs(1), c.get(&format!("{PODS}/a"))).await;
    assert!(hung.is_err(), "never answered");
    let statuses: Vec<(String, u16)> = d
        .requests()
        .into_iter()
        .map(|r| (r.path_and_query, r.status))
        .collect();
    assert!(
        statuses.contains(&(PODS.to_string(), 0)) && statuses.contains(&(format!("{PODS}/a"), 0)),
        "a reset and a hang are logged with status 0: {statuses:?}"
    );
    // Lifted: served again.
    d.set_faults(Faults::default());
    assert_eq!(c.get(PODS).await.status, 200);
}

#[tokio::test]
async fn bad_rules_are_refused_over_http() {
    let (_d, c) = with_answers(Vec::new()).await;
    for bad in [
        r#"{"answers":[{"kind":"lists","reply":"status","code":500}]}"#,
        r#"{"answers":[{"reply":"status","code":200}]}"#,
        r#"{"answers":[{"method":"FETCH","reply":"hang"}]}"#,
    ] {
        let r = c
            .request(
                "PUT",
                "/_double/faults",
                Some("application/json"),
                Some(bad.into()),
            )
            .await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
    }
    let ok = r#"{"answers":[{"kind":"watch","pathPrefix":"/api/v1/pods","reply":"watchError","code":410}]}"#;
    let r = c
        .request(
            "PUT",
            "/_double/faults",
            Some("application/json"),
            Some(ok.into()),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let back = c.get("/_double/faults").await.json();
    assert_eq!(back["answers"][0]["reply"], "watchError");
}
