//! What an operator relies on, on the real control plane: /healthz and /readyz following
//! the API server, /metrics (clears, failures, pending, latency, the labelled counters at
//! zero), the Events written and the ones RBAC refuses, a watch the server cuts, `status
//! --max-age` and `--once --only`'s warning. Each test is a scene of its own on the shared
//! control plane (tests/common/scene.rs); an API server that is down, a 503 on one pod's
//! PATCH and a cut watch are the fault proxy of tests/common/fuzz.rs in front of it. These
//! ran on the double's modern generation before (tests/operations.rs keeps 1.13's Events).

mod common;

use common::{
    admin_get, admin_until,
    control_plane::{WAIT, until},
    counter_sum,
    fuzz::{Fault, Plan, Stream},
    metrics_until, msg,
    scene::{Rights, Scene},
};
use metainit::client::RequestKind;
use serde_json::json;

const KUEUE: &str = "kueue.x-k8s.io/admission";
const NS: &str = "ops";

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The same fault for every kind of request: an API server that is not there.
fn every(fault: Fault) -> Plan {
    Plan::Each(
        RequestKind::ALL
            .iter()
            .map(|k| (*k, fault.clone()))
            .collect(),
    )
}

/// Waits until the scene's pod `name` has no gate left on the server.
async fn cleared(s: &Scene, name: &str) {
    until(&format!("{name} cleared"), WAIT, || async {
        s.gates(NS, name).await.is_empty().then_some(())
    })
    .await;
}

