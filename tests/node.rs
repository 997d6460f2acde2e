//! The scene metainit exists for, on a real node (`scripts/node.sh`: containerd and runc, a
//! kubelet whose manifests directory holds etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler and metainit as static pods, as kubeadm lays a control-plane node out).
//! One story, in order, on one node, each step asserting what the API server and the kubelet
//! report (never metainit's log):
//!
//! 1. the boot: metainit's mirror pod Running and ready, its container started before the
//!    API server answered, the kubeconfig mounted as the README says and read by uid 65532;
//! 2. a labelled gated pod cleared, bound to the node and Running;
//! 3. the limits as shipped: a burst of 1,000 labelled gated pods cleared with the container's
//!    memory cgroup under the manifest's limit, nothing OOM-killed;
//! 4. metainit's restartCount still 0, two minutes and more after it started;
//! 5. the deadlock: without metainit's manifest, an installer's controller (gated by its own
//!    webhook) stays gated for the whole wait; with it, the controller is cleared, Running and
//!    ready, and then does its job on another pod;
//! 6. what the node's real kubeadm does around the static pod (its own offline phases, on a
//!    scratch /etc/kubernetes): its scheduler.conf at the node's advertise address, the user
//!    kubeconfig at the controlPlaneEndpoint, the serving certificate covering both; `init`
//!    and `join` preflight passing with metainit.yaml in the manifests directory;
//! 7. a release as a user makes one: `scripts/release.sh` builds the image for amd64 and
//!    arm64 and pushes it, and the chart, to a registry on the node (Debian's
//!    docker-registry, 127.0.0.1 in the node's network namespace), and writes the release's
//!    files, served on the node as a forge serves them; the static pod page's steps
//!    (kubeadm's kubeconfig installed and pointed at the node's own API server, the
//!    release's file in place of the node's own), pulled by containerd from the registry
//!    (its log), Running and Ready, clearing a labelled pod; the page's upgrade (a new
//!    mirror pod of the new image) and removal (the Leases and the rights gone);
//! 8. the Deployment form (the release's `metainit.yaml`) and the Helm chart (from the
//!    registry), each running the pushed image as a pod on the node with the token the
//!    kubelet projects, Ready by the kubelet's probes, clearing a gated labelled pod (the
//!    audit log names its service account); the chart's `helm test` passing on that pod, and
//!    failing on a release whose metainit cannot be ready;
//! 9. the guides' blocks at a workstation (the installed binary): the kubectl plugin, the
//!    completions and man pages, an orphaned gate removed by hand;
//! 10. a node restart: the kubelet, every container and containerd stopped, then started on
//!     the same directories: metainit back before the API server, clearing a labelled pod
//!     created while it was down.
//!
//! The Deployment form and the chart run in the node's network namespace (hostNetwork) and
//! are told where the API server is, as on a cluster whose CNI is not up yet.

mod common;
#[path = "node_story/docs.rs"]
mod docs;
#[path = "node_story/forms.rs"]
mod forms;
#[path = "node_story/guides.rs"]
mod guides;
#[path = "node_story/kubeadm.rs"]
mod kubeadm;
#[path = "node_story/limits.rs"]
mod limits;
#[path = "node_story/registry.rs"]
mod registry;
#[path = "node_story/restart.rs"]
mod restart;
#[path = "node_story/static_pod.rs"]
mod static_pod;

