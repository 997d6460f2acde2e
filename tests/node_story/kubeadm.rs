//! What kubeadm itself does around the static pod, as docs/src/install/static-pod.md says,
//! asked of the node's real kubeadm (built from the minor's k8s.io/kubernetes,
//! scripts/node/kubeadm.sh installs it) with its own offline phases, on the node (its network
//! and mount namespaces) with a scratch directory bound at /etc/kubernetes in a mount
//! namespace of its own: the node's own /etc/kubernetes is never written. For a control-plane
//! node whose advertise address is one address and whose cluster's controlPlaneEndpoint is a
//! load balancer's name:
//!
//! - its scheduler.conf and controller-manager.conf point at the advertise address, the
//!   kubeconfig `kubeadm kubeconfig user` writes at the endpoint; the API server's serving
//!   certificate covers both, and not 127.0.0.1;
//! - `kubeadm init phase preflight` and `kubeadm join phase preflight` with only
//!   manifests/metainit.yaml in /etc/kubernetes/manifests: every check this machine cannot
//!   pass (no kubelet, no swap off, ...) is named and ignored, and what is left passes; with
//!   kube-apiserver.yaml (init) or kubelet.conf (join) there too, the same run fails on it,
//!   so the checks did look at that directory.

use std::{path::PathBuf, process::Command};

use crate::common::node::Node;

/// The advertise address and the load balancer of the configuration.
const ADVERTISE: &str = "192.0.2.10";
const ENDPOINT: &str = "lb.example.internal";

/// The node's kubeadm, as above; whether it succeeded, and its output.
struct Kubeadm {
    dir: PathBuf,
    scratch: PathBuf,
}

impl Kubeadm {
    fn new(node: &Node) -> Kubeadm {
        let dir = node.path("METAINIT_NODE").join("kubeadm");
        let scratch = dir.join("etc-kubernetes");
        std::fs::create_dir_all(scratch.join("manifests")).unwrap();
        std::fs::create_dir_all(dir.join("out")).unwrap();
        let kubeadm = Kubeadm { dir, scratch };
        std::fs::write(kubeadm.dir.join("config.yaml"), kubeadm.config(node)).unwrap();
        kubeadm
    }

