//! Never stuck: a labelled object never stays held back while the API server can be
//! reached, against the ways real clusters answer during bootstrap and recovery. One test
//! per failure mode (issue "Never stuck", rows 1 to 10), in both modes where it applies,
//! each asserting what an operator would see: the object's end state on the server, the
//! metric, the log line, the exit code, `/readyz`.

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
    for (g, code, text) in [
        (Gen::Modern, 422, "422 Invalid"),
        (Gen::Legacy, 400, "400 BadRequest"),
    ] {
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
    for g in BOTH {
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

/// As above, for the webhooks pass of `--once --webhooks`: the second kind's LIST hangs.
#[tokio::test]
async fn once_ends_within_its_timeout_when_the_webhooks_list_hangs() {
    let bed = Bed::modern().await;
    bed.double.set_faults(Faults {
        latency: Duration::from_millis(700),
        hang_method: Some("GET".into()),
        hang_path: Some(
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations".into(),
        ),
        hang_count: 1,
        ..Faults::default()
    });
    let args = [
        "--once",
        "--webhooks",
        "--timeout",
        "3s",
        "--request-timeout",
        "30s",
    ];
    let (code, took, m) = run_once(&bed, &args).await;
    assert_eq!(code, Some(1), "{:#?}", m.log());
    assert_eq!(bed.double.faults().hang_count, 0, "{:#?}", m.log());
    assert!(took < Duration::from_secs(4), "exited after {took:?}");
    assert_budget_named(&m, "3s").await;
}

/// The `--timeout` of `--once` cuts an attempt in flight too: a clearing PATCH, or the
/// GET of the object's newest state before the next try, that the server never answers
/// ends at the budget's end, not at `--request-timeout` (30 s), and the object is named
/// as not cleared, with the budget as the reason.
#[tokio::test]
async fn once_cuts_an_attempt_in_flight_at_its_timeout() {
    // The PATCH hangs; or the PATCH is refused and the GET before the retry hangs.
    let hung_patch = Faults {
        hang_method: Some("PATCH".into()),
        hang_count: 1,
        ..Faults::default()
    };
    let hung_get = Faults {
        hang_method: Some("GET".into()),
        hang_path: Some("/api/v1/namespaces/default/pods/stuck".into()),
        hang_count: 1,
        ..reject("stuck", 422, "denied by policy require-approval")
    };
    for (g, faults) in [
        (Gen::Legacy, hung_patch.clone()),
        (Gen::Modern, hung_patch),
        (Gen::Modern, hung_get),
    ] {
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

/// The Events of `--once` are waited for within what is left of `--timeout`: an Event
/// POST that is never answered does not hold the run past it. The object was cleared.
#[tokio::test]
async fn once_waits_for_its_events_within_its_timeout() {
    let g = Gen::Modern;
    let bed = g.bed().await;
    bed.double.create("pods", "default", g.held("p")).unwrap();
    bed.double.set_faults(Faults {
        hang_method: Some("POST".into()),
        hang_count: 1,
        ..Faults::default()
    });
    let args = ["--once", "--timeout", "3s", "--request-timeout", "30s"];
    let (code, took, m) = run_once(&bed, &args).await;
    assert_eq!(code, Some(0), "{:#?}", m.log());
    assert_eq!(bed.double.faults().hang_count, 0, "{:#?}", m.log());
    assert!(took < Duration::from_secs(4), "exited after {took:?}");
    assert!(g.blocked(&bed, "p").is_empty());
    m.logged("the Events' warning", |l| {
        l.contains("some Events were not written")
    })
    .await;
}

/// Runs `metainit` to its exit: the exit code and the time from spawn to exit.
async fn run_once(bed: &Bed, args: &[&str]) -> (Option<i32>, Duration, Metainit) {
    let started = std::time::Instant::now();
    let mut m = bed.metainit(args);
    let status = tokio::time::timeout(WAIT, m.child.wait())
        .await
        .unwrap_or_else(|_| panic!("no exit within {WAIT:?}: {:#?}", m.log()))
        .expect("wait");
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

/// A loopback proxy in front of the double that passes everything on both ways, except
/// the answer to the first PATCH: its headers go through, its body is held back for ever
/// (a server or load balancer that stalls mid-answer).
async fn stalling_proxy(upstream: std::net::SocketAddr) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stalled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            if let Ok(server) = tokio::net::TcpStream::connect(upstream).await {
                tokio::spawn(relay(client, server, stalled.clone()));
            }
        }
    });
    format!("http://{addr}")
}

async fn relay(
    client: tokio::net::TcpStream,
    server: tokio::net::TcpStream,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use std::sync::{Arc, atomic::AtomicBool, atomic::Ordering::SeqCst};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    // HTTP/1.1 without pipelining: the answer after a PATCH is the PATCH's.
    let stall_next = Arc::new(AtomicBool::new(false));
    let mark = stall_next.clone();
    let up = tokio::spawn(async move {
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n @ 1..) = from_client.read(&mut buf).await {
            if buf[..n].starts_with(b"PATCH ") && !stalled.swap(true, SeqCst) {
                mark.store(true, SeqCst);
            }
            if to_server.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    });
    let mut buf = vec![0u8; 1 << 16];
    while let Ok(n @ 1..) = from_server.read(&mut buf).await {
        if stall_next.load(SeqCst)
            && let Some(end) = buf[..n].windows(4).position(|w| w == b"\r\n\r\n")
        {
            let _ = to_client.write_all(&buf[..end + 4]).await;
            // The connection stays open and the body never comes.
            std::future::pending::<()>().await;
        }
        if to_client.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    up.abort();
}

/// `--request-timeout` bounds the whole request, its body included: a PATCH whose answer
/// stalls after its headers times out and frees its worker.
#[tokio::test]
async fn an_answer_that_stalls_after_its_headers_times_out() {
    let g = Gen::Modern;
    let bed = g.bed().await;
    let url = stalling_proxy(bed.double.addr()).await;
    let kubeconfig = bed.dir.path().join("kubeconfig-proxy");
    std::fs::write(&kubeconfig, kube_double::kubeconfig_yaml(&url, None)).unwrap();
    bed.double.create("pods", "default", g.held("p0")).unwrap();
    let m = Metainit::spawn(&[
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--admin-addr".into(),
        "127.0.0.1:0".into(),
        "--request-timeout".into(),
        "1s".into(),
    ]);
    m.logged("the stalled answer timed out", |l| {
        l.contains("p0") && l.contains("no answer within 1s")
    })
    .await;
    eventually("cleared", WAIT, || g.blocked(&bed, "p0").is_empty()).await;
    assert!(m.stop().await.success());
}

/// Row 5: an object deleted and created again under the same name while its clear is
/// being retried: the new object is the one worked on, and it is cleared.
#[tokio::test]
async fn an_object_recreated_under_its_name_is_cleared() {
    for g in BOTH {
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
    for g in BOTH {
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
    // A broken webhook fails every PATCH with 500: still ready.
    let bed = Gen::Modern.bed().await;
    bed.double.set_faults(Faults {
        error_fraction: 1.0,
        error_codes: vec![500],
        error_only: vec!["patch".into()],
        ..Faults::default()
    });
    bed.double
        .create("pods", "default", Gen::Modern.held("p"))
        .unwrap();
    let m = bed.metainit(&[]);
    let addr = m.admin_addr().await;
    wait_metric(
        &addr,
        "metainit_clear_failures_total{reason=\"server_error\"}",
        3.0,
    )
    .await;
    assert_eq!(admin_get(&addr, "/readyz").await.0, 200);
    bed.double.set_faults(Faults::default());
    eventually("cleared", WAIT, || {
        Gen::Modern.blocked(&bed, "p").is_empty()
    })
    .await;
    assert!(m.stop().await.success());

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

/// Row 10: Events that fail under load are retried with backoff, in a bounded queue.
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

/// Every kubeconfig in KUBECONFIG is merged (missing ones skipped), relative paths are
/// resolved against the file that names them, and every request says who it is.
#[tokio::test]
async fn kubeconfig_like_kubectl_and_a_user_agent() {
    let bed = Bed::as_user(Config::modern(), &["*"]).await;
    bed.double
        .create("pods", "default", Gen::Modern.held("p"))
        .unwrap();
    let dir = bed.dir.path();
    let sub = dir.join("users");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("token"), "user").unwrap();
    let first = dir.join("clusters.yaml");
    std::fs::write(
        &first,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n\
             contexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\ncurrent-context: ctx\n",
            bed.double.url()
        ),
    )
    .unwrap();
    let second = sub.join("users.yaml");
    std::fs::write(
        &second,
        "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    tokenFile: token\n",
    )
    .unwrap();
    let kubeconfig = format!(
        "{}:{}:{}",
        dir.join("missing.yaml").display(),
        first.display(),
        second.display()
    );
    let out = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_metainit"))
            .args(["--once", "--timeout", "5s"])
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
    assert!(Gen::Modern.blocked(&bed, "p").is_empty());
    let requests = bed.double.requests();
    assert!(!requests.is_empty());
    for r in requests {
        let ua = r.user_agent.unwrap_or_default();
        assert!(
            ua.starts_with("metainit/"),
            "{} {}: {ua:?}",
            r.method,
            r.path_and_query
        );
    }
}
