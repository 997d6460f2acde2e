//! `metainit status` against both generations: what it lists, its formats, its exit codes,
//! and that it only reads.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(30);

async fn status(bed: &Bed, args: &[&str]) -> (i32, String, String) {
    let kc = bed.kubeconfig.display().to_string();
    let mut all = vec!["status", "--kubeconfig", &kc];
    all.extend_from_slice(args);
    run_to_end(&all, LIMIT).await
}

#[tokio::test]
async fn modern_lists_gated_pods_labelled_or_not() {
    let bed = Bed::modern().await;
    let mut owned = gated_pod("kueue-manager-1", true, &["kueue.x-k8s.io/admission"]);
    owned["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "kueue-manager", "uid": "u1", "controller": true
    }]);
    bed.double.create("pods", "kueue-system", owned).unwrap();
    bed.double
        .create(
            "pods",
            "default",
            gated_pod(
                "job-1",
                false,
                &["kueue.x-k8s.io/admission", "example.com/quota"],
            ),
        )
        .unwrap();
    bed.double
        .create("pods", "default", pod("free", true))
        .unwrap();
    bed.double.clear_requests();

    let (code, out, err) = status(&bed, &["-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report["mode"], "scheduling-gates");
    let items = report["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{out}");
    let manager = items
        .iter()
        .find(|i| i["name"] == "kueue-manager-1")
        .unwrap();
    assert_eq!(manager["kind"], "Pod");
    assert_eq!(manager["namespace"], "kueue-system");
    assert_eq!(manager["labelled"], true);
    assert_eq!(manager["owner"], "ReplicaSet/kueue-manager");
    assert_eq!(manager["blockedBy"], json!(["kueue.x-k8s.io/admission"]));
    let job = items.iter().find(|i| i["name"] == "job-1").unwrap();
    assert_eq!(job["labelled"], false);
    assert!(job.get("owner").is_none());
    assert_eq!(
        report["byName"],
        json!({"example.com/quota": 1, "kueue.x-k8s.io/admission": 2})
    );

    // The table, aligned like kubectl's, with its summary line.
    let (code, out, _) = status(&bed, &[]).await;
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[0].starts_with("KIND   NAME"), "{out}");
    let col = |l: &str, w: &str| l.find(w).unwrap_or_else(|| panic!("{w} in {l}"));
    let owner_col = col(lines[0], "OWNER");
    assert!(
        lines[1..3]
            .iter()
            .any(|l| l.find("ReplicaSet/kueue-manager") == Some(owner_col)),
        "{out}"
    );
    assert!(
        lines[1..3]
            .iter()
            .all(|l| col(l, "kueue.x-k8s.io/admission") == col(lines[0], "BLOCKED BY")),
        "{out}"
    );
    assert!(lines[3].starts_with("2 held back (1 labelled k8s.opsani.io/initializer): 1 by example.com/quota, 2 by kueue.x-k8s.io/admission; oldest Pod"), "{out}");

    let (code, out, _) = status(&bed, &["-o", "yaml", "--namespace", "default"]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("name: job-1") && !out.contains("kueue-manager-1"),
        "{out}"
    );

    // It only read.
    let writes: Vec<_> = bed
        .double
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(writes.is_empty(), "status wrote: {writes:?}");
}

#[tokio::test]
async fn legacy_lists_pending_objects_of_every_type() {
    let bed = Bed::legacy(&["podimage.example.com"]).await;
    bed.double
        .create("pods", "default", pod("web", true))
        .unwrap();
    bed.double
        .create("pods", "default", pod("other", false))
        .unwrap();
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}
    });
    bed.double
        .create("deployments.apps", "default", deploy)
        .unwrap();
    bed.double.clear_requests();
    let (code, out, err) = status(&bed, &["-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["mode"], "initializers");
    let mut kinds: Vec<String> = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            format!(
                "{}/{}",
                i["kind"].as_str().unwrap(),
                i["name"].as_str().unwrap()
            )
        })
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["Deployment/d", "Pod/other", "Pod/web"]);
    assert_eq!(report["byName"], json!({"podimage.example.com": 3}));
    assert!(bed.double.requests().iter().all(|r| r.method == "GET"));
}

