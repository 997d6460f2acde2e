//! Never stuck: a labelled object never stays held back while the API server can be
//! reached, against the ways real clusters answer during bootstrap and recovery. One test
//! per failure mode (issue "Never stuck", rows 1 to 10), in both modes where it applies,
//! each asserting what an operator would see: the object's end state on the server, the
//! metric, the log line, the exit code, `/readyz`. On the double: Kubernetes 1.13
//! (initializers), and the faults no proxy in front of the real server makes; the modern
//! cases a proxy can make are tests/cluster_never_stuck.rs's.

mod common;

use std::{collections::HashMap, time::Duration};

use common::*;
use kube_double::{Config, Faults, Rejection};
use serde_json::Value;

const INIT: &str = "podimage.example.com";
const KUEUE: &str = "kueue.x-k8s.io/admission";
const WAIT: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Gen {
    Legacy,
    Modern,
}

const BOTH: [Gen; 2] = [Gen::Legacy, Gen::Modern];

impl Gen {
    fn config(self) -> Config {
        match self {
            Gen::Legacy => {
                let mut c = Config::legacy();
                c.initializers = vec![kube_double::InitializerRule {
                    name: INIT.into(),
                    resources: vec!["pods".into()],
                }];
                c
            }
            Gen::Modern => Config::modern(),
        }
    }

    async fn bed(self) -> Bed {
        Bed::start(self.config()).await
    }

    /// A labelled object that is held back once created.
    fn held(self, name: &str) -> Value {
        match self {
            Gen::Legacy => pod(name, true),
            Gen::Modern => gated_pod(name, true, &[KUEUE]),
        }
    }

    /// What holds the object back on the server now.
    fn blocked(self, bed: &Bed, name: &str) -> Vec<String> {
        let obj = bed
            .double
            .get("pods", "default", name)
            .expect("object exists");
        match self {
            Gen::Legacy => pending_initializers(&obj),
            Gen::Modern => gates(&obj),
        }
    }

    /// Everything metainit needs, as `verb resource` entries for the double's RBAC.
    fn all_perms(self) -> Vec<String> {
        let mut p: Vec<String> = ["get pods", "list pods", "watch pods", "patch pods"]
            .map(String::from)
            .into();
        p.push("create events".into());
        if self == Gen::Legacy {
            p.push("initialize pods".into());
        }
        p
    }
}

fn tokens(perms: Vec<String>) -> Option<HashMap<String, Vec<String>>> {
    Some([("user".to_string(), perms)].into())
}

/// Admission refuses every update of the objects whose name starts with `prefix`.
fn reject(prefix: &str, code: u16, message: &str) -> Faults {
    Faults {
        reject_writes: Some(Rejection {
            name_prefix: prefix.into(),
            code,
            message: message.into(),
        }),
        ..Faults::default()
    }
}

