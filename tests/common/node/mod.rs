//! A real control-plane node for the tests and the boot benchmark (`scripts/node.sh`), and
//! what they read from it: the API server through kubectl as the admin, the kubelet's pods,
//! metainit's process. Std only: the node's tests are synchronous.

pub mod guard;
pub mod installer;
pub mod kueue;

use std::{
    collections::HashMap,
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde_json::Value;

/// The installer's gate (tests/node/installer): its controller lifts it from every pod.
pub const GATE: &str = "example.com/installer";
/// A gate nothing on the node lifts but metainit.
pub const HELD: &str = "example.com/held";
pub const WAIT: Duration = Duration::from_secs(120);

pub struct Node {
    pub env: HashMap<String, String>,
    /// Booted for this process: brought down when dropped (also on a failed assertion), so
    /// that the next test binary finds no kubelet and no static pod holding its ports. The
    /// `--owner` watcher of `scripts/node.sh up` is the backstop for a process killed outright.
    owned: bool,
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.owned {
            let _ = self.script(&["down"]);
        }
    }
}

impl Node {
    /// A node booted for this test binary (and stopped when it exits); or, for a run by
    /// hand, the one `METAINIT_NODE` names, if it has just booted.
    pub fn up() -> Node {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/node.sh");
        let owned = std::env::var("METAINIT_NODE").map_or(true, |d| d.is_empty());
        let args = match std::env::var("METAINIT_NODE") {
            Ok(dir) if !dir.is_empty() => vec!["env".to_string(), dir],
            _ => vec![
                "up".into(),
                "--owner".into(),
                std::process::id().to_string(),
            ],
        };
        let env = super::control_plane::script_env(&script, &args);
        Node { env, owned }
    }

    pub fn get(&self, k: &str) -> String {
        self.env
            .get(k)
            .unwrap_or_else(|| panic!("scripts/node.sh printed no {k}"))
            .clone()
    }

    pub fn path(&self, k: &str) -> PathBuf {
        self.get(k).into()
    }

    /// kubectl as the admin; its stdout, or a failure with its stderr.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
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

    pub fn apply(&self, yaml: &str) {
        self.kubectl(&["apply", "-f", "-"], Some(yaml))
            .unwrap_or_else(|e| panic!("kubectl apply failed: {e}\n{yaml}"));
    }

