//! Never stuck on the real control plane: the modern halves of tests/never_stuck.rs, each a
//! scene of its own (tests/common/scene.rs), the fault made by the proxy of
//! tests/common/fuzz.rs in front of the real kube-apiserver (`Scene::behind`) or by the real
//! server itself (its RBAC). What is asserted is what an operator would see: the pod's
//! gates on the server, the metric, the log line, the exit code, `/readyz`; that a fault
//! was reached is read from what the proxy received. These ran on the double before;
//! tests/never_stuck.rs keeps the legacy halves and the faults no proxy makes.

mod common;

use std::time::{Duration, Instant};

use common::{
    Metainit, admin_get, admin_until, counter_sum,
    fuzz::{Fault, Plan, Proxy},
    metrics_until, msg,
    scene::{Rights, Scene},
};
use metainit::client::RequestKind;
use serde_json::{Value, json};

const NS: &str = "stuck";
const KUEUE: &str = "kueue.x-k8s.io/admission";
const WAIT: Duration = Duration::from_secs(20);
/// A request the proxy never answers (it is reset long after any budget here).
const HANG: Duration = Duration::from_secs(120);

fn hang() -> Fault {
    Fault::Delay(HANG, Box::new(Fault::Reset))
}

/// A 422 with causes, as validation or an admission webhook refuses a pod's update: a
/// rejection, not a race.
fn invalid(name: &str, message: &str) -> Fault {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("Pod \"{name}\" is invalid: spec: Forbidden: {message}"),
        "reason": "Invalid", "code": 422,
        "details": {"name": name, "kind": "Pod", "causes": [
            {"reason": "FieldValueForbidden", "message": format!("Forbidden: {message}"),
             "field": "spec"}]},
    });
    Fault::Status(422, None, Some(body.to_string()))
}

/// A scene in `NS`, its ServiceAccount with `rights`, and the pod `name` gated there.
async fn scene(rights: Rights, pods: &[&str]) -> Scene {
    let s = Scene::new(&[NS], rights).await;
    for name in pods {
        s.add(NS, &s.gated_pod(name, KUEUE));
    }
    s
}

async fn blocked(s: &Scene, name: &str) -> bool {
    !s.gates(NS, name).await.is_empty()
}

async fn until_cleared(s: &Scene, name: &str) {
    common::control_plane::until(&format!("{name} cleared"), WAIT, || async {
        (!blocked(s, name).await).then_some(())
    })
    .await;
}

/// The pod `name`'s path, as the proxy sees its PATCH and GET.
fn pod_path(s: &Scene, name: &str) -> String {
    format!("/api/v1/namespaces/{}/pods/{name}", s.home)
}

/// How many requests the proxy received whose `METHOD URI` starts with `what`.
fn received(proxy: &Proxy, what: &str) -> usize {
    proxy
        .seen()
        .iter()
        .filter(|r| r.what.starts_with(what))
        .count()
}

/// Waits until the metric sum for `prefix` reaches `at_least`; returns the metrics text.
async fn wait_metric(addr: &str, prefix: &str, at_least: f64) -> String {
    let what = format!("{prefix} at {at_least} or more");
    metrics_until(addr, &what, WAIT, |t| counter_sum(t, prefix) >= at_least).await
}

/// Runs `m` to its exit: the exit code and the time from spawn to exit.
async fn run_once(mut m: Metainit) -> (Option<i32>, Duration, Metainit) {
    let started = Instant::now();
    // Waits for the exit and for the pipes' last lines: `out()` right after the exit
    // alone once read an empty summary.
    let status = m.wait(WAIT).await;
    (status.code(), started.elapsed(), m)
}

/// The last line says that the `--timeout` budget of `budget` was spent.
async fn assert_budget_named(m: &Metainit, budget: &str) {
    let last = m
        .logged("the error line", |l| l.starts_with("error:"))
        .await;
    assert!(
        last.contains(msg::TIMEOUT_SPENT) && last.contains(&format!("within {budget}")),
        "{last}\n{:#?}",
        m.log()
    );
}