fn uid(bed: &Bed, name: &str) -> String {
    bed.double.get("pods", "default", name).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Waits until the metric sum for `prefix` reaches `at_least`; returns the metrics text.
async fn wait_metric(addr: &str, prefix: &str, at_least: f64) -> String {
    let what = format!("{prefix} at {at_least} or more");
    metrics_until(addr, &what, WAIT, |t| counter_sum(t, prefix) >= at_least).await
}

/// Row 1: RBAC lands after metainit. 403s are retried with backoff and warned with the
/// fix; the object is cleared within seconds of the permission arriving.
#[tokio::test]
async fn forbidden_until_rbac_lands_then_cleared_within_seconds() {
    for g in BOTH {
        let mut perms = g.all_perms();
        perms.retain(|p| p != "patch pods" && p != "initialize pods");
        let config = g.config();
        let bed = Bed::as_user(
            config,
            &perms.iter().map(String::as_str).collect::<Vec<_>>(),
        )
        .await;
        bed.double.create("pods", "default", g.held("p")).unwrap();
        let m = bed.metainit(&[]);
        let addr = m.admin_addr().await;
        wait_metric(
            &addr,
            "metainit_clear_failures_total{reason=\"forbidden\"}",
            2.0,
        )
        .await;
        let warn = m
            .logged("warning with the fix", |l| {
                l.contains("WARN")
                    && l.contains("403 Forbidden")
                    && l.contains("manifests/rbac.yaml")
            })
            .await;
        assert!(warn.contains("default/p"), "{g:?}: {warn}");
        assert!(
            warn.contains("status.code=403 status.reason=Forbidden"),
            "the server's Status as fields: {warn}"
        );
        assert!(!g.blocked(&bed, "p").is_empty(), "{g:?}");

        let granted = std::time::Instant::now();
        bed.double.set_tokens(tokens(g.all_perms()));
        eventually("cleared after the grant", WAIT, || {
            g.blocked(&bed, "p").is_empty()
        })
        .await;
        assert!(
            granted.elapsed() < Duration::from_secs(10),
            "{g:?}: cleared {:?} after the grant",
            granted.elapsed()
        );
        assert!(m.stop().await.success());
    }
}

/// Row 2: a 422 with causes (admission, validation) or a 400 is a rejection: counted,
/// warned, retried with backoff until it goes; a failed `test` (422 without causes)
/// is a race. The object is cleared once the rejection is lifted.
#[tokio::test]
async fn rejected_patches_are_counted_warned_and_retried() {
    // The modern half (a 422 with causes) is tests/cluster_never_stuck.rs's, on the real
    // server behind the proxy.
    for (g, code, text) in [(Gen::Legacy, 400, "400 BadRequest")] {
        let bed = g.bed().await;
        bed.double
            .set_faults(reject("p", code, "denied by policy require-approval"));
        bed.double.create("pods", "default", g.held("p")).unwrap();
        let m = bed.metainit(&[]);
        let addr = m.admin_addr().await;
        wait_metric(
            &addr,
            "metainit_clear_failures_total{reason=\"rejected\"}",
            2.0,
        )
        .await;
        let warn = m
            .logged("the rejection warned", |l| {
                l.contains("WARN") && l.contains(text) && l.contains("default/p")
            })
            .await;
        assert!(warn.contains("denied by policy require-approval"), "{warn}");
        assert!(!g.blocked(&bed, "p").is_empty());
        bed.double.set_faults(Faults::default());
        eventually("cleared after the rejection is lifted", WAIT, || {
            g.blocked(&bed, "p").is_empty()
        })
        .await;
        assert!(m.stop().await.success());
    }
}

/// Row 3: `--once` against a rejection retries within the `--timeout` budget, with
/// backoff, then exits 1 naming the object and the last error.
#[tokio::test]
async fn once_retries_within_its_budget_then_names_what_it_could_not_clear() {
    // The modern half is tests/cluster_never_stuck.rs's, on the real server behind the proxy.
    for g in [Gen::Legacy] {
        let bed = g.bed().await;
        bed.double.set_faults(reject(
            "stuck",
            422,
            "pod updates may not change fields other than spec.schedulingGates",
        ));
        bed.double
            .create("pods", "default", g.held("stuck"))
            .unwrap();
        bed.double
            .create("pods", "default", g.held("fine"))
            .unwrap();
        let started = std::time::Instant::now();
        let mut m = bed.metainit(&["--once", "--timeout", "3s"]);
        assert_eq!(m.wait(WAIT).await.code(), Some(1), "{g:?}: {:#?}", m.log());
        let took = started.elapsed();
        assert!(took < Duration::from_secs(10), "{g:?}: took {took:?}");
        assert!(
            m.out().contains("cleared 1,") && m.out().contains("failed 1"),
            "{}",
            m.out()
        );
        let last = m
            .logged("could not clear", |l| l.contains("could not clear"))
            .await;
        assert!(
            last.contains("default/stuck")
                && last.contains("422 Invalid")
                && last.contains("may not change fields"),
            "{last}"
        );
        let patches = bed
            .patched()
            .iter()
            .filter(|p| *p == "default/stuck")
            .count();
        // 100 ms doubling within 3 s: about 5 attempts, never a tight loop.
        assert!((2..=12).contains(&patches), "{g:?}: {patches} PATCHes");
        assert!(g.blocked(&bed, "fine").is_empty());
    }
}

/// `--timeout` is the budget of the whole run, not of each `--resource`: with two
/// resources whose objects can never be cleared, `--once` still exits within it. The pod
/// is retried to the budget's end, so the deployments are never listed: the summary counts
/// the pod and the last line says so.
#[tokio::test]
async fn once_spends_one_budget_across_every_resource() {
    let bed = Bed::legacy(&[INIT]).await;
    bed.double.set_faults(reject(
        "stuck",
        422,
        "updates may not change fields other than metadata.initializers",
    ));
    bed.double
        .create("pods", "default", pod("stuck-pod", true))
        .unwrap();
    let deploy = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "stuck-deploy", "labels": {LABEL: "true"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "stuck"}},
            "template": {"metadata": {"labels": {"app": "stuck"}},
                         "spec": {"containers": [{"name": "c", "image": "x"}]}}
        }
    });
    bed.double
        .create("deployments.apps", "default", deploy)
        .unwrap();
    let started = std::time::Instant::now();
    let mut m = bed.metainit(&[
        "--once",
        "--timeout",
        "3s",
        "--resource",
        "pods",
        "--resource",
        "deployments.apps",
    ]);
    assert_eq!(m.wait(WAIT).await.code(), Some(1), "{:#?}", m.log());
    let took = started.elapsed();
    // 3 s of budget, from the start; a budget per resource takes 6 s at least.
    assert!(took < Duration::from_secs(4), "took {took:?}");
    assert!(m.out().contains("failed 1"), "{}", m.out());
    m.logged("the pod's could not clear", |l| {
        l.contains("could not clear") && l.contains("default/stuck-pod")
    })
    .await;
    let last = m
        .logged("the error line", |l| l.starts_with("error:"))
        .await;
    assert!(
        last.contains("LIST deployments not sent")
            && last.contains(&format!("{} (3s)", msg::TIMEOUT_SPENT)),
        "{last}"
    );
}