    pub fn json(&self, args: &[&str]) -> Option<Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let text = self.kubectl(&all, None).ok()?;
        serde_json::from_str(&text).ok()
    }

    pub fn pod(&self, ns: &str, name: &str) -> Option<Value> {
        self.json(&["-n", ns, "get", "pod", name])
    }

    /// `scripts/node.sh CMD... DIR` on this node; whether it succeeded.
    pub fn script(&self, args: &[&str]) -> bool {
        Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/node.sh"))
            .args(args)
            .arg(self.get("METAINIT_NODE"))
            .stdout(Stdio::null())
            .status()
            .expect("bash runs")
            .success()
    }

    /// Whether the API server's /readyz answers 200 now (as the admin, within 1 s).
    pub fn readyz(&self) -> bool {
        let pki = self.path("NODE_PKI");
        Command::new("curl")
            .args(["-sf", "-o", "/dev/null", "--max-time", "1", "--cacert"])
            .arg(pki.join("ca.crt"))
            .arg("--cert")
            .arg(pki.join("admin.crt"))
            .arg("--key")
            .arg(pki.join("admin.key"))
            .arg(format!("{}/readyz", self.get("NODE_SERVER")))
            .status()
            .is_ok_and(|s| s.success())
    }

    /// `program` on the node: in its network namespace (where its hostNetwork pods listen;
    /// the machine reaches only the API server, through scripts/node/forward.py) and its
    /// mount namespace (where /etc/kubernetes is the node's), in this process's directory.
    pub fn in_netns(&self, program: &str) -> Command {
        let here = std::env::current_dir().expect("the working directory");
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", self.get("NODE_NETNS")))
            .arg(format!("--mount={}", self.get("NODE_MNTNS")))
            .arg(format!("--wdns={}", here.display()))
            .arg(program);
        cmd
    }

    /// The TLS Secret `ns/name` of the node's PKI pair `pair` (.crt and .key).
    pub fn tls_secret(&self, ns: &str, name: &str, pair: &str) {
        let pki = self.path("NODE_PKI");
        let cert = format!("--cert={}", pki.join(format!("{pair}.crt")).display());
        let key = format!("--key={}", pki.join(format!("{pair}.key")).display());
        self.kubectl(
            &["-n", ns, "create", "secret", "tls", name, &cert, &key],
            None,
        )
        .unwrap_or_else(|e| panic!("the Secret {ns}/{name}: {e}"));
    }

    /// The API server's port on loopback.
    pub fn api_port(&self) -> String {
        let server = self.get("NODE_SERVER");
        server.rsplit(':').next().unwrap().to_string()
    }

    /// metainit down and kept down: the kubelet stopped (it would start it again), then
    /// metainit's process killed; the API server's container keeps running.
    pub fn stop_metainit(&self) {
        assert!(self.script(&["stop", "kubelet"]), "node.sh stop kubelet");
        let pid = self.metainit_pid().expect("metainit's process");
        let killed = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        assert!(killed.is_ok_and(|s| s.success()), "kill {pid}");
        until("metainit's process gone", WAIT, || {
            self.metainit_pid().is_none().then_some(())
        });
    }

    /// The mirror pod of metainit's static pod.
    pub fn metainit(&self) -> Option<Value> {
        self.pod(
            "kube-system",
            &format!("metainit-{}", self.get("NODE_NAME")),
        )
    }

    /// The pods of a namespace whose labels match `selector`.
    pub fn pods(&self, ns: &str, selector: &str) -> Vec<Value> {
        self.json(&["-n", ns, "get", "pods", "-l", selector])
            .and_then(|v| v["items"].as_array().cloned())
            .unwrap_or_default()
    }
}

/// A pod labelled with metainit's key and held by gate `HELD`: one that runs on the node
/// (hostNetwork, the pause image) if `runs`, else one no node can take (only its gate matters).
/// `command` without the variables cargo sets for a test (CARGO_*, OUT_DIR,
/// LD_LIBRARY_PATH, RUSTUP_TOOLCHAIN, ...) and the test's METAINIT_* settings: a build it
/// runs (scripts/build-static.sh, `cargo install`) then finds the workspace's artifacts
/// fresh, as scripts/node/build.sh's own build does, instead of rebuilding every crate.
pub fn without_cargo_env(command: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let keep = matches!(
            &*key,
            "CARGO_HOME" | "CARGO_TARGET_DIR" | "CARGO_INCREMENTAL"
        );
        if !keep
            && (key.starts_with("CARGO")
                || key.starts_with("RUSTUP_TOOLCHAIN")
                || key.starts_with("METAINIT_")
                || matches!(
                    &*key,
                    "OUT_DIR" | "LD_LIBRARY_PATH" | "RUST_RECURSION_COUNT"
                ))
        {
            command.env_remove(&*key);
        }
    }
}

