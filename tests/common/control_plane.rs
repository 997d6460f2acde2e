//! The real control plane (etcd, kube-apiserver, kube-scheduler built from their Go
//! modules by `scripts/control-plane.sh`), as the tests reach it: the one named by
//! `METAINIT_CONTROL_PLANE` (scripts/test.sh starts one for the whole suite), or else one
//! started for this test binary and stopped when it exits. Tests share it: each works in
//! namespaces of its own and runs metainit with `--namespace`.

use std::{
    collections::HashMap,
    io::{Read, Write},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::Value;

use super::Metainit;

/// How long a test waits for what the control plane does.
pub const WAIT: Duration = Duration::from_secs(60);

pub struct ControlPlane {
    pub dir: PathBuf,
    /// An admin's kubeconfig (O=system:masters).
    pub admin: PathBuf,
    /// The user `metainit`'s kubeconfig: a client certificate, no rights of its own.
    pub metainit: PathBuf,
    /// `https://127.0.0.1:PORT`: the first kube-apiserver's.
    pub server: String,
    /// Each kube-apiserver's `https://127.0.0.1:PORT`, the first first (`server`): one
    /// unless started with [`ControlPlane::own_ha`].
    pub servers: Vec<String>,
    /// The user metainit's kubeconfig for each kube-apiserver, in the order of `servers`
    /// (the first is `metainit`).
    pub metainits: Vec<PathBuf>,
    /// The CA bundle that verifies the API server's certificate.
    pub ca: PathBuf,
    /// Whether this process started it (and `down`s it on drop).
    owned: bool,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/control-plane.sh")
}

/// `bash SCRIPT ARGS` (control-plane.sh, node.sh), its messages on our stderr; the `export
/// K=V` lines it printed. Fails the test, saying `SCRIPT ARGS[0]` failed, unless it succeeded.
pub(crate) fn script_env<S: AsRef<std::ffi::OsStr>>(
    script: &Path,
    args: &[S],
) -> HashMap<String, String> {
    let out = Command::new("bash")
        .arg(script)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .expect("bash runs");
    let name = script.file_name().unwrap_or_default().to_string_lossy();
    let first = args.first().map(|a| a.as_ref().to_string_lossy());
    assert!(
        out.status.success(),
        "scripts/{name} {} failed (its reason is above)",
        first.unwrap_or_default()
    );
    parse_env(&String::from_utf8_lossy(&out.stdout))
}

/// The `export K=V` lines a script of ours prints (control-plane.sh, node.sh).
pub(crate) fn parse_env(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl ControlPlane {
    fn from_env(vars: &HashMap<String, String>, owned: bool) -> ControlPlane {
        let get = |k: &str| {
            vars.get(k)
                .unwrap_or_else(|| panic!("scripts/control-plane.sh printed no {k}: {vars:?}"))
                .clone()
        };
        // `export K="A B"`: the quotes are the shell's.
        let list = |k: &str| -> Vec<String> {
            get(k)
                .trim_matches('"')
                .split_whitespace()
                .map(str::to_string)
                .collect()
        };
        ControlPlane {
            dir: get("METAINIT_CONTROL_PLANE").into(),
            admin: get("CONTROL_PLANE_ADMIN").into(),
            metainit: get("CONTROL_PLANE_METAINIT").into(),
            server: get("CONTROL_PLANE_SERVER"),
            servers: list("CONTROL_PLANE_SERVERS"),
            metainits: list("CONTROL_PLANE_METAINITS")
                .into_iter()
                .map(PathBuf::from)
                .collect(),
            ca: get("CONTROL_PLANE_CA").into(),
            owned,
        }
    }

    /// The suite's control plane: `METAINIT_CONTROL_PLANE`'s, or one of this binary's own.
    pub fn shared() -> &'static ControlPlane {
        static SHARED: OnceLock<ControlPlane> = OnceLock::new();
        SHARED.get_or_init(|| match std::env::var("METAINIT_CONTROL_PLANE") {
            Ok(dir) if !dir.is_empty() => {
                let out = Command::new("bash")
                    .arg(script())
                    .args(["env", &dir])
                    .output()
                    .expect("bash runs");
                assert!(
                    out.status.success(),
                    "METAINIT_CONTROL_PLANE={dir} is not a running control plane: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                ControlPlane::from_env(&parse_env(&String::from_utf8_lossy(&out.stdout)), false)
            }
            // Never dropped (a static): the script stops it when this process ends.
            _ => ControlPlane::up(),
        })
    }

    /// A control plane of this test's own, for a test that changes what every other test
    /// relies on (the user metainit's binding); stopped when dropped.
    pub fn own() -> ControlPlane {
        ControlPlane::own_with(&[])
    }

    /// One of this test's own whose kube-apiserver has `args` besides the script's
    /// (`--watch-cache-sizes=pods#0`); stopped when dropped.
    pub fn own_with(args: &[&str]) -> ControlPlane {
        ControlPlane::own_ha(1, args)
    }

    /// One of this test's own with `apiservers` kube-apiservers on its one etcd (1 to 5), as
    /// a kubeadm HA control plane has them, each with `apiserver_args` besides the script's;
    /// stopped when dropped. `stop`/`start` take `kube-apiserver-I` for the I-th (from 1).
    pub fn own_ha(apiservers: usize, apiserver_args: &[&str]) -> ControlPlane {
        let mut cp = ControlPlane::up_with(apiservers, apiserver_args);
        cp.owned = true;
        cp
    }

    fn up() -> ControlPlane {
        ControlPlane::up_with(1, &[])
    }

    fn up_with(apiservers: usize, apiserver_args: &[&str]) -> ControlPlane {
        let owner = std::process::id().to_string();
        let count = apiservers.to_string();
        let mut args = vec!["up", "--owner", &owner, "--apiservers", &count];
        for a in apiserver_args {
            args.extend(["--apiserver-arg", a]);
        }
        ControlPlane::from_env(&script_env(&script(), &args), false)
    }

    /// Kills one component with SIGKILL, as a crash would (`etcd`, `kube-apiserver` (the
    /// first), `kube-apiserver-I`, `kube-scheduler`).
    pub fn stop(&self, component: &str) {
        self.script(&["stop", component]);
    }

    /// Starts one component again on its ports and data; returns once it answers.
    pub fn start(&self, component: &str) {
        self.script(&["start", component]);
    }

    fn script(&self, args: &[&str]) {
        let dir = self.dir.to_str().expect("utf-8 path");
        let ok = Command::new("bash")
            .arg(script())
            .args(args)
            .arg(dir)
            .status()
            .expect("bash runs")
            .success();
        assert!(ok, "scripts/control-plane.sh {args:?} failed");
    }

    /// Whether the control plane dialled nothing outside 127.0.0.0/8 (its logs), with what
    /// `control-plane.sh check-network` says otherwise.
    pub fn check_network(&self) -> Result<(), String> {
        let out = Command::new("bash")
            .arg(script())
            .arg("check-network")
            .arg(&self.dir)
            .output()
            .expect("bash runs");
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// etcd's JSON gateway, reached without the API server.
    pub fn etcd(&self) -> Etcd {
        let port = std::fs::read_to_string(self.dir.join("etcd.port")).expect("etcd.port");
        Etcd {
            addr: format!("127.0.0.1:{}", port.trim()),
        }
    }

    /// kubectl as the admin: success and the combined output.
    pub fn kubectl(&self, args: &[&str]) -> (bool, String) {
        self.kubectl_in(args, None)
    }

    /// kubectl as the admin with `input` on its standard input (`-f -`).
    pub fn kubectl_in(&self, args: &[&str], input: Option<&str>) -> (bool, String) {
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.admin)
            .args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        if let Some(text) = input {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes())
                .expect("kubectl reads its input");
        }
        let out = child.wait_with_output().expect("kubectl ends");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// kubectl as the admin, which must succeed; its standard output.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let (ok, out) = self.kubectl(args);
        assert!(ok, "kubectl {args:?} failed: {out}");
        out
    }

    /// Creates the object `obj` (JSON) as the admin.
    pub fn create(&self, namespace: &str, obj: &Value) {
        let (ok, out) = self.kubectl_in(
            &["create", "-n", namespace, "-f", "-"],
            Some(&obj.to_string()),
        );
        assert!(ok, "creating {obj} failed: {out}");
    }

    /// Applies a manifest file of the repository (`manifests/rbac.yaml`) as the admin.
    pub fn apply_manifest(&self, file: &str) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let path = path.to_str().expect("utf-8 path");
        self.kubectl_ok(&["apply", "-f", path]);
    }

    /// `manifests/rbac.yaml`, applied once per control plane and process.
    pub fn with_rbac(&'static self) -> &'static ControlPlane {
        static APPLIED: OnceLock<()> = OnceLock::new();
        APPLIED.get_or_init(|| self.apply_manifest("manifests/rbac.yaml"));
        self
    }

    /// A new namespace named after `prefix`, with the ServiceAccount `default` that the
    /// ServiceAccount admission plugin requires of every pod (no controller-manager runs
    /// here to create it).
    pub fn namespace(&self, prefix: &str) -> String {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        self.kubectl_ok(&["create", "namespace", &name]);
        self.kubectl_ok(&["create", "serviceaccount", "default", "-n", &name]);
        name
    }

    /// A kube client as the admin.
    pub async fn client(&self) -> kube::Client {
        let kubeconfig = Kubeconfig::read_from(&self.admin).expect("admin kubeconfig");
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .expect("admin config");
        kube::Client::try_from(config).expect("admin client")
    }

    pub async fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client().await, namespace)
    }

    /// Runs metainit with `kubeconfig`, an ephemeral admin port and `args`.
    pub fn metainit(&self, kubeconfig: &Path, args: &[&str]) -> Metainit {
        super::metainit_via(kubeconfig, args)
    }

    /// A kubeconfig in `dir` for the ServiceAccount `namespace/name`: a token from
    /// TokenRequest (`kubectl create token`, 10 minutes) and the cluster's CA, as the pod's
    /// in-cluster configuration would have them.
    pub fn service_account_kubeconfig(&self, dir: &Path, namespace: &str, name: &str) -> PathBuf {
        let token = self.kubectl_ok(&[
            "create",
            "token",
            name,
            "-n",
            namespace,
            "--duration",
            "10m",
        ]);
        self.token_kubeconfig(dir, token.trim())
    }

    /// A kubeconfig in `dir` for `token` (a ServiceAccount's, from TokenRequest), with the
    /// cluster's CA.
    fn token_kubeconfig(&self, dir: &Path, token: &str) -> PathBuf {
        let path = dir.join("token.kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n",
            self.server,
            self.ca.display()
        );
        std::fs::write(&path, text).expect("kubeconfig written");
        path
    }

    /// The audit log's entries (JSON lines) for `user`, as the (first) API server wrote them.
    pub fn audit(&self, user: &str) -> Vec<Value> {
        self.audit_of(1, user)
    }

    /// The entries for `user` in the audit log of kube-apiserver `i` (from 1: `audit.log`,
    /// then `audit-I.log`).
    pub fn audit_of(&self, i: usize, user: &str) -> Vec<Value> {
        let file = if i == 1 {
            "audit.log".to_string()
        } else {
            format!("audit-{i}.log")
        };
        let text = std::fs::read_to_string(self.dir.join(file)).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["user"]["username"] == user)
            .collect()
    }
}

