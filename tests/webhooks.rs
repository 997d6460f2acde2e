//! `--webhooks` where only the double will do: a server whose revision goes backwards (an
//! etcd restore), a server reporting Kubernetes 1.13 or 1.20, and answers slowed on
//! demand. Everything a modern server does with webhooks (which pods it admits, the
//! configuration it stores, the Events, the RBAC) is tested on the real control plane:
//! tests/cluster_webhooks*.rs (docs/src/developers/double.md, "What moved to the real
//! server"). The double stores webhook configurations, Services and EndpointSlices and
//! calls no webhook, so these tests read what metainit wrote on the configuration.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use serde_json::{Value, json};

const VWC: &str = "validatingwebhookconfigurations.admissionregistration.k8s.io";
const WAIT: Duration = Duration::from_secs(30);

/// A configuration with one webhook on pod creation, calling `ns/svc`.
fn config(name: &str, labelled: bool, hook: &str, policy: &str, ns: &str, svc: &str) -> Value {
    let mut labels = json!({"app": "policy"});
    if labelled {
        labels[LABEL] = json!("");
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": labels},
        "webhooks": [{
            "name": hook,
            "clientConfig": {"service": {"namespace": ns, "name": svc, "path": "/validate"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "failurePolicy": policy,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }],
    })
}

/// The labelled configuration `gk`, whose one webhook `validate.gk.example.com` fails
/// closed on pod creation and calls `gk/gk-svc`, served with its one endpoint `ready` or
/// not.
fn gatekeeper(bed: &Bed, ready: bool) {
    serve(&bed.double, "gk", "gk-svc", ready);
    bed.double
        .create(
            VWC,
            "",
            config(
                "gk",
                true,
                "validate.gk.example.com",
                "Fail",
                "gk",
                "gk-svc",
            ),
        )
        .expect("configuration");
}

/// Waits until the configuration `name` has, as its first webhook, the one it was
/// created with and namespace `ns` exempted from it by metainit's one expression and its
/// record: what lets the webhook's own pods in on a real server (tests/cluster_webhooks*.rs).
async fn exempted_eventually(bed: &Bed, name: &str, what: &str) {
    let ns = name;
    eventually(what, WAIT, || {
        bed.double.get(VWC, "", name).is_some_and(|c| {
            c["webhooks"][0]["namespaceSelector"]
                == json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [ns]}]})
                && c["metadata"]["annotations"]["k8s.opsani.io/metainit-exempted"].is_string()
        })
    })
    .await;
}

fn patches_to(bed: &Bed, plural: &str, name: &str) -> Vec<(SystemTime, Value)> {
    bed.double
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "PATCH"
                && r.status < 300
                && r.path_and_query
                    .split('?')
                    .next()
                    .is_some_and(|p| p.ends_with(&format!("/{plural}/{name}")))
        })
        .map(|r| (r.at, serde_json::from_str(&r.body).unwrap_or(Value::Null)))
        .collect()
}

/// The server's revision goes backwards (etcd restored from a snapshot): the watches of
/// the webhook configurations and of the endpoints resume from a version the server has
/// not reached and hear nothing. The resync lists them again, so a deadlock that starts
/// after the restore is still broken.
#[tokio::test]
async fn a_deadlock_after_an_etcd_restore_is_still_broken() {
    let bed = Bed::modern().await;
    let snapshot = bed.double.snapshot();
    let metainit = bed.metainit(&[
        "--webhooks",
        "--webhook-grace",
        "1s",
        "--resync-period",
        "1s",
    ]);
    // A first deadlock, exempted and restored: the watches have seen every change so far.
    serve(&bed.double, "first", "first-svc", false);
    bed.double
        .create(
            VWC,
            "",
            config(
                "first",
                true,
                "validate.first.example.com",
                "Fail",
                "first",
                "first-svc",
            ),
        )
        .expect("configuration");
    exempted_eventually(&bed, "first", "the first webhook's namespace").await;
    set_ready(&bed.double, "first", "first-svc", true);
    eventually("the first exemption removed", WAIT, || {
        patches_to(&bed, "validatingwebhookconfigurations", "first").len() == 2
    })
    .await;
    let seen = bed.double.resource_version();
    bed.double.restore(&snapshot);
    gatekeeper(&bed, false);
    assert!(
        bed.double.resource_version() < seen,
        "the new configuration's revision is below what metainit saw"
    );
    exempted_eventually(&bed, "gk", "the webhook's own namespace, after the restore").await;
    assert!(metainit.stop().await.success());
}

