//! `metainit status` on the real control plane: the gated pods it lists (labelled or not,
//! with their owners), its table, JSON and YAML, `--max-age`'s exit codes, `--webhooks`
//! listing the webhooks that are down or exempted and their state, exit 2 naming the
//! manifest when forbidden, a closed pipe; and that it only reads (the audit log). Each
//! test is a scene of its own on the shared control plane (tests/common/scene.rs); where
//! status looks at every namespace, what it lists is narrowed to the scene's namespaces,
//! gates and configurations (no other test's are), and the totals are read for those.
//! These ran on the double's modern generation before; a 1.13 server's pending objects
//! stay on the double (tests/status.rs).

mod common;

use std::time::Duration;

use common::{
    control_plane::{WAIT, until},
    gated_pod, msg, pod, run_into_closed_pipe,
    scene::Scene,
    webhooks::{ANNOTATION, Kind, Rights, exemption},
};
use serde_json::{Value, json};

const KUEUE: &str = "kueue.x-k8s.io/admission";
const QUOTA: &str = "example.com/quota";
const NOTHING: &str = "nothing held back (scheduling-gates mode)";

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn lists_gated_pods_labelled_or_not() {
    let s = Scene::new(&["default", "kueue-system"], Rights::RbacOnly).await;
    let (kueue, quota) = (s.gate(KUEUE), s.gate(QUOTA));
    let (home, system) = (
        s.ns("default").to_string(),
        s.ns("kueue-system").to_string(),
    );
    let mut owned = s.gated_pod("kueue-manager-1", &kueue);
    owned["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "kueue-manager", "uid": "u1", "controller": true
    }]);
    s.add("kueue-system", &owned);
    // job-1 as a controller creates it, under a field manager of its own: who added its
    // gates is read from its managedFields.
    let job1 = gated_pod("job-1", false, &[&kueue, &quota]).to_string();
    let args = [
        "create",
        "-n",
        &home,
        "--field-manager=kueue-job",
        "-f",
        "-",
    ];
    let (ok, made) = s.cp.kubectl_in(&args, Some(&job1));
    assert!(ok, "{made}");
    let mut free = pod("free", false);
    free["metadata"]["labels"][&s.key] = json!("true");
    s.add("default", &free);

    let ours = |i: &&Value| i["namespace"] == home.as_str() || i["namespace"] == system.as_str();
    let (code, out, err) = s.run_in(None, &["status", "-o", "json"], &[]).await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report["mode"], "scheduling-gates");
    let items: Vec<&Value> = report["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(ours)
        .collect();
    assert_eq!(items.len(), 2, "{out}");
    let manager = items
        .iter()
        .find(|i| i["name"] == "kueue-manager-1")
        .expect("the manager");
    assert_eq!(manager["kind"], "Pod");
    assert_eq!(manager["namespace"], system.as_str());
    assert_eq!(manager["labelled"], true);
    assert_eq!(manager["owner"], "ReplicaSet/kueue-manager");
    assert_eq!(manager["blockedBy"], json!([kueue]));
    let job = items.iter().find(|i| i["name"] == "job-1").expect("job-1");
    assert_eq!(job["labelled"], false);
    assert!(job.get("owner").is_none());
    assert_eq!(
        job["addedBy"],
        json!({&kueue: "kueue-job (Update)", &quota: "kueue-job (Update)"}),
        "{out}"
    );
    assert_eq!(
        manager["addedBy"],
        json!({&kueue: "kubectl-create (Update)"})
    );
    assert_eq!(report["byName"][&quota], 1, "{out}");
    assert_eq!(report["byName"][&kueue], 2, "{out}");

    // The table, aligned like kubectl's, with its summary line.
    let (code, out, err) = s.run_in(None, &["status"], &[]).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("KIND   NAME"), "{out}");
    let rows: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains(&format!("{home}/")) || l.contains(&format!("{system}/")))
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    let col = |l: &str, w: &str| l.find(w).unwrap_or_else(|| panic!("{w} in {l}"));
    let owner_col = col(lines[0], "OWNER");
    assert!(
        rows.iter()
            .any(|l| l.find("ReplicaSet/kueue-manager") == Some(owner_col)),
        "{out}"
    );
    assert!(
        rows.iter()
            .all(|l| col(l, &kueue) == col(lines[0], "BLOCKED BY")),
        "{out}"
    );
    let job_row = rows
        .iter()
        .find(|l| l.contains("/job-1"))
        .expect("job-1's row");
    assert_eq!(
        job_row.find("kueue-job (Update)"),
        Some(col(lines[0], "ADDED BY")),
        "{out}"
    );
    let summary = lines.last().expect("a summary");
    let (head, tally) = summary.split_once(": ").expect("a tally");
    assert!(
        head.ends_with(&format!(" held back (1 labelled {})", s.key)),
        "{summary}"
    );
    let tally = tally.split("; oldest Pod").next().unwrap_or_default();
    let parts: Vec<&str> = tally.split(", ").collect();
    for want in [format!("1 by {quota}"), format!("2 by {kueue}")] {
        assert!(parts.contains(&want.as_str()), "{want} in {summary}");
    }
    assert!(summary.contains("; oldest Pod"), "{summary}");

    let (code, out, err) = s.run(&["status", "-o", "yaml"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("name: job-1") && !out.contains("kueue-manager-1"),
        "{out}"
    );
    // It only read.
    assert!(
        s.all_writes().is_empty(),
        "status wrote: {:?}",
        s.all_writes()
    );
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn max_age_exits_1_when_something_is_held_too_long() {
    let s = Scene::new(&["held", "empty"], Rights::RbacOnly).await;
    s.add("held", &s.gated_pod("old", "example.com/g"));
    // Once the pod is older than a second by its creationTimestamp.
    let err = until("held longer than 1s", WAIT, || async {
        let (code, _, err) = s.run(&["status", "--max-age", "1s"]).await;
        assert!(code == 0 || code == 1, "{err}");
        (code == 1).then_some(err)
    })
    .await;
    assert!(err.contains(msg::MAX_AGE), "{err}");
    assert_eq!(s.run(&["status", "--max-age", "1h"]).await.0, 0);
    let empty = s.ns("empty").to_string();
    let (code, out, err) = s
        .run_in(Some(&empty), &["status", "--max-age", "0s"], &[])
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), NOTHING);
}

