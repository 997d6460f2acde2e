//! The Deployment form (manifests/deployment, through a kustomize overlay) and the Helm chart
//! (charts/metainit), each as a pod on the node: the token the kubelet projects, Ready by
//! the kubelet's probes, a gated labelled pod cleared by its service account (the API
//! server's audit log says whose PATCH it was).
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

/// helm as the node's admin, in kube-system, with a home of its own; its output.
fn helm(node: &Node, args: &[&str]) -> std::process::Output {
    let home = node.path("METAINIT_NODE").join("helm");
    Command::new(helm_binary())
        .args(args)
        .args(["--kubeconfig", &node.get("NODE_ADMIN"), "-n", "kube-system"])
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("helm runs")
}

/// helm, which must succeed; its stdout.
fn helm_ok(node: &Node, args: &[&str]) -> String {
    let out = helm(node, args);
    assert!(
        out.status.success(),
        "helm {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `helm install metainit` as this node needs it (its image, one replica, the node's
/// network namespace, the API server's address), plus `extra` values.
fn install(node: &Node, extra: &[&str]) {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/metainit");
    let api = format!(
        "apiServer.host=127.0.0.1,apiServer.port={}",
        node.api_port()
    );
    let mut args = vec![
        "install",
        "metainit",
        chart.to_str().unwrap(),
        "--set",
        "image.repository=localhost/node/metainit,image.tag=test,replicas=1,hostNetwork=true",
        "--set",
        &api,
    ];
    for value in extra {
        args.extend(["--set", value]);
    }
    helm_ok(node, &args);
}

pub fn the_helm_chart(node: &Node) {
    install(node, &[]);
    // Release `metainit` has the kustomize base's names and labels.
    let selector = "app.kubernetes.io/instance=metainit-deployment";
    ready_pod(node, selector);
    clears(node, "by-helm");
    helm_test_passes(node);
    helm_ok(node, &["uninstall", "metainit", "--wait"]);
    gone(node, selector);
    helm_test_fails_when_not_ready(node, selector);
}

/// `helm test`: the test pod (the metainit image, `metainit probe`, hostNetwork and told
/// where the API server is, as the release) GETs /readyz on the release's pod through its
/// metrics Service: it passes (its pod is deleted on success, so no log to show).
fn helm_test_passes(node: &Node) {
    let out = helm_ok(node, &["test", "metainit", "--timeout", "3m"]);
    println!("helm test, one Ready replica:\n{}", out.trim());
}

/// A release whose metainit cannot be ready (`--webhooks` without the chart's webhooks
/// rights: its watch of the webhook configurations is forbidden): running, not Ready, and
/// `helm test` fails, its log saying 503 and why.
fn helm_test_fails_when_not_ready(node: &Node, selector: &str) {
    install(node, &["extraArgs={--webhooks}"]);
    // Not ready for good, not merely not yet: its /readyz (the node's port 10275, the
    // static pod parked) says the watch was refused.
    let why = until("the release's /readyz: 503, forbidden", WAIT, || {
        admin_readyz(node)
            .filter(|(code, body)| *code == 503 && body.to_lowercase().contains("forbidden"))
    });
    println!("the release's /readyz: {why:?}");
    let out = helm(node, &["test", "metainit", "--timeout", "3m"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "helm test passed: {stdout}{stderr}");
    // Its log, as the kubelet wrote it: the release's pod asked at the node's address (a
    // hostNetwork pod's IP), 503.
    let log = test_pod_log(node);
    println!("helm test metainit (not ready): {}\n{log}", stderr.trim());
    let asked = format!("http://{}:10275/readyz (pod ", node.get("NODE_IP"));
    assert!(
        log.contains(&asked)
            && log.contains(", not ready): 503: ")
            && log.contains("did not answer 200"),
        "{log}"
    );
    // A failed test's hooks stay for inspection, and helm uninstall leaves them.
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
    helm_ok(node, &["uninstall", "metainit", "--wait"]);
    gone(node, selector);
}

/// GET /readyz on the node's admin port (in the node's network namespace): the status
/// code and the body.
fn admin_readyz(node: &Node) -> Option<(u16, String)> {
    let out = node
        .in_netns("curl")
        .args(["-s", "--max-time", "5", "-w", "\n%{http_code}"])
        .arg("http://127.0.0.1:10275/readyz")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, code) = text.rsplit_once('\n')?;
    Some((code.trim().parse().ok()?, body.to_string()))
}

/// The log of the `helm test` pod's container, from the kubelet's pod-logs directory: the
/// directory of this pod's uid (an earlier test pod's may still be there), once the
/// container's last line is in it.
fn test_pod_log(node: &Node) -> String {
    let pod = node
        .pod("kube-system", "metainit-test-readyz")
        .expect("the failed test pod, kept");
    let uid = pod["metadata"]["uid"].as_str().expect("a uid").to_string();
    let file = node
        .path("METAINIT_NODE")
        .join("pod-logs")
        .join(format!("kube-system_metainit-test-readyz_{uid}"))
        .join("probe/0.log");
    until("the test pod's log, to its last line", WAIT, || {
        std::fs::read_to_string(&file)
            .ok()
            .filter(|log| log.contains("did not answer 200"))
    })
}
