//! Orphaned gates (`--release-gate NAME=AGE`) where only the double will do: faults on
//! demand (2,000 orphaned pods, back-dated as a restored server shows them, under 20 %
//! random errors) and bad rules and flags, the last against a 1.13 server. PATCHes refused
//! until they are not are tests/cluster_orphaned_faults.rs's (the real server behind the
//! fault proxy). What a modern server does with the rules (which gate goes from which
//! pod, when, at what pace, the Events, metrics, log, `--dry-run`, a re-created pod,
//! `status`) is tested on the real control plane: tests/cluster_orphaned.rs.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use serde_json::Value;

const A: &str = "a.example.com/orphaned";
const B: &str = "b.example.com/slow";
const KEEP: &str = "kueue.x-k8s.io/admission";
const WAIT: Duration = Duration::from_secs(30);

fn ago(secs: u64) -> SystemTime {
    SystemTime::now() - Duration::from_secs(secs)
}

fn create_at(bed: &Bed, ns: &str, pod: Value, created: SystemTime) {
    bed.double
        .create_created_at("pods", ns, pod, created)
        .unwrap_or_else(|e| panic!("created: {e}"));
}

fn gates_in(bed: &Bed, ns: &str, name: &str) -> Vec<String> {
    gates(
        &bed.double
            .get("pods", ns, name)
            .unwrap_or_else(|| panic!("{ns}/{name} exists")),
    )
}

/// The server's creation time of a pod.
fn created(bed: &Bed, ns: &str, name: &str) -> SystemTime {
    let pod = bed.double.get("pods", ns, name).expect("exists");
    let ts: k8s_openapi::jiff::Timestamp = pod["metadata"]["creationTimestamp"]
        .as_str()
        .expect("creationTimestamp")
        .parse()
        .expect("RFC 3339");
    SystemTime::from(ts)
}

/// The accepted PATCHes of `ns/name`: when, and the body.
fn accepted_patches(bed: &Bed, ns: &str, name: &str) -> Vec<(SystemTime, Value)> {
    let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
    bed.double
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.status == 200)
        .filter(|r| r.path_and_query.split('?').next() == Some(path.as_str()))
        .map(|r| (r.at, serde_json::from_str(&r.body).expect("JSON patch")))
        .collect()
}

fn metric(text: &str, name: &str, gate: &str) -> Option<f64> {
    let prefix = format!("{name}{{gate=\"{gate}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test]
async fn bad_rules_and_flags_exit_2_saying_what_to_fix() {
    let legacy = Bed::legacy(&["a.example.com"]).await;
    let kubeconfig = legacy.kubeconfig.display().to_string();
    let rule = format!("{A}=1h");
    let again = format!("{A}=2h");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--release-gate", "no-age"],
            "a release rule is GATE=AGE",
        ),
        (
            vec!["--release-gate", "a.io/x=soon"],
            "a duration is a number",
        ),
        (vec!["--release-gate", "a.io/x=0s"], msg::ZERO_AGE),
        (
            vec!["--release-gate", "Bad Name=1h"],
            "is not a scheduling gate name",
        ),
        (
            vec!["--release-gate", &rule, "--release-gate", &again],
            "twice",
        ),
        (vec!["--exclude-namespace", "x"], msg::EXCLUDE_WITHOUT_RULE),
        (vec!["--release-rate", "60/m"], msg::RATE_WITHOUT_RULE),
        (
            vec!["--release-gate", &rule, "--release-rate", "0/m"],
            "a rate of 0",
        ),
        (
            vec!["--release-gate", &rule, "--release-rate", "60/d"],
            "N/s, N/m or N/h",
        ),
        (
            vec!["--release-gate", &rule, "--once"],
            msg::RULE_NEEDS_WATCHER,
        ),
        (
            vec!["--release-gate", &rule, "--mode", "initializers"],
            "--mode initializers means initializers",
        ),
        (
            vec!["--watch-gates", A, "--mode", "initializers"],
            "--watch-gates works on scheduling gates",
        ),
        // Against a 1.13 server, `auto` finds initializers.
        (vec!["--release-gate", &rule], msg::AUTO_MEANS_INITIALIZERS),
    ];
    each_refused(&kubeconfig, &cases).await;
    // From the environment, comma-separated.
    let (code, _, err) = run_to_end_env(
        &["--kubeconfig", &kubeconfig, "--check-config"],
        &[("METAINIT_RELEASE_GATES", &format!("{A}=1h,{B}=x"))],
        WAIT,
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("METAINIT_RELEASE_GATES"), "{err}");
    let (code, out, err) = run_to_end_env(
        &["--kubeconfig", &kubeconfig, "--check-config"],
        &[
            ("METAINIT_RELEASE_GATES", &format!("{A}=1h,{B}=90m")),
            ("METAINIT_EXCLUDE_NAMESPACES", "a,b"),
        ],
        WAIT,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("configuration OK"));
}