/// `metainit status | head -1`: once the reader is gone, status exits as it would have,
/// quietly, without a panic.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn status_into_a_closed_pipe_exits_quietly() {
    let s = Scene::new(&["pipe"], Rights::RbacOnly).await;
    for i in 0..3 {
        s.add("pipe", &gated_pod(&format!("job-{i}"), false, &[QUOTA]));
    }
    let kc = s.kubeconfig.display().to_string();
    let args = ["status", "--kubeconfig", &kc, "--namespace", s.ns("pipe")];
    let (code, err) = run_into_closed_pipe(&args, WAIT).await;
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

// `status --webhooks`: the webhooks of labelled configurations that are down or exempted.

/// A webhook on pod creation that calls `ns/svc` (namespaces short), asked only about
/// the scene's namespaces (so no other test's pod is sent to it), with `ns` exempted if
/// `exempt`.
fn webhook(s: &Scene, name: &str, policy: &str, ns: &str, svc: &str, exempt: bool) -> Value {
    let mut scope: Vec<&String> = s.namespaces.values().collect();
    scope.sort();
    let mut exprs =
        vec![json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": scope})];
    if exempt {
        exprs.push(exemption(s.ns(ns)));
    }
    json!({
        "name": name,
        "clientConfig": {"service": {"namespace": s.ns(ns), "name": svc, "path": "/validate"}},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "namespaceSelector": {"matchExpressions": exprs},
        "failurePolicy": policy,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    })
}

/// A configuration `short`, labelled with the scene's key or not; `records` (webhook,
/// namespace (short), how long ago) fill metainit's annotation as it writes it.
fn webhook_config(
    s: &Scene,
    short: &str,
    labelled: bool,
    hooks: Vec<Value>,
    records: &[(&str, &str, Duration)],
) -> Value {
    let mut labels = json!({"app": "policy"});
    if labelled {
        labels[&s.key] = json!("");
    }
    let mut metadata = json!({"name": s.name(short), "labels": labels});
    if !records.is_empty() {
        let now = k8s_openapi::jiff::Timestamp::now();
        let map: serde_json::Map<String, Value> = records
            .iter()
            .map(|(hook, ns, ago)| {
                // Whole seconds, as metainit writes it.
                let since = k8s_openapi::jiff::Timestamp::from_second(
                    now.as_second() - ago.as_secs() as i64,
                )
                .expect("a time");
                (
                    hook.to_string(),
                    json!({"expression": exemption(s.ns(ns)), "since": since.to_string()}),
                )
            })
            .collect();
        metadata["annotations"] = json!({ANNOTATION: Value::Object(map).to_string()});
    }
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "metadata": metadata, "webhooks": hooks})
}

