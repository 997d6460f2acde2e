//! What an operator relies on: /healthz, /readyz, /metrics, Events, and SIGTERM.

mod common;

use std::time::Duration;

use common::*;
use kube_double::Faults;

const KUEUE: &str = "kueue.x-k8s.io/admission";
const WAIT: Duration = Duration::from_secs(20);

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn readyz_follows_the_api_server() {
    let bed = Bed::modern().await;
    let m = bed.metainit(&[]);
    let addr = m.admin_addr().await;
    admin_until(&addr, "/healthz", 200, &[], WAIT).await;
    admin_until(&addr, "/readyz", 200, &[], WAIT).await;
    bed.double.stop();
    admin_until(&addr, "/readyz", 503, &[], WAIT).await;
    assert_eq!(
        admin_get(&addr, "/healthz").await.0,
        200,
        "alive while the server is down"
    );
    bed.double.resume().await.unwrap();
    admin_until(&addr, "/readyz", 200, &[], WAIT).await;
    // And it still clears after the outage.
    bed.double
        .create("pods", "default", gated_pod("after", true, &[KUEUE]))
        .unwrap();
    eventually("cleared after the outage", WAIT, || {
        gates(&bed.double.get("pods", "default", "after").unwrap()).is_empty()
    })
    .await;
    let (_, text) = admin_get(&addr, "/metrics").await;
    // Every cause is there from the start at 0: the outage must have counted one.
    assert!(
        counter_sum(&text, "metainit_watch_restarts_total{cause=") >= 1.0,
        "{text}"
    );
    assert!(m.stop().await.success());
}

#[tokio::test]
async fn readyz_waits_for_a_server_down_at_start() {
    let mut config = kube_double::Config::modern();
    config.down_at_start = Some(Duration::from_secs(3));
    let bed = Bed::start(config).await;
    bed.double
        .create("pods", "default", gated_pod("p", true, &[KUEUE]))
        .unwrap();
    let m = bed.metainit(&[]);
    let addr = m.admin_addr().await;
    assert_eq!(admin_get(&addr, "/readyz").await.0, 503);
    assert_eq!(admin_get(&addr, "/healthz").await.0, 200);
    eventually("cleared once the server is up", WAIT, || {
        gates(&bed.double.get("pods", "default", "p").unwrap()).is_empty()
    })
    .await;
    admin_until(&addr, "/readyz", 200, &[], WAIT).await;
    assert!(m.stop().await.success());
}