/// The `--timeout` of `--once` bounds the whole run, from its start: discovery, every page
/// of every listing and the clearing (issue #43 item 5). A slow server (every answer
/// 300 ms late) that stops answering at the second page of the second resource's list:
/// a budget that starts late, or a fresh one for each page, ends after the bound.
#[tokio::test]
async fn once_ends_within_its_timeout_when_a_list_hangs_halfway() {
    let bed = Bed::legacy(&[INIT]).await;
    for name in ["p1", "p2"] {
        bed.double
            .create("pods", "default", pod(name, true))
            .unwrap();
    }
    // 501: two pages of 500.
    for i in 0..501 {
        let deploy = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": format!("d-{i:03}"), "labels": {LABEL: "true"}},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}},
                             "spec": {"containers": [{"name": "c", "image": "x"}]}}
            }
        });
        bed.double
            .create("deployments.apps", "default", deploy)
            .unwrap();
    }
    bed.double.set_faults(Faults {
        latency: Duration::from_millis(300),
        hang_method: Some("GET".into()),
        hang_path: Some("/apis/apps/v1/deployments".into()),
        hang_after: 1,
        hang_count: 1,
        ..Faults::default()
    });
    let args = [
        "--once",
        "--timeout",
        "3s",
        "--request-timeout",
        "30s",
        "--resource",
        "pods",
        "--resource",
        "deployments.apps",
    ];
    let (code, took, m) = run_once(&bed, &args).await;
    assert_eq!(code, Some(1), "{:#?}", m.log());
    // The second page was asked for: the hang, not something before it, is what was cut.
    assert_eq!(bed.double.faults().hang_count, 0, "{:#?}", m.log());
    assert!(pending_initializers(&bed.double.get("pods", "default", "p1").unwrap()).is_empty());
    assert!(took < Duration::from_secs(4), "exited after {took:?}");
    assert_budget_named(&m, "3s").await;
    // The summary, before that line, counts what was listed.
    eventually("the summary", WAIT, || m.out().contains("cleared 2,")).await;
}

