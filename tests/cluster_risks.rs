//! `metainit status --risks` on a real kube-apiserver, as a ServiceAccount with exactly
//! manifests/rbac-status.yaml: first a cluster whose webhooks cannot stall a cold start
//! (each excludes its own pods, or fails open), which reports nothing and exits 0; then
//! each shape of the issue built beside it (self-interception, a two-webhook cycle, a
//! webhook on pods/binding, system pods behind a webhook a pod-network outage stops, a
//! gated template nobody lifts), reported finding by finding, exit 3.
//!
//! A control plane of the test's own: its webhooks fail closed, each with a ready endpoint
//! (an EndpointSlice written as its controller would: they are up). No pod is created (no
//! controller-manager runs here: the Deployments and the DaemonSet stay templates), so the
//! API server calls no webhook and dials nothing.

mod common;

use std::collections::BTreeSet;

use common::{
    LABEL,
    control_plane::ControlPlane,
    risks::{risks, status_reader},
    run_to_end,
};
use serde_json::{Value, json};

const LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

fn namespaces(cp: &ControlPlane, names: &[&str]) {
    for ns in names {
        cp.kubectl_ok(&["create", "namespace", ns]);
    }
}

/// A Deployment `ns/name` whose pods carry `app: name` (and `extra` in its pod spec).
fn deployment(cp: &ControlPlane, ns: &str, name: &str, extra: Value) {
    let mut spec = json!({"containers": [{"name": "c", "image": "example.com/c"}]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    cp.create(
        ns,
        &json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}},
        }),
    );
}

/// A Service `ns/name` selecting `app: name`.
fn service(cp: &ControlPlane, ns: &str, name: &str) {
    cp.create(
        ns,
        &json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"port": 443, "targetPort": 8443}]},
        }),
    );
}

/// A validating configuration `name` with one webhook calling `ns/name`, on `resources`.
fn webhook(cp: &ControlPlane, name: &str, ns: &str, entry: Value, labelled: bool) {
    let mut hook = json!({
        "name": format!("{name}.example.com"),
        "clientConfig": {"service": {"namespace": ns, "name": name, "path": "/validate"}},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    if let (Some(h), Some(e)) = (hook.as_object_mut(), entry.as_object()) {
        h.extend(e.clone());
    }
    let labels = if labelled {
        json!({LABEL: ""})
    } else {
        json!({})
    };
    cp.create(
        "",
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name, "labels": labels},
            "webhooks": [hook],
        }),
    );
}

fn only(namespaces: &[&str]) -> Value {
    json!({"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]}})
}

/// A webhook, its Service and the Deployment that serves it, all named `name` in `ns`.
fn served(cp: &ControlPlane, name: &str, ns: &str, entry: Value, labelled: bool) {
    service(cp, ns, name);
    deployment(cp, ns, name, json!({}));
    ready_endpoint(cp, ns, name);
    webhook(cp, name, ns, entry, labelled);
}

/// The EndpointSlice the endpointslice controller would write for a running backend of
/// `ns/name`: one ready endpoint (a TEST-NET address no one dials: no pod is created, so the
/// API server calls no webhook). A webhook up: a forecast, not the `down` finding.
fn ready_endpoint(cp: &ControlPlane, ns: &str, name: &str) {
    cp.create(
        ns,
        &json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-1"), "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["192.0.2.10"], "conditions": {"ready": true}}],
            "ports": [{"port": 8443, "protocol": "TCP"}],
        }),
    );
}

/// Each finding as (risk, webhooks, objects).
fn shapes(report: &Value) -> BTreeSet<(String, Vec<String>, Vec<String>)> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            (
                f["risk"].as_str().unwrap_or_default().to_string(),
                strings(&f["webhooks"]),
                strings(&f["objects"]),
            )
        })
        .collect()
}

fn finding<'a>(report: &'a Value, risk: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["risk"] == risk))
        .unwrap_or_else(|| panic!("no {risk} finding: {report}"))
}