#[tokio::test]
async fn max_age_exits_1_when_something_is_held_too_long() {
    let bed = Bed::modern().await;
    bed.double
        .create(
            "pods",
            "default",
            gated_pod("old", true, &["example.com/g"]),
        )
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(status(&bed, &["--max-age", "1s"]).await.0, 1);
    assert_eq!(status(&bed, &["--max-age", "1h"]).await.0, 0);
    let empty = Bed::modern().await;
    let (code, out, _) = status(&empty, &["--max-age", "0s"]).await;
    assert_eq!(code, 0);
    assert_eq!(out.trim(), "nothing held back (scheduling-gates mode)");
}

// `status --webhooks`: the webhooks of labelled configurations that are down or exempted.

const VWC: &str = "validatingwebhookconfigurations.admissionregistration.k8s.io";
const MWC: &str = "mutatingwebhookconfigurations.admissionregistration.k8s.io";
const ANNOTATION: &str = "k8s.opsani.io/metainit-exempted";

/// A webhook on pod creation that calls `ns/svc`.
fn webhook(name: &str, policy: &str, ns: &str, svc: &str) -> Value {
    json!({
        "name": name,
        "clientConfig": {"service": {"namespace": ns, "name": svc, "path": "/validate"}},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "failurePolicy": policy,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    })
}

/// The expression metainit adds to exempt `ns`.
fn exemption(ns: &str) -> Value {
    json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [ns]})
}

/// `hook` with `ns` exempted in its namespace selector, as metainit (or a person) leaves it.
fn exempted(mut hook: Value, ns: &str) -> Value {
    hook["namespaceSelector"] = json!({"matchExpressions": [exemption(ns)]});
    hook
}

/// A configuration of `kind` (`Validating` or `Mutating`), labelled or not; `records`
/// (webhook, namespace, how long ago) fill metainit's annotation as it writes it.
fn webhook_config(
    kind: &str,
    name: &str,
    labelled: bool,
    hooks: Vec<Value>,
    records: &[(&str, &str, Duration)],
) -> Value {
    let mut labels = json!({"app": "policy"});
    if labelled {
        labels[LABEL] = json!("");
    }
    let mut metadata = json!({"name": name, "labels": labels});
    if !records.is_empty() {
        let now = k8s_openapi::jiff::Timestamp::now();
        let map: serde_json::Map<String, Value> = records
            .iter()
            .map(|(hook, ns, ago)| {
                // Whole seconds, as metainit writes it.
                let since = k8s_openapi::jiff::Timestamp::from_second(
                    now.as_second() - ago.as_secs() as i64,
                )
                .unwrap();
                (
                    hook.to_string(),
                    json!({"expression": exemption(ns), "since": since.to_string()}),
                )
            })
            .collect();
        metadata["annotations"] = json!({ANNOTATION: Value::Object(map).to_string()});
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": format!("{kind}WebhookConfiguration"),
        "metadata": metadata,
        "webhooks": hooks,
    })
}