/// The `--timeout` of `--once` cuts an attempt in flight too: a clearing PATCH, or the
/// GET of the object's newest state before the next try, that the server never answers
/// ends at the budget's end, not at `--request-timeout` (30 s), and the object is named
/// as not cleared, with the budget as the reason.
#[tokio::test]
async fn once_cuts_an_attempt_in_flight_at_its_timeout() {
    // The PATCH hangs (the modern cases, and a GET that hangs after a refused PATCH, are
    // tests/cluster_never_stuck.rs's, on the real server behind the proxy).
    let hung_patch = Faults {
        hang_method: Some("PATCH".into()),
        hang_count: 1,
        ..Faults::default()
    };
    for (g, faults) in [(Gen::Legacy, hung_patch)] {
        let bed = g.bed().await;
        bed.double
            .create("pods", "default", g.held("stuck"))
            .unwrap();
        bed.double.set_faults(faults);
        let args = ["--once", "--timeout", "3s", "--request-timeout", "30s"];
        let (code, took, m) = run_once(&bed, &args).await;
        assert_eq!(code, Some(1), "{g:?}: {:#?}", m.log());
        // The hang was reached: it, not something before it, is what was cut.
        assert_eq!(bed.double.faults().hang_count, 0, "{g:?}: {:#?}", m.log());
        assert!(
            took < Duration::from_secs(4),
            "{g:?}: exited after {took:?}"
        );
        let line = m
            .logged("the object's could not clear", |l| {
                l.contains(msg::COULD_NOT_CLEAR) && l.contains("default/stuck")
            })
            .await;
        eprintln!("{line}");
        assert!(
            line.contains(msg::TIMEOUT_SPENT) && line.contains("(3s)"),
            "{g:?}: {line}"
        );
        eventually("the summary", WAIT, || m.out().contains("failed 1")).await;
        assert!(!g.blocked(&bed, "stuck").is_empty(), "{g:?}");
    }
}

/// Runs `metainit` to its exit: the exit code and the time from spawn to exit.
async fn run_once(bed: &Bed, args: &[&str]) -> (Option<i32>, Duration, Metainit) {
    let started = std::time::Instant::now();
    let mut m = bed.metainit(args);
    // Waits for the exit and for the pipes' last lines: `out()` right after the exit
    // alone once read an empty summary.
    let status = m.wait(WAIT).await;
    let took = started.elapsed();
    eprintln!("metainit {args:?} exited {status} after {took:?}");
    (status.code(), took, m)
}

/// The last line says that the `--timeout` budget of `budget` was spent.
async fn assert_budget_named(m: &Metainit, budget: &str) {
    let last = m
        .logged("the error line", |l| l.starts_with("error:"))
        .await;
    eprintln!("{last}");
    assert!(
        last.contains(msg::TIMEOUT_SPENT) && last.contains(&format!("within {budget}")),
        "{last}\n{:#?}",
        m.log()
    );
}

/// Row 4: PATCHes accepted and never answered time out (`--request-timeout`), count as
/// `timeout`, are retried, and never hold up clearing, even more of them than the
/// concurrency.
#[tokio::test]
async fn unanswered_requests_time_out_and_are_retried() {
    // Both stay on the double: its `hang_count` leaves exactly the first 6 PATCHes
    // unanswered, a count the proxy (every request of a kind alike while faulty) cannot
    // hold to.
    for g in BOTH {
        let bed = g.bed().await;
        bed.double.set_faults(Faults {
            hang_method: Some("PATCH".into()),
            hang_count: 6,
            ..Faults::default()
        });
        for i in 0..8 {
            bed.double
                .create("pods", "default", g.held(&format!("p{i}")))
                .unwrap();
        }
        let m = bed.metainit(&["--request-timeout", "1s", "--concurrency", "4"]);
        let addr = m.admin_addr().await;
        eventually("all cleared", WAIT, || {
            (0..8).all(|i| g.blocked(&bed, &format!("p{i}")).is_empty())
        })
        .await;
        let text = wait_metric(
            &addr,
            "metainit_clear_failures_total{reason=\"timeout\"}",
            6.0,
        )
        .await;
        assert_eq!(
            counter_sum(&text, "metainit_clear_failures_total{reason=\"timeout\"}"),
            6.0,
            "{text}"
        );
        m.logged("the timeout warned", |l| {
            l.contains("WARN") && l.contains("no answer within 1s")
        })
        .await;
        assert!(m.stop().await.success());
    }
}