fn s(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn every_shape_found_and_none_where_there_is_none() {
    let cp = ControlPlane::own();
    namespaces(&cp, &["ops", "own", "ign", "obj", "team"]);
    let dir = tempfile::tempdir().unwrap();
    let kc = status_reader(&cp, dir.path(), "ops");
    let kc = kc.to_str().unwrap();

    // Clean: a webhook that excludes its own namespace (it sees only `team`), one that
    // fails open, one whose objectSelector leaves its own pods out.
    served(&cp, "own", "own", only(&["team"]), false);
    deployment(&cp, "team", "app", json!({}));
    served(&cp, "ign", "ign", json!({"failurePolicy": "Ignore"}), false);
    let mut by_object = only(&["obj"]);
    by_object["objectSelector"] =
        json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["obj"]}]});
    served(&cp, "obj", "obj", by_object, false);
    let (code, report, err) = risks(kc, &[]).await;
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["findings"], json!([]), "{report}");
    assert_eq!(report["webhooks"], 3, "{report}");
    let (code, out, err) = run_to_end(&["status", "--risks", "--kubeconfig", kc], LIMIT).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("no risk found; read 3 webhooks, 4 pod templates"),
        "{out}"
    );

    // Every shape.
    namespaces(
        &cp,
        &["gk", "istio", "pepr", "slurm", "net", "policy", "kueue"],
    );
    served(&cp, "gk", "gk", only(&["gk"]), true);
    served(&cp, "istio", "istio", only(&["pepr"]), false);
    served(&cp, "pepr", "pepr", only(&["istio"]), false);
    let mut binding = only(&["slurm"]);
    binding["rules"] = json!([{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                               "resources": ["pods/binding"]}]);
    served(&cp, "slurm", "slurm", binding, false);
    served(
        &cp,
        "policy",
        "policy",
        only(&["kube-system", "net"]),
        false,
    );
    deployment(&cp, "kube-system", "coredns", json!({}));
    cp.create(
        "net",
        &json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "cni"},
            "spec": {"selector": {"matchLabels": {"app": "cni"}},
                     "template": {"metadata": {"labels": {"app": "cni"}},
                                  "spec": {"hostNetwork": true,
                                           "containers": [{"name": "c", "image": "example.com/c"}]}}},
        }),
    );
    deployment(
        &cp,
        "kueue",
        "kueue-controller",
        json!({"schedulingGates": [{"name": "example.com/quota"}]}),
    );

    let (code, report, err) = risks(kc, &[]).await;
    assert_eq!(code, 3, "{report}\n{err}");
    let expected: BTreeSet<_> = [
        (
            "self-interception",
            s(&["validating/gk/gk.example.com"]),
            s(&["Deployment gk/gk"]),
        ),
        (
            "cycle",
            s(&[
                "validating/istio/istio.example.com",
                "validating/pepr/pepr.example.com",
            ]),
            s(&["Deployment istio/istio", "Deployment pepr/pepr"]),
        ),
        (
            "binding",
            s(&["validating/slurm/slurm.example.com"]),
            s(&["Deployment slurm/slurm"]),
        ),
        (
            "system-pods",
            s(&["validating/policy/policy.example.com"]),
            s(&["Deployment kube-system/coredns", "DaemonSet net/cni"]),
        ),
        (
            "unlifted-gates",
            vec![],
            s(&["Deployment kueue/kueue-controller"]),
        ),
    ]
    .into_iter()
    .map(|(r, w, o)| (r.to_string(), w, o))
    .collect();
    assert_eq!(shapes(&report), expected, "{report}");

    // What metainit would do: gk carries the label key, so --webhooks clears it; the
    // cycle's configurations do not; --release-gate covers the gated template.
    let gk = finding(&report, "self-interception");
    assert!(
        gk["metainit"]
            .as_str()
            .unwrap()
            .contains("without --webhooks"),
        "{gk}"
    );
    let (_, report, _) = risks(
        kc,
        &["--webhooks", "--release-gate", "example.com/quota=2h"],
    )
    .await;
    assert_eq!(
        finding(&report, "self-interception")["covered"],
        true,
        "{report}"
    );
    let cycle = finding(&report, "cycle");
    assert_eq!(cycle["covered"], false, "{cycle}");
    assert!(
        cycle["metainit"]
            .as_str()
            .unwrap()
            .contains("label configuration istio and configuration pepr with"),
        "{cycle}"
    );
    let gates = finding(&report, "unlifted-gates");
    assert_eq!(gates["covered"], true, "{gates}");

    // The table: a block per finding, the summary last.
    let (code, out, _) = run_to_end(&["status", "--risks", "--kubeconfig", kc], LIMIT).await;
    assert_eq!(code, 3);
    println!("status --risks:\n{out}");
    assert!(
        out.contains(
            "self-interception: validating/gk/gk.example.com\n  objects:  Deployment gk/gk\n  why:"
        ),
        "{out}"
    );
    assert!(
        out.trim_end().ends_with("5 risks (1 binding, 1 cycle, 1 self-interception, 1 system-pods, 1 unlifted-gates), 0 cleared by metainit as configured; read 8 webhooks, 12 pod templates"),
        "{out}"
    );
    // Without the role: exit 2, saying what to grant.
    cp.kubectl_ok(&["delete", "clusterrolebinding", "check"]);
    let (code, _, err) = run_to_end(&["status", "--risks", "--kubeconfig", kc], LIMIT).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("forbidden") && err.contains("manifests/rbac-status.yaml"),
        "{err}"
    );
}
