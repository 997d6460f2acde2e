//! Orphaned gates (`--release-gate NAME=AGE`) on the real control plane: a pod's age is
//! the server's creationTimestamp, so the ages are seconds (a restored server's pods,
//! hours old, were back-dated on the double: the real server sets the time itself), and
//! each test waits for what it asserts. What is asserted is what the operator sees: which
//! gate of which pod is gone on the server, when by the server's clock (the audit log's
//! time of each PATCH), at what pace, the Events, the metrics, the log and `status`; and
//! that nothing else is written. Each test is a scene of its own (tests/common/scene.rs),
//! its gates named for it (`Scene::gate`), so that a metainit in every namespace releases
//! no other test's gate. Faults (20 % errors, refused PATCHes) and bad flags stay on the
//! double (tests/orphaned_gates.rs).

mod common;

use std::time::{Duration, SystemTime};

use common::{
    admin_get,
    control_plane::{WAIT, until},
    gated_pod, metrics_until, msg, pod,
    scene::{Rights, Scene},
    tested_paths,
    webhooks::seconds_between,
};
use kube::api::DeleteParams;
use serde_json::{Value, json};

const NS: &str = "orphans";

/// The scene's three gates: one released after seconds, one after an hour, one watched.
fn gates(s: &Scene) -> (String, String, String) {
    (
        s.gate("a.example.com/orphaned"),
        s.gate("b.example.com/slow"),
        s.gate("kueue.x-k8s.io/admission"),
    )
}