/// The scene's labelled pods `names`, gated by Kueue.
fn gated(s: &Scene, names: &[String]) {
    let items: Vec<_> = names.iter().map(|n| s.gated_pod(n, KUEUE)).collect();
    s.add(
        NS,
        &json!({"apiVersion": "v1", "kind": "List", "items": items}),
    );
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn readyz_follows_the_api_server() {
    let mut s = Scene::new(&[NS], Rights::Files).await;
    let proxy = s.behind(every(Fault::Reset)).await;
    let m = s.metainit(&[]);
    let addr = m.admin_addr().await;
    admin_until(&addr, "/healthz", 200, &[], WAIT).await;
    admin_until(&addr, "/readyz", 200, &[], WAIT).await;
    // Every connection dropped: the open watch ends, and nothing answers after it.
    proxy.faulty(true);
    admin_until(&addr, "/readyz", 503, &[], WAIT).await;
    assert_eq!(
        admin_get(&addr, "/healthz").await.0,
        200,
        "alive while the server is down"
    );
    proxy.faulty(false);
    admin_until(&addr, "/readyz", 200, &[], WAIT).await;
    // And it still clears after the outage.
    gated(&s, &["after".into()]);
    cleared(&s, "after").await;
    // Every cause is there from the start at 0: the outage must have counted one.
    metrics_until(&addr, "the outage counted", WAIT, |t| {
        counter_sum(t, "metainit_watch_restarts_total{cause=") >= 1.0
    })
    .await;
    assert!(m.stop().await.success());
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn readyz_waits_for_a_server_down_at_start() {
    let mut s = Scene::new(&[NS], Rights::Files).await;
    let proxy = s.behind(every(Fault::Reset)).await;
    proxy.faulty(true);
    gated(&s, &["p".into()]);
    let m = s.metainit(&[]);
    let addr = m.admin_addr().await;
    m.logged("the server not reachable", |l| {
        l.contains(msg::NOT_REACHABLE_YET)
    })
    .await;
    assert_eq!(admin_get(&addr, "/readyz").await.0, 503);
    assert_eq!(admin_get(&addr, "/healthz").await.0, 200);
    assert_eq!(
        s.gates(NS, "p").await,
        [KUEUE],
        "nothing cleared while down"
    );
    proxy.faulty(false);
    cleared(&s, "p").await;
    admin_until(&addr, "/readyz", 200, &[], WAIT).await;
    assert!(m.stop().await.success());
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn metrics_count_clears_failures_pending_and_latency() {
    let mut s = Scene::new(&[NS], Rights::Files).await;
    // The PATCH of one pod, `stuck`, answered 503 by the proxy while it is faulty.
    let stuck = format!("/api/v1/namespaces/{}/pods/stuck", s.home);
    let unavailable = Fault::Status(503, Some("1".into()), None);
    let plan = Plan::Fixed(RequestKind::Patch, Fault::At(stuck, Box::new(unavailable)));
    let proxy = s.behind(plan).await;
    gated(&s, &names("p", 3));
    let m = s.metainit(&[]);
    let addr = m.admin_addr().await;
    for name in names("p", 3) {
        cleared(&s, &name).await;
    }
    admin_until(&addr, "/readyz", 200, &[], WAIT).await;
    proxy.faulty(true);
    gated(&s, &["stuck".into()]);
    let text = metrics_until(&addr, "a failure counted", WAIT, |t| {
        counter_sum(t, "metainit_clear_failures_total{") >= 1.0
    })
    .await;
    assert_eq!(
        metric(
            &text,
            "metainit_clear_failures_total{reason=\"server_error\"}"
        ),
        Some(counter_sum(&text, "metainit_clear_failures_total{")),
        "every failure a 503: {text}"
    );
    assert_eq!(
        metric(&text, "metainit_objects_pending"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(s.gates(NS, "stuck").await, [KUEUE]);
    proxy.faulty(false);
    cleared(&s, "stuck").await;

    let cleared = "metainit_objects_cleared_total{mode=\"scheduling-gates\",resource=\"pods\"}";
    // Pending is counted from the watch, one event behind the server.
    let text = metrics_until(&addr, "4 cleared, 4 latencies, none pending", WAIT, |t| {
        metric(t, cleared) == Some(4.0)
            && metric(t, "metainit_clear_latency_seconds_count") == Some(4.0)
            && metric(t, "metainit_objects_pending") == Some(0.0)
    })
    .await;
    assert!(
        text.contains(&format!(
            "metainit_build_info{{version=\"0.1.0\",revision=\"{}\"}} 1",
            metainit::GIT_COMMIT
        )),
        "{text}"
    );
    assert!(m.stop().await.success());
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn events_are_written_for_cleared_objects() {
    let s = Scene::new(&[NS], Rights::Files).await;
    gated(&s, &["web".into()]);
    let m = s.metainit(&["--node-name", "cp-1"]);
    // The scheduler's own Event on the pod (it binds it once cleared) aside.
    let events = until("an Event", WAIT, || async {
        let mut e = s.pod_events(NS, "web").await;
        e.retain(|e| e["reportingComponent"] != "default-scheduler");
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(events.len(), 1, "{events:#?}");
    let e = &events[0];
    assert_eq!(e["reason"], "SchedulingGatesCleared");
    assert_eq!(e["type"], "Normal");
    assert_eq!(e["involvedObject"]["kind"], "Pod");
    assert_eq!(e["involvedObject"]["name"], "web");
    assert_eq!(e["involvedObject"]["namespace"], s.home.as_str());
    assert_eq!(e["reportingComponent"], "metainit");
    assert_eq!(e["reportingInstance"], "cp-1");
    assert_eq!(e["source"]["host"], "cp-1");
    let message = e["message"].as_str().unwrap();
    assert!(message.contains(KUEUE), "{message}");
    assert!(m.stop().await.success());
}

/// Pods, and no right to write Events: RBAC's 403 on every Event.
fn no_events() -> Rights {
    Rights::Rules(json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]}
    ]))
}

/// The Event writes the server saw (refused or not).
fn event_posts(s: &Scene) -> usize {
    s.requests()
        .iter()
        .filter(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "events")
        .count()
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn event_failures_never_block_a_clear() {
    let s = Scene::new(&[NS], no_events()).await;
    gated(&s, &["p".into()]);
    let m = s.metainit(&["--mode", "scheduling-gates"]);
    let addr = m.admin_addr().await;
    cleared(&s, "p").await;
    metrics_until(&addr, "the Event failure counted", WAIT, |t| {
        metric(t, "metainit_event_failures_total") == Some(1.0)
    })
    .await;
    // The metric is counted before the line is logged: wait for the line too.
    m.logged("the Event failure", |l| {
        l.contains("cannot write the Event") && l.contains("403 Forbidden")
    })
    .await;
    assert!(m.stop().await.success());
}

/// A namespace whose Events are refused (403: no right to write them) is remembered: the
/// pods cleared there after the first get no Event and no refused POST each (#58), for
/// five minutes, and the line says so.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn refused_events_are_asked_for_again_in_minutes() {
    let s = Scene::new(&[NS], no_events()).await;
    let m = s.metainit(&["--mode", "scheduling-gates"]);
    let addr = m.admin_addr().await;
    gated(&s, &["first".into()]);
    m.logged("the refusal said", |l| l.contains("cannot write the Event"))
        .await;
    gated(&s, &names("then-", 5));
    metrics_until(&addr, "six Events not written", WAIT, |t| {
        metric(t, "metainit_event_failures_total") == Some(6.0)
    })
    .await;
    for name in names("then-", 5) {
        cleared(&s, &name).await;
    }
    assert_eq!(event_posts(&s), 1, "one refused POST, then none");
    let refused: Vec<String> = m
        .log()
        .into_iter()
        .filter(|l| l.contains("cannot write the Event"))
        .collect();
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert!(refused[0].contains(msg::LOOKING_AGAIN), "{}", refused[0]);
    assert!(m.stop().await.success());
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn labelled_counters_are_there_at_zero_from_the_start() {
    let s = Scene::new(&[NS], Rights::Files).await;
    let m = s.metainit(&[]);
    let addr = m.admin_addr().await;
    admin_until(&addr, "/readyz", 200, &[], WAIT).await;
    let (_, text) = admin_get(&addr, "/metrics").await;
    let mut want: Vec<String> = [
        "race",
        "rejected",
        "forbidden",
        "unauthorized",
        "throttled",
        "server_error",
        "timeout",
        "unreachable",
    ]
    .iter()
    .map(|r| format!("metainit_clear_failures_total{{reason=\"{r}\"}} 0"))
    .collect();
    want.extend(
        [
            "list_failed",
            "watch_start_failed",
            "expired",
            "watch_error",
            "stream_failed",
            "no_resource_version",
            "revision_backwards",
            "short_watch",
            "list_loop",
        ]
        .iter()
        .map(|c| format!("metainit_watch_restarts_total{{cause=\"{c}\"}} 0")),
    );
    want.push(
        "metainit_objects_cleared_total{mode=\"scheduling-gates\",resource=\"pods\"} 0".into(),
    );
    want.extend(
        [
            msg::FAILURES_AT_ZERO,
            msg::RESTARTS_AT_ZERO,
            msg::CLEARED_AT_ZERO,
        ]
        .map(String::from),
    );
    for line in &want {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
    assert!(m.stop().await.success());
}

/// The metainit process's own log, without kube's debug dumps: a watch stream that the
/// server cuts is resumed without a `Custom { kind: UnexpectedEof, … }` line.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_cut_watch_leaves_no_debug_dump_in_the_log() {
    let mut s = Scene::new(&[NS], Rights::Files).await;
    // Each watch: one bookmark, then the connection dropped.
    let cut = Stream {
        bookmarks: 1,
        cut: true,
        ..Stream::default()
    };
    let proxy = s
        .behind(Plan::Fixed(RequestKind::WatchStart, Fault::Watch(cut)))
        .await;
    let m = s.metainit(&[]);
    let addr = m.admin_addr().await;
    admin_until(&addr, "/readyz", 200, &[], WAIT).await;
    gated(&s, &["p0".into()]);
    cleared(&s, "p0").await;
    let watches = || {
        proxy
            .seen()
            .iter()
            .filter(|r| r.kind == RequestKind::WatchStart)
            .count()
    };
    // The open watch ended, and each one after it cut.
    let before = watches();
    proxy.faulty(true);
    until("the watch cut and resumed", WAIT, || async {
        (watches() >= before + 3).then_some(())
    })
    .await;
    proxy.faulty(false);
    for name in ["p1", "p2"] {
        gated(&s, &[name.into()]);
        cleared(&s, name).await;
    }
    let log = m.log();
    assert!(
        !log.iter()
            .any(|l| l.contains("Custom {") || l.contains("Status {") || l.contains("eof in poll")),
        "{log:#?}"
    );
    assert!(m.stop().await.success());
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn status_max_age_names_the_objects_held_too_long() {
    let s = Scene::new(&[NS], Rights::Files).await;
    s.add(NS, &s.gated_pod("old", "example.com/g"));
    let (out, err) = until("held longer than 1s", WAIT, || async {
        let (code, out, err) = s.run(&["status", "--max-age", "1s"]).await;
        assert!(code == 0 || code == 1, "{err}");
        (code == 1).then_some((out, err))
    })
    .await;
    let old = format!("{}/old", s.home);
    assert!(out.contains(&old), "the table is printed: {out}");
    let prefix = format!("error: 1 {} 1s: Pod {old} (", msg::MAX_AGE);
    assert!(
        err.starts_with(&prefix) && err.ends_with("s by example.com/g)\n"),
        "{err}"
    );
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn once_warns_about_an_only_name_pending_on_no_labelled_object() {
    let s = Scene::new(&[NS], Rights::Files).await;
    gated(&s, &names("p", 3));
    let mut m = s.metainit(&["--once", "--only", "nonexistent.example.com"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(0), "{:#?}", m.log());
    assert!(m.out().contains("left alone 3,"), "{}", m.out());
    let warning = format!("--only nonexistent.example.com {}", msg::ONLY_UNUSED);
    let line = m
        .log()
        .into_iter()
        .find(|l| l.contains(&warning))
        .unwrap_or_else(|| panic!("no warning: {:#?}", m.log()));
    assert!(
        line.contains("WARN") && line.contains("pending=kueue.x-k8s.io/admission"),
        "{line}"
    );
    assert!(s.writes().is_empty(), "nothing cleared: {:#?}", s.writes());
    // A name that is pending is not warned about.
    let mut m = s.metainit(&["--once", "--only", KUEUE]);
    assert_eq!(m.wait(WAIT).await.code(), Some(0), "{:#?}", m.log());
    assert!(m.out().contains("cleared 3,"), "{}", m.out());
    assert!(!m.log().iter().any(|l| l.contains(msg::ONLY_UNUSED)));
}
