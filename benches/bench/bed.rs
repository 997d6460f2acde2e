//! The test bed of every measurement: a double of one generation, the pods it holds, a
//! kubeconfig pointing at it (or at a proxy in front of it), and the release metainit
//! binary run as a process.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant, SystemTime},
};

use kube_double::{Config, Double, InitializerRule, RequestRecord};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

pub const LABEL: &str = "k8s.opsani.io/initializer";
pub const INITIALIZER: &str = "bench.example.com";
pub const GATE: &str = "bench.example.com/gate";
pub const NAMESPACE: &str = "default";
/// Every wait is bounded: a stuck measurement stops the run with a message.
pub const LIMIT: Duration = Duration::from_secs(60);

/// The binary measured: cargo's release build of this package (`cargo bench` builds
/// binaries with the `bench` profile, which inherits `release`), or `METAINIT_BENCH_BIN`
/// (e.g. the static musl build, or a build with symbols for profiling).
pub fn metainit_bin() -> String {
    std::env::var("METAINIT_BENCH_BIN")
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_metainit").to_string())
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Generation {
    /// Kubernetes 1.13, initializers.
    Legacy,
    /// Kubernetes 1.33, scheduling gates.
    Modern,
}

impl Generation {
    pub const ALL: [Generation; 2] = [Generation::Legacy, Generation::Modern];

    /// metainit's `--mode` for this generation.
    pub fn mode(self) -> &'static str {
        match self {
            Generation::Legacy => "initializers",
            Generation::Modern => "scheduling-gates",
        }
    }

    fn config(self) -> Config {
        match self {
            Generation::Legacy => {
                let mut c = Config::legacy();
                c.initializers = vec![InitializerRule {
                    name: INITIALIZER.into(),
                    resources: vec!["pods".into()],
                }];
                c
            }
            Generation::Modern => Config::modern(),
        }
    }
}

pub struct Bed {
    pub generation: Generation,
    pub double: Double,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
}

impl Bed {
    pub async fn start(generation: Generation) -> Bed {
        let double = Double::start(generation.config())
            .await
            .expect("the double starts");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let kubeconfig = dir.path().join("kubeconfig");
        double
            .write_kubeconfig(&kubeconfig, None)
            .expect("kubeconfig written");
        Bed {
            generation,
            double,
            dir,
            kubeconfig,
        }
    }

    /// A kubeconfig for another server URL (the counting proxy).
    pub fn kubeconfig_for(&self, url: &str) -> PathBuf {
        let path = self.dir.path().join("kubeconfig-proxy");
        std::fs::write(&path, kube_double::kubeconfig_yaml(url, None)).expect("kubeconfig written");
        path
    }