/// Chaos: 2,000 orphaned gated pods (1,500 due at start, 500 coming of age during the
/// run) among 200 young ones and 200 with no rule's gate, while a fifth of every request
/// (lists, watches, patches, Events) is answered 500, 503 or 429. Every orphaned gate is
/// released, none before its pod's age, the young and the other pods are not written to,
/// and the PATCHes, failed ones included, keep to --release-rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_2000_orphaned_pods_under_20_percent_errors() {
    const RATE_PER_MIN: u64 = 6000;
    const ORPHANED: usize = 2000;
    // The rule's age, longer than the run can last (its wait gives up after 120 s): the young
    // pods, created at the start, cannot come of age before the checks below, however slow a
    // loaded machine makes the run (with 1m they did, once, in a run of 72 s).
    const AGE: u64 = 600;
    let interval = Duration::from_millis(60_000 / RATE_PER_MIN);
    let bed = Bed::modern().await;
    for i in 0..ORPHANED {
        let (ns, name) = (NS[i % 2], format!("orphan-{i}"));
        // The last 500 come of age 5 to 15 s into the run.
        let age = if i < 1500 {
            7200
        } else {
            AGE - 5 - (i as u64 % 11)
        };
        create_at(&bed, ns, gated_pod(&name, false, &[A, KEEP]), ago(age));
    }
    for i in 0..200 {
        create_at(
            &bed,
            NS[i % 2],
            gated_pod(&format!("young-{i}"), false, &[A]),
            ago(0),
        );
        create_at(
            &bed,
            NS[i % 2],
            gated_pod(&format!("other-{i}"), false, &[KEEP]),
            ago(7200),
        );
    }
    bed.double.set_faults(kube_double::Faults {
        error_fraction: 0.2,
        retry_after_secs: 1,
        ..Default::default()
    });
    let metainit = bed.metainit(&[
        "--release-gate",
        &format!("{A}={AGE}s"),
        "--release-rate",
        &format!("{RATE_PER_MIN}/m"),
    ]);
    let released = |i: usize| {
        bed.double
            .get("pods", NS[i % 2], &format!("orphan-{i}"))
            .is_some_and(|p| gates(&p) == [KEEP])
    };
    // 2,000 slots at 10 ms, a quarter more for the failed attempts: about 25 s here (31 s
    // with a build beside it). The bound is only where the test gives up: CI runs the node's
    // builds beside this tier.
    eventually_each(
        "every orphaned gate released",
        Duration::from_secs(240),
        0..ORPHANED,
        |&i| released(i),
    )
    .await;
    bed.double.set_faults(kube_double::Faults::default());
    // The young pods come of age AGE after the start, and metainit keeps running: read
    // before the slower checks below all the same.
    for i in 0..200 {
        assert_eq!(gates_in(&bed, NS[i % 2], &format!("young-{i}")), [A]);
        assert_eq!(gates_in(&bed, NS[i % 2], &format!("other-{i}")), [KEEP]);
    }

    let requests = bed.double.requests();
    let patches: Vec<_> = requests.iter().filter(|r| r.method == "PATCH").collect();
    // Nothing but the orphans written to.
    for r in &patches {
        assert!(
            r.path_and_query.contains("/pods/orphan-"),
            "{}",
            r.path_and_query
        );
    }
    // None early: each accepted PATCH after its pod's creation + AGE, by the server's clock.
    let mut early = Vec::new();
    for i in 0..ORPHANED {
        let (ns, name) = (NS[i % 2], format!("orphan-{i}"));
        let due = created(&bed, ns, &name) + Duration::from_secs(AGE);
        for (at, _) in accepted_patches(&bed, ns, &name) {
            if at < due {
                early.push(format!("{ns}/{name}"));
            }
        }
    }
    assert!(early.is_empty(), "released early: {early:?}");
    // The pace, failed attempts included: the k-th PATCH no sooner than k slots after the
    // first, less a quarter of a second for the requests' own jitter.
    let mut times: Vec<SystemTime> = patches.iter().map(|r| r.at).collect();
    times.sort();
    for (k, t) in times.iter().enumerate() {
        let took = t.duration_since(times[0]).unwrap_or_default();
        assert!(
            took + Duration::from_millis(250) >= interval * k as u32,
            "{} PATCHes in {took:?}: faster than {RATE_PER_MIN}/m",
            k + 1
        );
    }
    let failed = patches.iter().filter(|r| r.status != 200).count();
    assert!(failed > 0, "the faults reached the patches");
    // Each gate released and counted once: no second accepted PATCH for a pod.
    let accepted = patches.iter().filter(|r| r.status == 200).count();
    assert_eq!(accepted, ORPHANED, "one accepted PATCH per pod");
    let addr = metainit.admin_addr().await;
    // Counted once the PATCH's answer is back, just after the server has it.
    let text = metrics_until(&addr, "every release counted", WAIT, |t| {
        metric(t, "metainit_gates_released_total", A).unwrap_or(0.0) >= ORPHANED as f64
    })
    .await;
    assert_eq!(
        metric(&text, "metainit_gates_released_total", A),
        Some(ORPHANED as f64),
        "{text}"
    );
    println!(
        "chaos orphaned gates: {ORPHANED} released, {failed} PATCHes failed and retried, {} PATCHes over {:?} (at most {RATE_PER_MIN}/m)",
        patches.len(),
        times
            .last()
            .unwrap()
            .duration_since(times[0])
            .unwrap_or_default()
    );
    assert!(metainit.stop().await.success());
}

const NS: [&str; 2] = ["default", "team-b"];