/// Row 5: an object deleted and created again under the same name while its clear is
/// being retried: the new object is the one worked on, and it is cleared.
#[tokio::test]
async fn an_object_recreated_under_its_name_is_cleared() {
    // The modern half is tests/cluster_never_stuck.rs's, on the real server behind the proxy.
    for g in [Gen::Legacy] {
        let bed = g.bed().await;
        bed.double.set_faults(reject("web-0", 422, "not yet"));
        bed.double
            .create("pods", "default", g.held("web-0"))
            .unwrap();
        let old = uid(&bed, "web-0");
        let m = bed.metainit(&[]);
        let addr = m.admin_addr().await;
        wait_metric(
            &addr,
            "metainit_clear_failures_total{reason=\"rejected\"}",
            1.0,
        )
        .await;
        bed.double.recreate("pods", "default", "web-0").unwrap();
        let new = uid(&bed, "web-0");
        assert_ne!(old, new);
        assert!(!g.blocked(&bed, "web-0").is_empty(), "held again");
        bed.double.set_faults(Faults::default());
        eventually("the new web-0 cleared", WAIT, || {
            g.blocked(&bed, "web-0").is_empty()
        })
        .await;
        assert_eq!(uid(&bed, "web-0"), new);
        assert!(m.stop().await.success());
    }
}

/// Row 6: the server's revision goes backwards (etcd restored from a snapshot). The
/// watch resumes from a version the server has not reached and hears nothing; the
/// resync relists, says so, and clears what was created since.
#[tokio::test]
async fn a_revision_that_goes_backwards_is_noticed_and_objects_cleared() {
    // Both stay on the double: an etcd restored under a running server (its revision
    // going backwards) is a fault no proxy makes, and the shared control plane is not ours
    // to restore.
    for g in BOTH {
        let bed = g.bed().await;
        let snapshot = bed.double.snapshot();
        let m = bed.metainit(&["--resync-period", "1s"]);
        let addr = m.admin_addr().await;
        admin_until(&addr, "/readyz", 200, &[], WAIT).await;
        for i in 0..5 {
            bed.double
                .create("pods", "default", g.held(&format!("before{i}")))
                .unwrap();
        }
        eventually("the first ones cleared", WAIT, || {
            (0..5).all(|i| g.blocked(&bed, &format!("before{i}")).is_empty())
        })
        .await;
        bed.double.restore(&snapshot);
        bed.double
            .create("pods", "default", g.held("after"))
            .unwrap();
        assert!(
            bed.double.resource_version() < 10,
            "the new object's revision is below what metainit saw"
        );
        eventually("the one created after the restore cleared", WAIT, || {
            g.blocked(&bed, "after").is_empty()
        })
        .await;
        m.logged("the backwards revision warned", |l| {
            l.contains("WARN") && l.contains("revision went backwards")
        })
        .await;
        wait_metric(
            &addr,
            "metainit_watch_restarts_total{cause=\"revision_backwards\"}",
            1.0,
        )
        .await;
        assert!(m.stop().await.success());
    }
}

