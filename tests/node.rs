//! The scene metainit exists for, on a real node (`scripts/node.sh`: containerd and runc, a
//! kubelet whose manifests directory holds etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler and metainit as static pods, as kubeadm lays a control-plane node out).
//! One story, in order, on one node, each step asserting what the API server and the kubelet
//! report (never metainit's log):
//!
//! 1. the boot: metainit's mirror pod Running and ready, its container started before the
//!    API server answered, the kubeconfig mounted as the README says and read by uid 65532;
//! 2. a labelled gated pod cleared, bound to the node and Running;
//! 3. metainit's restartCount still 0, two minutes and more after it started;
//! 4. the deadlock: without metainit's manifest, an installer's controller (gated by its own
//!    webhook) stays gated for the whole wait; with it, the controller is cleared, Running and
//!    ready, and then does its job on another pod.

use std::{
    collections::HashMap,
    io::Write,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

const LABEL: &str = "k8s.opsani.io/initializer";
const GATE: &str = "example.com/installer";
const WAIT: Duration = Duration::from_secs(120);

struct Node {
    env: HashMap<String, String>,
}

impl Node {
    /// A node booted for this test binary (and stopped when it exits); or, for a run by
    /// hand, the one `METAINIT_NODE` names, if it has just booted.
    fn up() -> Node {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/node.sh");
        let args = match std::env::var("METAINIT_NODE") {
            Ok(dir) if !dir.is_empty() => vec!["env".to_string(), dir],
            _ => vec![
                "up".into(),
                "--owner".into(),
                std::process::id().to_string(),
            ],
        };
        let out = Command::new("bash")
            .arg(&script)
            .args(&args)
            .stderr(Stdio::inherit())
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "scripts/node.sh up failed (its reason is above)"
        );
        let env = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Node { env }
    }

    fn get(&self, k: &str) -> String {
        self.env
            .get(k)
            .unwrap_or_else(|| panic!("scripts/node.sh printed no {k}"))
            .clone()
    }

    fn path(&self, k: &str) -> PathBuf {
        self.get(k).into()
    }

    /// kubectl as the admin; its stdout, or a failure with its stderr.
    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.get("NODE_ADMIN"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().expect("kubectl ends");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    fn apply(&self, yaml: &str) {
        self.kubectl(&["apply", "-f", "-"], Some(yaml))
            .unwrap_or_else(|e| panic!("kubectl apply failed: {e}\n{yaml}"));
    }

    fn json(&self, args: &[&str]) -> Option<Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let text = self.kubectl(&all, None).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn pod(&self, ns: &str, name: &str) -> Option<Value> {
        self.json(&["-n", ns, "get", "pod", name])
    }

    /// The pods of a namespace whose labels match `selector`.
    fn pods(&self, ns: &str, selector: &str) -> Vec<Value> {
        self.json(&["-n", ns, "get", "pods", "-l", selector])
            .and_then(|v| v["items"].as_array().cloned())
            .unwrap_or_default()
    }
}

/// Polls `check` until it gives a value, for at most `limit`.
fn until<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn gates(pod: &Value) -> Vec<String> {
    pod["spec"]["schedulingGates"]
        .as_array()
        .map(|g| {
            g.iter()
                .filter_map(|g| g["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn running_and_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn started_at(pod: &Value) -> i64 {
    let text = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
        .as_str()
        .unwrap_or_else(|| panic!("not running: {pod}"));
    let out = Command::new("date")
        .args(["-u", "-d", text, "+%s"])
        .output()
        .expect("date runs");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn restarts(pod: &Value) -> i64 {
    pod["status"]["containerStatuses"][0]["restartCount"]
        .as_i64()
        .unwrap_or(-1)
}

/// The uid of the process running metainit's static pod (its command line is the manifest's).
fn metainit_process_uid() -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.starts_with("/metainit --kubeconfig=/etc/kubernetes/metainit.conf") {
            let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
            let uid = status.lines().find(|l| l.starts_with("Uid:"))?;
            return uid.split_whitespace().nth(1)?.parse().ok();
        }
    }
    None
}

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
    // The manifest as shipped: only the image and the kubeconfig's host path changed.
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
        changed.len() == 2
            && changed[0].0.trim_start().starts_with("image: ")
            && changed[1]
                .0
                .trim_start()
                .starts_with("path: /etc/kubernetes/metainit.conf"),
        "lines changed: {changed:?}"
    );
    // The kubeconfig as README says (chown 65532:65532, chmod 0600), read by uid 65532.
    let conf = std::fs::metadata(dir.join("etc/kubernetes/metainit.conf")).unwrap();
    assert_eq!(
        (conf.uid(), conf.gid(), conf.mode() & 0o777),
        (65532, 65532, 0o600)
    );
    assert_eq!(
        metainit_process_uid(),
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The installer's webhook: a Deployment (not labelled) and its configuration, which gates
/// every new pod in the namespaces `installer` and `workloads` but the webhook's own.
fn install_webhook(node: &Node) {
    let pki = node.path("NODE_PKI");
    let port = free_port();
    node.apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: installer}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: workloads}\n");
    node.kubectl(
        &[
            "-n",
            "installer",
            "create",
            "secret",
            "tls",
            "webhook-tls",
            &format!("--cert={}", pki.join("installer-webhook.crt").display()),
            &format!("--key={}", pki.join("installer-webhook.key").display()),
        ],
        None,
    )
    .expect("the webhook's Secret");
    node.apply(&format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: webhook, namespace: installer}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: installer-webhook}}}}
  template:
    metadata: {{labels: {{app: installer-webhook}}}}
    spec:
      hostNetwork: true
      enableServiceLinks: false
      containers:
      - name: webhook
        image: localhost/node/installer:test
        imagePullPolicy: Never
        args: [webhook]
        env:
        - {{name: ADDR, value: "127.0.0.1:{port}"}}
        - {{name: CERT, value: /tls/tls.crt}}
        - {{name: KEY, value: /tls/tls.key}}
        volumeMounts: [{{name: tls, mountPath: /tls, readOnly: true}}]
      volumes: [{{name: tls, secret: {{secretName: webhook-tls}}}}]
