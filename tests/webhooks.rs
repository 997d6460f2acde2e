//! `--webhooks` where only the double will do: a server whose revision goes backwards (an
//! etcd restore) and a server reporting Kubernetes 1.13. Everything a modern server does
//! with webhooks (which pods it admits, the configuration it stores, the Events, the RBAC,
//! a server reporting 1.20, a slow first list) is tested on the real control plane:
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
// On the double: no proxy makes a server's revision go backwards, and the shared etcd is not
// to be restored under the other tests.
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