use std::{
    os::unix::fs::MetadataExt,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use common::{
    LABEL,
    node::{GATE, Node, WAIT, gates, installer, restarts, running_and_ready, started_at, until},
};
use serde_json::Value;

fn the_boot(node: &Node) -> Value {
    let name = format!("metainit-{}", node.get("NODE_NAME"));
    let pod = until("metainit's mirror pod Running and ready", WAIT, || {
        node.pod("kube-system", &name).filter(running_and_ready)
    });
    assert_eq!(
        pod["metadata"]["annotations"]["kubernetes.io/config.source"],
        "file"
    );
    // Started by the kubelet before the API server answered its first /readyz.
    let dir = node.path("METAINIT_NODE");
    let ready_at: i64 = std::fs::read_to_string(dir.join("apiserver-ready.at"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let started = started_at(&pod);
    assert!(
        started <= ready_at,
        "metainit started at {started}, after the API server was ready at {ready_at}"
    );
    // The manifest as shipped: only the image changed (its hostPath is the node's
    // /etc/kubernetes/metainit.conf, in the node's mount namespace).
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/metainit.yaml"),
    )
    .unwrap();
    let written = std::fs::read_to_string(node.path("NODE_METAINIT_MANIFEST")).unwrap();
    let changed: Vec<(&str, &str)> = shipped
        .lines()
        .zip(written.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert_eq!(shipped.lines().count(), written.lines().count());
    assert!(
        changed.len() == 1 && changed[0].0.trim_start().starts_with("image: "),
        "lines changed: {changed:?}"
    );
    // The kubeconfig as README says (chown 65532:65532, chmod 0600), read by uid 65532.
    let conf = std::fs::metadata(dir.join("etc/kubernetes/metainit.conf")).unwrap();
    assert_eq!(
        (conf.uid(), conf.gid(), conf.mode() & 0o777),
        (65532, 65532, 0o600)
    );
    assert_eq!(
        node.metainit_process_uid(),
        Some(65532),
        "metainit's process uid"
    );
    println!(
        "the boot: metainit started {}s before the API server's first /readyz 200",
        ready_at - started
    );
    pod
}

fn a_labelled_gated_pod_cleared(node: &Node) {
    let created = Instant::now();
    node.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: held, namespace: default, labels: {{"{LABEL}": "true"}}}}
spec:
  hostNetwork: true
  schedulingGates: [{{name: {GATE}}}]
  containers: [{{name: c, image: localhost/node/pause:test, imagePullPolicy: Never}}]
"#
    ));
    let pod = until(
        "the labelled gated pod cleared, bound and Running",
        WAIT,
        || {
            node.pod("default", "held")
                .filter(|p| gates(p).is_empty() && p["status"]["phase"] == "Running")
        },
    );
    assert_eq!(pod["spec"]["nodeName"], node.get("NODE_NAME"));
    println!(
        "a labelled gated pod: cleared, bound and Running {:?} after its create",
        created.elapsed()
    );
}

/// metainit's manifest moved out of the kubelet's directory; its mirror pod gone.
fn park(node: &Node) {
    let parked = node.path("METAINIT_NODE").join("metainit.parked.yaml");
    std::fs::rename(node.path("NODE_MANIFESTS").join("metainit.yaml"), parked).unwrap();
    until("metainit's mirror pod gone", WAIT, || {
        node.metainit().is_none().then_some(())
    });
}

/// metainit's manifest back in the kubelet's directory (in one rename).
fn unpark(node: &Node) {
    let parked = node.path("METAINIT_NODE").join("metainit.parked.yaml");
    std::fs::rename(parked, node.path("NODE_MANIFESTS").join("metainit.yaml")).unwrap();
}