fn create(bed: &Bed, resource: &str, config: Value) {
    bed.double
        .create(resource, "", config)
        .expect("configuration");
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

/// One webhook in each state, and the ones that must not be listed: up and not
/// exempted, `Ignore`, in an unlabelled configuration.
async fn webhooks_bed() -> Bed {
    let bed = Bed::modern().await;
    serve(&bed.double, "pay", "pay-webhook", false);
    serve(
        &bed.double,
        "gatekeeper-system",
        "gatekeeper-webhook-service",
        false,
    );
    serve(&bed.double, "kyverno", "kyverno-svc", true);
    serve(&bed.double, "istio-system", "istiod", false);
    serve(&bed.double, "cert-manager", "cert-manager-webhook", true);
    // Down, two webhooks on one service: both fail closed, one LIST of its slices.
    let pay = |n| webhook(n, "Fail", "pay", "pay-webhook");
    create(
        &bed,
        VWC,
        webhook_config(
            "Validating",
            "payments",
            true,
            vec![pay("a.payments.example.com"), pay("b.payments.example.com")],
            &[],
        ),
    );
    // Exempted by metainit 12m30s ago, still down.
    let gk = webhook(
        "validation.gatekeeper.sh",
        "Fail",
        "gatekeeper-system",
        "gatekeeper-webhook-service",
    );
    create(
        &bed,
        VWC,
        webhook_config(
            "Validating",
            "gatekeeper-validating-webhook-configuration",
            true,
            vec![exempted(gk, "gatekeeper-system")],
            &[(
                "validation.gatekeeper.sh",
                "gatekeeper-system",
                Duration::from_secs(12 * 60 + 30),
            )],
        ),
    );
    // Exempted 25m30s ago, endpoints back.
    let ky = webhook(
        "validate.kyverno.svc-fail",
        "Fail",
        "kyverno",
        "kyverno-svc",
    );
    create(
        &bed,
        VWC,
        webhook_config(
            "Validating",
            "kyverno-resource-validating-webhook-cfg",
            true,
            vec![exempted(ky, "kyverno")],
            &[(
                "validate.kyverno.svc-fail",
                "kyverno",
                Duration::from_secs(25 * 60 + 30),
            )],
        ),
    );
    // Exempted by hand: the expression without a record.
    let istio = webhook(
        "sidecar-injector.istio.io",
        "Fail",
        "istio-system",
        "istiod",
    );
    create(
        &bed,
        MWC,
        webhook_config(
            "Mutating",
            "istio-sidecar-injector",
            true,
            vec![exempted(istio, "istio-system")],
            &[],
        ),
    );
    // Not listed: up and not exempted; Ignore; unlabelled.
    create(
        &bed,
        VWC,
        webhook_config(
            "Validating",
            "cert-manager-webhook",
            true,
            vec![webhook(
                "webhook.cert-manager.io",
                "Fail",
                "cert-manager",
                "cert-manager-webhook",
            )],
            &[],
        ),
    );
    create(
        &bed,
        MWC,
        webhook_config(
            "Mutating",
            "lenient",
            true,
            vec![webhook(
                "lenient.example.com",
                "Ignore",
                "pay",
                "pay-webhook",
            )],
            &[],
        ),
    );
    create(
        &bed,
        VWC,
        webhook_config(
            "Validating",
            "unlabelled",
            false,
            vec![webhook(
                "unlabelled.example.com",
                "Fail",
                "pay",
                "pay-webhook",
            )],
            &[],
        ),
    );
    bed.double.clear_requests();
    bed
}

const EXPECTED_ROWS: [&str; 5] = [
    "mutating/istio-sidecar-injector sidecar-injector.istio.io istio-system/istiod 0 istio-system exempted by hand",
    "validating/gatekeeper-validating-webhook-configuration validation.gatekeeper.sh gatekeeper-system/gatekeeper-webhook-service 0 gatekeeper-system exempted 12m ago",
    "validating/kyverno-resource-validating-webhook-cfg validate.kyverno.svc-fail kyverno/kyverno-svc 1 kyverno exempted 25m ago, endpoints back: restoring after the grace",
    "validating/payments a.payments.example.com pay/pay-webhook 0 failing closed on pay",
    "validating/payments b.payments.example.com pay/pay-webhook 0 failing closed on pay",
];

/// The table: after the held objects and a blank line, one row per webhook that is down
/// or exempted, in its state; and it only LISTs, each guarded service's slices once.
#[tokio::test]
async fn webhooks_table_lists_those_down_or_exempted_and_their_state() {
    let bed = webhooks_bed().await;
    let (code, out, err) = status(&bed, &["--webhooks"]).await;
    assert_eq!(code, 0, "{err}");
    // The held objects' summary, a blank line, then the webhooks' own header.
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() > 3, "{out}");
    assert_eq!(
        lines[..2],
        ["nothing held back (scheduling-gates mode)", ""],
        "{out}"
    );
    let header: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        header,
        ["CONFIGURATION", "WEBHOOK", "SERVICE", "READY", "STATE"],
        "{out}"
    );
    assert_eq!(webhook_rows(&out), EXPECTED_ROWS, "{out}");
    // Aligned: each row's STATE starts under the header's.
    let state_col = lines[2].find("STATE").unwrap();
    assert!(
        lines[3..].iter().all(|l| l.len() > state_col
            && l.as_bytes()[state_col - 1] == b' '
            && l.as_bytes()[state_col] != b' '),
        "{out}"
    );

    let requests = bed.double.requests();
    let writes: Vec<_> = requests.iter().filter(|r| r.method != "GET").collect();
    assert!(writes.is_empty(), "status wrote: {writes:?}");
    // Each LIST of `resource` as `path?selector`, sorted.
    let lists = |resource: &str| -> Vec<String> {
        let mut out: Vec<String> = requests
            .iter()
            .filter_map(|r| {
                let (path, query) = r
                    .path_and_query
                    .split_once('?')
                    .unwrap_or((&r.path_and_query, ""));
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
    };
    let slices: Vec<String> = [
        ("cert-manager", "cert-manager-webhook"),
        ("gatekeeper-system", "gatekeeper-webhook-service"),
        ("istio-system", "istiod"),
        ("kyverno", "kyverno-svc"),
        ("pay", "pay-webhook"),
    ]
    .iter()
    .map(|(ns, svc)| {
        format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?kubernetes.io/service-name={svc}")
    })
    .collect();
    assert_eq!(
        lists("/endpointslices"),
        slices,
        "one LIST per guarded service, by its label"
    );
    assert_eq!(
        lists("webhookconfigurations"),
        ["mutating", "validating"].map(|k| format!(
            "/apis/admissionregistration.k8s.io/v1/{k}webhookconfigurations?{LABEL}"
        ))
    );

    // `-n NS`: only the webhooks whose service is in NS.
    let (code, pay, err) = status(&bed, &["--webhooks", "-n", "pay"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(webhook_rows(&pay), EXPECTED_ROWS[3..], "{pay}");

    // METAINIT_WEBHOOKS=true in the environment is the flag.
    let kc = bed.kubeconfig.display().to_string();
    let args = ["status", "--kubeconfig", kc.as_str()];
    let (code, by_env, err) = run_to_end_env(&args, &[("METAINIT_WEBHOOKS", "true")], LIMIT).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(by_env, out);
    let (code, off, err) = run_to_end_env(&args, &[("METAINIT_WEBHOOKS", "false")], LIMIT).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(off, "nothing held back (scheduling-gates mode)\n");
}

/// `-o json`: the same rows as `webhooks`, with machine-readable states.
#[tokio::test]
async fn webhooks_json_has_the_rows_with_their_states() {
    let bed = webhooks_bed().await;
    let (code, out, err) = status(&bed, &["--webhooks", "-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect("json");
    let rows = report["webhooks"].as_array().expect("webhooks");
    let mut got: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut r = r.clone();
            let secs = r
                .as_object_mut()
                .unwrap()
                .remove("exemptedSeconds")
                .and_then(|s| s.as_u64());
            // Whole minutes: the records are 12m30s and 25m30s old when written.
            r["exemptedMinutes"] = json!(secs.map(|s| s / 60));
            r
        })
        .collect();
    got.sort_by_key(|r| r["webhook"].as_str().unwrap_or_default().to_string());
    let row = |kind, config, hook, service, ready, state, ns, minutes: Option<u64>| {
        json!({
            "kind": kind, "configuration": config, "webhook": hook, "service": service,
            "readyEndpoints": ready, "state": state, "namespace": ns, "exemptedMinutes": minutes,
        })
    };
    assert_eq!(
        got,
        [
            row(
                "validating",
                "payments",
                "a.payments.example.com",
                "pay/pay-webhook",
                0,
                "failingClosed",
                "pay",
                None
            ),
            row(
                "validating",
                "payments",
                "b.payments.example.com",
                "pay/pay-webhook",
                0,
                "failingClosed",
                "pay",
                None
            ),
            row(
                "mutating",
                "istio-sidecar-injector",
                "sidecar-injector.istio.io",
                "istio-system/istiod",
                0,
                "exemptedByHand",
                "istio-system",
                None
            ),
            row(
                "validating",
                "kyverno-resource-validating-webhook-cfg",
                "validate.kyverno.svc-fail",
                "kyverno/kyverno-svc",
                1,
                "restoring",
                "kyverno",
                Some(25)
            ),
            row(
                "validating",
                "gatekeeper-validating-webhook-configuration",
                "validation.gatekeeper.sh",
                "gatekeeper-system/gatekeeper-webhook-service",
                0,
                "exempted",
                "gatekeeper-system",
                Some(12)
            ),
        ],
        "{out}"
    );

    let (code, out, err) = status(&bed, &["--webhooks", "-o", "yaml"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("webhooks:") && out.contains("state: exemptedByHand"),
        "{out}"
    );
    // Without the flag, no `webhooks` at all.
    let (code, out, _) = status(&bed, &["-o", "json"]).await;
    assert_eq!(code, 0);
    let report: Value = serde_json::from_str(&out).expect("json");
    assert!(report.get("webhooks").is_none(), "{out}");
}

/// Nothing down: one line says so after the objects' summary; JSON has an empty array.
#[tokio::test]
async fn webhooks_none_down_says_so() {
    let bed = Bed::modern().await;
    serve(&bed.double, "cert-manager", "cert-manager-webhook", true);
    create(
        &bed,
        VWC,
        webhook_config(
            "Validating",
            "cert-manager-webhook",
            true,
            vec![webhook(
                "webhook.cert-manager.io",
                "Fail",
                "cert-manager",
                "cert-manager-webhook",
            )],
            &[],
        ),
    );
    let (code, out, err) = status(&bed, &["--webhooks"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "nothing held back (scheduling-gates mode)\n\n{}\n",
            msg::NO_WEBHOOK_DOWN
        )
    );
    let (code, out, err) = status(&bed, &["--webhooks", "-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report["webhooks"], json!([]), "{out}");
}

/// Initializers (forced, or a 1.7 to 1.13 server under `--mode auto`) have no webhooks
/// to list: exit 2 saying why, nothing printed.
#[tokio::test]
async fn webhooks_with_initializers_exits_2() {
    let bed = Bed::modern().await;
    let (code, out, err) = status(&bed, &["--webhooks", "--mode", "initializers"]).await;
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains(msg::WEBHOOKS_TOO_OLD) && err.contains("--mode initializers"),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");

    let legacy = Bed::legacy(&["podimage.example.com"]).await;
    let (code, out, err) = status(&legacy, &["--webhooks"]).await;
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains(msg::WEBHOOKS_TOO_OLD) && err.contains("is v1.13.12: drop --webhooks"),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
}

/// Without the right to list the configurations, or a service's EndpointSlices: exit 2,
/// nothing printed, the error naming the manifest that grants it. With list on those
/// three (and pods), it works.
#[tokio::test]
async fn webhooks_forbidden_exits_2_naming_the_manifest() {
    let pods = "list pods";
    let configs = [
        "list mutatingwebhookconfigurations.admissionregistration.k8s.io",
        "list validatingwebhookconfigurations.admissionregistration.k8s.io",
    ];
    let slices = "list endpointslices.discovery.k8s.io";
    let bed = Bed::as_user(kube_double::Config::modern(), &[pods]).await;
    serve(&bed.double, "pay", "pay-webhook", false);
    create(
        &bed,
        VWC,
        webhook_config(
            "Validating",
            "payments",
            true,
            vec![webhook(
                "a.payments.example.com",
                "Fail",
                "pay",
                "pay-webhook",
            )],
            &[],
        ),
    );
    let grant = |perms: &[&str]| {
        bed.double.set_tokens(Some(
            [(
                "user".to_string(),
                perms.iter().map(|p| p.to_string()).collect(),
            )]
            .into(),
        ))
    };

    let (code, out, err) = status(&bed, &["--webhooks"]).await;
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("LIST mutatingwebhookconfigurations: forbidden")
            && err.contains(msg::WEBHOOKS_RBAC),
        "{err}"
    );

    grant(&[pods, configs[0], configs[1]]);
    let (code, out, err) = status(&bed, &["--webhooks"]).await;
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("LIST endpointslices of pay/pay-webhook: forbidden")
            && err.contains(msg::WEBHOOKS_RBAC),
        "{err}"
    );

    grant(&[pods, configs[0], configs[1], slices]);
    let (code, out, err) = status(&bed, &["--webhooks"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        webhook_rows(&out),
        ["validating/payments a.payments.example.com pay/pay-webhook 0 failing closed on pay"],
        "{out}"
    );
}

/// `metainit status | head -1`: once the reader is gone, status exits as it would have,
/// quietly, without a panic.
#[tokio::test]
async fn status_into_a_closed_pipe_exits_quietly() {
    let bed = Bed::modern().await;
    for i in 0..3 {
        bed.double
            .create(
                "pods",
                "default",
                gated_pod(&format!("job-{i}"), false, &["example.com/quota"]),
            )
            .unwrap();
    }
    let kc = bed.kubeconfig.display().to_string();
    let (code, err) = run_into_closed_pipe(&["status", "--kubeconfig", &kc], LIMIT).await;
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
