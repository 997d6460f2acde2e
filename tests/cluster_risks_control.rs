//! `metainit status --risks` names a fail-closed webhook on the control plane's own objects
//! (issue 61, item 3), on a real kube-apiserver, as a ServiceAccount with exactly
//! manifests/rbac-status.yaml: a `url` webhook on Leases and Node registration, down (its
//! port closed on 127.0.0.1), that the real server shows stalling a Node's registration and
//! a node Lease's renewal; the fix the finding gives, applied, leaves nothing to report and
//! the Node registers.
//!
//! A control plane of the test's own: the webhook refuses the API servers' own identity
//! Lease renewals in kube-system too, which every other test's shared control plane would
//! feel.

mod common;

use common::{
    control_plane::{ControlPlane, until},
    risks::{risks, status_reader},
    run_to_end,
};
use serde_json::json;

const LIMIT: std::time::Duration = std::time::Duration::from_secs(60);
const CONFIG: &str = "node-guard";

/// The webhook a policy engine installs on "everything that changes": Leases and Nodes,
/// failing closed, its backend a `url` on a port where nothing listens.
fn guard(cp: &ControlPlane) {
    cp.create(
        "",
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": CONFIG},
            "webhooks": [{
                "name": "nodes.guard.example.com",
                "clientConfig": {"url": "https://127.0.0.1:1/validate"},
                "rules": [
                    {"operations": ["CREATE", "UPDATE"], "apiGroups": ["coordination.k8s.io"],
                     "apiVersions": ["v1"], "resources": ["leases"]},
                    {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                     "resources": ["nodes"]},
                ],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 2,
            }],
        }),
    );
}

/// What the kubelet writes first: its Node, then its Lease in kube-node-lease.
fn register(cp: &ControlPlane, node: &str) -> (bool, String) {
    let obj = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}});
    let (ok, out) = cp.kubectl_in(&["create", "-f", "-"], Some(&obj.to_string()));
    if !ok {
        return (ok, out);
    }
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": node},
                       "spec": {"holderIdentity": node, "leaseDurationSeconds": 40}});
    let lease = lease.to_string();
    cp.kubectl_in(
        &["create", "-n", "kube-node-lease", "-f", "-"],
        Some(&lease),
    )
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_fail_closed_webhook_on_leases_and_nodes_is_named_with_what_it_stalls() {
    let cp = ControlPlane::own();
    let dir = tempfile::tempdir().unwrap();
    let kc = status_reader(&cp, dir.path(), "default");
    let kc = kc.to_str().unwrap();
    guard(&cp);

    // The real server: the webhook down stalls a node's registration, once it has read
    // the configuration (its informer: a node may register before that).
    let mut n = 0;
    let out = until("a Node's registration refused", LIMIT, || {
        n += 1;
        let (ok, out) = register(&cp, &format!("node-a{n}"));
        async move { (!ok).then_some(out) }
    })
    .await;
    assert!(
        out.contains("failed calling webhook") && out.contains("nodes.guard.example.com"),
        "{out}"
    );

    let (code, report, err) = risks(kc, &[]).await;
    assert_eq!(code, 3, "{report}\n{err}");
    let findings = report["findings"].as_array().expect("findings");
    assert_eq!(findings.len(), 1, "{report}");
    let f = &findings[0];
    assert_eq!(f["risk"], "control-plane", "{f}");
    assert_eq!(
        f["webhooks"],
        json!([format!("validating/{CONFIG}/nodes.guard.example.com")])
    );
    assert_eq!(
        f["objects"],
        json!(["Leases kube-system/*", "Leases kube-node-lease/*", "Nodes"]),
        "{f}"
    );
    let why = f["why"].as_str().unwrap();
    for stalled in ["leader election", "node heartbeats", "node registration"] {
        assert!(why.contains(stalled), "{stalled}: {why}");
    }
    let fix = f["fix"].as_str().unwrap();
    assert!(
        fix.contains("values: [kube-system, kube-node-lease]") && fix.contains("take Nodes out"),
        "{fix}"
    );
    assert_eq!(f["covered"], false, "{f}");

    // The table names it too.
    let (code, table, _) = run_to_end(&["status", "--risks", "--kubeconfig", kc], LIMIT).await;
    assert_eq!(code, 3);
    println!("status --risks:\n{table}");
    assert!(
        table.starts_with(&format!(
            "control-plane: validating/{CONFIG}/nodes.guard.example.com\n  objects:  Leases kube-system/*, Leases kube-node-lease/*, Nodes\n"
        )),
        "{table}"
    );

    // The fix as the finding gives it: Namespaced rules, the two namespaces left out.
    let patch = json!([
        {"op": "add", "path": "/webhooks/0/rules/0/scope", "value": "Namespaced"},
        {"op": "add", "path": "/webhooks/0/rules/1/scope", "value": "Namespaced"},
        {"op": "add", "path": "/webhooks/0/namespaceSelector", "value": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": ["kube-system", "kube-node-lease"]}]}},
    ]);
    let patch = patch.to_string();
    let args = [
        "patch",
        "validatingwebhookconfiguration",
        CONFIG,
        "--type=json",
        "-p",
        &patch,
    ];
    cp.kubectl_ok(&args);
    let (code, report, err) = risks(kc, &[]).await;
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["findings"], json!([]), "{report}");
    let mut n = 0;
    until("a Node registered once the fix is in", LIMIT, || {
        n += 1;
        let (ok, _) = register(&cp, &format!("node-b{n}"));
        async move { ok.then_some(()) }
    })
    .await;
}
