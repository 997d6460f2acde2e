//! Answers whose content misleads (#58), on the real control plane: one test a row, each a
//! scene of its own (tests/common/scene.rs) with one labelled gated pod, the fault proxy
//! (tests/common/fuzz.rs) in front of the real kube-apiserver making the misleading answer,
//! each asserting a bound a user would see: requests the proxy received, the process's peak
//! memory, its log and metrics, the pod on the server. These ran on the double's modern
//! generation before (tests/content.rs).
//!
//! | answer | bound | today (4f01062) |
//! |---|---|---|
//! | a watch that repeats the pod's last version 20 times a second, every PATCH 500 | at most 20 PATCHes of it in a minute | 1,199 to 1,201 |
//! | a body that streams 2 MB a second and never a newline, 45 s: a watch's, a LIST's, a PATCH's | peak RSS under 64 MiB; a pod created after it cleared | 107, 81 and 81 MiB |
//! | every PATCH answered 200 with the object unpatched (a webhook keeping the gates) | not counted cleared; a warning naming the pod; `reason="kept"`; 2 to 20 PATCHes a minute | "cleared", counted, 1 PATCH |
//! | a watch's first event line cut in the middle, then a clean end | "watch failed" naming the cut line; `cause="stream_failed"` counted; the pod cleared | not said ("watch ended at once" on the restarts) |
//! | after the clearing, every LIST answered with a page from before it, every watch start 410 | at most 3 PATCHes of the pod in 30 s, and a GET of it after a stale PATCH | 9 PATCHes (422), no GET |
//! | 404 for the Lease API | at most 5 Lease requests a minute | 60 |
//!
//! Two at a time (the default on two cores) they take about 3.5 minutes (195 s on 1.37.2);
//! `cargo test --test cluster_content -- --ignored --test-threads 8` runs all at once, as
//! scripts/test.sh does (about 65 s on the double).

mod common;

use std::time::{Duration, Instant};

use common::{
    control_plane::until,
    fuzz::*,
    scene::{Rights, Scene},
    *,
};
use metainit::client::RequestKind;

const MINUTE: Duration = Duration::from_secs(60);
/// Longer than `--request-timeout` (30 s): a LIST or PATCH of the endless body reads for
/// that long before it is given up.
const ENDLESS_HELD: Duration = Duration::from_secs(45);
const STALE_HELD: Duration = Duration::from_secs(30);
/// The longest backoff step (30 s), a request timeout and slack.
const RECOVER: Duration = Duration::from_secs(75);
const MIB: u64 = 1 << 20;
/// The shipped memory limit (manifests, the chart).
const RSS_LIMIT: u64 = 64 * MIB;
/// The most attempts on one object in a minute, whatever triggers them.
const PER_POD: usize = 20;
const NS: &str = "content";

/// A scene with the labelled pods `pods`, gated, behind the proxy with `plan` (healthy until
/// `faulty(true)`).
async fn scene(pods: &[&str], plan: Plan) -> (Scene, Proxy) {
    let mut s = Scene::new(&[NS], Rights::Files).await;
    for name in pods {
        gated(&s, name);
    }
    let proxy = s.behind(plan).await;
    (s, proxy)
}

/// Whether the scene's pod `name` is there with no gate left.
async fn is_cleared(s: &Scene, name: &str) -> bool {
    s.gates(NS, name).await.is_empty()
}

/// Creates the scene's labelled pod `name`, gated.
fn gated(s: &Scene, name: &str) {
    s.add(NS, &s.gated_pod(name, "example.com/g"));
}

/// The requests of `kind` for the scene's pod `name` itself (not a list, not a watch).
fn of_pod(s: &Scene, seen: &[Seen], kind: RequestKind, name: &str) -> Vec<Seen> {
    let path = format!("/api/v1/namespaces/{}/pods/{name}", s.home);
    seen.iter()
        .filter(|s| s.kind == kind)
        .filter(|s| {
            let uri = s.what.split_whitespace().nth(1).unwrap_or("");
            uri.split('?').next() == Some(path.as_str())
        })
        .cloned()
        .collect()
}

/// Polls `check` until it holds, at most `limit`: whether it did.
async fn within<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