#[tokio::test]
async fn metrics_count_clears_failures_pending_and_latency() {
    let bed = Bed::modern().await;
    for i in 0..3 {
        bed.double
            .create(
                "pods",
                "default",
                gated_pod(&format!("p{i}"), true, &[KUEUE]),
            )
            .unwrap();
    }
    let m = bed.metainit(&[]);
    let addr = m.admin_addr().await;
    eventually("three cleared", WAIT, || {
        (0..3).all(|i| {
            gates(&bed.double.get("pods", "default", &format!("p{i}")).unwrap()).is_empty()
        })
    })
    .await;

    // The watch is open before the faults: the next pod must reach metainit through it.
    eventually("the watch open", WAIT, || {
        bed.double
            .requests()
            .iter()
            .any(|r| r.path_and_query.contains("watch=true") && r.status == 200)
    })
    .await;
    // Every request now fails: the next pod stays pending and its failures are counted.
    bed.double.set_faults(Faults {
        error_fraction: 1.0,
        error_codes: vec![503],
        retry_after_secs: 1,
        ..Faults::default()
    });
    bed.double
        .create("pods", "default", gated_pod("stuck", true, &[KUEUE]))
        .unwrap();
    let mut text = String::new();
    let start = std::time::Instant::now();
    // Counted whatever the reason label (503s, or a connection the server dropped).
    while counter_sum(&text, "metainit_clear_failures_total{") < 1.0 {
        assert!(
            start.elapsed() < WAIT,
            "no failure counted: {text}\n{:#?}",
            m.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        text = admin_get(&addr, "/metrics").await.1;
    }
    assert_eq!(
        metric(&text, "metainit_objects_pending"),
        Some(1.0),
        "{text}"
    );
    bed.double.set_faults(Faults::default());
    eventually("stuck cleared", Duration::from_secs(40), || {
        gates(&bed.double.get("pods", "default", "stuck").unwrap()).is_empty()
    })
    .await;

    let cleared = "metainit_objects_cleared_total{mode=\"scheduling-gates\",resource=\"pods\"}";
    // Pending is counted from the watch, one event behind the server.
    metrics_until(&addr, "4 cleared, 4 latencies, none pending", WAIT, |t| {
        metric(t, cleared) == Some(4.0)
            && metric(t, "metainit_clear_latency_seconds_count") == Some(4.0)
            && metric(t, "metainit_objects_pending") == Some(0.0)
    })
    .await;
    let (_, text) = admin_get(&addr, "/metrics").await;
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
async fn events_are_written_for_cleared_objects() {
    for (bed, reason) in [
        (Bed::modern().await, "SchedulingGatesCleared"),
        (
            Bed::legacy(&["podimage.example.com"]).await,
            "InitializersCleared",
        ),
    ] {
        let obj = if reason == "InitializersCleared" {
            pod("web", true)
        } else {
            gated_pod("web", true, &[KUEUE])
        };
        bed.double.create("pods", "default", obj).unwrap();
        let m = bed.metainit(&["--node-name", "cp-1"]);
        eventually("an event", WAIT, || !bed.double.events().is_empty()).await;
        let events = bed.double.events();
        assert_eq!(events.len(), 1, "{events:#?}");
        let e = &events[0];
        assert_eq!(e["reason"], reason);
        assert_eq!(e["type"], "Normal");
        assert_eq!(e["involvedObject"]["kind"], "Pod");
        assert_eq!(e["involvedObject"]["name"], "web");
        assert_eq!(e["involvedObject"]["namespace"], "default");
        assert_eq!(e["reportingComponent"], "metainit");
        assert_eq!(e["reportingInstance"], "cp-1");
        assert_eq!(e["source"]["host"], "cp-1");
        let message = e["message"].as_str().unwrap();
        let name = if reason == "InitializersCleared" {
            "podimage.example.com"
        } else {
            KUEUE
        };
        assert!(message.contains(name), "{message}");
        assert!(m.stop().await.success());
    }
}

#[tokio::test]
async fn event_failures_never_block_a_clear() {
    // May clear pods but not write events.
    let bed = Bed::as_user(
        kube_double::Config::modern(),
        &["get pods", "list pods", "watch pods", "patch pods"],
    )
    .await;
    bed.double
        .create("pods", "default", gated_pod("p", true, &[KUEUE]))
        .unwrap();
    let m = bed.metainit(&["--mode", "scheduling-gates"]);
    let addr = m.admin_addr().await;
    eventually("cleared", WAIT, || {
        gates(&bed.double.get("pods", "default", "p").unwrap()).is_empty()
    })
    .await;
    let start = std::time::Instant::now();
    loop {
        let text = admin_get(&addr, "/metrics").await.1;
        if metric(&text, "metainit_event_failures_total") == Some(1.0) {
            break;
        }
        assert!(start.elapsed() < WAIT, "event failure not counted: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The metric is counted before the line is logged: wait for the line too.
    eventually("the Event failure logged", WAIT, || {
        m.log()
            .iter()
            .any(|l| l.contains("cannot write the Event") && l.contains("403 Forbidden"))
    })
    .await;
    assert!(m.stop().await.success());
}

/// A namespace whose Events are refused (403: no right to write them) is remembered: the
/// pods cleared there after the first get no Event and no refused POST each (#58), for
/// five minutes, and the line says so.
#[tokio::test]
async fn refused_events_are_asked_for_again_in_minutes() {
    let bed = Bed::as_user(
        kube_double::Config::modern(),
        &["get pods", "list pods", "watch pods", "patch pods"],
    )
    .await;
    let m = bed.metainit(&["--mode", "scheduling-gates"]);
    let addr = m.admin_addr().await;
    let create = |name: &str| {
        bed.double
            .create("pods", "default", gated_pod(name, true, &[KUEUE]))
            .unwrap();
    };
    create("first");
    m.logged("the refusal said", |l| l.contains("cannot write the Event"))
        .await;
    for i in 0..5 {
        create(&format!("then-{i}"));
    }
    metrics_until(&addr, "six Events not written", WAIT, |t| {
        metric(t, "metainit_event_failures_total") == Some(6.0)
    })
    .await;
    let posts = bed
        .double
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path_and_query.contains("/events"))
        .count();
    assert_eq!(posts, 1, "one refused POST, then none");
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
async fn sigterm_lets_in_flight_patches_finish() {
    let bed = Bed::modern().await;
    let m = bed.metainit(&[]);
    let addr = m.admin_addr().await;
    admin_until(&addr, "/readyz", 200, &[], WAIT).await;
    // Every request now takes 1.5 s on the server.
    bed.double.set_faults(Faults {
        latency: Duration::from_millis(1500),
        ..Faults::default()
    });
    for i in 0..10 {
        bed.double
            .create(
                "pods",
                "default",
                gated_pod(&format!("p{i}"), true, &[KUEUE]),
            )
            .unwrap();
    }
    eventually("10 patches sent", WAIT, || {
        bed.double.arrived("PATCH") == 10
    })
    .await;
    assert_eq!(bed.patched().len(), 0, "no patch has completed yet");
    m.signal("TERM");
    let mut m = m;
    let status = m.wait(WAIT).await;
    assert_eq!(status.code(), Some(0), "{:#?}", m.log());
    let done: Vec<_> = bed
        .double
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.status == 200)
        .collect();
    assert_eq!(done.len(), 10, "all in-flight patches completed");
    assert!(
        (0..10).all(
            |i| gates(&bed.double.get("pods", "default", &format!("p{i}")).unwrap()).is_empty()
        )
    );
    assert!(
        m.log()
            .iter()
            .any(|l| l.contains("waiting for in-flight patches: 10 in flight, 0 queued")),
        "{:#?}",
        m.log()
    );
}

#[tokio::test]
async fn a_second_signal_exits_at_once() {
    let bed = Bed::modern().await;
    let m = bed.metainit(&["--shutdown-timeout", "60s"]);
    let addr = m.admin_addr().await;
    admin_until(&addr, "/readyz", 200, &[], WAIT).await;
    bed.double.set_faults(Faults {
        latency: Duration::from_secs(30),
        ..Faults::default()
    });
    bed.double
        .create("pods", "default", gated_pod("slow", true, &[KUEUE]))
        .unwrap();
    eventually("the patch sent", WAIT, || bed.double.arrived("PATCH") == 1).await;
    m.signal("TERM");
    eventually("the first signal taken", WAIT, || {
        m.log()
            .iter()
            .any(|l| l.contains("waiting for in-flight patches: 1 in flight"))
    })
    .await;
    m.signal("INT");
    let mut m = m;
    let started = std::time::Instant::now();
    let status = m.wait(Duration::from_secs(5)).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(status.code(), Some(130));
}

#[tokio::test]
async fn once_waits_for_every_event() {
    let bed = Bed::modern().await;
    for i in 0..60 {
        bed.double
            .create(
                "pods",
                "default",
                gated_pod(&format!("p{i:02}"), true, &[KUEUE]),
            )
            .unwrap();
    }
    // Slow Event writes would be cut off if --once exited without waiting for them.
    bed.double.set_faults(Faults {
        latency: Duration::from_millis(50),
        ..Faults::default()
    });
    let mut m = bed.metainit(&["--once", "--concurrency", "4"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(0), "{:#?}", m.log());
    assert!(m.out().contains("cleared 60,"), "{}", m.out());
    assert_eq!(
        bed.double.events().len(),
        60,
        "one Event per cleared pod, all written before exit"
    );
}

#[tokio::test]
async fn labelled_counters_are_there_at_zero_from_the_start() {
    let bed = Bed::modern().await;
    let m = bed.metainit(&[]);
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
            common::msg::FAILURES_AT_ZERO,
            common::msg::RESTARTS_AT_ZERO,
            common::msg::CLEARED_AT_ZERO,
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
async fn a_cut_watch_leaves_no_debug_dump_in_the_log() {
    let bed = Bed::modern().await;
    bed.double.set_faults(Faults {
        cut_watch_after: Some(1),
        ..Faults::default()
    });
    let m = bed.metainit(&[]);
    let addr = m.admin_addr().await;
    admin_until(&addr, "/readyz", 200, &[], WAIT).await;
    for i in 0..3 {
        bed.double
            .create(
                "pods",
                "default",
                gated_pod(&format!("p{i}"), true, &[KUEUE]),
            )
            .unwrap();
        eventually("cleared", WAIT, || {
            gates(&bed.double.get("pods", "default", &format!("p{i}")).unwrap()).is_empty()
        })
        .await;
    }
    let watches = || {
        bed.double
            .requests()
            .iter()
            .filter(|r| r.path_and_query.contains("watch=true"))
            .count()
    };
    eventually("the watch cut and resumed", WAIT, || watches() >= 3).await;
    let log = m.log();
    assert!(
        !log.iter()
            .any(|l| l.contains("Custom {") || l.contains("Status {") || l.contains("eof in poll")),
        "{log:#?}"
    );
    assert!(m.stop().await.success());
}

#[tokio::test]
async fn status_max_age_names_the_objects_held_too_long() {
    let bed = Bed::modern().await;
    bed.double
        .create(
            "pods",
            "default",
            gated_pod("old", true, &["example.com/g"]),
        )
        .unwrap();
    let kc = bed.kubeconfig.display().to_string();
    let args = ["status", "--kubeconfig", &kc, "--max-age", "1s"];
    let start = std::time::Instant::now();
    let (out, err) = loop {
        let (code, out, err) = run_to_end(&args, WAIT).await;
        if code == 1 {
            break (out, err);
        }
        assert_eq!(code, 0, "{err}");
        assert!(start.elapsed() < WAIT, "never over 1s: {out}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(out.contains("default/old"), "the table is printed: {out}");
    let prefix = format!("error: 1 {} 1s: Pod default/old (", common::msg::MAX_AGE);
    assert!(
        err.starts_with(&prefix) && err.ends_with("s by example.com/g)\n"),
        "{err}"
    );
}

#[tokio::test]
async fn once_warns_about_an_only_name_pending_on_no_labelled_object() {
    let bed = Bed::modern().await;
    for i in 0..3 {
        bed.double
            .create(
                "pods",
                "default",
                gated_pod(&format!("p{i}"), true, &[KUEUE]),
            )
            .unwrap();
    }
    let mut m = bed.metainit(&["--once", "--only", "nonexistent.example.com"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(0), "{:#?}", m.log());
    assert!(m.out().contains("left alone 3,"), "{}", m.out());
    let warning = format!(
        "--only nonexistent.example.com {}",
        common::msg::ONLY_UNUSED
    );
    let line = m
        .log()
        .into_iter()
        .find(|l| l.contains(&warning))
        .unwrap_or_else(|| panic!("no warning: {:#?}", m.log()));
    assert!(
        line.contains("WARN") && line.contains("pending=kueue.x-k8s.io/admission"),
        "{line}"
    );
    // A name that is pending is not warned about.
    let mut m = bed.metainit(&["--once", "--only", KUEUE]);
    assert_eq!(m.wait(WAIT).await.code(), Some(0), "{:#?}", m.log());
    assert!(m.out().contains("cleared 3,"), "{}", m.out());
    assert!(!m.log().iter().any(|l| l.contains(common::msg::ONLY_UNUSED)));
}

/// Waits until `n` log lines contain `what`.
async fn logged(m: &Metainit, what: &str, n: usize) {
    eventually(what, WAIT, || {
        m.log().iter().filter(|l| l.contains(what)).count() >= n
    })
    .await;
}

#[tokio::test]
async fn sigterm_during_once_finishes_what_is_in_flight_and_says_what_was_not_done() {
    // All in flight: finished, exit 0.
    let bed = Bed::modern().await;
    for i in 0..2 {
        bed.double
            .create(
                "pods",
                "default",
                gated_pod(&format!("a{i}"), true, &[KUEUE]),
            )
            .unwrap();
    }
    bed.double.set_faults(Faults {
        latency: Duration::from_millis(1500),
        ..Faults::default()
    });
    let mut m = bed.metainit(&["--once", "--concurrency", "2"]);
    logged(&m, "patching", 2).await;
    m.signal("TERM");
    assert_eq!(m.wait(WAIT).await.code(), Some(0), "{:#?}", m.log());
    assert!(m.out().starts_with("cleared 2,"), "{}", m.out());
    assert!(m.log().iter().any(|l| l.contains(common::msg::ONCE_SIGNAL)));

    // More than the concurrency: the ones not started are not tried, exit 1.
    let bed = Bed::modern().await;
    for i in 0..4 {
        bed.double
            .create(
                "pods",
                "default",
                gated_pod(&format!("b{i}"), true, &[KUEUE]),
            )
            .unwrap();
    }
    bed.double.set_faults(Faults {
        latency: Duration::from_millis(1500),
        ..Faults::default()
    });
    let mut m = bed.metainit(&["--once", "--concurrency", "2"]);
    logged(&m, "patching", 2).await;
    m.signal("TERM");
    assert_eq!(m.wait(WAIT).await.code(), Some(1), "{:#?}", m.log());
    assert!(
        m.out().starts_with("cleared 2,")
            && m.out().ends_with(&format!(
                "failed 0, not tried 2 ({} them)",
                common::msg::INTERRUPTED
            )),
        "{}",
        m.out()
    );

    // An object waiting to be retried is not waited for: exit 1 at once, naming it.
    let bed = Bed::modern().await;
    bed.double.set_faults(Faults {
        reject_writes: Some(kube_double::Rejection {
            name_prefix: "stuck".into(),
            code: 422,
            message: "no".into(),
        }),
        ..Faults::default()
    });
    bed.double
        .create("pods", "default", gated_pod("stuck", true, &[KUEUE]))
        .unwrap();
    let mut m = bed.metainit(&["--once", "--timeout", "60s"]);
    logged(&m, common::msg::RETRYING, 2).await;
    let signalled = std::time::Instant::now();
    m.signal("TERM");
    assert_eq!(m.wait(WAIT).await.code(), Some(1), "{:#?}", m.log());
    assert!(signalled.elapsed() < Duration::from_secs(10));
    assert!(m.out().ends_with("failed 1"), "{}", m.out());
    assert!(
        m.log()
            .iter()
            .any(|l| l.contains(common::msg::COULD_NOT_CLEAR) && l.contains("default/stuck")),
        "{:#?}",
        m.log()
    );
}

#[tokio::test]
async fn sigterm_before_the_server_answers_ends_once_and_status_with_a_message() {
    let bed = Bed::modern().await;
    bed.double.set_faults(Faults {
        error_fraction: 1.0,
        error_codes: vec![503],
        ..Faults::default()
    });
    let kc = bed.kubeconfig.display().to_string();
    for (args, said) in [
        (
            vec!["--kubeconfig".to_string(), kc.clone(), "--once".into()],
            format!(
                "{} the server answered: nothing was cleared",
                common::msg::INTERRUPTED
            ),
        ),
        (
            vec!["status".to_string(), "--kubeconfig".into(), kc.clone()],
            format!(
                "error: {} before every object was listed: nothing printed",
                common::msg::STATUS_SIGNAL
            ),
        ),
    ] {
        let mut m = Metainit::spawn(&args);
        logged(&m, common::msg::NOT_REACHABLE_YET, 1).await;
        m.signal("TERM");
        assert_eq!(
            m.wait(WAIT).await.code(),
            Some(1),
            "{args:?}: {:#?}",
            m.log()
        );
        assert!(
            m.log().iter().any(|l| l.contains(&said)),
            "{args:?}: {said:?} not in {:#?}",
            m.log()
        );
    }
}

#[tokio::test]
async fn once_retries_for_the_whole_timeout_budget() {
    let bed = Bed::modern().await;
    bed.double.set_faults(Faults {
        reject_writes: Some(kube_double::Rejection {
            name_prefix: "stuck".into(),
            code: 422,
            message: "no".into(),
        }),
        ..Faults::default()
    });
    bed.double
        .create("pods", "default", gated_pod("stuck", true, &[KUEUE]))
        .unwrap();
    let mut m = bed.metainit(&["--once", "--timeout", "4s"]);
    assert_eq!(m.wait(WAIT).await.code(), Some(1), "{:#?}", m.log());
    let patches: Vec<std::time::SystemTime> = bed
        .double
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| r.at)
        .collect();
    let (first, last) = (patches[0], patches[patches.len() - 1]);
    let spread = last.duration_since(first).unwrap();
    // 100 ms doubling: stopping when the next wait would overrun ends near 3.1 s; using
    // the budget to its end tries a last time near 4 s.
    assert!(
        spread >= Duration::from_millis(3600) && spread <= Duration::from_millis(4500),
        "PATCHes from first to last: {spread:?} ({} of them)",
        patches.len()
    );
}

/// `metainit --once | head -1`: once the reader of its summary is gone, `--once` exits as
/// it would have, quietly, without a panic.
#[tokio::test]
async fn once_into_a_closed_pipe_exits_quietly() {
    let bed = Bed::modern().await;
    bed.double
        .create("pods", "default", gated_pod("p", true, &[KUEUE]))
        .unwrap();
    let kc = bed.kubeconfig.display().to_string();
    let (code, err) = run_into_closed_pipe(&["--kubeconfig", &kc, "--once"], WAIT).await;
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(gates(&bed.double.get("pods", "default", "p").unwrap()).is_empty());
}