fn the_deadlock(node: &Node) {
    park(node);
    installer::install_webhook(node);
    installer::install_controller(node);
    // Without metainit: the controller's pod is gated by the webhook, and nothing lifts it.
    let held = Duration::from_secs(20);
    let start = Instant::now();
    let pod = until("the controller's pod created", WAIT, || {
        node.pods("installer", "app=installer-controller").pop()
    });
    let pod_name = pod["metadata"]["name"].as_str().unwrap().to_string();
    while start.elapsed() < held {
        let pod = node
            .pod("installer", &pod_name)
            .expect("the controller's pod");
        assert_eq!(gates(&pod), vec![GATE], "without metainit: {pod}");
        assert!(
            pod["spec"]["nodeName"].is_null(),
            "bound while gated: {pod}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    println!("the deadlock: the installer's controller gated for {held:?} without metainit");
    // With metainit's manifest back in the kubelet's directory.
    unpark(node);
    let back = Instant::now();
    let pod = until(
        "the controller cleared, bound, Running and ready",
        WAIT,
        || node.pod("installer", &pod_name).filter(running_and_ready),
    );
    assert!(gates(&pod).is_empty(), "{pod}");
    println!(
        "the deadlock broken: the controller Running and ready {:?} after metainit's manifest was back",
        back.elapsed()
    );
    // And the installer does its job: a workload's pod gated by the webhook, processed.
    // Created gated by the installer's webhook: it fails open (`failurePolicy: Ignore`), so a
    // call that did not answer in time creates the pod ungated, and nothing would process it;
    // created again until the webhook gated it (the story is about the controller).
    let workload = "apiVersion: v1\nkind: Pod\nmetadata: {name: job, namespace: workloads}\nspec:\n  hostNetwork: true\n  containers: [{name: c, image: localhost/node/pause:test, imagePullPolicy: Never}]\n";
    until(
        "the workload's pod created gated by the installer",
        WAIT,
        || {
            let created = node
                .kubectl(&["create", "-o", "json", "-f", "-"], Some(workload))
                .ok()?;
            let created: Value = serde_json::from_str(&created).ok()?;
            if gates(&created).contains(&GATE.to_string()) {
                return Some(());
            }
            println!("the installer's webhook did not gate the workload's pod: created again");
            let _ = node.kubectl(
                &["-n", "workloads", "delete", "pod", "job", "--wait=true"],
                None,
            );
            None
        },
    );
    let job = until(
        "the workload's pod processed by the installer and Running",
        WAIT,
        || {
            node.pod("workloads", "job").filter(|p| {
                p["metadata"]["annotations"]["example.com/processed-by"] == pod_name.as_str()
                    && p["status"]["phase"] == "Running"
            })
        },
    );
    assert!(gates(&job).is_empty(), "{job}");
}

/// Two minutes and more after its container started, metainit was never restarted.
fn never_restarted(node: &Node, boot: &Value) {
    let started = started_at(boot);
    let name = format!("metainit-{}", node.get("NODE_NAME"));
    let pod = until(
        "two minutes since metainit started",
        Duration::from_secs(200),
        || {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64;
            (now - started >= 120)
                .then(|| node.pod("kube-system", &name))
                .flatten()
        },
    );
    assert_eq!(
        pod["metadata"]["uid"], boot["metadata"]["uid"],
        "the same pod"
    );
    assert_eq!(restarts(&pod), 0, "{pod}");
    assert!(running_and_ready(&pod), "{pod}");
}

#[test]
#[ignore = "the node tier: root, containerd and a Go-built kubelet (bash scripts/test.sh runs it)"]
fn a_control_plane_node_boots_with_metainit_and_breaks_an_installers_deadlock() {
    let node = Node::up();
    let boot = timed("the boot", || the_boot(&node));
    timed("a labelled gated pod", || {
        a_labelled_gated_pod_cleared(&node)
    });
    timed("the static pod page's check", || {
        docs::run(&node, "static-pod-check", None)
    });
    timed("the README's check", || {
        docs::run(&node, "readme-check", None)
    });
    timed("the limits as shipped", || limits::as_shipped(&node));
    timed("never restarted", || never_restarted(&node, &boot));
    timed("the deadlock", || the_deadlock(&node));
    timed("kubeadm around the static pod", || {
        kubeadm::around_the_static_pod(&node)
    });
    let mut registry = timed("the registry", || registry::Registry::start(&node));
    let pushed = timed("the release", || registry.release(&node));
    timed("the static pod from the release", || {
        static_pod::the_static_pod_from_it(&node, &registry, &pushed)
    });
    // The other two forms, with the static pod out of the way.
    park(&node);
    timed("the Deployment form", || {
        forms::the_deployment_form(&node, &pushed)
    });
    timed("the Helm chart", || forms::the_helm_chart(&node, &pushed));
    timed("the guides", || guides::the_guides(&node));
    unpark(&node);
    drop(registry);
    until("metainit's mirror pod Running and ready", WAIT, || {
        node.metainit().filter(running_and_ready)
    });
    timed("a node restart", || restart::a_node_restart(&node));
    // The network rule: the kubelet, containerd and every container dialled nothing else.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/node.sh");
    let status = Command::new("bash")
        .arg(&script)
        .args(["check-network", &node.get("METAINIT_NODE")])
        .status()
        .expect("bash runs");
    assert!(
        status.success(),
        "something on the node dialled outside 127.0.0.0/8"
    );
}

/// STEP of the story run, and how long it took said on stderr itself, past the harness's
/// capture (CI's log: where the tier's time goes).
fn timed<T>(step: &str, run: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = run();
    let line = format!("node story: {step} in {:.0?}\n", start.elapsed());
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    out
}