/// Row 2: a 422 with causes (admission, validation) is a rejection: counted, warned,
/// retried with backoff until it goes. The pod is cleared once the rejection is lifted.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn rejected_patches_are_counted_warned_and_retried() {
    let mut s = scene(Rights::Files, &["p"]).await;
    let refused = invalid("p", "denied by policy require-approval");
    let proxy = s.behind(Plan::Fixed(RequestKind::Patch, refused)).await;
    proxy.faulty(true);
    let m = s.metainit(&[]);
    let addr = m.admin_addr().await;
    let rejected = "metainit_clear_failures_total{reason=\"rejected\"}";
    wait_metric(&addr, rejected, 2.0).await;
    let warn = m
        .logged("the rejection warned", |l| {
            l.contains("WARN") && l.contains("422 Invalid") && l.contains("/p")
        })
        .await;
    assert!(warn.contains(&format!("{}/p", s.home)), "{warn}");
    assert!(warn.contains("denied by policy require-approval"), "{warn}");
    assert!(blocked(&s, "p").await);
    proxy.faulty(false);
    until_cleared(&s, "p").await;
    assert!(m.stop().await.success());
}

/// Row 3: `--once` against a rejection retries within the `--timeout` budget, with
/// backoff, then exits 1 naming the pod and the last error; the other pod is cleared.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn once_retries_within_its_budget_then_names_what_it_could_not_clear() {
    let mut s = scene(Rights::Files, &["stuck", "fine"]).await;
    let stuck = pod_path(&s, "stuck");
    let message = "pod updates may not change fields other than spec.schedulingGates";
    let refused = Fault::At(stuck.clone(), Box::new(invalid("stuck", message)));
    let proxy = s.behind(Plan::Fixed(RequestKind::Patch, refused)).await;
    proxy.faulty(true);
    let (code, took, m) = run_once(s.metainit(&["--once", "--timeout", "3s"])).await;
    assert_eq!(code, Some(1), "{:#?}", m.log());
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(
        m.out().contains("cleared 1,") && m.out().contains("failed 1"),
        "{}",
        m.out()
    );
    let last = m
        .logged("could not clear", |l| l.contains("could not clear"))
        .await;
    assert!(
        last.contains(&format!("{}/stuck", s.home))
            && last.contains("422 Invalid")
            && last.contains("may not change fields"),
        "{last}"
    );
    // 100 ms doubling within 3 s: about 5 attempts, never a tight loop.
    let patches = received(&proxy, &format!("PATCH {stuck}"));
    assert!((2..=12).contains(&patches), "{patches} PATCHes");
    assert!(!blocked(&s, "fine").await);
}

/// As tests/never_stuck.rs's `once_ends_within_its_timeout_when_a_list_hangs_halfway`, for
/// the webhooks pass of `--once --webhooks`: every answer 700 ms late, and the second kind's
/// LIST never answered.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn once_ends_within_its_timeout_when_the_webhooks_list_hangs() {
    let mut s = scene(Rights::Files, &[]).await;
    let path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
    let late = |then: Fault| Fault::Delay(Duration::from_millis(700), Box::new(then));
    let plan = Plan::Each(vec![
        (RequestKind::Get, late(Fault::Forward)),
        (
            RequestKind::List,
            late(Fault::At(path.into(), Box::new(hang()))),
        ),
    ]);
    let proxy = s.behind(plan).await;
    proxy.faulty(true);
    let args = [
        "--once",
        "--webhooks",
        "--timeout",
        "3s",
        "--request-timeout",
        "30s",
    ];
    let (code, took, m) = run_once(s.metainit(&args)).await;
    assert_eq!(code, Some(1), "{:#?}", m.log());
    // The hang was reached: it, not something before it, is what was cut.
    assert_eq!(
        received(&proxy, &format!("GET {path}")),
        1,
        "{:#?}",
        m.log()
    );
    assert!(took < Duration::from_secs(4), "exited after {took:?}");
    assert_budget_named(&m, "3s").await;
}