/// etcd's JSON gateway (`/v3/kv/...`).
#[derive(Clone)]
pub struct Etcd {
    addr: String,
}

impl Etcd {
    /// POSTs `body` to `path`, which must answer 200; its answer. A connection of its own and
    /// no process: tests/cluster_expired.rs calls it hundreds of times a second.
    pub fn post(&self, path: &str, body: &str) -> Value {
        let (code, answer) = self.answer(path, body);
        assert_eq!(code, 200, "etcd {path} {body}: {answer}");
        answer
    }

    /// POSTs `body` to `path`: the HTTP status and the JSON answer.
    pub fn answer(&self, path: &str, body: &str) -> (u16, Value) {
        let addr = &self.addr;
        let mut conn = std::net::TcpStream::connect(addr).expect("etcd reachable");
        write!(
            conn,
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("request written to etcd");
        let mut answer = String::new();
        conn.read_to_string(&mut answer).expect("etcd answers");
        let (head, json) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        let code = head
            .strip_prefix("HTTP/1.1 ")
            .and_then(|h| h.get(..3)?.parse().ok())
            .unwrap_or_else(|| panic!("etcd {path}: not HTTP/1.1: {answer}"));
        assert!(
            !head.to_lowercase().contains("chunked"),
            "etcd {path}: a chunked answer: {answer}"
        );
        let json =
            serde_json::from_str(json).unwrap_or_else(|e| panic!("etcd {path}: {e}: {answer}"));
        (code, json)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if self.owned {
            let _ = Command::new("bash")
                .arg(script())
                .arg("down")
                .arg(&self.dir)
                .status();
        }
    }
}

/// Polls the async `check` until it returns `Some`, failing the test after `limit`.
pub async fn until<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn gate_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .map(|g| g.iter().map(|g| g.name.clone()).collect())
        .unwrap_or_default()
}

