//! The Deployment form (manifests/deployment, through a kustomize overlay) and the Helm chart
//! (charts/metainit), each as a pod on the node: the token the kubelet projects, Ready by
//! the kubelet's probes, a gated labelled pod cleared by its service account (the API
//! server's audit log says whose PATCH it was).
//!
//! Both run the image `scripts/release.sh` pushed to the node's registry (`registry.rs`),
//! from the release's files and its chart in that registry, installed and checked by the
//! documentation's own blocks (`docs.rs`): two replicas on the pod network, as shipped. The release that
//! cannot be ready runs in the node's network namespace (hostNetwork, told where the API
//! server is), so that its /readyz is read on the node's port.

use std::{path::Path, process::Command, time::Instant};

use serde_json::Value;

use crate::{
    common::{
        LABEL, helm_binary,
        node::{Node, WAIT, gates, held_pod, pod_writes, running_and_ready, until},
    },
    docs,
    registry::Pushed,
};

const ACCOUNT: &str = "system:serviceaccount:kube-system:metainit";

/// The pod of a form, Running and Ready, its container running the image release.sh
/// pushed (by digest: the image the kubelet asked for, and the one containerd pulled).
pub fn runs_image(node: &Node, selector: &str, pushed: &Pushed) -> Value {
    let pod = until(
        "the form's pod of the pushed image Running and Ready",
        WAIT,
        || {
            node.pods("kube-system", selector).into_iter().find(|p| {
                p["spec"]["containers"][0]["image"] == pushed.image.as_str() && running_and_ready(p)
            })
        },
    );
    let status = &pod["status"]["containerStatuses"][0];
    assert!(
        status["imageID"]
            .as_str()
            .is_some_and(|id| id.ends_with(pushed.digest())),
        "not the pushed image: {status}"
    );
    pod
}

/// The pod of a form, as `runs_image`, with the projected token mounted where in-cluster
/// configuration reads it (seen from the host, in its root).
fn ready_pod(node: &Node, selector: &str, pushed: &Pushed) {
    let pod = runs_image(node, selector, pushed);
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

/// A gated labelled pod, cleared and Running; the audit log shows `account`'s PATCH.
pub fn clears_by(node: &Node, name: &str, account: &str) {
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
            .any(|(user, code, _)| user == account && *code == 200),
        "no PATCH of {name} by {account}: {writes:?}"
    );
    println!("{name}: cleared by {account} in {:?}", start.elapsed());
}

fn gone(node: &Node, selector: &str) {
    until("the form's pods gone", WAIT, || {
        node.pods("kube-system", selector).is_empty().then_some(())
    });
}

/// The Deployment form as its pages say, every block run (`docs::run`): the README's quick
/// start and the page's step 1 (the release's `metainit.yaml`, applied server-side: two
/// replicas on the pod network, the API server through the `kubernetes` Service), "Check it", a labelled pod cleared by its service
/// account, the README's label patch, `metainit --once` from a workstation, and "Remove it".
pub fn the_deployment_form(node: &Node, pushed: &Pushed) {
    let selector = "app.kubernetes.io/instance=metainit-deployment";
    docs::run(node, "readme-deployment", Some(pushed));
    docs::run(node, "deployment-apply", Some(pushed));
    ready_pod(node, selector, pushed);
    docs::run(node, "deployment-check", Some(pushed));
    replicas_share(node, selector);
    clears_by(node, "by-deployment", ACCOUNT);
    let writes = pod_writes(node, "default", "by-deployment");
    assert_eq!(
        writes.len(),
        1,
        "one PATCH by two replicas that share: {writes:?}"
    );
    the_label_patch(node);
    docs::run(node, "readme-once", Some(pushed));
    docs::run(node, "deployment-delete", Some(pushed));
    gone(node, selector);
}

/// Both replicas keep their Lease in kube-system (role.yaml's rights), each named after
/// its pod: they share the work (src/peers/).
fn replicas_share(node: &Node, selector: &str) {
    let pods: Vec<String> = node
        .pods("kube-system", selector)
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    assert_eq!(pods.len(), 2, "{pods:?}");
    until("each replica's Lease", WAIT, || {
        let leases = node.json(&[
            "-n",
            "kube-system",
            "get",
            "leases",
            "-l",
            "app.kubernetes.io/name=metainit,app.kubernetes.io/component=peer",
        ])?;
        let holders: Vec<&str> = leases["items"]
            .as_array()?
            .iter()
            .filter_map(|l| l["spec"]["holderIdentity"].as_str())
            .collect();
        pods.iter()
            .all(|p| holders.contains(&p.as_str()))
            .then_some(())
    });
}

/// The README's `kubectl patch` of a Deployment's pod template, on one made for it.
fn the_label_patch(node: &Node) {
    for args in [
        &["create", "namespace", "docs"][..],
        &[
            "-n",
            "docs",
            "create",
            "deployment",
            "labelled",
            "--image=localhost/node/pause:test",
        ],
    ] {
        node.kubectl(args, None)
            .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"));
    }
    docs::run(node, "readme-label", None);
    let template = node
        .json(&["-n", "docs", "get", "deployment", "labelled"])
        .expect("the Deployment");
    assert_eq!(
        template["spec"]["template"]["metadata"]["labels"][LABEL], "true",
        "{template}"
    );
    node.kubectl(&["delete", "namespace", "docs", "--wait=false"], None)
        .unwrap_or_else(|e| panic!("kubectl delete namespace docs: {e}"));
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

/// `helm install metainit -f VALUES` (the release's: the image), as this node needs it
/// (one replica, the node's network namespace, the API server's address), plus `extra` values.
fn install(node: &Node, pushed: &Pushed, extra: &[&str]) {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/metainit");
    let api = format!(
        "apiServer.host=127.0.0.1,apiServer.port={}",
        node.api_port()
    );
    let values = pushed.out.join("values.yaml");
    let mut args = vec![
        "install",
        "metainit",
        chart.to_str().unwrap(),
        "-f",
        values.to_str().unwrap(),
        "--set",
        "replicas=1,hostNetwork=true",
        "--set",
        &api,
    ];
    for value in extra {
        args.extend(["--set", value]);
    }
    helm_ok(node, &args);
}

/// The chart as its pages say, every block run: the README's quick start (the release's
/// chart from the registry; `helm test` passing on both replicas), a labelled pod cleared by its service
/// account; the Helm page's install, test, upgrade and uninstall; the chart README's.
/// Then a release that cannot be ready fails `helm test`.
pub fn the_helm_chart(node: &Node, pushed: &Pushed) {
    // Release `metainit` has the kustomize base's names and labels.
    let selector = "app.kubernetes.io/instance=metainit-deployment";
    docs::run(node, "readme-helm", Some(pushed));
    ready_pod(node, selector, pushed);
    clears_by(node, "by-helm", ACCOUNT);
    helm_ok(node, &["uninstall", "metainit", "--wait"]);
    gone(node, selector);
    docs::run(node, "helm-page", Some(pushed));
    gone(node, selector);
    docs::run(node, "chart-readme", Some(pushed));
    helm_ok(node, &["uninstall", "metainit", "--wait"]);
    gone(node, selector);
    helm_test_fails_when_not_ready(node, pushed, selector);
}

/// A release whose metainit cannot be ready (`--webhooks` without the chart's webhooks
/// rights: its watch of the webhook configurations is forbidden): running, not Ready, and
/// `helm test` fails, its log saying 503 and why.
fn helm_test_fails_when_not_ready(node: &Node, pushed: &Pushed, selector: &str) {
    install(node, pushed, &["extraArgs={--webhooks}"]);
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