/// The rows of the webhook table, cells joined by one space, sorted.
fn webhook_rows(out: &str) -> Vec<String> {
    let mut rows: Vec<String> = out
        .lines()
        .skip_while(|l| !l.starts_with("CONFIGURATION"))
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    rows.sort();
    rows
}

const NAMESPACES: [&str; 5] = [
    "pay",
    "gatekeeper-system",
    "kyverno",
    "istio-system",
    "cert-manager",
];

/// One webhook in each state, and the ones that must not be listed: up and not
/// exempted, `Ignore`, in an unlabelled configuration. Of the services, kyverno's and
/// cert-manager's have a ready endpoint; no pod is created in the scene.
async fn webhooks_scene(rights: Rights) -> Scene {
    let s = Scene::new(&NAMESPACES, rights).await;
    s.serve("pay", "pay-webhook", false);
    s.serve("gatekeeper-system", "gatekeeper-webhook-service", false);
    s.serve("kyverno", "kyverno-svc", true);
    s.serve("istio-system", "istiod", false);
    s.serve("cert-manager", "cert-manager-webhook", true);
    // Down, two webhooks on one service: both fail closed, one LIST of its slices.
    let pay = |n| webhook(&s, n, "Fail", "pay", "pay-webhook", false);
    let c = webhook_config(
        &s,
        "payments",
        true,
        vec![pay("a.payments.example.com"), pay("b.payments.example.com")],
        &[],
    );
    s.create(Kind::Validating, &c).await;
    // Exempted by metainit 12m30s ago, still down.
    let gk = webhook(
        &s,
        "validation.gatekeeper.sh",
        "Fail",
        "gatekeeper-system",
        "gatekeeper-webhook-service",
        true,
    );
    let c = webhook_config(
        &s,
        "gatekeeper",
        true,
        vec![gk],
        &[(
            "validation.gatekeeper.sh",
            "gatekeeper-system",
            Duration::from_secs(12 * 60 + 30),
        )],
    );
    s.create(Kind::Validating, &c).await;
    // Exempted 25m30s ago, endpoints back.
    let ky = webhook(
        &s,
        "validate.kyverno.svc-fail",
        "Fail",
        "kyverno",
        "kyverno-svc",
        true,
    );
    let c = webhook_config(
        &s,
        "kyverno",
        true,
        vec![ky],
        &[(
            "validate.kyverno.svc-fail",
            "kyverno",
            Duration::from_secs(25 * 60 + 30),
        )],
    );
    s.create(Kind::Validating, &c).await;
    // Exempted by hand: the expression without a record.
    let istio = webhook(
        &s,
        "sidecar-injector.istio.io",
        "Fail",
        "istio-system",
        "istiod",
        true,
    );
    let c = webhook_config(&s, "istio", true, vec![istio], &[]);
    s.create(Kind::Mutating, &c).await;
    // Not listed: up and not exempted; Ignore; unlabelled.
    let cm = webhook(
        &s,
        "webhook.cert-manager.io",
        "Fail",
        "cert-manager",
        "cert-manager-webhook",
        false,
    );
    let c = webhook_config(&s, "cert-manager", true, vec![cm], &[]);
    s.create(Kind::Validating, &c).await;
    let lenient = webhook(
        &s,
        "lenient.example.com",
        "Ignore",
        "pay",
        "pay-webhook",
        false,
    );
    let c = webhook_config(&s, "lenient", true, vec![lenient], &[]);
    s.create(Kind::Mutating, &c).await;
    let unlabelled = webhook(
        &s,
        "unlabelled.example.com",
        "Fail",
        "pay",
        "pay-webhook",
        false,
    );
    let c = webhook_config(&s, "unlabelled", false, vec![unlabelled], &[]);
    s.create(Kind::Validating, &c).await;
    s
}