    /// Creates a pod held back by this generation's blocker (legacy: the double's
    /// initializer rule fills `pending`; modern: one scheduling gate), as the server's
    /// admission would, without blocking.
    pub fn create(&self, name: &str, labelled: bool) {
        let mut labels = json!({"app": "bench"});
        if labelled {
            labels[LABEL] = json!("true");
        }
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "registry.example/c:1"}]}
        });
        if self.generation == Generation::Modern {
            pod["spec"]["schedulingGates"] = json!([{"name": GATE}]);
        }
        self.double
            .create("pods", NAMESPACE, pod)
            .unwrap_or_else(|e| panic!("cannot create {name}: {e}"));
    }

    /// Creates a running pod: bound to a node, never gated (a real server refuses gates
    /// with `nodeName`).
    pub fn create_bound(&self, name: &str) {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "bench"}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "registry.example/c:1"}]}
        });
        self.double
            .create("pods", NAMESPACE, pod)
            .unwrap_or_else(|e| panic!("cannot create {name}: {e}"));
    }

    /// Changes a pod's labels, as a controller does.
    pub fn relabel(&self, name: &str) {
        self.double
            .patch(
                "pods",
                NAMESPACE,
                name,
                "application/merge-patch+json",
                &json!({"metadata": {"labels": {"rev": "2"}}}),
            )
            .unwrap_or_else(|e| panic!("cannot patch {name}: {e}"));
    }

    pub fn delete(&self, name: &str) {
        self.double
            .delete("pods", NAMESPACE, name)
            .unwrap_or_else(|e| panic!("cannot delete {name}: {e}"));
    }

    /// The JSON patch metainit sends for this pod as the server holds it now: test what is
    /// pending, remove it.
    pub fn clearing_patch(&self, name: &str) -> Vec<u8> {
        let pod = self
            .double
            .get("pods", NAMESPACE, name)
            .unwrap_or_else(|| panic!("{name} exists"));
        let path = match self.generation {
            Generation::Legacy => "/metadata/initializers",
            Generation::Modern => "/spec/schedulingGates",
        };
        let seen = pod.pointer(path).cloned().unwrap_or(Value::Null);
        serde_json::to_vec(&json!([
            {"op": "test", "path": path, "value": seen},
            {"op": "remove", "path": path},
        ]))
        .expect("a patch serializes")
    }

    pub fn pod_path(name: &str) -> String {
        format!("/api/v1/namespaces/{NAMESPACE}/pods/{name}")
    }

    pub fn is_clear(&self, name: &str) -> bool {
        let Some(pod) = self.double.get("pods", NAMESPACE, name) else {
            return false;
        };
        let pending = match self.generation {
            Generation::Legacy => pod.pointer("/metadata/initializers/pending"),
            Generation::Modern => pod.pointer("/spec/schedulingGates"),
        };
        pending
            .and_then(Value::as_array)
            .is_none_or(|a| a.is_empty())
    }

    /// From the server's change history: when the pod was added and when the change that
    /// cleared it (the first MODIFIED after its ADDED) was applied.
    pub fn cleared_span(&self, name: &str) -> Option<(SystemTime, SystemTime)> {
        let history = self.double.history("pods", NAMESPACE, name);
        let added = history.iter().position(|c| c.kind == "ADDED")?;
        let cleared = history[added + 1..].iter().find(|c| c.kind == "MODIFIED")?;
        Some((history[added].at, cleared.at))
    }

    /// Requests to the pods API that arrived at or after `since`.
    pub fn pod_requests(&self, since: SystemTime) -> Vec<RequestRecord> {
        self.double
            .requests()
            .into_iter()
            .filter(|r| r.at >= since && r.path_and_query.starts_with("/api/v1/pods"))
            .collect()
    }

    /// Waits for the first LIST of pods at or after `since`; returns its arrival time and
    /// how many requests (of any kind) came before it.
    pub async fn first_list(&self, since: SystemTime, m: &mut Metainit) -> (SystemTime, usize) {
        self.first(since, m, "LIST", is_list).await
    }

    /// Waits for the first PATCH of pod `name` at or after `since`; returns its arrival time
    /// and how many requests (of any kind) came before it.
    pub async fn first_patch(
        &self,
        since: SystemTime,
        name: &str,
        m: &mut Metainit,
    ) -> (SystemTime, usize) {
        let path = Self::pod_path(name);
        self.first(since, m, "PATCH", |r| {
            r.method == "PATCH" && r.path_and_query.starts_with(&path)
        })
        .await
    }

    /// Waits for the first request at or after `since` that `wanted` accepts.
    async fn first(
        &self,
        since: SystemTime,
        m: &mut Metainit,
        what: &str,
        wanted: impl Fn(&RequestRecord) -> bool,
    ) -> (SystemTime, usize) {
        let start = Instant::now();
        loop {
            let all: Vec<RequestRecord> = self
                .double
                .requests()
                .into_iter()
                .filter(|r| r.at >= since)
                .collect();
            if let Some(i) = all.iter().position(&wanted) {
                return (all[i].at, i);
            }
            m.check_alive();
            assert!(start.elapsed() < LIMIT, "no {what} from metainit");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits until metainit's WATCH of pods, started at or after `since`, is open.
    pub async fn watching(&self, since: SystemTime, m: &mut Metainit) {
        let start = Instant::now();
        loop {
            if self.pod_requests(since).iter().any(is_watch) {
                return;
            }
            m.check_alive();
            assert!(start.elapsed() < LIMIT, "no WATCH from metainit");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn is_watch(r: &RequestRecord) -> bool {
    r.method == "GET"
        && r.path_and_query
            .split_once('?')
            .is_some_and(|(_, q)| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

fn is_list(r: &RequestRecord) -> bool {
    r.method == "GET" && r.path_and_query.starts_with("/api/v1/pods") && !is_watch(r)
}

/// Memory of a process, from /proc/PID/status, in KiB.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    /// VmHWM: the peak resident set.
    pub peak_kib: u64,
    /// VmRSS: the resident set now.
    pub now_kib: u64,
}

/// A running metainit, its log in a file.
pub struct Metainit {
    child: Child,
    pub spawned: SystemTime,
    log: PathBuf,
}

impl Metainit {
    /// Starts metainit on `kubeconfig` with `--mode MODE`, the default log level and an
    /// ephemeral admin port; `SystemTime` is read just before the spawn.
    pub fn spawn(kubeconfig: &Path, mode: &str, log: &Path) -> Metainit {
        Metainit::spawn_with(kubeconfig, mode, log, &[])
    }

    /// `spawn` with more arguments.
    pub fn spawn_with(kubeconfig: &Path, mode: &str, log: &Path, extra: &[&str]) -> Metainit {
        let file = std::fs::File::create(log).expect("log file");
        let err = file.try_clone().expect("log file");
        // `METAINIT_BENCH_WRAPPER="valgrind --tool=callgrind"` runs metainit under a
        // profiler (its figures then mean nothing; the profile does).
        let wrapper = std::env::var("METAINIT_BENCH_WRAPPER").unwrap_or_default();
        let mut words = wrapper.split_whitespace();
        let mut cmd = match words.next() {
            Some(program) => {
                let mut c = Command::new(program);
                c.args(words).arg(metainit_bin());
                c
            }
            None => Command::new(metainit_bin()),
        };
        cmd.arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--admin-addr", "127.0.0.1:0", "--mode", mode])
            .args(extra)
            .env_remove("KUBECONFIG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .kill_on_drop(true);
        let spawned = SystemTime::now();
        let child = cmd.spawn().expect("metainit starts");
        Metainit {
            child,
            spawned,
            log: log.to_path_buf(),
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Lines logged at WARN or ERROR.
    pub fn problems(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
            .map(str::to_string)
            .collect()
    }

    /// Stops the run if metainit has exited.
    pub fn check_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("metainit exited ({status}); its log:\n{}", self.log_tail());
        }
    }

    pub fn memory(&self) -> Memory {
        let pid = self.child.id().expect("metainit runs");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
        };
        Memory {
            peak_kib: field("VmHWM:"),
            now_kib: field("VmRSS:"),
        }
    }

    /// CPU time of every thread so far (from /proc/PID/task/*/schedstat).
    pub fn cpu(&self) -> Duration {
        cpu_of(&format!(
            "/proc/{}",
            self.child.id().expect("metainit runs")
        ))
    }

    /// User and system time so far, in clock ticks (`/proc/PID/stat`): the kernel samples
    /// the split at each tick, so it is read over many objects, never over one.
    pub fn user_system_ticks(&self) -> (u64, u64) {
        let pid = self.child.id().expect("metainit runs");
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields 14 and 15 (utime, stime), counted after the command's closing parenthesis.
        let fields: Vec<&str> = stat
            .rfind(')')
            .map(|at| stat[at + 1..].split_whitespace().collect())
            .unwrap_or_default();
        let field = |i: usize| fields.get(i).and_then(|f| f.parse().ok()).unwrap_or(0);
        (field(11), field(12))
    }

    pub fn sockets(&self) -> usize {
        let pid = self.child.id().expect("metainit runs");
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| {
                        std::fs::read_link(e.path())
                            .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    /// Stops the process with SIGTERM (so a profiler wrapping it writes its output),
    /// killing it if it is still there after a while, and reaps it.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        if tokio::time::timeout(LIMIT, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }
}

/// Polls `check` every millisecond until it holds, stopping the run after `LIMIT`.
pub async fn until(what: &str, m: &mut Metainit, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        m.check_alive();
        assert!(
            start.elapsed() < LIMIT,
            "timed out waiting for {what}; metainit's log:\n{}",
            m.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The kernel's floor for one HTTP request on loopback TCP, on this machine now: a
/// request of `request` bytes and an answer of `answer` bytes between two connected
/// sockets of one thread (a `write` and a `read` at each end), CPU per round trip, both
/// ends counted; the client's share is about half. Median of 5 runs of `n` round trips.
pub fn loopback_round_trip(request: usize, answer: usize, n: usize) -> Duration {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds on loopback");
    let mut client =
        std::net::TcpStream::connect(listener.local_addr().expect("an address")).expect("connects");
    let (mut server, _) = listener.accept().expect("accepts");
    for s in [&client, &server] {
        s.set_nodelay(true).expect("TCP_NODELAY");
    }
    let (req, ans) = (vec![b'x'; request], vec![b'y'; answer]);
    let mut buf = vec![0u8; request.max(answer)];
    let mut read_all = |s: &mut std::net::TcpStream, len: usize| {
        let mut got = 0;
        while got < len {
            got += s.read(&mut buf[got..len]).expect("reads");
        }
    };
    let mut runs: Vec<Duration> = (0..5)
        .map(|_| {
            let before = thread_cpu();
            for _ in 0..n {
                client.write_all(&req).expect("writes");
                read_all(&mut server, request);
                server.write_all(&ans).expect("writes");
                read_all(&mut client, answer);
            }
            (thread_cpu() - before) / n as u32
        })
        .collect();
    runs.sort();
    runs[2]
}

/// CPU time of the calling thread so far.
fn thread_cpu() -> Duration {
    Duration::from_nanos(schedstat_ns(Path::new("/proc/thread-self/schedstat")).unwrap_or(0))
}

/// The time on CPU in a `schedstat` file (its first field), in nanoseconds.
fn schedstat_ns(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU time of every thread of a process, from `/proc/.../task/*/schedstat`.
pub fn cpu_of(proc_dir: &str) -> Duration {
    let ns: u64 = std::fs::read_dir(format!("{proc_dir}/task"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|t| schedstat_ns(&t.path().join("schedstat")))
                .sum()
        })
        .unwrap_or(0);
    Duration::from_nanos(ns)
}