    /// An InitConfiguration and a ClusterConfiguration: the node's Kubernetes version (no
    /// lookup of the latest), its containerd, the certificates under `out/pki`.
    fn config(&self, node: &Node) -> String {
        format!(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nlocalAPIEndpoint: {{advertiseAddress: {ADVERTISE}, bindPort: 6443}}\nnodeRegistration: {{name: cp-1, criSocket: \"unix://{}/containerd/containerd.sock\"}}\n---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: {}\ncontrolPlaneEndpoint: \"{ENDPOINT}:6443\"\ncertificatesDir: {}\nnetworking: {{dnsDomain: cluster.local, serviceSubnet: 10.96.0.0/16}}\n",
            node.get("METAINIT_NODE"),
            node.get("NODE_KUBERNETES"),
            self.out("pki").display()
        )
    }

    fn out(&self, name: &str) -> PathBuf {
        self.dir.join("out").join(name)
    }

    fn run(&self, node: &Node, args: &[&str]) -> (bool, String) {
        let out = node
            .in_netns("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/kubernetes && exec kubeadm "$@""#)
            .arg(&self.scratch)
            .args(args)
            // No kubelet on PATH: the system verification stops there (a warning).
            .env("PATH", "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            .output()
            .expect("unshare runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    fn ok(&self, node: &Node, args: &[&str]) -> String {
        let (ok, text) = self.run(node, args);
        assert!(ok, "kubeadm {args:?}:\n{text}");
        text
    }
}

pub fn around_the_static_pod(node: &Node) {
    let kubeadm = Kubeadm::new(node);
    its_own_components(node, &kubeadm);
    init_preflight(node, &kubeadm);
    join_preflight(node, &kubeadm);
}

/// kubeadm's own phases: the CA, the API server's certificate, the scheduler's and the
/// controller manager's kubeconfigs, and `kubeconfig user`.
fn its_own_components(node: &Node, kubeadm: &Kubeadm) {
    let config = kubeadm.dir.join("config.yaml").display().to_string();
    let out = kubeadm.out("").display().to_string();
    kubeadm.ok(node, &["init", "phase", "certs", "ca", "--config", &config]);
    kubeadm.ok(
        node,
        &["init", "phase", "certs", "apiserver", "--config", &config],
    );
    for file in ["scheduler", "controller-manager"] {
        let args = ["init", "phase", "kubeconfig", file, "--config", &config];
        kubeadm.ok(node, &[&args[..], &["--kubeconfig-dir", &out]].concat());
        let text = std::fs::read_to_string(kubeadm.out(&format!("{file}.conf"))).unwrap();
        assert!(
            text.contains(&format!("server: https://{ADVERTISE}:6443\n")),
            "{file}.conf:\n{text}"
        );
    }
    let user = [
        "kubeconfig",
        "user",
        "--client-name=metainit",
        "--config",
        &config,
    ];
    let text = kubeadm.ok(node, &user);
    assert!(
        text.contains(&format!("server: https://{ENDPOINT}:6443\n")),
        "kubeadm kubeconfig user:\n{text}"
    );
    let sans = Command::new("openssl")
        .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
        .arg(kubeadm.out("pki/apiserver.crt"))
        .output()
        .expect("openssl runs");
    let sans = String::from_utf8_lossy(&sans.stdout);
    let names: Vec<&str> = sans
        .lines()
        .skip(1)
        .flat_map(|l| l.split(", "))
        .map(str::trim)
        .collect();
    for name in [
        format!("IP Address:{ADVERTISE}"),
        format!("DNS:{ENDPOINT}"),
        "DNS:cp-1".into(),
        "DNS:kubernetes.default.svc.cluster.local".into(),
        "IP Address:10.96.0.1".into(),
    ] {
        assert!(names.contains(&name.as_str()), "{name} not in {names:?}");
    }
    assert!(!names.contains(&"IP Address:127.0.0.1"), "{names:?}");
    println!(
        "kubeadm: scheduler.conf at {ADVERTISE}, the user's kubeconfig at {ENDPOINT}; the API server's certificate: {names:?}"
    );
}

/// The names of the checks a run warned about (`[WARNING NAME]: ...`).
fn warned(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("[WARNING ")?.split_once(']'))
        .map(|(name, _)| name.to_string())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// How a preflight run ends once its checks pass: it succeeds, or fails saying `then`.
#[derive(Clone, Copy)]
enum After<'a> {
    Passes,
    FailsAfterTheChecks(&'a str),
}

/// `args` with every error ignored, then again ignoring only the checks that warned (those
/// this machine cannot pass): that run's checks pass, and no check named the manifests
/// directory or metainit.yaml. Then, with `blocker` in the scratch /etc/kubernetes too, the
/// same run fails on `check`.
fn preflight(
    node: &Node,
    kubeadm: &Kubeadm,
    args: &[&str],
    after: After,
    blocker: &str,
    check: &str,
) {
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/metainit.yaml");
    std::fs::copy(shipped, kubeadm.scratch.join("manifests/metainit.yaml")).unwrap();
    let ends_as_said = |ok: bool, text: &str| match after {
        After::Passes => ok,
        After::FailsAfterTheChecks(then) => !ok && text.contains(then),
    };
    let (ok, all) = kubeadm.run(node, &[args, &["--ignore-preflight-errors=all"]].concat());
    assert!(
        ends_as_said(ok, &all),
        "{args:?}, every error ignored:\n{all}"
    );
    for line in all.lines().filter(|l| l.contains("WARNING")) {
        assert!(
            !line.contains("manifests") && !line.contains("metainit"),
            "{args:?}: {line}"
        );
    }
    let names = warned(&all);
    let ignore = format!("--ignore-preflight-errors={}", names.join(","));
    let args: Vec<&str> = match names.is_empty() {
        true => args.to_vec(),
        false => [args, &[ignore.as_str()]].concat(),
    };
    let (ok, text) = kubeadm.run(node, &args);
    assert!(
        ends_as_said(ok, &text) && !text.contains("[ERROR"),
        "{args:?}, with metainit.yaml in the manifests directory:\n{text}"
    );
    std::fs::write(kubeadm.scratch.join(blocker), "").unwrap();
    let (ok, text) = kubeadm.run(node, &args);
    std::fs::remove_file(kubeadm.scratch.join(blocker)).unwrap();
    assert!(
        !ok && text.contains(&format!("[ERROR {check}]")),
        "{args:?}, with {blocker} there too:\n{text}"
    );
    println!(
        "kubeadm {args:?}: its checks pass with metainit.yaml in the manifests directory; with {blocker}, {check} fails"
    );
}

/// `kubeadm init phase preflight` (its `--dry-run` pulls no image).
fn init_preflight(node: &Node, kubeadm: &Kubeadm) {
    let config = kubeadm.dir.join("config.yaml").display().to_string();
    let args = [
        "init",
        "phase",
        "preflight",
        "--dry-run",
        "--config",
        &config,
    ];
    preflight(
        node,
        kubeadm,
        &args,
        After::Passes,
        "manifests/kube-apiserver.yaml",
        "FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml",
    );
}

/// `kubeadm join phase preflight` of a worker: its checks, then its discovery, which finds
/// no cluster at the file's server (a refused port on the node's loopback) within 2 s: a
/// failure after the checks, which the run with the checks passing reaches.
fn join_preflight(node: &Node, kubeadm: &Kubeadm) {
    let ca = std::fs::read(kubeadm.out("pki/ca.crt")).unwrap();
    let discovery = kubeadm.out("discovery.conf");
    std::fs::write(
        &discovery,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster: {{server: \"https://127.0.0.1:1\", certificate-authority-data: {}}}\ncontexts:\n- name: join\n  context: {{cluster: kubernetes, user: join}}\ncurrent-context: join\nusers:\n- name: join\n  user: {{token: abcdef.0123456789abcdef}}\n",
            crate::common::node::installer::base64(&ca)
        ),
    )
    .unwrap();
    let join = kubeadm.dir.join("join.yaml");
    std::fs::write(
        &join,
        format!(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  file: {{kubeConfigPath: {}}}\nnodeRegistration: {{name: cp-2, criSocket: \"unix://{}/containerd/containerd.sock\"}}\ntimeouts: {{discovery: 2s}}\n",
            discovery.display(),
            node.get("METAINIT_NODE")
        ),
    )
    .unwrap();
    let config = join.display().to_string();
    let args = [
        "join",
        "phase",
        "preflight",
        "--dry-run",
        "--config",
        &config,
    ];
    preflight(
        node,
        kubeadm,
        &args,
        After::FailsAfterTheChecks("couldn't validate the identity of the API Server"),
        "kubelet.conf",
        "FileAvailable--etc-kubernetes-kubelet.conf",
    );
}