/// The rows the scene's webhooks make, sorted.
fn expected_rows(s: &Scene) -> Vec<String> {
    let (pay, gk, ky, istio) = (
        s.ns("pay"),
        s.ns("gatekeeper-system"),
        s.ns("kyverno"),
        s.ns("istio-system"),
    );
    let mut rows = vec![
        format!(
            "mutating/{} sidecar-injector.istio.io {istio}/istiod 0 {istio} exempted by hand",
            s.name("istio")
        ),
        format!(
            "validating/{} validation.gatekeeper.sh {gk}/gatekeeper-webhook-service 0 {gk} exempted 12m ago",
            s.name("gatekeeper")
        ),
        format!(
            "validating/{} validate.kyverno.svc-fail {ky}/kyverno-svc 1 {ky} exempted 25m ago, endpoints back: restoring after the grace",
            s.name("kyverno")
        ),
        format!(
            "validating/{} a.payments.example.com {pay}/pay-webhook 0 failing closed on {pay}",
            s.name("payments")
        ),
        format!(
            "validating/{} b.payments.example.com {pay}/pay-webhook 0 failing closed on {pay}",
            s.name("payments")
        ),
    ];
    rows.sort();
    rows
}

/// The scene's LISTs of `resource` (the end of the path) as `path?selector`, sorted.
fn lists(s: &Scene, resource: &str) -> Vec<String> {
    let mut out: Vec<String> = s
        .requests()
        .iter()
        .filter(|e| e["verb"] == "list")
        .filter_map(|e| e["requestURI"].as_str())
        .filter_map(|uri| {
            let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
            let selector = query
                .split('&')
                .find_map(|p| p.strip_prefix("labelSelector="))
                .unwrap_or_default();
            let selector = selector.replace("%2F", "/").replace("%3D", "=");
            path.ends_with(resource)
                .then(|| format!("{path}?{selector}"))
        })
        .collect();
    out.sort();
    out
}

