//! Kueue, the most used gate injector, met for real on the real node with its network: its
//! manager built from its Go module (sigs.k8s.io/kueue, tests/kueue/go.mod) and installed
//! from its own config/default (scripts/kueue.sh), its webhooks served on the pod network.
//! Only what metainit depends on is asserted of Kueue. One story, in order:
//!
//! a. Kueue gates the pods of its queue and lifts the gates when it admits them (and
//!    suspends a Job of its queue until it admits it: no gate there); metainit
//!    (the static pod, and a daemon from the machine with `--watch-gates`) leaves them alone
//!    (unlabelled: no PATCH of metainit's in the audit log); a pod over the quota stays
//!    gated, and `metainit status` lists its gate with its age, `metainit_gated_pods` counts it;
//! b. kueue#9482's shape: a pod with a gate of its own besides Kueue's: Kueue admits it and
//!    lifts its own; the other stays, `status` and `status --risks` name it, and
//!    `--release-gate` of that name clears it and nothing else;
//! c. Kueue scaled to zero: its pod webhooks fail closed (a pod of team-a is refused);
//!    `status --risks`, as the read-only role of manifests/rbac-status.yaml, reports what
//!    they block (the namespaces, the workloads, a hostNetwork DaemonSet), with the fix; the gates
//!    stay, and `--release-gate` cannot lift them (Kueue's validating webhook refuses every
//!    pod update): metainit says so, naming the webhook;
//! d. Kueue uninstalled: the gates stay; `--release-gate kueue.x-k8s.io/admission=AGE`
//!    releases them by age, that gate only, and no younger pod.

mod common;

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::Instant,
};

use common::node::{
    Node, WAIT, gates,
    kueue::{self, ADMISSION, Daemon, NS, gates_of, metainit, queued_pod, text},
    pod_writes, until,
};

const EXTRA: &str = "example.com/extra";
const CNI_AGENT: &str = "apiVersion: v1\nkind: Namespace\nmetadata: {name: cni}\n---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: cni-agent, namespace: cni}\nspec:\n  selector: {matchLabels: {app: cni-agent}}\n  template:\n    metadata: {labels: {app: cni-agent}}\n    spec:\n      hostNetwork: true\n      containers: [{name: c, image: localhost/node/pause:test, imagePullPolicy: Never}]\n";

/// A Job of Kueue's queue: created suspended by Kueue's webhook (its way for Jobs: no gate),
/// unsuspended when admitted; its pod runs.
fn a_job_admitted(node: &Node) -> String {
    let job = format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: train, namespace: {NS}, labels: {{kueue.x-k8s.io/queue-name: user-queue}}}}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - {{name: c, image: localhost/node/pause:test, imagePullPolicy: Never, resources: {{requests: {{cpu: 100m, memory: 10Mi}}}}}}\n"
    );
    let created = node
        .kubectl(&["create", "-o", "json", "-f", "-"], Some(&job))
        .expect("kubectl create the Job");
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    assert_eq!(
        created["spec"]["suspend"], true,
        "not suspended by Kueue: {created}"
    );
    let start = Instant::now();
    let pod = until("the Job admitted and its pod Running", WAIT, || {
        node.pods(NS, "job-name=train")
            .into_iter()
            .find(|p| p["status"]["phase"] == "Running" && gates(p).is_empty())
    });
    println!(
        "a. Kueue suspended a Job of its queue and admitted it: its pod Running {:?} after",
        start.elapsed()
    );
    pod["metadata"]["name"].as_str().unwrap().to_string()
}

fn admitted_and_held(node: &Node, conf: &Path) {
    // Created gated: the object the API server returns carries Kueue's gate.
    let created = node
        .kubectl(
            &["create", "-o", "json", "-f", "-"],
            Some(&queued_pod("small", "100m", &[])),
        )
        .expect("kubectl create");
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    assert!(
        gates(&created).contains(&ADMISSION.to_string()),
        "not gated by Kueue: {created}"
    );
    let admitted = Instant::now();
    until(
        "Kueue admitted the small pod: no gate, Running",
        WAIT,
        || {
            node.pod(NS, "small")
                .filter(|p| gates(p).is_empty() && p["status"]["phase"] == "Running")
        },
    );
    println!(
        "a. Kueue gated a pod of its queue and admitted it ({:?})",
        admitted.elapsed()
    );
    node.apply(&queued_pod("held", "2", &[]));
    until("the pod over the quota gated by Kueue", WAIT, || {
        gates_of(node, "held")
            .contains(&ADMISSION.to_string())
            .then_some(())
    });
    let status = metainit(conf, &["status"]);
    let out = text(&status);
    let line = out
        .lines()
        .find(|l| l.contains("team-a/held"))
        .unwrap_or_else(|| panic!("status does not list team-a/held:\n{out}"));
    assert!(line.contains(ADMISSION) && line.contains(" no "), "{line}");
    println!("a. metainit status, while Kueue holds a pod over its quota:\n{out}");
    watched_gates(conf);
}

