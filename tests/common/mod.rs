//! Test helpers: a double, a kubeconfig pointing at it, and the real `metainit` binary
//! run as a process, with every wait bounded.
#![allow(dead_code)]

pub mod control_plane;
pub mod doc_blocks;
pub mod fuzz;
pub mod ha;
pub mod helm;
pub mod node;
pub mod risks;
pub mod scene;
pub mod webhooks;

use std::{
    path::PathBuf,
    process::{ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use kube_double::{Config, Double, InitializerRule};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

pub const LABEL: &str = "k8s.opsani.io/initializer";

/// A double and a kubeconfig that points at it.
pub struct Bed {
    pub double: Double,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
}

impl Bed {
    /// Creates pod `default/NAME`, labelled, gated by `example.com/g`.
    pub fn gated(&self, name: &str) {
        self.double
            .create("pods", "default", gated_pod(name, true, &["example.com/g"]))
            .unwrap();
    }

    /// Whether pod `default/NAME` is there with no gate left.
    pub fn cleared(&self, name: &str) -> bool {
        self.double
            .get("pods", "default", name)
            .is_some_and(|p| gates(&p).is_empty())
    }

    pub async fn start(config: Config) -> Bed {
        let double = Double::start(config).await.expect("double starts");
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        double
            .write_kubeconfig(&kubeconfig, None)
            .expect("kubeconfig written");
        Bed {
            double,
            dir,
            kubeconfig,
        }
    }

    pub async fn legacy(initializers: &[&str]) -> Bed {
        let mut config = Config::legacy();
        config.initializers = initializers
            .iter()
            .map(|n| InitializerRule {
                name: n.to_string(),
                resources: vec!["pods".into(), "deployments.apps".into()],
            })
            .collect();
        config.post_timeout = Duration::from_secs(20);
        Bed::start(config).await
    }

    pub async fn modern() -> Bed {
        Bed::start(Config::modern()).await
    }

    /// A double that requires a token, and a kubeconfig for a user allowed only `perms`
    /// (`"verb resource"` entries, as the double's token table takes them).
    pub async fn as_user(mut config: Config, perms: &[&str]) -> Bed {
        config.tokens = Some(
            [
                (
                    "user".to_string(),
                    perms.iter().map(|p| p.to_string()).collect(),
                ),
                // What `client` uses: the test's own requests (a controller creating pods).
                (ADMIN_TOKEN.to_string(), vec!["*".to_string()]),
            ]
            .into(),
        );
        let bed = Bed::start(config).await;
        bed.double
            .write_kubeconfig(&bed.kubeconfig, Some("user"))
            .expect("kubeconfig written");
        bed
    }

    /// Runs metainit with the kubeconfig, an ephemeral admin port, and `args`.
    pub fn metainit(&self, args: &[&str]) -> Metainit {
        let mut all = vec![
            "--kubeconfig".to_string(),
            self.kubeconfig.display().to_string(),
        ];
        all.extend(["--admin-addr".into(), "127.0.0.1:0".into()]);
        all.extend(args.iter().map(|a| a.to_string()));
        Metainit::spawn(&all)
    }

    /// Objects PATCHed so far (pods, deployments: not the instances' Leases), with their
    /// namespace, as `ns/name`.
    pub fn patched(&self) -> Vec<String> {
        self.double
            .requests()
            .into_iter()
            .filter(|r| r.method == "PATCH" && !r.path_and_query.contains("/leases/"))
            .filter_map(|r| {
                let path = r.path_and_query.split('?').next()?.to_string();
                let parts: Vec<&str> = path.split('/').collect();
                // /api/v1/namespaces/NS/pods/NAME or /apis/G/V/namespaces/NS/R/NAME
                let ns = parts
                    .iter()
                    .position(|p| *p == "namespaces")
                    .and_then(|i| parts.get(i + 1))?;
                Some(format!("{ns}/{}", parts.last()?))
            })
            .collect()
    }
}

/// A labelled (or not) pod with one container.
pub fn pod(name: &str, labelled: bool) -> Value {
    let mut labels = json!({"app": "test"});
    if labelled {
        labels[LABEL] = json!("true");
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "registry.example/c:1"}]}
    })
}