/// The table: after the held objects and a blank line, one row per webhook that is down
/// or exempted, in its state; and it only LISTs, each guarded service's slices once.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn webhooks_table_lists_those_down_or_exempted_and_their_state() {
    let s = webhooks_scene(Rights::Files).await;
    let (code, out, err) = s.run_in(None, &["status", "--webhooks"], &[]).await;
    assert_eq!(code, 0, "{err}");
    // The held objects' part, a blank line, then the webhooks' own header.
    let lines: Vec<&str> = out.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("CONFIGURATION"))
        .unwrap_or_else(|| panic!("no webhook table: {out}"));
    assert!(header >= 2 && lines[header - 1].is_empty(), "{out}");
    let cells: Vec<&str> = lines[header].split_whitespace().collect();
    assert_eq!(
        cells,
        ["CONFIGURATION", "WEBHOOK", "SERVICE", "READY", "STATE"],
        "{out}"
    );
    assert_eq!(webhook_rows(&out), expected_rows(&s), "{out}");
    // Aligned: each row's STATE starts under the header's.
    let state_col = lines[header].find("STATE").expect("STATE");
    assert!(
        lines[header + 1..].iter().all(|l| l.len() > state_col
            && l.as_bytes()[state_col - 1] == b' '
            && l.as_bytes()[state_col] != b' '),
        "{out}"
    );

    // One LIST of slices per guarded service, by its label; one of each configuration
    // kind, by the scene's label; nothing written.
    let mut slices: Vec<String> = [
        ("cert-manager", "cert-manager-webhook"),
        ("gatekeeper-system", "gatekeeper-webhook-service"),
        ("istio-system", "istiod"),
        ("kyverno", "kyverno-svc"),
        ("pay", "pay-webhook"),
    ]
    .iter()
    .map(|(ns, svc)| {
        format!(
            "/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices?kubernetes.io/service-name={svc}",
            s.ns(ns)
        )
    })
    .collect();
    slices.sort();
    let configs = ["mutating", "validating"].map(|k| {
        format!(
            "/apis/admissionregistration.k8s.io/v1/{k}webhookconfigurations?{}",
            s.key
        )
    });
    until("status's LISTs audited", WAIT, || async {
        (lists(&s, "/endpointslices").len() >= slices.len()
            && lists(&s, "webhookconfigurations").len() >= configs.len())
        .then_some(())
    })
    .await;
    assert_eq!(
        lists(&s, "/endpointslices"),
        slices,
        "one LIST per guarded service, by its label"
    );
    assert_eq!(lists(&s, "webhookconfigurations"), configs);
    assert!(
        s.all_writes().is_empty(),
        "status wrote: {:?}",
        s.all_writes()
    );

    // `-n NS`: only the webhooks whose service is in NS, after the held objects of NS.
    let pay_ns = s.ns("pay").to_string();
    let (code, pay, err) = s
        .run_in(Some(&pay_ns), &["status", "--webhooks"], &[])
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        pay.lines().take(2).collect::<Vec<_>>(),
        [NOTHING, ""],
        "{pay}"
    );
    assert_eq!(webhook_rows(&pay), expected_rows(&s)[3..], "{pay}");

    // METAINIT_WEBHOOKS=true in the environment is the flag.
    let (code, by_env, err) = s
        .run_in(Some(&pay_ns), &["status"], &[("METAINIT_WEBHOOKS", "true")])
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(by_env, pay);
    let (code, off, err) = s
        .run_in(
            Some(&pay_ns),
            &["status"],
            &[("METAINIT_WEBHOOKS", "false")],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(off, format!("{NOTHING}\n"));
    s.check_network();
}