/// A metainit daemon from the machine with `--watch-gates`: its metrics count the held pod.
fn watched_gates(conf: &Path) {
    let port = common::node::installer::free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut child: Child = Command::new(env!("CARGO_BIN_EXE_metainit"))
        .arg("--kubeconfig")
        .arg(conf)
        .args(["--watch-gates", ADMISSION, "--admin-addr", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("metainit runs");
    let wanted = format!("metainit_gated_pods{{gate=\"{ADMISSION}\"}} 1");
    let metrics = until("metainit_gated_pods counts the held pod", WAIT, || {
        let out = Command::new("curl")
            .args(["-s", "--max-time", "2", &format!("http://{addr}/metrics")])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains(&wanted).then_some(text)
    });
    let _ = child.kill();
    let _ = child.wait();
    let lines: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("metainit_gated_"))
        .collect();
    println!(
        "a. metainit --watch-gates {ADMISSION}: {}",
        lines.join("; ")
    );
}

fn the_extra_gate(node: &Node, conf: &Path, reader: &Path) {
    node.apply(&queued_pod("extra", "100m", &[EXTRA]));
    until(
        "Kueue admitted it and lifted its own gates; the extra one stays",
        WAIT,
        || (gates_of(node, "extra") == [EXTRA]).then_some(()),
    );
    let out = text(&metainit(conf, &["status"]));
    assert!(
        out.lines()
            .any(|l| l.contains("team-a/extra") && l.contains(EXTRA)),
        "status does not name the extra gate:\n{out}"
    );
    let risks = text(&metainit(reader, &["status", "--risks"]));
    println!("b. status --risks, the extra gate held:\n{risks}");
    assert!(
        risks.contains(EXTRA),
        "status --risks does not name {EXTRA}:\n{risks}"
    );
    let rule = format!("{EXTRA}=1s");
    let log = node.path("METAINIT_NODE").join("release-extra.log");
    let daemon = Daemon::start(conf, &["--release-gate", &rule], log);
    until("the extra gate released, the pod Running", WAIT, || {
        node.pod(NS, "extra")
            .filter(|p| gates(p).is_empty() && p["status"]["phase"] == "Running")
    });
    drop(daemon);
    assert!(
        gates_of(node, "held").contains(&ADMISSION.to_string()),
        "--release-gate {EXTRA} lifted Kueue's gate from another pod"
    );
    println!("b. #9482's shape: Kueue lifted its own gates, --release-gate {rule} the other");
}

fn kueue_down(node: &Node, conf: &Path, reader: &Path) {
    let before = gates_of(node, "held");
    kueue::scale(node, 0);
    let risks = metainit(reader, &["status", "--risks"]);
    let out = text(&risks);
    println!(
        "c. Kueue down, status --risks as the read-only role (exit {:?}):\n{out}",
        risks.status.code()
    );
    assert_eq!(risks.status.code(), Some(3), "{out}");
    let down = "down: mutating/kueue-mutating-webhook-configuration/mpod.kb.io";
    let finding = out
        .split("\n\n")
        .find(|f| f.starts_with(down))
        .unwrap_or_else(|| panic!("no {down:?} in:\n{out}"));
    for named in [
        "DaemonSet cni/cni-agent",
        "team-a",
        "default",
        "not cleared",
    ] {
        assert!(finding.contains(named), "{named:?} not in:\n{finding}");
    }
    assert!(!finding.contains("kube-system,"), "{finding}");
    // And for real: a pod of any other namespace is refused.
    let refused = node
        .kubectl(
            &["create", "-f", "-"],
            Some(&queued_pod("refused", "100m", &[])),
        )
        .expect_err("a pod created with Kueue down");
    assert!(
        refused.contains("failed calling webhook \"mpod.kb.io\""),
        "{refused}"
    );
    let rule = format!("{ADMISSION}=1s");
    let log = node.path("METAINIT_NODE").join("release-down.log");
    let daemon = Daemon::start(conf, &["--release-gate", &rule], log);
    let said = until(
        "metainit says Kueue's webhook refused the release",
        WAIT,
        || {
            let said = daemon.said();
            said.contains("vpod.kb.io").then_some(said)
        },
    );
    drop(daemon);
    let line = said
        .lines()
        .find(|l| l.contains("vpod.kb.io"))
        .unwrap_or("");
    println!("c. --release-gate {rule} with Kueue down: {line}");
    assert_eq!(
        gates_of(node, "held"),
        before,
        "the gates changed with Kueue down"
    );
}

fn kueue_uninstalled(node: &Node, conf: &Path) {
    let before = gates_of(node, "held");
    // Uninstalled as `helm uninstall` does it (the CRDs and their objects stay), while down:
    // nothing is left to lift the gates, or to delete the pods.
    kueue::script(node, "uninstall", &["--keep-pods"]);
    assert_eq!(
        gates_of(node, "held"),
        before,
        "the gates changed at the uninstall"
    );
    // A younger pod with Kueue's gate (no webhook puts it there now: its own spec does).
    node.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: young, namespace: {NS}}}\nspec:\n  schedulingGates: [{{name: {ADMISSION}}}]\n  containers: [{{name: c, image: localhost/node/pause:test, imagePullPolicy: Never}}]\n"
    ));
    let held = node.pod(NS, "held").unwrap();
    let created = held["metadata"]["creationTimestamp"].as_str().unwrap();
    let age = common::node::now() - common::node::epoch_seconds(created) as i64;
    let rule = format!("{ADMISSION}={}s", (age / 2).max(1));
    let shown = text(&metainit(conf, &["status", "--release-gate", &rule]));
    println!("d. Kueue uninstalled; status --release-gate {rule}:\n{shown}");
    let log = node.path("METAINIT_NODE").join("release-gone.log");
    let daemon = Daemon::start(conf, &["--release-gate", &rule], log);
    until("the admission gate released from the old pod", WAIT, || {
        (!gates_of(node, "held").contains(&ADMISSION.to_string())).then_some(())
    });
    drop(daemon);
    let left: Vec<String> = before.into_iter().filter(|g| g != ADMISSION).collect();
    assert_eq!(gates_of(node, "held"), left, "not that gate only");
    assert_eq!(
        gates_of(node, "young"),
        [ADMISSION],
        "a younger pod released"
    );
    println!(
        "d. --release-gate {rule} lifted {ADMISSION} from the pod {age}s old, left {left:?} and the younger pod"
    );
}