pub fn condition(pod: &Pod, kind: &str) -> Option<(String, Option<String>)> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// Waits until the pod has no gate left and kube-scheduler has bound it.
pub async fn scheduled(pods: &Api<Pod>, name: &str) -> Pod {
    until(&format!("pod {name} cleared and bound"), WAIT, || async {
        let pod = pods.get(name).await.ok()?;
        let bound = pod.spec.as_ref()?.node_name.is_some();
        (gate_names(&pod).is_empty()
            && bound
            && condition(&pod, "PodScheduled").map(|c| c.0) == Some("True".into()))
        .then_some(pod)
    })
    .await
}

/// The PATCH requests user `user` made on pods of `ns`, from the API server's audit log:
/// the pods' names, in order.
pub fn patched_by(cp: &ControlPlane, user: &str, ns: &str) -> Vec<String> {
    cp.audit(user)
        .into_iter()
        .filter(|e| e["verb"] == "patch" && e["objectRef"]["namespace"] == ns)
        .filter(|e| e["objectRef"]["resource"] == "pods" && e["stage"] == "ResponseComplete")
        .filter_map(|e| e["objectRef"]["name"].as_str().map(str::to_string))
        .collect()
}

/// `s` in base64, as etcd's JSON gateway takes keys and values.
pub fn base64(s: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, c)| n | (u32::from(*c) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