#[tokio::test]
async fn bad_webhook_flags_exit_2_saying_what_to_fix() {
    let legacy = Bed::legacy(&["a.example.com"]).await;
    let kubeconfig = legacy.kubeconfig.display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--webhook-grace", "10s"], msg::GRACE_WITHOUT_WEBHOOKS),
        (
            vec!["--webhooks", "--webhook-grace", "0s"],
            msg::GRACE_AT_LEAST,
        ),
        (
            vec!["--webhooks", "--once", "--webhook-grace", "1m"],
            msg::GRACE_WITH_ONCE,
        ),
        (
            vec!["--webhooks", "--mode", "initializers"],
            msg::WEBHOOKS_TOO_OLD,
        ),
        // Against a 1.13 server, `auto` finds initializers.
        (vec!["--webhooks"], "is v1.13.12: drop --webhooks"),
        (vec!["--webhooks", "--once"], "is v1.13.12: drop --webhooks"),
    ];
    each_refused(&kubeconfig, &cases).await;
}

/// 1.14 to 1.20: no `kubernetes.io/metadata.name` on namespaces (the exemption would
/// exempt nothing) and no EndpointSlice v1: `--webhooks` exits 2 naming the version.
#[tokio::test]
async fn kubernetes_1_20_refuses_webhooks_naming_the_version() {
    let bed = bed_reporting((1, 20)).await;
    let kubeconfig = bed.kubeconfig.display().to_string();
    for extra in [&[][..], &["--once"][..]] {
        let mut args = vec!["--kubeconfig", kubeconfig.as_str(), "--webhooks"];
        args.extend_from_slice(extra);
        let (code, _, err) = run_to_end(&args, WAIT).await;
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains(msg::WEBHOOKS_TOO_OLD) && err.contains("is v1.20.0: drop --webhooks"),
            "{args:?}: {err}"
        );
    }
    let (code, _, err) = run_to_end(
        &["status", "--kubeconfig", kubeconfig.as_str(), "--webhooks"],
        WAIT,
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is v1.20.0: drop --webhooks"), "{err}");
    assert!(
        bed.double.requests().iter().all(|r| r.method == "GET"),
        "nothing written"
    );
}

/// `/readyz` is about the process's own watches having listed once: a second labelled
/// configuration naming a new service starts that service's EndpointSlices watch, whose
/// first list (slow here) does not make the process unready.
#[tokio::test]
async fn readyz_stays_ready_while_a_new_services_watch_makes_its_first_list() {
    let bed = Bed::modern().await;
    gatekeeper(&bed, true);
    let metainit = bed.metainit(&["--webhooks", "--webhook-grace", "1s"]);
    let addr = metainit.admin_addr().await;
    until_readyz(&addr, WAIT).await;
    // Every answer from now on comes late: the new service's first list takes a while.
    bed.double.set_faults(kube_double::Faults {
        latency: Duration::from_millis(1500),
        ..kube_double::Faults::default()
    });
    serve(&bed.double, "gk2", "svc2", true);
    bed.double
        .create(
            VWC,
            "",
            config(
                "gk2",
                true,
                "validate.gk2.example.com",
                "Fail",
                "gk2",
                "svc2",
            ),
        )
        .expect("second configuration");
    let listed = || {
        bed.double.requests().iter().any(|r| {
            r.method == "GET"
                && r.status == 200
                && r.path_and_query
                    .starts_with("/apis/discovery.k8s.io/v1/namespaces/gk2/endpointslices")
                && !r.path_and_query.contains("watch=")
        })
    };
    let start = std::time::Instant::now();
    while !listed() {
        let (code, body) = admin_get(&addr, "/readyz").await;
        assert_eq!(code, 200, "while the new service's first list runs: {body}");
        assert!(
            start.elapsed() < WAIT,
            "the new service's EndpointSlices never listed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    metainit.stop().await;
}

/// A server reporting `version`, with the modern generation's APIs (admission webhooks,
/// EndpointSlice v1), as a 1.14 to 1.25 cluster is to metainit.
async fn bed_reporting(version: (u32, u32)) -> Bed {
    let mut config = kube_double::Config::modern();
    config.report_version = Some(version);
    Bed::start(config).await
}
