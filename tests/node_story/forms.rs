//! The Deployment form (manifests/deployment, through a kustomize overlay) and the Helm chart
//! (charts/metainit), each as a pod on the node: the token the kubelet projects, Ready by
//! the kubelet's probes, a gated labelled pod cleared by its service account (the API
//! server's audit log says whose PATCH it was). The chart's `helm test` too: its pod passes
//! on the Ready replica and fails once the Deployment is scaled to none.
//!
//! What this node needs changed, and nothing else: no pod network and no kube-proxy, so the
//! pod runs in the node's network namespace and is told where the API server is; one
//! replica (a second would want the same port on the same node).

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use crate::common::{
    helm_binary,
    node::{Node, WAIT, gates, held_pod, pod_writes, running_and_ready, until},
};

const ACCOUNT: &str = "system:serviceaccount:kube-system:metainit";

/// A relative path from `from` to `to` (kustomize wants its bases relative).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c);
    }
    out
}

fn overlay(node: &Node) -> PathBuf {
    let dir = node.path("METAINIT_NODE").join("deployment");
    std::fs::create_dir_all(&dir).unwrap();
    let base = relative(
        &dir,
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/deployment"),
    );
    let port = node.api_port();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            r#"apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [{base}]
images:
- {{name: ghcr.io/example/metainit, newName: localhost/node/metainit, newTag: test}}
patches:
- target: {{kind: Deployment, name: metainit}}
  patch: |
    - {{op: replace, path: /spec/replicas, value: 1}}
    - {{op: add, path: /spec/template/spec/hostNetwork, value: true}}
    - {{op: add, path: /spec/template/spec/containers/0/env/-, value: {{name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}}}}
    - {{op: add, path: /spec/template/spec/containers/0/env/-, value: {{name: KUBERNETES_SERVICE_PORT, value: "{port}"}}}}
"#,
            base = base.display()
        ),
    )
    .unwrap();
    dir
}

/// The pod of a form, Running and Ready by the kubelet's probes, with the projected token
/// mounted where in-cluster configuration reads it (seen from the host, in its root).
fn ready_pod(node: &Node, selector: &str) {
    let pod = until("the form's pod Running and Ready", WAIT, || {
        node.pods("kube-system", selector)
            .into_iter()
            .find(running_and_ready)
    });
    let volumes = pod["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        volumes.iter().any(|v| v["projected"]["sources"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| !s["serviceAccountToken"].is_null()))),
        "no projected token: {pod}"
    );
    let pid = until("the form's metainit process", WAIT, || {
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline)
                .starts_with("/metainit\0--node-name=")
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
    });
    let token = std::fs::read_to_string(format!(
        "/proc/{pid}/root/var/run/secrets/kubernetes.io/serviceaccount/token"
    ))
    .expect("the projected token, in the container");
    assert!(token.starts_with("eyJ"), "not a JWT: {token}");
}

/// A gated labelled pod, cleared and Running; the audit log shows the form's PATCH.
fn clears(node: &Node, name: &str) {
    let start = Instant::now();
    node.apply(&held_pod("default", name, true));
    until("the pod cleared and Running", WAIT, || {
        node.pod("default", name)
            .filter(|p| gates(p).is_empty() && p["status"]["phase"] == "Running")
    });
    let writes = pod_writes(node, "default", name);
    assert!(
        writes
            .iter()
            .any(|(user, code, _)| user == ACCOUNT && *code == 200),
        "no PATCH of {name} by {ACCOUNT}: {writes:?}"
    );
    println!("{name}: cleared by {ACCOUNT} in {:?}", start.elapsed());
}

fn gone(node: &Node, selector: &str) {
    until("the form's pods gone", WAIT, || {
        node.pods("kube-system", selector).is_empty().then_some(())
    });
}

pub fn the_deployment_form(node: &Node) {
    let dir = overlay(node);
    let dir = dir.to_str().unwrap();
    node.kubectl(&["apply", "-k", dir], None)
        .unwrap_or_else(|e| panic!("kubectl apply -k: {e}"));
    let selector = "app.kubernetes.io/instance=metainit-deployment";
    ready_pod(node, selector);
    clears(node, "by-deployment");
    node.kubectl(&["delete", "-k", dir], None)
        .unwrap_or_else(|e| panic!("kubectl delete -k: {e}"));
    gone(node, selector);
}

pub fn the_helm_chart(node: &Node) {
    let port = node.api_port();
    let home = node.path("METAINIT_NODE").join("helm");
    let run = |args: &[&str]| {
        let out = Command::new(helm_binary())
            .args(args)
            .args(["--kubeconfig", &node.get("NODE_ADMIN"), "-n", "kube-system"])
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .output()
            .expect("helm runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let helm = |args: &[&str]| {
        let (ok, out) = run(args);
        assert!(ok, "helm {args:?}: {out}");
    };
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/metainit");
    helm(&[
        "install",
        "metainit",
        chart.to_str().unwrap(),
        "--set",
        "image.repository=localhost/node/metainit,image.tag=test,replicas=1,hostNetwork=true",
        "--set",
        &format!("apiServer.host=127.0.0.1,apiServer.port={port}"),
    ]);
    // Release `metainit` has the kustomize base's names and labels.
    let selector = "app.kubernetes.io/instance=metainit-deployment";
    ready_pod(node, selector);
    clears(node, "by-helm");
    // helm test: its pod (the same image, hostNetwork and apiServer) GETs the replica's
    // /readyz; it passes while the replica is Ready and fails once there is none.
    let (ok, out) = run(&["test", "metainit", "--timeout", "3m"]);
    assert!(ok, "helm test on a Ready replica: {out}");
    println!("helm test, one Ready replica: {}", out.trim());
    node.kubectl(
        &[
            "scale",
            "deployment",
            "metainit",
            "-n",
            "kube-system",
            "--replicas=0",
        ],
        None,
    )
    .unwrap_or_else(|e| panic!("kubectl scale: {e}"));
    gone(node, selector);
    let (ok, out) = run(&["test", "metainit", "--timeout", "3m"]);
    assert!(!ok, "helm test passed with no replica: {out}");
    println!("helm test, no replica: {}", out.trim());
    // A failed test's hooks stay for inspection; helm uninstall leaves them.
    node.kubectl(
        &[
            "delete",
            "pods,serviceaccounts,roles.rbac.authorization.k8s.io,rolebindings.rbac.authorization.k8s.io,networkpolicies.networking.k8s.io",
            "-n",
            "kube-system",
            "-l",
            "app.kubernetes.io/instance=metainit,app.kubernetes.io/component=test",
        ],
        None,
    )
    .unwrap_or_else(|e| panic!("kubectl delete the test hooks: {e}"));
    helm(&["uninstall", "metainit", "--wait"]);
    gone(node, selector);
}