/// A pod with scheduling gates.
pub fn gated_pod(name: &str, labelled: bool, gates: &[&str]) -> Value {
    let mut p = pod(name, labelled);
    p["spec"]["schedulingGates"] = gates.iter().map(|g| json!({"name": g})).collect();
    p
}

/// The paths a JSON patch `test`s, in order.
pub fn tested_paths(patch: &Value) -> Vec<String> {
    patch
        .as_array()
        .map(|ops| {
            ops.iter()
                .filter(|op| op["op"] == "test")
                .filter_map(|op| op["path"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

pub fn pending_initializers(obj: &Value) -> Vec<String> {
    names(obj.pointer("/metadata/initializers/pending"))
}

pub fn gates(obj: &Value) -> Vec<String> {
    names(obj.pointer("/spec/schedulingGates"))
}

fn names(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|e| e["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `check` until it is true, failing the test after `limit`.
pub async fn eventually(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Polls until `done` holds for every one of `items`, failing the test after `limit` with
/// how many did not and the first few of them. Each is checked until it holds, then no
/// more: a wait over thousands of objects does not read each of them every time round (the
/// double serves metainit from the test's own runtime, and a check that clones 2,000 pods
/// 40 times a second takes the CPU it is waiting on).
pub async fn eventually_each<T: std::fmt::Debug>(
    what: &str,
    limit: Duration,
    items: impl IntoIterator<Item = T>,
    mut done: impl FnMut(&T) -> bool,
) {
    let start = Instant::now();
    let mut left: Vec<T> = items.into_iter().collect();
    let all = left.len();
    loop {
        left.retain(|item| !done(item));
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for: {what} ({} of {all} not yet, among them {:?})",
            left.len(),
            &left[..left.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// metainit on `kubeconfig`, the admin port ephemeral, with `args`.
pub fn metainit_via(kubeconfig: &std::path::Path, args: &[&str]) -> Metainit {
    let mut all = vec![
        "--kubeconfig".to_string(),
        kubeconfig.display().to_string(),
        "--admin-addr".into(),
        "127.0.0.1:0".into(),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    Metainit::spawn(&all)
}

/// A running metainit process, its stderr collected line by line.
pub struct Metainit {
    pub child: Child,
    pub stderr: Arc<Mutex<Vec<String>>>,
    pub stdout: Arc<Mutex<Vec<String>>>,
    /// The tasks reading its pipes: done once they read the end of each.
    readers: Vec<tokio::task::JoinHandle<()>>,
}

/// `test-PID-N`: a name no other metainit this machine runs has.
fn next_identity() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("test-{}-{n}", std::process::id())
}

impl Metainit {
    /// Runs the binary cargo built for the test, or `METAINIT_BIN` if set: another build
    /// (the release one, for the figures of RELIABILITY.md's admin flood).
    pub fn spawn(args: &[String]) -> Metainit {
        let bin = std::env::var_os("METAINIT_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_metainit").into());
        let mut child = Command::new(bin)
            .args(args)
            .env(
                "RUST_LOG",
                format!("{},metainit=debug", metainit::logging::DEFAULT_FILTER),
            )
            .env_remove("KUBECONFIG")
            // Each process an instance of its own among its peers, as on distinct nodes
            // (they share this machine's hostname); a test's --identity comes first.
            .env("METAINIT_IDENTITY", next_identity())
            // Alone, no Lease, unless the test says `--peer-delay`: the tests of one
            // instance count its requests to the objects it clears (tests/peers.rs and the
            // real control plane's run the instances that share the work).
            .env("METAINIT_PEER_DELAY", "0s")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("metainit starts");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            collect(child.stderr.take().expect("stderr"), stderr.clone()),
            collect(child.stdout.take().expect("stdout"), stdout.clone()),
        ];
        Metainit {
            child,
            stderr,
            stdout,
            readers,
        }
    }

    pub fn log(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until a line matching `line` is logged: a line is written after the change
    /// it reports reaches the server, so a test that saw the change must still wait.
    /// Returns the first such line; fails, showing the log, after 20 s without one.
    pub async fn logged(&self, what: &str, line: impl Fn(&str) -> bool) -> String {
        let limit = Duration::from_secs(20);
        let start = Instant::now();
        loop {
            if let Some(l) = self.log().into_iter().find(|l| line(l)) {
                return l;
            }
            assert!(
                start.elapsed() < limit,
                "no log line {what} within {limit:?}: {:#?}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The most memory the process has held so far, in bytes: `VmHWM` of /proc/PID/status,
    /// its peak resident set (what a memory limit kills on).
    pub fn peak_rss(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }

    pub fn out(&self) -> String {
        self.stdout.lock().unwrap().join("\n")
    }

    /// Lines logged at WARN or ERROR.
    pub fn problems(&self) -> Vec<String> {
        self.log()
            .into_iter()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
            .collect()
    }

    /// The admin server's address, from its start-up line.
    pub async fn admin_addr(&self) -> String {
        let start = Instant::now();
        loop {
            if let Some(addr) = self.log().iter().find_map(|l| {
                let i = l.find("admin server listening")?;
                let _ = i;
                let a = l.split("addr=").nth(1)?;
                Some(a.split_whitespace().next()?.to_string())
            }) {
                return addr;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no admin address logged: {:?}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for the process to exit, failing after `limit`.
    pub async fn wait(&mut self, limit: Duration) -> ExitStatus {
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(status) => {
                // The readers have read every line once they meet the pipes' end (a fixed
                // 50 ms here once lost the last lines on a loaded machine).
                for reader in self.readers.drain(..) {
                    let drained = tokio::time::timeout(Duration::from_secs(10), reader).await;
                    assert!(drained.is_ok(), "metainit's pipes not drained within 10s");
                }
                status.expect("wait")
            }
            Err(_) => panic!(
                "metainit did not exit within {limit:?}; log: {:#?}",
                self.log()
            ),
        }
    }

    pub fn signal(&self, sig: &str) {
        let pid = self.child.id().expect("running");
        let ok = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .expect("kill");
        assert!(ok.success());
    }

    pub async fn stop(mut self) -> ExitStatus {
        self.signal("TERM");
        self.wait(Duration::from_secs(20)).await
    }
}

fn collect<R: tokio::io::AsyncRead + Unpin + Send + 'static>(
    r: R,
    into: Arc<Mutex<Vec<String>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = BufReader::new(r).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            into.lock().unwrap().push(line);
        }
    })
}

/// Runs metainit to completion with `args` (no kubeconfig added), returning exit code, stdout and stderr.
pub async fn run_to_end(args: &[&str], limit: Duration) -> (i32, String, String) {
    run_to_end_env(args, &[], limit).await
}

/// Each case's flags, against the server of `kubeconfig` (the admin server on a free port):
/// metainit exits 2 and its stderr holds the case's text (what to fix), within 30 s each.
pub async fn each_refused(kubeconfig: &str, cases: &[(Vec<&str>, &str)]) {
    for (args, want) in cases {
        let mut all = vec!["--kubeconfig", kubeconfig, "--admin-addr", "127.0.0.1:0"];
        all.extend(args.iter().copied());
        let (code, _, err) = run_to_end(&all, Duration::from_secs(30)).await;
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want {want:?} in {err}");
    }
}

/// As `run_to_end`, with extra environment variables.
pub async fn run_to_end_env(
    args: &[&str],
    env: &[(&str, &str)],
    limit: Duration,
) -> (i32, String, String) {
    let out = tokio::time::timeout(
        limit,
        Command::new(env!("CARGO_BIN_EXE_metainit"))
            .args(args)
            .env_remove("KUBECONFIG")
            .env_remove("NODE_NAME")
            .env("HOME", "/nonexistent")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("metainit {args:?} did not finish within {limit:?}"))
    .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs metainit to completion with its stdout a pipe nobody reads any more (as in
/// `metainit status | head -1` once `head` has exited): exit code and stderr.
pub async fn run_into_closed_pipe(args: &[&str], limit: Duration) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_metainit"))
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("metainit starts");
    // The reading end closed before metainit writes a byte.
    drop(child.stdout.take());
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("metainit {args:?} did not finish within {limit:?}"))
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits until metainit's `/readyz` answers 200, at most `wait`.
pub async fn until_readyz(addr: &str, wait: Duration) {
    admin_until(addr, "/readyz", 200, &[], wait).await;
}

/// Waits until the admin server's `path` answers `code` with a body holding each of `has`,
/// at most `limit`; returns that body.
pub async fn admin_until(
    addr: &str,
    path: &str,
    code: u16,
    has: &[&str],
    limit: Duration,
) -> String {
    let start = Instant::now();
    loop {
        let (got, body) = admin_get(addr, path).await;
        if got == code && has.iter().all(|w| body.contains(w)) {
            return body;
        }
        assert!(
            start.elapsed() < limit,
            "{path} stayed {got} {body:?}, wanted {code} with {has:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// GET on the admin server: status code and body.
pub async fn admin_get(addr: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("admin reachable");
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let code = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// The sum of every sample whose name and labels start with `name` in metainit's metrics
/// text (a counter family's, or one labelled series).
pub fn counter_sum(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Scrapes `/metrics` until `check` holds on the text, and returns that text. Gauges are
/// counted from what the watch has seen, one event behind the server: a test waits for them.
pub async fn metrics_until(
    addr: &str,
    what: &str,
    limit: Duration,
    check: impl Fn(&str) -> bool,
) -> String {
    let start = Instant::now();
    loop {
        let text = admin_get(addr, "/metrics").await.1;
        if check(&text) {
            return text;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for the metrics: {what}\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The rights a shipped manifest grants (`manifests/FILE`), as the double's token table
/// takes them: `"verb plural[.group]"` for each rule of its ClusterRoles and Roles.
pub fn manifest_perms(files: &[&str]) -> Vec<String> {
    let mut perms = Vec::new();
    for file in files {
        let path = format!("{}/manifests/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        for doc in docs
            .iter()
            .filter(|d| matches!(d["kind"].as_str(), Some("ClusterRole" | "Role")))
        {
            let strings = |v: &serde_json::Value| -> Vec<String> {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            };
            for rule in doc["rules"].as_array().into_iter().flatten() {
                for group in strings(&rule["apiGroups"]) {
                    for resource in strings(&rule["resources"]) {
                        for verb in strings(&rule["verbs"]) {
                            perms.push(match group.as_str() {
                                "" => format!("{verb} {resource}"),
                                g => format!("{verb} {resource}.{g}"),
                            });
                        }
                    }
                }
            }
        }
    }
    assert!(!perms.is_empty(), "no rules in {files:?}");
    perms
}

pub const EPS: &str = "endpointslices.discovery.k8s.io";

/// A webhook's Service and its one EndpointSlice (`SVC-abc`, label
/// `kubernetes.io/service-name`) of one endpoint, ready or not.
pub fn serve(double: &Double, ns: &str, svc: &str, ready: bool) {
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": svc, "namespace": ns},
        "spec": {"ports": [{"port": 443, "targetPort": 8443}]},
    });
    double.create("services", ns, service).expect("service");
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{svc}-abc"), "namespace": ns,
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.7"], "conditions": {"ready": ready}}],
        "ports": [{"port": 8443, "protocol": "TCP"}],
    });
    double.create(EPS, ns, slice).expect("slice");
}

/// Makes the endpoint of `serve`'s slice ready or not.
pub fn set_ready(double: &Double, ns: &str, svc: &str, ready: bool) {
    let mut s = double.get(EPS, ns, &format!("{svc}-abc")).expect("slice");
    s["endpoints"][0]["conditions"]["ready"] = json!(ready);
    double.update(EPS, ns, s).expect("slice updated");
}

/// A kube client for the double (what a user's `kubectl create` would be).
/// The token of the test's own admin user on a double with a token table (`Bed::as_user`).
pub const ADMIN_TOKEN: &str = "test-admin";

/// A kube client for the double as its admin (a double without a token table takes any).
pub fn client(bed: &Bed) -> kube::Client {
    let url: http::Uri = bed.double.url().parse().expect("url");
    let mut config = kube::Config::new(url);
    config.auth_info.token = Some(ADMIN_TOKEN.to_string().into());
    kube::Client::try_from(config).expect("client")
}

/// What the operator reads, as the tests assert it: every one of these is in
/// docs/src/troubleshooting.md (`tests/cli.rs` checks), so the doc says what the program
/// really prints.
pub mod msg {
    pub const TOKEN_FILE: &str = ", the tokenFile of user ";
    pub const PROXY: &str = "but metainit connects to the API server directly: remove proxy-url from the kubeconfig, or unset HTTPS_PROXY for metainit";
    pub const CLIENT_CERT: &str = ", the client-certificate of user ";
    pub const CLIENT_KEY: &str = ", the client-key of user ";
    pub const UNREACHABLE: &str = "could not reach the API server at ";
    pub const NO_ANSWER: &str = "no answer within ";
    pub const TRIED_ONCE: &str = "tried once as --timeout is 0s";
    pub const TIMEOUT_SPENT: &str = "--timeout spent";
    pub const NOT_REACHABLE_YET: &str = "API server not reachable yet, retrying";
    pub const EMPTY_BODY: &str = "with an empty body, not a Status";
    pub const NOT_KUBERNETES: &str = "does not look like a Kubernetes API server";
    pub const ENV_VALUE: &str = "in the environment variable METAINIT_";
    pub const BOOLEAN_RULE: &str = "a boolean is 1, 0, true, false, yes or no (any case)";
    pub const ADMIN_ADDR_RULE: &str = "an address is IP:PORT, [IPv6]:PORT or localhost:PORT";
    pub const NODE_NAME_RULE: &str = "a node name is a DNS-1123 subdomain";
    pub const NODE_NAME_ENV: &str = "from NODE_NAME";
    pub const GATES_NEED_PODS: &str =
        "scheduling gates exist only on pods; in scheduling-gates mode the resource must be pods";
    pub const LABEL_KEY_TWICE: &str = "the label key is given twice";
    pub const JSON_ERROR: &str = r#""level":"ERROR""#;
    pub const MAX_AGE: &str = "held back longer than --max-age";
    pub const ONLY_UNUSED: &str = "is pending on no labelled object";
    pub const ONCE_SIGNAL: &str = "signal received: starting no new object";
    pub const INTERRUPTED: &str = "interrupted before";
    pub const STATUS_SIGNAL: &str = "status interrupted by a signal";
    pub const CONFIG_OK: &str = "configuration OK";
    pub const STATUS_FIELDS: &str =
        "status.code=503 status.reason=ServiceUnavailable status.message=the server is restarting";
    pub const COULD_NOT_CLEAR: &str = "could not clear";
    pub const RETRYING: &str = "cannot clear yet; retrying";
    pub const FAILURES_AT_ZERO: &str = r#"metainit_clear_failures_total{reason="forbidden"} 0"#;
    pub const RESTARTS_AT_ZERO: &str = r#"metainit_watch_restarts_total{cause="list_failed"} 0"#;
    pub const CLEARED_AT_ZERO: &str =
        r#"metainit_objects_cleared_total{mode="scheduling-gates",resource="pods"} 0"#;
    pub const RELEASED: &str = "released an orphaned gate";
    pub const WOULD_RELEASE_NOW: &str = "dry run: would release an orphaned gate now";
    pub const WOULD_RELEASE_LATER: &str =
        "dry run: would release a gate when its pod is old enough";
    pub const WATCHING_UNBOUND: &str = "watching every unbound pod for its gates";
    pub const RULE_NEEDS_WATCHER: &str = "needs the watcher";
    pub const ZERO_AGE: &str = "label them instead";
    pub const EXCLUDE_WITHOUT_RULE: &str = "--exclude-namespace only limits --release-gate";
    pub const RATE_WITHOUT_RULE: &str = "--release-rate has no effect without --release-gate";
    pub const AUTO_MEANS_INITIALIZERS: &str =
        "the server's version (--mode auto) means initializers";
    pub const EXEMPTED: &str = "exempted the webhook's own namespace";
    pub const RESTORED: &str = "restored the webhook's namespace selector";
    pub const REVERTED: &str = "the exemption was removed by someone else";
    pub const CALLED_BY_URL: &str = "a webhook called by url, not through a service";
    pub const WOULD_EXEMPT: &str = "dry run: would exempt the webhook's own namespace";
    pub const PATCH_GIVING_UP: &str = "could not patch the webhook configuration: giving up";
    pub const WEBHOOKS_TALLY: &str =
        "webhooks: exempted 1, restored 0, would exempt 0, would restore 0, failed 0";
    pub const WEBHOOKS_RBAC: &str = "manifests/rbac-webhooks.yaml";
    pub const GRACE_WITHOUT_WEBHOOKS: &str = "--webhook-grace has no effect without --webhooks";
    pub const GRACE_WITH_ONCE: &str = "--webhook-grace has no effect with --once";
    pub const GRACE_AT_LEAST: &str = "the grace period must be at least 1s";
    pub const WEBHOOKS_TOO_OLD: &str = "--webhooks needs Kubernetes 1.21 or later";
    pub const NO_WEBHOOK_DOWN: &str = "no webhook of a labelled configuration is down or exempted";
    pub const FAILING_CLOSED: &str = "failing closed on ";
    /// An API that answered 404 or 403 as a whole, asked again in minutes (#58).
    pub const LOOKING_AGAIN: &str = "looking again in 5m";

    pub const ALL: &[&str] = &[
        PROXY,
        TOKEN_FILE,
        CLIENT_CERT,
        CLIENT_KEY,
        UNREACHABLE,
        NO_ANSWER,
        TRIED_ONCE,
        TIMEOUT_SPENT,
        NOT_REACHABLE_YET,
        EMPTY_BODY,
        NOT_KUBERNETES,
        ENV_VALUE,
        BOOLEAN_RULE,
        ADMIN_ADDR_RULE,
        NODE_NAME_RULE,
        NODE_NAME_ENV,
        GATES_NEED_PODS,
        LABEL_KEY_TWICE,
        JSON_ERROR,
        MAX_AGE,
        ONLY_UNUSED,
        ONCE_SIGNAL,
        INTERRUPTED,
        STATUS_SIGNAL,
        CONFIG_OK,
        STATUS_FIELDS,
        COULD_NOT_CLEAR,
        RETRYING,
        FAILURES_AT_ZERO,
        RESTARTS_AT_ZERO,
        CLEARED_AT_ZERO,
        RELEASED,
        WOULD_RELEASE_NOW,
        WOULD_RELEASE_LATER,
        WATCHING_UNBOUND,
        RULE_NEEDS_WATCHER,
        ZERO_AGE,
        EXCLUDE_WITHOUT_RULE,
        RATE_WITHOUT_RULE,
        AUTO_MEANS_INITIALIZERS,
        EXEMPTED,
        RESTORED,
        REVERTED,
        CALLED_BY_URL,
        WOULD_EXEMPT,
        PATCH_GIVING_UP,
        WEBHOOKS_TALLY,
        WEBHOOKS_RBAC,
        GRACE_WITHOUT_WEBHOOKS,
        GRACE_WITH_ONCE,
        GRACE_AT_LEAST,
        WEBHOOKS_TOO_OLD,
        NO_WEBHOOK_DOWN,
        FAILING_CLOSED,
        LOOKING_AGAIN,
    ];
}

/// helm's path: `METAINIT_HELM`, or the one scripts/helm.sh builds (and caches). A missing
/// helm fails the test: it never passes by skipping.
pub fn helm_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("METAINIT_HELM").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "METAINIT_HELM={} is not a file: unset it, or run `bash scripts/helm.sh path`",
            path.display()
        );
        return path;
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/helm.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .arg("path")
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "no helm: `bash scripts/helm.sh path` failed (it builds helm from tests/helm/go.mod \
         with Go; or set METAINIT_HELM): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}
