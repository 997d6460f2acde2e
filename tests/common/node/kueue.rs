//! Kueue on the real node (tests/node_kueue.rs): built from its Go module and installed from
//! its own config/default by scripts/kueue.sh, its queues from tests/node/kueue/queues.yaml,
//! and metainit run beside it from the machine (the binary under test, as a workstation runs
//! it) with the node's kubeconfigs.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use serde_json::Value;

use super::{Node, WAIT, until};

pub const NS: &str = "team-a";
/// Kueue's gate on the pods it manages, lifted when it admits them.
pub const ADMISSION: &str = "kueue.x-k8s.io/admission";

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// `scripts/kueue.sh CMD [FLAGS] DIR`, which must succeed.
pub fn script(node: &Node, cmd: &str, flags: &[&str]) {
    let status = Command::new("bash")
        .arg(repo("scripts/kueue.sh"))
        .arg(cmd)
        .args(flags)
        .arg(node.get("METAINIT_NODE"))
        .stdout(Stdio::null())
        .status()
        .expect("bash runs");
    assert!(status.success(), "scripts/kueue.sh {cmd} failed (above)");
}

/// Kueue installed and answering, and its queues.
pub fn install(node: &Node) {
    script(node, "install", &[]);
    let queues = std::fs::read_to_string(repo("tests/node/kueue/queues.yaml")).unwrap();
    node.apply(&queues);
}

/// A plain pod of team-a that asks Kueue's queue for `cpu`, with `gates` of its own.
pub fn queued_pod(name: &str, cpu: &str, gates: &[&str]) -> String {
    let gates: Vec<String> = gates.iter().map(|g| format!("{{name: {g}}}")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {NS}, labels: {{kueue.x-k8s.io/queue-name: user-queue}}}}\nspec:\n  schedulingGates: [{}]\n  containers:\n  - {{name: c, image: localhost/node/pause:test, imagePullPolicy: Never, resources: {{requests: {{cpu: \"{cpu}\", memory: 10Mi}}}}}}\n",
        gates.join(", ")
    )
}

/// Kueue's manager scaled to `replicas`, and that many of its pods Ready (or none left).
pub fn scale(node: &Node, replicas: usize) {
    node.kubectl(
        &[
            "-n",
            "kueue-system",
            "scale",
            "deployment/kueue-controller-manager",
            &format!("--replicas={replicas}"),
        ],
        None,
    )
    .expect("kubectl scale");
    until("Kueue's manager scaled", WAIT, || {
        let pods = node.pods("kueue-system", "control-plane=controller-manager");
        let ready = pods.iter().filter(|p| super::running_and_ready(p)).count();
        (pods.len() == replicas && ready == replicas).then_some(())
    });
}

/// The metainit under test, run from the machine with `kubeconfig`: its output.
pub fn metainit(kubeconfig: &Path, args: &[&str]) -> Output {
    // Subcommands first: `metainit --kubeconfig F status` is refused (the watcher's label key).
    Command::new(env!("CARGO_BIN_EXE_metainit"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("RUST_LOG")
        .output()
        .expect("metainit runs")
}

pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A kubeconfig for `user`, a client certificate signed by the node's CA, bound to
/// `clusterrole` (and nothing else).
pub fn kubeconfig_for(node: &Node, user: &str, clusterrole: &str) -> PathBuf {
    let pki = node.path("NODE_PKI");
    let dir = node.path("METAINIT_NODE").join(format!("users/{user}"));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |args: &[&str]| {
        let ok = Command::new("openssl")
            .args(args)
            .current_dir(&dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "openssl {args:?}");
    };
    let subject = format!("/CN={user}");
    run(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "user.key",
        "-out",
        "user.csr",
        "-subj",
        &subject,
    ]);
    let (ca, key) = (pki.join("ca.crt"), pki.join("ca.key"));
    // Extensions make it X.509 v3, as a client certificate must be (rustls refuses v1).
    std::fs::write(
        dir.join("ext.cnf"),
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "user.csr",
        "-CA",
        ca.to_str().unwrap(),
        "-CAkey",
        key.to_str().unwrap(),
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
        "-out",
        "user.crt",
    ]);
    let conf = dir.join("kubeconfig");
    let kubectl = |args: &[&str]| {
        let ok = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&conf)
            .args(args)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kubectl config {args:?}");
    };
    let server = format!("--server={}", node.get("NODE_SERVER"));
    let ca_arg = format!("--certificate-authority={}", ca.display());
    kubectl(&[
        "config",
        "set-cluster",
        "node",
        &server,
        &ca_arg,
        "--embed-certs",
    ]);
    let (crt, k) = (dir.join("user.crt"), dir.join("user.key"));
    kubectl(&[
        "config",
        "set-credentials",
        user,
        &format!("--client-certificate={}", crt.display()),
        &format!("--client-key={}", k.display()),
        "--embed-certs",
    ]);
    kubectl(&[
        "config",
        "set-context",
        "node",
        "--cluster=node",
        &format!("--user={user}"),
    ]);
    kubectl(&["config", "use-context", "node"]);
    node.apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {user}-{clusterrole}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {clusterrole}}}\nsubjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]\n"
    ));
    conf
}

/// The scheduling gates of pod team-a/NAME.
pub fn gates_of(node: &Node, name: &str) -> Vec<String> {
    node.pod(NS, name)
        .map(|p: Value| super::gates(&p))
        .unwrap_or_default()
}

/// metainit's watcher run from the machine with `kubeconfig` and `args`, its log in a file;
/// killed when dropped.
pub struct Daemon {
    child: std::process::Child,
    pub log: PathBuf,
}

impl Daemon {
    pub fn start(kubeconfig: &Path, args: &[&str], log: PathBuf) -> Daemon {
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_metainit"))
            .args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("metainit runs");
        Daemon { child, log }
    }

    pub fn said(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
