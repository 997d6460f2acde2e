//! `metainit status --risks` reads admission policies in CEL (issue 61, item 2), on a real
//! kube-apiserver 1.37 (MutatingAdmissionPolicy GA and on by default from 1.36): a mutating
//! policy that adds a scheduling gate to every pod of a namespace (the real server shows it
//! adding the gate, with no webhook), and a validating policy's binding whose parameter
//! does not exist with `parameterNotFoundAction: Deny` (the real server shows it refusing
//! every pod there). As a ServiceAccount with exactly manifests/rbac-status.yaml, which
//! reads no parameters, the binding is named "not checked"; as the admin, "does not
//! exist"; the ConfigMap created, it goes.
//!
//! A control plane of the test's own: the policies are cluster-wide objects that every
//! other `status --risks` on a shared one would read.

mod common;

use common::{
    control_plane::{ControlPlane, until},
    risks::{risks, status_reader},
    run_to_end,
};
use serde_json::{Value, json};

const LIMIT: std::time::Duration = std::time::Duration::from_secs(60);
const HOLD: &str = "example.com/hold";

fn only_team() -> Value {
    json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team"}}})
}

fn pod_rules() -> Value {
    json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                              "operations": ["CREATE"], "resources": ["pods"]}]})
}

/// A mutating policy, bound to namespace team, that gates every pod created there.
fn gate_injector(cp: &ControlPlane) {
    let expression = format!(
        "Object{{spec: Object.spec{{schedulingGates: [Object.spec.schedulingGates{{name: \"{HOLD}\"}}]}}}}"
    );
    cp.create(
        "",
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": "hold"},
            "spec": {"matchConstraints": pod_rules(), "failurePolicy": "Fail",
                     "reinvocationPolicy": "Never",
                     "mutations": [{"patchType": "ApplyConfiguration",
                                    "applyConfiguration": {"expression": expression}}]},
        }),
    );
    cp.create("", &json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": "hold-team"},
        "spec": {"policyName": "hold", "matchResources": only_team()},
    }));
}

/// A validating policy whose binding needs ConfigMap team/limits, which does not exist.
fn needs_limits(cp: &ControlPlane) {
    cp.create(
        "",
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "limits"},
            "spec": {"matchConstraints": pod_rules(), "failurePolicy": "Fail",
                     "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                     "validations": [{"expression": "true"}]},
        }),
    );
    cp.create("", &json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "need-limits"},
        "spec": {"policyName": "limits", "validationActions": ["Deny"],
                 "paramRef": {"name": "limits", "namespace": "team",
                              "parameterNotFoundAction": "Deny"},
                 "matchResources": only_team()},
    }));
}

/// Creates pods `prefix`N in team until `done` holds of kubectl's answer and the pod: the
/// API server applies a new policy a moment after it is stored.
async fn until_pod(
    cp: &ControlPlane,
    prefix: &str,
    what: &str,
    done: impl Fn(bool, &str) -> bool,
) -> String {
    let mut n = 0;
    until(what, LIMIT, || {
        n += 1;
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("{prefix}{n}")},
                         "spec": {"containers": [{"name": "c", "image": "example.com/c"}]}});
        let (ok, out) = cp.kubectl_in(&["create", "-n", "team", "-o", "json", "-f", "-"], Some(&pod.to_string()));
        let hit = done(ok, &out);
        async move { hit.then_some(out) }
    })
    .await
}

fn finding<'a>(report: &'a Value, risk: &str) -> Option<&'a Value> {
    report["findings"]
        .as_array()?
        .iter()
        .find(|f| f["risk"] == risk)
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn gate_adding_and_parameter_missing_policies_are_found() {
    let cp = ControlPlane::own();
    cp.kubectl_ok(&["create", "namespace", "team"]);
    // No controller-manager here to make it: pods need their namespace's default account.
    cp.kubectl_ok(&["create", "serviceaccount", "default", "-n", "team"]);
    let dir = tempfile::tempdir().unwrap();
    let kc = status_reader(&cp, dir.path(), "team");
    let kc = kc.to_str().unwrap();
    let admin = cp.admin.to_str().unwrap();

    // The real server: the mutating policy gates each pod of team, no webhook involved.
    gate_injector(&cp);
    let gated = until_pod(&cp, "held", "a pod gated by the policy", |ok, out| {
        ok && out.contains(HOLD)
    })
    .await;
    assert!(gated.contains("schedulingGates"), "{gated}");
    let (code, report, _) = risks(kc, &[]).await;
    assert_eq!(code, 3, "{report}");
    let gates = finding(&report, "gate-injector").unwrap_or_else(|| panic!("{report}"));
    assert_eq!(gates["webhooks"], json!(["mutating-policy/hold"]));
    assert_eq!(gates["objects"], json!([HOLD]));
    assert!(
        gates["why"]
            .as_str()
            .unwrap()
            .contains("bound by hold-team"),
        "{gates}"
    );
    assert_eq!(gates["covered"], false);
    let rule = format!("{HOLD}=1h");
    let (_, report, _) = risks(kc, &["--release-gate", &rule]).await;
    assert_eq!(
        finding(&report, "gate-injector").unwrap()["covered"],
        true,
        "{report}"
    );

    // The binding with no parameter: every pod of team refused.
    needs_limits(&cp);
    let refused = until_pod(
        &cp,
        "refused",
        "a pod refused for want of the parameter",
        |ok, _| !ok,
    )
    .await;
    assert!(
        refused.contains("need-limits") || refused.contains("limits"),
        "{refused}"
    );
    let (_, report, _) = risks(kc, &[]).await;
    let param = finding(&report, "policy-parameter").unwrap_or_else(|| panic!("{report}"));
    assert_eq!(
        param["webhooks"],
        json!(["validating-policy/limits/need-limits"])
    );
    assert_eq!(param["objects"], json!(["ConfigMap team/limits"]));
    let why = param["why"].as_str().unwrap();
    assert!(
        why.contains("were missing (not checked: ") && why.contains("forbidden"),
        "{why}"
    );
    let (_, report, _) = risks(admin, &[]).await;
    let param = finding(&report, "policy-parameter").unwrap_or_else(|| panic!("{report}"));
    let why = param["why"].as_str().unwrap();
    assert!(
        why.contains("its parameter ConfigMap team/limits does not exist"),
        "{why}"
    );
    assert!(
        param["fix"]
            .as_str()
            .unwrap()
            .starts_with("create ConfigMap team/limits")
    );

    println!("refused: {refused}");
    let (code, table, _) = run_to_end(&["status", "--risks", "--kubeconfig", admin], LIMIT).await;
    assert_eq!(code, 3);
    println!("status --risks:\n{table}");
    assert!(
        table.contains("policy-parameter: validating-policy/limits/need-limits\n"),
        "{table}"
    );

    // The fix: the parameter created, the binding is fine.
    cp.kubectl_ok(&["create", "configmap", "limits", "-n", "team"]);
    let (_, report, _) = risks(admin, &[]).await;
    assert!(finding(&report, "policy-parameter").is_none(), "{report}");
    assert!(finding(&report, "gate-injector").is_some(), "{report}");
}