#[test]
#[ignore = "the node tier: root, containerd and a Go-built kubelet (bash scripts/test.sh runs it)"]
fn kueue_holds_pods_and_metainit_releases_only_what_it_is_told() {
    let node = Node::up();
    kueue::install(&node);
    let conf = node
        .path("METAINIT_NODE")
        .join("etc/kubernetes/metainit.conf");
    let reader = kueue::kubeconfig_for(&node, "risk-reader", "metainit-status");
    // A network agent, as a CNI runs one: hostNetwork, in a namespace of its own.
    node.apply(CNI_AGENT);
    let rbac = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/rbac-status.yaml");
    node.kubectl(&["apply", "-f", rbac], None)
        .expect("kubectl apply rbac-status.yaml");
    admitted_and_held(&node, &conf);
    let job_pod = a_job_admitted(&node);
    the_extra_gate(&node, &conf, &reader);
    kueue_down(&node, &conf, &reader);
    kueue_uninstalled(&node, &conf);
    // metainit never wrote a pod of team-a but where told (the extra and admission gates).
    for name in ["small", "young", job_pod.as_str()] {
        let by_metainit = pod_writes(&node, NS, name)
            .into_iter()
            .filter(|(user, _, _)| user == "metainit")
            .count();
        assert_eq!(by_metainit, 0, "metainit wrote pod {NS}/{name}");
    }
    assert!(node.script(&["check-network"]), "dialled outside the node");
}