fn metric(text: &str, name: &str, gate: &str) -> Option<f64> {
    let prefix = format!("{name}{{gate=\"{gate}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// The accepted PATCHes of pod `name` in the scene's namespace `ns`: when, and the body.
fn patches_of(s: &Scene, ns: &str, name: &str) -> Vec<(SystemTime, Value)> {
    let who = format!("{}/{name}", s.ns(ns));
    s.pod_patches()
        .into_iter()
        .filter(|(n, _, _)| *n == who)
        .map(|(_, at, body)| (at, body))
        .collect()
}

/// Waits until pod `name` of `ns` (short) has exactly `want` as its gates.
async fn until_gates(s: &Scene, ns: &str, name: &str, want: &[&str]) {
    until(&format!("{ns}/{name}: {want:?}"), WAIT, || async {
        (s.gates(ns, name).await == want).then_some(())
    })
    .await;
}

/// Asserts that the one accepted PATCH of `name` came once the pod was `age` old by its
/// creationTimestamp, and within 5 s of it.
async fn released_at_its_age(s: &Scene, name: &str, age: Duration) {
    let patches = patches_of(s, NS, name);
    assert_eq!(patches.len(), 1, "{name}: {patches:?}");
    let due = s.created(NS, name).await + age;
    let at = patches[0].0;
    assert!(at >= due, "{name} released early: {at:?} < {due:?}");
    assert!(
        at < due + Duration::from_secs(5),
        "{name} released late: {at:?} vs {due:?}"
    );
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn only_the_named_gate_goes_only_from_pods_old_enough_and_nothing_else_is_written() {
    let s = Scene::new(&[NS, "excluded"], Rights::RbacOnly).await;
    let (a, b, keep) = gates(&s);
    let (a, b, keep) = (a.as_str(), b.as_str(), keep.as_str());
    let ns = s.ns(NS).to_string();
    // Gate A goes 3 s after creation; the other gate stays.
    s.add(NS, &gated_pod("old", false, &[keep, a]));
    // A and B of one pod: A goes, B (one hour) does not.
    s.add(NS, &gated_pod("two", false, &[a, b]));
    // No rule names its gate.
    s.add(NS, &gated_pod("other", false, &[keep]));
    // Excluded namespace: left alone, whatever its age.
    s.add("excluded", &gated_pod("old", false, &[a]));
    // Labelled: every gate goes at once, as without rules.
    s.add(NS, &s.labelled_pod("labelled", &[keep, a]));
    // Bound, never gated: never even sent to metainit.
    let mut running = pod("running", false);
    running["spec"]["nodeName"] = json!("node-a");
    s.add(NS, &running);

    let (rule_a, rule_b) = (format!("{a}=3s"), format!("{b}=1h"));
    let metainit = s.metainit_everywhere(&[
        "--release-gate",
        &rule_a,
        "--release-gate",
        &rule_b,
        "--watch-gates",
        keep,
        "--exclude-namespace",
        s.ns("excluded"),
        "--release-rate",
        "600/m",
    ]);
    metainit
        .logged("listed", |l| l.contains("listed; watching"))
        .await;
    // Created while metainit watches: released at its own age, never before.
    s.add(NS, &gated_pod("young", false, &[a]));
    until_gates(&s, NS, "labelled", &[]).await;
    until_gates(&s, NS, "old", &[keep]).await;
    until_gates(&s, NS, "two", &[b]).await;
    until_gates(&s, NS, "young", &[]).await;
    for name in ["old", "two", "young"] {
        released_at_its_age(&s, name, Duration::from_secs(3)).await;
    }
    metainit
        .logged("the release line of young", |l| {
            l.contains(msg::RELEASED) && l.contains(&format!("{ns}/young"))
        })
        .await;

    // The patches: A only, the uid and the gates as seen tested first.
    let (_, old) = &patches_of(&s, NS, "old")[0];
    assert_eq!(
        tested_paths(old),
        ["/metadata/uid", "/spec/schedulingGates"],
        "{old}"
    );
    assert_eq!(
        old.as_array().and_then(|ops| ops.last()),
        Some(&json!({"op": "replace", "path": "/spec/schedulingGates", "value": [{"name": keep}]})),
        "{old}"
    );
    // Written: exactly one PATCH to each of the four, nothing to the others.
    let mut patched = s.patched();
    patched.sort();
    let want: Vec<String> = ["labelled", "old", "two", "young"]
        .iter()
        .map(|n| format!("{ns}/{n}"))
        .collect();
    assert_eq!(patched, want, "one PATCH each, nowhere else");
    assert_eq!(s.writes().len(), 4, "{:#?}", s.writes());
    assert_eq!(s.gates(NS, "other").await, [keep]);
    assert_eq!(s.gates("excluded", "old").await, [a]);

    // The watch asked for unbound pods only, never by label, and says so at start-up.
    metainit
        .logged("the start-up line", |l| {
            l.contains(msg::WATCHING_UNBOUND)
                && l.contains(&format!("release_gates={rule_a},{rule_b}"))
        })
        .await;
    let reads = s.pod_reads();
    assert!(!reads.is_empty());
    for uri in &reads {
        assert!(uri.contains("fieldSelector=spec.nodeName%3D"), "{uri}");
        assert!(!uri.contains("labelSelector"), "{uri}");
    }

    // An Event per released pod, naming the gate, its age and the rule.
    let events = until("three release Events", WAIT, || async {
        let mut all = Vec::new();
        for name in ["old", "two", "young", "other", "labelled", "running"] {
            all.extend(
                s.pod_events(NS, name)
                    .await
                    .into_iter()
                    .filter(|e| e["reason"] == "SchedulingGateReleased"),
            );
        }
        (all.len() >= 3).then_some(all)
    })
    .await;
    assert_eq!(events.len(), 3, "{events:#?}");
    let old_event = events
        .iter()
        .find(|e| e["involvedObject"]["name"] == "old")
        .expect("an Event on old");
    let message = old_event["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("(rule --release-gate {rule_a})")),
        "{message}"
    );
    let age = seconds_between(old_event, &format!("gate {a} after "), " (rule");
    assert!((3.0..10.0).contains(&age), "{message}");

    // Metrics: released by gate; held now by each watched gate (A: only the excluded pod
    // still has it; B: `two`; KEEP: `old` and `other`), and the oldest.
    let addr = metainit.admin_addr().await;
    let want = [
        ("metainit_gates_released_total", a, 3.0),
        ("metainit_gates_released_total", b, 0.0),
        ("metainit_gated_pods", a, 1.0),
        ("metainit_gated_pods", b, 1.0),
        ("metainit_gated_pods", keep, 2.0),
        // How long gates held, whoever removed them: A went from old, two and young at 3 s
        // and from labelled at once, KEEP from labelled; B is still on two.
        ("metainit_gate_held_seconds_count", a, 4.0),
        ("metainit_gate_held_seconds_count", keep, 1.0),
        ("metainit_gate_held_seconds_count", b, 0.0),
    ];
    metrics_until(&addr, "the released and held gates", WAIT, |t| {
        want.iter()
            .all(|(name, gate, v)| metric(t, name, gate) == Some(*v))
    })
    .await;
    let before = SystemTime::now();
    let (_, text) = admin_get(&addr, "/metrics").await;
    let oldest = metric(&text, "metainit_gated_oldest_seconds", keep).expect("the oldest");
    let age = |at: SystemTime, created: SystemTime| {
        at.duration_since(created).unwrap_or_default().as_secs_f64()
    };
    let created = s.created(NS, "old").await;
    let (low, high) = (
        age(before, created) - 1.0,
        age(SystemTime::now(), created) + 1.0,
    );
    assert!(
        (low..=high).contains(&oldest),
        "{oldest}: not old's age ({low}..{high})"
    );
    let held_a = metric(&text, "metainit_gate_held_seconds_sum", a).expect("A's sum");
    assert!(held_a >= 9.0, "three pods held 3 s or more by A: {held_a}");
    // B removed by hand (its controller, say): timed too.
    let gone = r#"[{"op": "remove", "path": "/spec/schedulingGates"}]"#;
    let args = ["patch", "pod", "two", "-n", &ns, "--type=json", "-p", gone];
    s.cp.kubectl_ok(&args);
    metrics_until(&addr, "B held until removed by hand", WAIT, |t| {
        metric(t, "metainit_gate_held_seconds_count", b) == Some(1.0)
    })
    .await;
    assert!(metainit.problems().is_empty(), "{:#?}", metainit.problems());
    assert!(metainit.stop().await.success());
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn releases_are_paced_across_pods_by_release_rate() {
    let s = Scene::new(&[NS], Rights::RbacOnly).await;
    let (a, _, _) = gates(&s);
    let items: Vec<Value> = (0..8)
        .map(|i| gated_pod(&format!("p{i}"), false, &[&a]))
        .collect();
    s.add(
        NS,
        &json!({"apiVersion": "v1", "kind": "List", "items": items}),
    );
    let mut created = Vec::new();
    for i in 0..8 {
        created.push(s.created(NS, &format!("p{i}")).await);
    }
    // Due within a second of each other (creationTimestamp has whole seconds): without a
    // pace, each second's pods would be released at once.
    let (first, last) = (created.iter().min(), created.iter().max());
    assert!(
        last.zip(first).is_some_and(
            |(l, f)| l.duration_since(*f).unwrap_or_default() <= Duration::from_secs(1)
        ),
        "{created:?}"
    );
    // 120/m: one every half second.
    let metainit = s.metainit(&[
        "--release-gate",
        &format!("{a}=2s"),
        "--release-rate",
        "120/m",
    ]);
    until("all released", WAIT, || async {
        for i in 0..8 {
            if !s.gates(NS, &format!("p{i}")).await.is_empty() {
                return None;
            }
        }
        Some(())
    })
    .await;
    assert!(metainit.stop().await.success());
    let mut times: Vec<SystemTime> = s.pod_patches().into_iter().map(|(_, at, _)| at).collect();
    times.sort();
    assert_eq!(times.len(), 8, "{times:?}");
    // The server's clock may see two requests closer than their slots by the requests'
    // own jitter; never by a whole slot: k releases take at least (k - 1) half-seconds,
    // less a tenth of a second per gap.
    for (k, t) in times.iter().enumerate().skip(1) {
        let took = t.duration_since(times[0]).unwrap_or_default();
        let least = Duration::from_millis(500 * k as u64 - 100 * k as u64);
        assert!(
            took >= least,
            "{k} releases after {took:?}, at most one per 500 ms: {times:?}"
        );
    }
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn dry_run_says_what_goes_and_when_and_writes_nothing() {
    let s = Scene::new(&[NS], Rights::RbacOnly).await;
    let (a, b, _) = gates(&s);
    let ns = s.ns(NS).to_string();
    s.add(NS, &gated_pod("old", false, &[&a]));
    s.add(NS, &gated_pod("young", false, &[&b]));
    let (rule_a, rule_b) = (format!("{a}=2s"), format!("{b}=1h"));
    let metainit = s.metainit(&[
        "--release-gate",
        &rule_a,
        "--release-gate",
        &rule_b,
        "--dry-run",
    ]);
    // Once it is 2 s old.
    metainit
        .logged("the dry-run line of old", |l| {
            l.contains(msg::WOULD_RELEASE_NOW)
                && l.contains(&format!("{ns}/old"))
                && l.contains(&format!("rule={rule_a}"))
        })
        .await;
    // Created a moment before metainit started: an hour less that moment, rounded up to
    // the second (60m, the minutes floored), or 59m once a second more went by before its
    // line (a loaded machine's start-up).
    metainit
        .logged("the dry-run line of young", |l| {
            l.contains(msg::WOULD_RELEASE_LATER)
                && l.contains(&format!("{ns}/young"))
                && (l.contains("releases_in=60m") || l.contains("releases_in=59m"))
        })
        .await;
    assert!(metainit.stop().await.success());
    assert_eq!(s.gates(NS, "old").await, [a.as_str()]);
    let writes = s.all_writes();
    assert!(writes.is_empty(), "{writes:#?}");
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_pod_recreated_under_the_same_name_is_young_again() {
    let s = Scene::new(&[NS], Rights::RbacOnly).await;
    let (a, _, keep) = gates(&s);
    let p = gated_pod("p", false, &[&a, &keep]);
    s.add(NS, &p);
    let metainit = s.metainit(&["--release-gate", &format!("{a}=10s")]);
    let addr = metainit.admin_addr().await;
    // Until metainit has seen the first pod 3 s old: the second is created 3 s later at
    // least, a difference whole-second timestamps cannot hide.
    metrics_until(&addr, "the first pod 3 s old", WAIT, |t| {
        metric(t, "metainit_gated_oldest_seconds", &a).is_some_and(|v| v >= 3.0)
    })
    .await;
    // Replaced from its template before its gate's age: a new uid, created now, gated.
    let first = s.created(NS, "p").await;
    s.pods(NS)
        .delete("p", &DeleteParams::default())
        .await
        .expect("deleted");
    until("p gone", WAIT, || async {
        s.pods(NS).get_opt("p").await.ok()?.is_none().then_some(())
    })
    .await;
    s.add(NS, &p);
    let again = s.created(NS, "p").await;
    assert!(
        again >= first + Duration::from_secs(3),
        "{first:?} {again:?}"
    );
    until_gates(&s, NS, "p", &[&keep]).await;
    assert!(metainit.stop().await.success());
    let patches = patches_of(&s, NS, "p");
    assert_eq!(patches.len(), 1, "{patches:?}");
    assert!(
        patches[0].0 >= again + Duration::from_secs(10),
        "released by the old pod's age"
    );
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn status_shows_the_rule_and_when() {
    let s = Scene::new(&[NS], Rights::RbacOnly).await;
    let (a, b, keep) = gates(&s);
    let ns = s.ns(NS).to_string();
    s.add(NS, &gated_pod("old", false, &[&a]));
    // Due in an hour: "in 60m", then "in 59m" for 59 s (the minutes floored).
    s.add(NS, &gated_pod("young", false, &[&b]));
    s.add(NS, &gated_pod("other", false, &[&keep]));
    let (rule_a, rule_b) = (format!("{a}=1s"), format!("{b}=1h"));
    let line = |out: &str, name: &str| {
        out.lines()
            .find(|l| l.contains(&format!("{ns}/{name} ")))
            .unwrap_or_else(|| panic!("{name} listed: {out}"))
            .to_string()
    };
    // Once old is a second old, by its creationTimestamp.
    let out = until("old due", WAIT, || async {
        let (code, out, err) = s
            .run(&[
                "status",
                "--release-gate",
                &rule_a,
                "--release-gate",
                &rule_b,
            ])
            .await;
        assert_eq!(code, 0, "{err}");
        line(&out, "old")
            .ends_with(&format!("{rule_a} now"))
            .then_some(out)
    })
    .await;
    assert!(
        out.lines().next().is_some_and(|l| l.ends_with("RELEASE")),
        "{out}"
    );
    // An hour less its age in whole seconds, the minutes floored: 60m while it reads 0s.
    let young = line(&out, "young");
    assert!(
        young.ends_with(&format!("{rule_b} in 59m"))
            || young.ends_with(&format!("{rule_b} in 60m")),
        "{out}"
    );
    assert!(line(&out, "other").ends_with(" -"), "{out}");
    let (code, out, err) = s
        .run(&[
            "status",
            "--release-gate",
            &rule_a,
            "--release-gate",
            &rule_b,
            "-o",
            "json",
        ])
        .await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report["releaseRules"], json!([rule_a, rule_b]));
    let old = report["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["name"] == "old"))
        .cloned()
        .unwrap_or_else(|| panic!("old in {out}"));
    assert_eq!(old["release"], json!(format!("{rule_a} now")));
    assert!(s.all_writes().is_empty(), "{:?}", s.all_writes());
}