/// Fails with everything that went wrong and the log's end; the whole log in a file.
fn verdict(row: &str, wrong: &[String], log: &[String]) {
    let name: String = row
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cluster-content-{name}.log"));
    let _ = std::fs::write(&file, log.join("\n"));
    let tail = log[log.len().saturating_sub(30)..].join("\n    ");
    assert!(
        wrong.is_empty(),
        "{row}:\n  {}\n  the whole log: {}\n  its end:\n    {tail}",
        wrong.join("\n  "),
        file.display()
    );
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

/// What an admission webhook that refuses every update makes the server answer.
fn refused() -> Fault {
    let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "reason": "InternalError", "code": 500,
        "message": "Internal error occurred: failed calling webhook \"gates.example.com\": connection refused"});
    Fault::Status(500, None, Some(body.to_string()))
}

/// The rows, a test each, under `answer_rows::`: each is a minute or so of watching a scene of
/// its own, so scripts/test.sh runs them all at once, before the rest of the real tier.
mod answer_rows {
    use super::*;

    /// Row 1: every event repeats what metainit knows; it is no news, and does not cut the
    /// refused pod's backoff (each one did: a PATCH per event).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
    async fn repeated_events_do_not_cut_a_refused_pods_backoff() {
        let plan = Plan::Each(vec![
            (
                RequestKind::WatchStart,
                Fault::Repeat(Duration::from_millis(50)),
            ),
            (RequestKind::Patch, refused()),
        ]);
        let (s, proxy) = scene(&["repeated"], plan).await;
        proxy.faulty(true);
        let start = Instant::now();
        let m = s.metainit(&[]);
        tokio::time::sleep(MINUTE).await;
        let seen = proxy.seen();
        let patches = of_pod(&s, &seen, RequestKind::Patch, "repeated");
        let most = most_in_window(&patches, RequestKind::Patch, MINUTE);
        eprintln!(
            "repeated events, PATCH 500: {most} PATCHes of the pod in a minute ({} in {:?}); {}",
            patches.len(),
            start.elapsed(),
            counts(&seen)
        );
        let mut wrong = Vec::new();
        if most > PER_POD {
            wrong.push(format!(
                "{most} PATCHes of the pod in a minute (at most {PER_POD})"
            ));
        }
        if patches.is_empty() {
            wrong.push("the pod never PATCHed: the fault was never met".into());
        }
        if is_cleared(&s, "repeated").await {
            wrong.push("the pod cleared: the PATCHes were not refused".into());
        }
        verdict("repeated events", &wrong, &m.log());
        m.stop().await;
    }