pub fn held_pod(ns: &str, name: &str, runs: bool) -> String {
    let placement = if runs {
        "hostNetwork: true"
    } else {
        "nodeSelector: {example.com/no-such-node: \"true\"}"
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, labels: {{\"{}\": \"true\"}}}}\nspec:\n  {placement}\n  schedulingGates: [{{name: {HELD}}}]\n  containers: [{{name: c, image: localhost/node/pause:test, imagePullPolicy: Never}}]\n",
        crate::common::LABEL
    )
}

/// A manifest of the repository's directory `dir` (tests/node/installer, tests/node/guard)
/// with its `${NAME}`s replaced, every one of them.
pub fn manifest(dir: &str, file: &str, values: &[(&str, &str)]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join(file);
    let mut text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for (name, value) in values {
        text = text.replace(&format!("${{{name}}}"), value);
    }
    assert!(!text.contains("${"), "{file}: a value is missing: {text}");
    text
}

/// Polls `check` until it gives a value, for at most `limit`.
pub fn until<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

pub fn gates(pod: &Value) -> Vec<String> {
    pod["spec"]["schedulingGates"]
        .as_array()
        .map(|g| {
            g.iter()
                .filter_map(|g| g["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

pub fn running_and_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// When the pod's (first) container started running, in seconds since the epoch.
pub fn started_at(pod: &Value) -> i64 {
    started(pod).unwrap_or_else(|| panic!("not running: {pod}"))
}

pub fn started(pod: &Value) -> Option<i64> {
    let text = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"].as_str()?;
    Some(epoch_seconds(text) as i64)
}

/// Seconds since the epoch, as the API server writes its times (whole seconds).
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The API server's audit log on this node: each PATCH or UPDATE of pod NS/NAME, as (user,
/// response code, when it was received in seconds since the epoch, to the microsecond).
pub fn pod_writes(node: &Node, ns: &str, name: &str) -> Vec<(String, i64, f64)> {
    let log = node.path("METAINIT_NODE").join("log/audit.log");
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["objectRef"]["namespace"] == ns
                && e["objectRef"]["name"] == name
                && e["objectRef"]["subresource"].is_null()
        })
        .map(|e| {
            let user = e["user"]["username"].as_str().unwrap_or("").to_string();
            let code = e["responseStatus"]["code"].as_i64().unwrap_or(0);
            let at = e["requestReceivedTimestamp"]
                .as_str()
                .map_or(0.0, epoch_seconds);
            (user, code, at)
        })
        .collect()
}

/// RFC 3339 (`2026-11-26T17:03:04.123456Z`) to seconds since the epoch.
pub fn epoch_seconds(text: &str) -> f64 {
    let out = Command::new("date")
        .args(["-u", "-d", text, "+%s.%N"])
        .output()
        .expect("date runs");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a time: {text}"))
}

pub fn restarts(pod: &Value) -> i64 {
    pod["status"]["containerStatuses"][0]["restartCount"]
        .as_i64()
        .unwrap_or(-1)
}

impl Node {
    /// `ctr` on this node's own containerd (its socket in the node's directory), in the
    /// kubelet's namespace: its stdout.
    fn ctr(&self, args: &[&str]) -> String {
        let socket = self
            .path("METAINIT_NODE")
            .join("containerd/containerd.sock");
        let out = Command::new("ctr")
            .arg("--address")
            .arg(socket)
            .args(["--namespace", "k8s.io"])
            .args(args)
            .output()
            .expect("ctr runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pid of this node's metainit: the running task of the container the kubelet
    /// named `metainit` in this node's containerd, never a process found by its command line
    /// across the machine (another node there runs one too: a matrix run, `demo.sh --node`).
    pub fn metainit_pid(&self) -> Option<u32> {
        let filter = format!(
            "labels.\"io.kubernetes.container.name\"==metainit,labels.\"io.kubernetes.pod.name\"==metainit-{}",
            self.get("NODE_NAME")
        );
        let ids = self.ctr(&["containers", "list", "--quiet", &filter]);
        let ids: Vec<&str> = ids.split_whitespace().collect();
        // TASK, PID, STATUS: the one that runs.
        self.ctr(&["tasks", "list"])
            .lines()
            .skip(1)
            .find_map(|line| {
                let cols: Vec<&str> = line.split_whitespace().collect();
                match cols.as_slice() {
                    [task, pid, "RUNNING"] if ids.contains(task) => pid.parse().ok(),
                    _ => None,
                }
            })
    }

    /// The uid of this node's metainit process.
    pub fn metainit_process_uid(&self) -> Option<u32> {
        let pid = self.metainit_pid()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let uid = status.lines().find(|l| l.starts_with("Uid:"))?;
        uid.split_whitespace().nth(1)?.parse().ok()
    }
}