/// The `--timeout` of `--once` cuts an attempt in flight too: a clearing PATCH, or the GET
/// of the pod's newest state before the next try, that the server never answers ends at
/// the budget's end, not at `--request-timeout` (30 s), and the pod is named as not
/// cleared, with the budget as the reason.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn once_cuts_an_attempt_in_flight_at_its_timeout() {
    for hung_get in [false, true] {
        let mut s = scene(Rights::Files, &["stuck"]).await;
        let stuck = pod_path(&s, "stuck");
        let (plan, hung) = if hung_get {
            let refused = invalid("stuck", "denied by policy require-approval");
            let get = Fault::At(stuck.clone(), Box::new(hang()));
            let plan = Plan::Each(vec![(RequestKind::Patch, refused), (RequestKind::Get, get)]);
            (plan, format!("GET {stuck}"))
        } else {
            (
                Plan::Fixed(RequestKind::Patch, hang()),
                format!("PATCH {stuck}"),
            )
        };
        let proxy = s.behind(plan).await;
        proxy.faulty(true);
        let args = ["--once", "--timeout", "3s", "--request-timeout", "30s"];
        let (code, took, m) = run_once(s.metainit(&args)).await;
        assert_eq!(code, Some(1), "{hung}: {:#?}", m.log());
        assert!(received(&proxy, &hung) >= 1, "{hung}: {:#?}", m.log());
        assert!(
            took < Duration::from_secs(4),
            "{hung}: exited after {took:?}"
        );
        let line = m
            .logged("the pod's could not clear", |l| {
                l.contains(msg::COULD_NOT_CLEAR) && l.contains("/stuck")
            })
            .await;
        assert!(
            line.contains(msg::TIMEOUT_SPENT) && line.contains("(3s)"),
            "{hung}: {line}"
        );
        common::eventually("the summary", WAIT, || m.out().contains("failed 1")).await;
        assert!(blocked(&s, "stuck").await, "{hung}");
    }
}

/// The Events of `--once` are waited for within what is left of `--timeout`: an Event
/// POST that is never answered does not hold the run past it. The pod was cleared.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn once_waits_for_its_events_within_its_timeout() {
    let mut s = scene(Rights::Files, &["p"]).await;
    let proxy = s.behind(Plan::Fixed(RequestKind::Write, hang())).await;
    proxy.faulty(true);
    let args = ["--once", "--timeout", "3s", "--request-timeout", "30s"];
    let (code, took, m) = run_once(s.metainit(&args)).await;
    assert_eq!(code, Some(0), "{:#?}", m.log());
    assert!(received(&proxy, "POST ") >= 1, "{:#?}", m.log());
    assert!(took < Duration::from_secs(4), "exited after {took:?}");
    assert!(!blocked(&s, "p").await);
    m.logged("the Events' warning", |l| {
        l.contains("some Events were not written")
    })
    .await;
}

/// `--request-timeout` bounds the whole request, its body included: a PATCH whose answer
/// stalls after its headers (the start of a pod, then nothing) times out and frees its
/// worker; the pod is cleared once the answers come whole again.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn an_answer_that_stalls_after_its_headers_times_out() {
    let mut s = scene(Rights::Files, &["p0"]).await;
    let proxy = s
        .behind(Plan::Fixed(RequestKind::Patch, Fault::Endless(1)))
        .await;
    proxy.faulty(true);
    let m = s.metainit(&["--request-timeout", "1s"]);
    m.logged("the stalled answer timed out", |l| {
        l.contains("p0") && l.contains("no answer within 1s")
    })
    .await;
    assert!(blocked(&s, "p0").await);
    proxy.faulty(false);
    until_cleared(&s, "p0").await;
    assert!(m.stop().await.success());
}

/// The uid of pod `name`.
async fn uid(s: &Scene, name: &str) -> String {
    let pod = s.pods(NS).get(name).await.expect("the pod");
    pod.metadata.uid.expect("a uid")
}

/// Row 5: a pod deleted and created again under the same name while its clear is being
/// retried: the new pod is the one worked on, and it is cleared.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn an_object_recreated_under_its_name_is_cleared() {
    let mut s = scene(Rights::Files, &["web-0"]).await;
    let refused = invalid("web-0", "not yet");
    let proxy = s.behind(Plan::Fixed(RequestKind::Patch, refused)).await;
    proxy.faulty(true);
    let old = uid(&s, "web-0").await;
    let m = s.metainit(&[]);
    let addr = m.admin_addr().await;
    let rejected = "metainit_clear_failures_total{reason=\"rejected\"}";
    wait_metric(&addr, rejected, 1.0).await;
    // Unbound, it is gone at once.
    s.cp.kubectl_ok(&["delete", "pod", "web-0", "-n", &s.home, "--wait"]);
    s.add(NS, &s.gated_pod("web-0", KUEUE));
    let new = uid(&s, "web-0").await;
    assert_ne!(old, new);
    assert!(blocked(&s, "web-0").await, "held again");
    proxy.faulty(false);
    until_cleared(&s, "web-0").await;
    assert_eq!(uid(&s, "web-0").await, new);
    assert!(m.stop().await.success());
}