/// `-o json`: the same rows as `webhooks`, with machine-readable states.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn webhooks_json_has_the_rows_with_their_states() {
    let s = webhooks_scene(Rights::Files).await;
    let (code, out, err) = s
        .run_in(None, &["status", "--webhooks", "-o", "json"], &[])
        .await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect("json");
    let rows = report["webhooks"].as_array().expect("webhooks");
    let mut got: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut r = r.clone();
            let secs = r
                .as_object_mut()
                .and_then(|o| o.remove("exemptedSeconds"))
                .and_then(|s| s.as_u64());
            // Whole minutes: the records are 12m30s and 25m30s old when written.
            r["exemptedMinutes"] = json!(secs.map(|s| s / 60));
            r
        })
        .collect();
    got.sort_by_key(|r| r["webhook"].as_str().unwrap_or_default().to_string());
    let row = |kind: &str,
               config: &str,
               hook: &str,
               (ns, svc): (&str, &str),
               ready: u64,
               state: &str,
               minutes: Option<u64>| {
        let ns = s.ns(ns);
        json!({
            "kind": kind, "configuration": s.name(config), "webhook": hook,
            "service": format!("{ns}/{svc}"), "readyEndpoints": ready, "state": state,
            "namespace": ns, "exemptedMinutes": minutes,
        })
    };
    let pay = ("pay", "pay-webhook");
    assert_eq!(
        got,
        [
            row(
                "validating",
                "payments",
                "a.payments.example.com",
                pay,
                0,
                "failingClosed",
                None
            ),
            row(
                "validating",
                "payments",
                "b.payments.example.com",
                pay,
                0,
                "failingClosed",
                None
            ),
            row(
                "mutating",
                "istio",
                "sidecar-injector.istio.io",
                ("istio-system", "istiod"),
                0,
                "exemptedByHand",
                None
            ),
            row(
                "validating",
                "kyverno",
                "validate.kyverno.svc-fail",
                ("kyverno", "kyverno-svc"),
                1,
                "restoring",
                Some(25)
            ),
            row(
                "validating",
                "gatekeeper",
                "validation.gatekeeper.sh",
                ("gatekeeper-system", "gatekeeper-webhook-service"),
                0,
                "exempted",
                Some(12)
            ),
        ],
        "{out}"
    );

    let (code, out, err) = s
        .run_in(None, &["status", "--webhooks", "-o", "yaml"], &[])
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("webhooks:") && out.contains("state: exemptedByHand"),
        "{out}"
    );
    // Without the flag, no `webhooks` at all.
    let (code, out, err) = s.run(&["status", "-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect("json");
    assert!(report.get("webhooks").is_none(), "{out}");
    s.check_network();
}

/// Nothing down: one line says so after the objects' summary; JSON has an empty array.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn webhooks_none_down_says_so() {
    let s = Scene::new(&["cert-manager"], Rights::Files).await;
    s.serve("cert-manager", "cert-manager-webhook", true);
    let cm = webhook(
        &s,
        "webhook.cert-manager.io",
        "Fail",
        "cert-manager",
        "cert-manager-webhook",
        false,
    );
    let c = webhook_config(&s, "cert-manager", true, vec![cm], &[]);
    s.create(Kind::Validating, &c).await;
    let (code, out, err) = s.run(&["status", "--webhooks"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{NOTHING}\n\n{}\n", msg::NO_WEBHOOK_DOWN));
    let (code, out, err) = s.run(&["status", "--webhooks", "-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report["webhooks"], json!([]), "{out}");
    s.check_network();
}

/// Initializers forced on a server that has none: no webhooks to list, exit 2 saying
/// why, nothing printed (a 1.13 server under `--mode auto` is tests/status.rs's).
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn webhooks_with_initializers_exits_2() {
    let s = Scene::new(&["init"], Rights::Files).await;
    let (code, out, err) = s
        .run(&["status", "--webhooks", "--mode", "initializers"])
        .await;
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains(msg::WEBHOOKS_TOO_OLD) && err.contains("--mode initializers"),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
}

/// Without the right to list the configurations, or a service's EndpointSlices: exit 2,
/// nothing printed, the error naming the manifest that grants it. With list on those
/// three (and pods), it works.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn webhooks_forbidden_exits_2_naming_the_manifest() {
    let pods = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]});
    let configs = json!({
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
        "verbs": ["list"],
    });
    let slices = json!({"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]});
    let s = Scene::new(&["pay"], Rights::Rules(json!([pods]))).await;
    s.serve("pay", "pay-webhook", false);
    let hook = webhook(
        &s,
        "a.payments.example.com",
        "Fail",
        "pay",
        "pay-webhook",
        false,
    );
    let c = webhook_config(&s, "payments", true, vec![hook], &[]);
    s.create(Kind::Validating, &c).await;
    let grant = |rules: Value| {
        s.apply(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": format!("metainit-{}", s.id)}, "rules": rules,
        }));
    };
    // Exit 2 with nothing printed and `want` in the error, once RBAC says so.
    let refused = |want: String| {
        let s = &s;
        async move {
            until(&want, WAIT, || async {
                let (code, out, err) = s.run(&["status", "--webhooks"]).await;
                assert!(code == 2 || code == 0, "{out}\n{err}");
                (code == 2 && err.contains(&want)).then_some((out, err))
            })
            .await
        }
    };

    let (out, err) = refused("LIST mutatingwebhookconfigurations: forbidden".into()).await;
    assert!(out.is_empty(), "{out}");
    assert!(err.contains(msg::WEBHOOKS_RBAC), "{err}");

    grant(json!([pods, configs]));
    let (out, err) = refused(format!(
        "LIST endpointslices of {}/pay-webhook: forbidden",
        s.ns("pay")
    ))
    .await;
    assert!(out.is_empty(), "{out}");
    assert!(err.contains(msg::WEBHOOKS_RBAC), "{err}");

    grant(json!([pods, configs, slices]));
    let out = until("allowed", WAIT, || async {
        let (code, out, _) = s.run(&["status", "--webhooks"]).await;
        (code == 0).then_some(out)
    })
    .await;
    let pay = s.ns("pay");
    assert_eq!(
        webhook_rows(&out),
        [format!(
            "validating/{} a.payments.example.com {pay}/pay-webhook 0 failing closed on {pay}",
            s.name("payments")
        )],
        "{out}"
    );
    s.check_network();
}