/// Row 7: the label is removed while the clearing PATCH is in flight: the patch tests the
/// label as seen, so the object is left held, as its owner now wants.
#[tokio::test]
async fn a_label_removed_while_the_patch_is_in_flight_is_respected() {
    // The modern half is tests/cluster_never_stuck.rs's, on the real server behind the proxy.
    for g in [Gen::Legacy] {
        let bed = g.bed().await;
        let m = bed.metainit(&[]);
        let addr = m.admin_addr().await;
        admin_until(&addr, "/readyz", 200, &[], WAIT).await;
        // Every answer now takes 2 s: the window in which the label goes.
        bed.double.set_faults(Faults {
            latency: Duration::from_secs(2),
            ..Faults::default()
        });
        bed.double.create("pods", "default", g.held("p")).unwrap();
        m.logged("the PATCH sent", |l| {
            l.contains("patching") && l.contains("default/p")
        })
        .await;
        let mut obj = bed.double.get("pods", "default", "p").unwrap();
        obj["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(LABEL);
        bed.double.update("pods", "default", obj).unwrap();
        wait_metric(&addr, "metainit_clear_failures_total{reason=\"race\"}", 1.0).await;
        bed.double.set_faults(Faults::default());
        // Nothing more comes for it: it is no longer selected.
        tokio::task::yield_now().await;
        assert!(!g.blocked(&bed, "p").is_empty(), "{g:?}: cleared anyway");
        let obj = bed.double.get("pods", "default", "p").unwrap();
        assert!(obj["metadata"]["labels"].get(LABEL).is_none());
        assert!(m.stop().await.success());
    }
}

/// Row 8: `/readyz` follows the watch, not one object's PATCHes; a watch failure (403
/// included) makes it 503 with the real reason.
#[tokio::test]
async fn readyz_follows_the_watch_with_the_real_reason() {
    // The user may not list yet: 503 saying so, then ready once RBAC lands.
    for g in BOTH {
        let mut perms = g.all_perms();
        perms.retain(|p| p != "list pods");
        let bed = Bed::as_user(
            g.config(),
            &perms.iter().map(String::as_str).collect::<Vec<_>>(),
        )
        .await;
        bed.double.create("pods", "default", g.held("p")).unwrap();
        let m = bed.metainit(&[]);
        let addr = m.admin_addr().await;
        let body = admin_until(
            &addr,
            "/readyz",
            503,
            &["watch of pods failed", "403 Forbidden"],
            WAIT,
        )
        .await;
        assert!(body.contains("manifests/rbac.yaml"), "{body}");
        let warn = m
            .logged("the watch's warning", |l| l.contains("watch failed"))
            .await;
        assert!(
            warn.contains("WARN") && warn.contains("status.code=403 status.reason=Forbidden"),
            "the server's Status as fields: {warn}"
        );
        bed.double.set_tokens(tokens(g.all_perms()));
        admin_until(&addr, "/readyz", 200, &[], WAIT).await;
        eventually("cleared", WAIT, || g.blocked(&bed, "p").is_empty()).await;
        m.logged("the recovery logged", |l| l.contains("watch recovered"))
            .await;
        assert!(m.stop().await.success());
    }
}

/// Row 9: a forced mode that the server's version cannot have is refused (exit 2),
/// never a false all-clear.
#[tokio::test]
async fn a_forced_mode_the_server_cannot_have_exits_2() {
    for (g, mode, says) in [
        (Gen::Modern, "initializers", "has no initializers"),
        (Gen::Legacy, "scheduling-gates", "has no scheduling gates"),
    ] {
        let bed = g.bed().await;
        bed.double.create("pods", "default", g.held("p")).unwrap();
        for extra in [&["--once"][..], &[][..]] {
            let mut args = vec!["--mode", mode];
            args.extend_from_slice(extra);
            let mut m = bed.metainit(&args);
            assert_eq!(
                m.wait(WAIT).await.code(),
                Some(2),
                "{g:?} {args:?}: {:#?}",
                m.log()
            );
            let log = m.log().join("\n");
            assert!(log.contains(says) && log.contains("--mode auto"), "{log}");
        }
        assert!(!g.blocked(&bed, "p").is_empty());
    }
}

/// Row 10: Events that fail under load are retried with backoff, in a bounded queue. On
/// the double: 30 % of the creates fail at random, and the proxy answers every request of a
/// kind alike.
#[tokio::test]
async fn events_are_retried_under_server_errors() {
    let g = Gen::Modern;
    let bed = g.bed().await;
    bed.double.set_faults(Faults {
        error_fraction: 0.3,
        error_codes: vec![503],
        error_only: vec!["create".into()],
        ..Faults::default()
    });
    const N: usize = 50;
    for i in 0..N {
        bed.double
            .create("pods", "default", g.held(&format!("p{i}")))
            .unwrap();
    }
    let m = bed.metainit(&[]);
    let addr = m.admin_addr().await;
    eventually("all cleared", WAIT, || {
        (0..N).all(|i| g.blocked(&bed, &format!("p{i}")).is_empty())
    })
    .await;
    // Every Event is written, or counted as failed or dropped.
    let start = std::time::Instant::now();
    let (written, lost) = loop {
        let text = admin_get(&addr, "/metrics").await.1;
        let lost = counter_sum(&text, "metainit_event_failures_total")
            + counter_sum(&text, "metainit_events_dropped_total");
        let written = bed.double.events().len();
        if written as f64 + lost >= N as f64 {
            break (written, lost);
        }
        assert!(start.elapsed() < WAIT, "{written} written, {lost} lost");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(written as f64 + lost, N as f64);
    // Without retries, 30 % would be lost; with 4 attempts, about 1 %.
    assert!(written >= N - 5, "{written} of {N} Events written");
    assert!(m.stop().await.success());
}