/// Row 7: the label is removed while the clearing PATCH is in flight (every PATCH 2 s
/// late at the proxy): the patch tests the label as seen, so the real server refuses it
/// and the pod is left held, as its owner now wants.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_label_removed_while_the_patch_is_in_flight_is_respected() {
    let mut s = scene(Rights::Files, &[]).await;
    let late = Fault::Delay(Duration::from_secs(2), Box::new(Fault::Forward));
    let proxy = s.behind(Plan::Fixed(RequestKind::Patch, late)).await;
    let m = s.metainit(&[]);
    let addr = m.admin_addr().await;
    admin_until(&addr, "/readyz", 200, &[], WAIT).await;
    proxy.faulty(true);
    s.add(NS, &s.gated_pod("p", KUEUE));
    m.logged("the PATCH sent", |l| {
        l.contains("patching") && l.contains("/p")
    })
    .await;
    let unlabel = format!("{}-", s.key);
    s.cp.kubectl_ok(&["label", "pod", "p", "-n", &s.home, &unlabel]);
    wait_metric(&addr, "metainit_clear_failures_total{reason=\"race\"}", 1.0).await;
    proxy.faulty(false);
    // Nothing more comes for it: it is no longer selected.
    assert!(blocked(&s, "p").await, "cleared anyway");
    let pod = s.pods(NS).get("p").await.expect("the pod");
    let labels = pod.metadata.labels.unwrap_or_default();
    assert!(!labels.contains_key(&s.key), "{labels:?}");
    assert!(m.stop().await.success());
}

/// Row 8, its first half: `/readyz` follows the watch, not one pod's PATCHes: a broken
/// webhook failing every PATCH with 500 leaves it ready.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn readyz_stays_ready_while_every_patch_fails() {
    let mut s = scene(Rights::Files, &["p"]).await;
    let broken = Fault::Status(500, None, None);
    let proxy = s.behind(Plan::Fixed(RequestKind::Patch, broken)).await;
    proxy.faulty(true);
    let m = s.metainit(&[]);
    let addr = m.admin_addr().await;
    let failed = "metainit_clear_failures_total{reason=\"server_error\"}";
    wait_metric(&addr, failed, 3.0).await;
    assert_eq!(admin_get(&addr, "/readyz").await.0, 200);
    proxy.faulty(false);
    until_cleared(&s, "p").await;
    assert!(m.stop().await.success());
}

/// Every kubeconfig in KUBECONFIG is merged (missing ones skipped), relative paths are
/// resolved against the file that names them, and every request says who it is: the
/// user agent as the real server's audit log records it.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn kubeconfig_like_kubectl_and_a_user_agent() {
    let s = scene(Rights::Files, &["p"]).await;
    let own: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&s.kubeconfig).unwrap()).unwrap();
    let cluster = &own["clusters"][0]["cluster"];
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("users");
    std::fs::create_dir(&sub).unwrap();
    let token = own["users"][0]["user"]["token"].as_str().expect("a token");
    std::fs::write(sub.join("token"), token).unwrap();
    let first = dir.path().join("clusters.yaml");
    std::fs::write(
        &first,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    \
             certificate-authority: {}\ncontexts:\n- name: ctx\n  context:\n    cluster: c\n    \
             user: u\ncurrent-context: ctx\n",
            cluster["server"].as_str().unwrap(),
            cluster["certificate-authority"].as_str().unwrap(),
        ),
    )
    .unwrap();
    let second = sub.join("users.yaml");
    std::fs::write(
        &second,
        "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    tokenFile: token\n",
    )
    .unwrap();
    let missing = dir.path().join("missing.yaml");
    let kubeconfig = format!(
        "{}:{}:{}",
        missing.display(),
        first.display(),
        second.display()
    );
    let out = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_metainit"))
            .args(["--once", "--timeout", "5s", "--label-key", &s.key])
            .args(["--namespace", &s.home])
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", "/nonexistent")
            .current_dir("/")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("finishes")
    .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!blocked(&s, "p").await);
    let requests = common::control_plane::until("the PATCH audited", WAIT, || async {
        let r = s.requests();
        r.iter().any(|e| e["verb"] == "patch").then_some(r)
    })
    .await;
    for r in requests {
        let ua = r["userAgent"].as_str().unwrap_or_default();
        assert!(
            ua.starts_with("metainit/"),
            "{} {}: {ua:?}",
            r["verb"],
            r["requestURI"]
        );
    }
}