    /// Row 2, for one kind of request: its answer a line with no end.
    async fn endless_line(kind: RequestKind) {
        let row = format!("an endless line answering every {}", kind.label());
        let plan = Plan::Fixed(kind, Fault::Endless(2_000_000));
        let (s, proxy) = scene(&["before"], plan).await;
        proxy.faulty(true);
        let start = Instant::now();
        let mut m = s.metainit(&[]);
        let mut peak = 0;
        while start.elapsed() < ENDLESS_HELD {
            peak = peak.max(m.peak_rss().unwrap_or(0));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        peak = peak.max(m.peak_rss().unwrap_or(0));
        let met = proxy.received(kind, Instant::now());
        proxy.faulty(false);
        let healed = Instant::now();
        gated(&s, "after");
        let cleared = within(RECOVER, || is_cleared(&s, "after")).await;
        eprintln!(
            "{row}, {ENDLESS_HELD:?}: peak RSS {}; {met} requests met it; the pod after it {} ({:?})",
            mib(peak),
            if cleared { "cleared" } else { "NOT cleared" },
            healed.elapsed()
        );
        let mut wrong = Vec::new();
        if peak >= RSS_LIMIT {
            wrong.push(format!(
                "peak RSS {} (under {} wanted)",
                mib(peak),
                mib(RSS_LIMIT)
            ));
        }
        if met == 0 {
            wrong.push("no request met the fault".into());
        }
        if !cleared {
            wrong.push(format!(
                "the pod created after the fault not cleared within {RECOVER:?}"
            ));
        }
        if let Ok(Some(status)) = m.child.try_wait() {
            wrong.push(format!("metainit exited: {status}"));
        }
        verdict(&row, &wrong, &m.log());
        m.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
    async fn a_watch_line_with_no_end_is_bounded() {
        endless_line(RequestKind::WatchStart).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
    async fn a_list_body_with_no_end_is_bounded() {
        endless_line(RequestKind::List).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
    async fn a_patch_answer_with_no_end_is_bounded() {
        endless_line(RequestKind::Patch).await;
    }

    /// Row 3: a PATCH answered 200 whose object still has the gates is no clearing: the pod
    /// named, counted as kept, tried again on the backoff.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
    async fn a_patch_that_kept_the_gates_is_not_a_clearing() {
        let plan = Plan::Fixed(RequestKind::Patch, Fault::Unchanged);
        let (s, proxy) = scene(&["kept"], plan).await;
        proxy.faulty(true);
        let start = Instant::now();
        let m = s.metainit(&[]);
        let addr = m.admin_addr().await;
        tokio::time::sleep(MINUTE.saturating_sub(start.elapsed())).await;
        let metrics = admin_get(&addr, "/metrics").await.1;
        let seen = proxy.seen();
        let patches = of_pod(&s, &seen, RequestKind::Patch, "kept").len();
        let cleared = counter_sum(&metrics, "metainit_objects_cleared_total");
        // `+ 0.0`: no sample at all is 0, not -0.
        let kept = counter_sum(&metrics, r#"metainit_clear_failures_total{reason="kept"}"#) + 0.0;
        let log = m.log();
        let pod = format!("{}/kept", s.home);
        let warned = log
            .iter()
            .find(|l| l.contains("WARN") && l.contains(&pod) && l.contains("kept the gates"));
        let said_cleared = log
            .iter()
            .find(|l| l.contains(" cleared") && l.contains(&pod));
        eprintln!(
            "PATCH 200 with the gates kept, a minute: {patches} PATCHes; metainit_objects_cleared_total {cleared}; \
         kept failures {kept}; warned: {warned:?}; said cleared: {said_cleared:?}"
        );
        let mut wrong = Vec::new();
        if cleared != 0.0 {
            wrong.push(format!(
            "metainit_objects_cleared_total is {cleared}: a pod that kept its gates counted cleared"
        ));
        }
        if kept < 1.0 {
            wrong.push(r#"metainit_clear_failures_total{reason="kept"} not 1 or more"#.into());
        }
        if warned.is_none() {
            wrong.push(format!(
                "no WARN line naming {pod} and saying it \"kept the gates\""
            ));
        }
        if !(2..=PER_POD).contains(&patches) {
            wrong.push(format!(
                "{patches} PATCHes of the pod in a minute (a retry on the backoff: 2 to {PER_POD})"
            ));
        }
        if is_cleared(&s, "kept").await {
            wrong.push("the pod cleared on the server: the fault was not met".into());
        }
        verdict("a PATCH that kept the gates", &wrong, &log);
        m.stop().await;
    }

    const STREAM_FAILED: &str = r#"metainit_watch_restarts_total{cause="stream_failed"}"#;

    /// Row 4: a watch whose first event line is cut short and whose stream then ends cleanly
    /// failed, and says so; the pod that line carried is cleared once the watch is whole again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
    async fn a_watch_line_cut_short_is_a_failure() {
        let plan = Plan::Fixed(RequestKind::WatchStart, Fault::CutLine);
        let (s, proxy) = scene(&[], plan).await;
        let m = s.metainit(&[]);
        let addr = m.admin_addr().await;
        until_readyz(&addr, Duration::from_secs(20)).await;
        // The watch runs (a second): cut by the proxy turning faulty, it starts again at once.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let before = counter_sum(&admin_get(&addr, "/metrics").await.1, STREAM_FAILED);
        let from = Instant::now();
        proxy.faulty(true);
        // The watch started again now runs (a second): its end alone is no failure.
        tokio::time::sleep(Duration::from_secs(2)).await;
        gated(&s, "cut");
        let said = |l: &str| l.contains("watch failed") && l.contains("in the middle of a line");
        let warned = within(Duration::from_secs(20), || async {
            m.log().iter().any(|l| said(l))
        })
        .await;
        let asked = Instant::now();
        let mut counted = false;
        while !counted && asked.elapsed() < Duration::from_secs(5) {
            let text = admin_get(&addr, "/metrics").await.1;
            counted = counter_sum(&text, STREAM_FAILED) > before;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let failures: Vec<String> = m
            .log()
            .into_iter()
            .filter(|l| l.contains("watch failed"))
            .collect();
        let starts = proxy
            .seen()
            .iter()
            .filter(|s| s.kind == RequestKind::WatchStart && s.at >= from)
            .count();
        proxy.faulty(false);
        let cleared = within(RECOVER, || is_cleared(&s, "cut")).await;
        eprintln!(
            "a watch line cut short: said {warned}, {STREAM_FAILED} grew {counted}, {starts} watch \
         starts cut, the pod {}; its \"watch failed\" lines: {failures:#?}",
            if cleared { "cleared" } else { "NOT cleared" }
        );
        let mut wrong = Vec::new();
        if !warned {
            wrong.push(
                "no \"watch failed\" line saying the line ended \"in the middle of a line\"".into(),
            );
        }
        if !counted {
            wrong.push(format!("{STREAM_FAILED} did not grow"));
        }
        if starts == 0 {
            wrong.push("no watch start met the fault".into());
        }
        if !cleared {
            wrong.push(format!(
                "the pod in the cut line not cleared within {RECOVER:?}"
            ));
        }
        verdict("a watch line cut short", &wrong, &m.log());
        m.stop().await;
    }

    /// Row 5: after the pod was cleared, every relist is answered with the page from before (the
    /// pod still gated, at its old version), every watch start 410 (a relist). A 422 whose test
    /// failed means the copy is stale: the object is read (a GET), not patched again from it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
    async fn a_stale_relist_is_not_patched_again_and_again() {
        let gone = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "reason": "Expired", "code": 410,
        "message": "too old resource version: 1 (2)"});
        let plan = Plan::Each(vec![
            (RequestKind::List, Fault::Stale),
            (
                RequestKind::WatchStart,
                Fault::Status(410, None, Some(gone.to_string())),
            ),
        ]);
        let (s, proxy) = scene(&["stale"], plan).await;
        let m = s.metainit(&[]);
        let addr = m.admin_addr().await;
        until("the pod cleared", Duration::from_secs(20), || async {
            is_cleared(&s, "stale").await.then_some(())
        })
        .await;
        until_readyz(&addr, Duration::from_secs(20)).await;
        // The watch shows it cleared (its MODIFIED event), as it does at once.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let from = Instant::now();
        proxy.faulty(true);
        tokio::time::sleep(STALE_HELD).await;
        let seen: Vec<Seen> = proxy.seen().into_iter().filter(|s| s.at >= from).collect();
        let patches = of_pod(&s, &seen, RequestKind::Patch, "stale");
        let gets = of_pod(&s, &seen, RequestKind::Get, "stale");
        let lists = seen.iter().filter(|s| s.kind == RequestKind::List).count();
        let read_after = patches
            .first()
            .is_none_or(|p| gets.iter().any(|g| g.at >= p.at));
        eprintln!(
            "a stale relist, {STALE_HELD:?}: {} PATCHes of the pod, {} GETs of it, {lists} stale LISTs; {}",
            patches.len(),
            gets.len(),
            counts(&seen)
        );
        let mut wrong = Vec::new();
        if patches.len() > 3 {
            wrong.push(format!(
                "{} PATCHes of the pod from a stale copy (at most 3)",
                patches.len()
            ));
        }
        if !read_after {
            wrong.push("no GET of the pod after its PATCH from the stale copy".into());
        }
        if lists == 0 {
            wrong.push("no LIST met the stale page".into());
        }
        verdict("a stale relist", &wrong, &m.log());
        m.stop().await;
    }

    /// Row 6: a server without the Lease API (404) is asked again on a slow schedule, not
    /// every renewal; clearing goes on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
    async fn an_absent_lease_api_is_asked_again_slowly() {
        let absent = Fault::Absent("/apis/coordination.k8s.io/".into());
        let plan = Plan::Each(
            RequestKind::ALL
                .iter()
                .map(|k| (*k, absent.clone()))
                .collect(),
        );
        let (s, proxy) = scene(&["p"], plan).await;
        proxy.faulty(true);
        let start = Instant::now();
        // Sharing the work: a Lease kept in the scene's namespace (the tests' default is
        // alone, with no Lease).
        let mut args = vec!["--peer-delay".to_string(), "500ms".into()];
        args.extend(s.peers());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let m = s.metainit(&args);
        let cleared = within(Duration::from_secs(20), || is_cleared(&s, "p")).await;
        tokio::time::sleep(MINUTE.saturating_sub(start.elapsed())).await;
        let leases: Vec<Seen> = proxy
            .seen()
            .into_iter()
            .filter(|s| s.at <= start + MINUTE && s.what.contains("/apis/coordination.k8s.io/"))
            .collect();
        eprintln!(
            "no Lease API, a minute: {} Lease requests ({}); the pod {}",
            leases.len(),
            counts(&leases),
            if cleared { "cleared" } else { "NOT cleared" }
        );
        let mut wrong = Vec::new();
        if leases.len() > 5 {
            wrong.push(format!(
                "{} requests for Leases in a minute (at most 5)",
                leases.len()
            ));
        }
        if leases.is_empty() {
            wrong.push("no Lease request: the fault was never met".into());
        }
        if !cleared {
            wrong.push("the pod not cleared within 20 s".into());
        }
        verdict("no Lease API", &wrong, &m.log());
        m.stop().await;
    }
}