"#
    ));
    until("the webhook's pod Running and ready", WAIT, || {
        node.pods("installer", "app=installer-webhook")
            .into_iter()
            .find(running_and_ready)
    });
    let ca = std::fs::read(pki.join("ca.crt")).unwrap();
    let ca = base64(&ca);
    node.apply(&format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {{name: installer}}
webhooks:
- name: gate.installer.example.com
  clientConfig: {{url: "https://127.0.0.1:{port}/mutate", caBundle: "{ca}"}}
  rules: [{{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods]}}]
  namespaceSelector:
    matchExpressions: [{{key: kubernetes.io/metadata.name, operator: In, values: [installer, workloads]}}]
  objectSelector:
    matchExpressions: [{{key: app, operator: NotIn, values: [installer-webhook]}}]
  failurePolicy: Ignore
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 5
"#
    ));
}

/// The installer's controller: labelled with metainit's key, gated by the webhook.
fn install_controller(node: &Node) {
    let server = node.get("NODE_SERVER");
    let api_port = server.rsplit(':').next().unwrap();
    let ready_port = free_port();
    node.apply(&format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: controller, namespace: installer}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: installer-controller}}
rules: [{{apiGroups: [""], resources: [pods], verbs: [list, patch]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: installer-controller}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: installer-controller}}
subjects: [{{kind: ServiceAccount, name: controller, namespace: installer}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: controller, namespace: installer}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: installer-controller}}}}
  template:
    metadata: {{labels: {{app: installer-controller, "{LABEL}": "true"}}}}
    spec:
      serviceAccountName: controller
      hostNetwork: true
      enableServiceLinks: false
      containers:
      - name: controller
        image: localhost/node/installer:test
        imagePullPolicy: Never
        args: [controller]
        env:
        - {{name: ADDR, value: "127.0.0.1:{ready_port}"}}
        - {{name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}}
        - {{name: KUBERNETES_SERVICE_PORT, value: "{api_port}"}}
        - name: POD_NAME
          valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
        readinessProbe:
          httpGet: {{host: 127.0.0.1, path: /readyz, port: {ready_port}}}
          periodSeconds: 1
"#
    ));
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn the_deadlock(node: &Node) {
    let manifests = node.path("NODE_MANIFESTS");
    let name = format!("metainit-{}", node.get("NODE_NAME"));
    let parked = node.path("METAINIT_NODE").join("metainit.parked.yaml");
    std::fs::rename(manifests.join("metainit.yaml"), &parked).unwrap();
    until("metainit's mirror pod gone", WAIT, || {
        node.pod("kube-system", &name).is_none().then_some(())
    });
    install_webhook(node);
    install_controller(node);
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
    std::fs::rename(&parked, manifests.join("metainit.yaml")).unwrap();
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
    node.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: job, namespace: workloads}\nspec:\n  hostNetwork: true\n  containers: [{name: c, image: localhost/node/pause:test, imagePullPolicy: Never}]\n",
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
fn a_control_plane_node_boots_with_metainit_and_breaks_an_installers_deadlock() {
    let node = Node::up();
    let boot = the_boot(&node);
    a_labelled_gated_pod_cleared(&node);
    never_restarted(&node, &boot);
    the_deadlock(&node);
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
