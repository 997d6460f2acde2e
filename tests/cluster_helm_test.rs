//! `helm test`'s pod (charts/metainit/templates/tests/) on the real control plane, without a
//! kubelet: its RBAC hooks applied as `helm test` would make them, its command line (from
//! `helm template`) run by the local binary with its ServiceAccount's token. It passes
//! while a pod of the release answers /readyz 200 and fails when there is none and when the
//! one there stops answering. The pod itself runs only on a real node (`helm test` there).
//!
//!   cargo test --test cluster_helm_test     (starts its own control plane unless
//!                                            METAINIT_CONTROL_PLANE names a running one)
//!
//! The Deployment's pods never run here: a pod object of the Deployment's labels stands in
//! for one, its IP 127.0.0.1 and its `admin` port the local metainit's admin port (that
//! metainit runs as the chart's ServiceAccount). Nothing dials off loopback.

mod common;

use std::time::Duration;

use common::{
    control_plane::{ControlPlane, WAIT, until},
    helm::{Helm, chart},
    helm_binary, run_to_end, until_readyz,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// `helm template` of the release with the defaults, only the templates named, as JSON
/// objects (kubectl converts the YAML).
fn rendered(cp: &ControlPlane, helm: &Helm, release: &str, templates: &[&str]) -> Vec<Value> {
    let mut args = vec!["template", release, "-n", "kube-system"];
    let chart = chart();
    args.insert(2, &chart);
    for t in templates {
        args.extend(["--show-only", t]);
    }
    let yaml = helm.ok(&args);
    let (ok, out) = cp.kubectl_in(
        &["create", "-f", "-", "--dry-run=client", "-o", "json"],
        Some(&yaml),
    );
    assert!(ok, "kubectl create --dry-run: {out}");
    // One JSON object after another.
    serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .map(|v| v.expect("JSON"))
        .collect()
}

/// A pod object standing for one of the Deployment's: its pod template's labels, an
/// `admin` port of `port`, Running at 127.0.0.1.
async fn stand_in(cp: &ControlPlane, name: &str, labels: &Value, port: u16) {
    let pods = cp.pods("kube-system").await;
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "metainit", "image": "metainit:stand-in",
                  "ports": [{"name": "admin", "containerPort": port}]}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("stand-in pod made");
    let status = json!({"status": {"phase": "Running", "podIP": "127.0.0.1",
        "podIPs": [{"ip": "127.0.0.1"}],
        "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("stand-in pod's status");
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn the_helm_test_pod_passes_on_a_ready_release_and_fails_without_one() {
    let bin = helm_binary();
    let cp = ControlPlane::shared();
    let helm = Helm::new(bin, cp);
    let pid = std::process::id();
    let release = format!("metainit-t-{pid}");
    helm.ok(&["install", &release, &chart(), "-n", "kube-system"]);

    // The test hooks: the RBAC made, the pod's command line taken.
    let hooks = rendered(
        cp,
        &helm,
        &release,
        &["templates/tests/rbac.yaml", "templates/tests/readyz.yaml"],
    );
    let (pods, rbac): (Vec<Value>, Vec<Value>) =
        hooks.into_iter().partition(|o| o["kind"] == "Pod");
    for obj in &rbac {
        assert_eq!(obj["metadata"]["annotations"]["helm.sh/hook"], "test");
        cp.create("kube-system", obj);
    }
    let pod = &pods[0]["spec"];
    let account = pod["serviceAccountName"].as_str().unwrap().to_string();
    let c = &pod["containers"][0];
    let argv: Vec<String> = c["command"]
        .as_array()
        .into_iter()
        .chain(c["args"].as_array())
        .flatten()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(argv[..2], ["/metainit", "probe"], "{argv:?}");
    // `$(NODE_NAME)` as the kubelet expands it: the pod's node, from its env's fieldRef.
    assert_eq!(
        c["env"][0],
        json!({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    );
    let argv: Vec<String> = argv
        .into_iter()
        .map(|a| a.replace("$(NODE_NAME)", "node-1"))
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = cp.service_account_kubeconfig(dir.path(), "kube-system", &account);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let probe = || {
        let mut args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
        args.extend(["--kubeconfig", kubeconfig, "--timeout", "5s"]);
        async move { run_to_end(&args, Duration::from_secs(60)).await }
    };

    // No pod of the release yet: the test fails, saying so.
    let (code, _, err) = probe().await;
    assert_eq!(code, 1, "no pod: {err}");

    // A pod of the Deployment's labels, its admin port a metainit's that is ready.
    let labels = cp.kubectl_ok(&[
        "get",
        "deployment",
        &release,
        "-n",
        "kube-system",
        "-o",
        "jsonpath={.spec.template.metadata.labels}",
    ]);
    let labels: Value = serde_json::from_str(&labels).unwrap();
    let sa_dir = tempfile::tempdir().expect("tempdir");
    let sa = cp.service_account_kubeconfig(sa_dir.path(), "kube-system", &release);
    let gate = format!("example.com/helm-test-{pid}");
    let metainit = cp.metainit(&sa, &["--namespace", "kube-system", "--only", &gate]);
    let addr = metainit.admin_addr().await;
    until_readyz(&addr, WAIT).await;
    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
    let name = format!("{release}-stand-in");
    stand_in(cp, &name, &labels, port).await;
    let (code, out, err) = probe().await;
    assert_eq!(code, 0, "a ready release: {out}{err}");

    // The one replica stops answering: the test fails.
    assert!(metainit.stop().await.success());
    let (code, out, err) = probe().await;
    assert_eq!(code, 1, "no replica answers: {out}{err}");

    cp.pods("kube-system")
        .await
        .delete(&name, &Default::default())
        .await
        .expect("stand-in deleted");
    for obj in &rbac {
        let kind = obj["kind"].as_str().unwrap().to_lowercase();
        let name = obj["metadata"]["name"].as_str().unwrap();
        cp.kubectl_ok(&["delete", &kind, name, "-n", "kube-system"]);
    }
    helm.ok(&["uninstall", &release, "-n", "kube-system"]);
    until("the release gone", WAIT, || async {
        let (found, _) = cp.kubectl(&["get", "deployment", &release, "-n", "kube-system"]);
        (!found).then_some(())
    })
    .await;
}
