//! Fault injection ("chaos"): the real `metainit` binary, as a process, against the double
//! with seeded faults, in both modes. Every scenario creates labelled pending objects among
//! many unlabelled ones, over time, while faults come and go; then checks liveness (every
//! labelled pending object cleared of the names it should be, within a bound after the last
//! fault ends), safety (the request log and the final state show no unlabelled object
//! PATCHed, no refused object touched, no name outside `--only` removed), that the process
//! never exits or panics, its peak RSS, and that a failing or absent server is not
//! hammered. It prints a table (run with `--nocapture`) and writes it to
//! `<target dir>/chaos-report.md`.
//!
//! The webhooks scenario (`--webhooks`, modern only) runs on the real control plane behind
//! the fault proxy: tests/cluster_chaos_webhooks.rs.
//!
//! Every scenario draws from one seed (tests/common/fuzz.rs's `Rng`), the FNV-1a hash of its
//! `name/mode`, printed with its failures: the same name replays the same choices.
//!
//! `METAINIT_CHAOS=full` runs the full sizes (see RELIABILITY.md); the default is the short
//! run for CI. `METAINIT_CHAOS_ONLY=substring` runs only the scenarios whose
//! `name/mode` contains it.

mod common;

use std::{
    collections::{HashMap, HashSet},
    fmt::Write as _,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use common::{fuzz::Rng, *};
use kube_double::{Config, Double, Faults, InitializerRule, Rejection};
use serde_json::{Value, json};

/// Legacy: the initializer metainit clears (`--only`), and the one it must leave.
const INIT_CLEARED: &str = "a.chaos.example.com";
const INIT_KEPT: &str = "b.chaos.example.com";
/// Modern: the gate metainit clears (`--only`), and the one it must leave.
const GATE_CLEARED: &str = "kueue.x-k8s.io/admission";
const GATE_KEPT: &str = "example.com/quota";

const NAMESPACES: [&str; 2] = ["default", "chaos-b"];
const TICK: Duration = Duration::from_millis(100);

/// rbac-late: metainit's bearer token.
const TOKEN: &str = "metainit";
/// rejected, recreated: PATCHes of the objects named so are refused as an admission
/// webhook or policy does (422 `Invalid` with causes): the labelled objects with only the
/// `--only` name, 8 of the 28 to clear (48 of 168 in the full run).
const REJECT_PREFIX: &str = "l-one-";
/// hung: PATCHes accepted and never answered, more than metainit's default
/// `--concurrency` (16), and metainit's `--request-timeout`.
const HANG_COUNT: u32 = 20;
const HUNG_REQUEST_TIMEOUT: &str = "2s";
/// restored: metainit's `--resync-period`, and the name prefix of the unrelated writes
/// between the snapshot and the restore.
const RESYNC: Duration = Duration::from_secs(2);
const RESYNC_ARG: &str = "2s";
const BURST_PREFIX: &str = "u-none-burst-";

// ---------------------------------------------------------------------------------------
// Sizes and bounds

struct Size {
    full: bool,
    labelled: usize,
    unlabelled: usize,
    /// Objects are created evenly over this long.
    create_over: Duration,
    /// Server down at start.
    down: Duration,
    /// Server restarted mid-run.
    restart: Duration,
    /// Every request answered 500/503/429.
    total_failure: Duration,
    /// Every labelled pending object is cleared within this long after the last fault
    /// ends (and after it was created).
    bound: Duration,
    /// Watched a little longer after the last clear, to catch a late wrong PATCH.
    settle: Duration,
    /// Scenarios run at the same time.
    parallel: usize,
}

impl Size {
    fn from_env() -> Size {
        if std::env::var("METAINIT_CHAOS").as_deref() == Ok("full") {
            Size {
                full: true,
                labelled: 240,
                unlabelled: 2000,
                create_over: Duration::from_secs(30),
                down: Duration::from_secs(20),
                restart: Duration::from_secs(10),
                total_failure: Duration::from_secs(10),
                bound: Duration::from_secs(60),
                settle: Duration::from_secs(3),
                parallel: 3,
            }
        } else {
            Size {
                full: false,
                labelled: 40,
                unlabelled: 300,
                create_over: Duration::from_secs(6),
                down: Duration::from_secs(5),
                restart: Duration::from_secs(3),
                total_failure: Duration::from_secs(3),
                bound: Duration::from_secs(30),
                settle: Duration::from_millis(1500),
                parallel: 4,
            }
        }
    }
}

/// Connection attempts (server absent) or requests (server failing every request) per
/// second, per metainit process, in any one-second window. The watch retries with
/// kube-runtime's backoff (0.8 s doubling, jittered), start-up requests with the same
/// schedule, and each object's PATCH with 0.1 s doubling, jittered; across objects, the
/// work queue lets at most 16 retries (`--concurrency`) through at once and 48 a second
/// after that, however many objects fail: 16 + 48 and a few for the watch. A hot loop
/// would make thousands. An object created during the window also gets its first
/// attempt, which is not a retry: see `Refusal::allow`.
const OUTAGE_RPS_BOUND: f64 = 80.0;
/// Peak resident memory of one metainit process (debug or release build).
const RSS_BOUND_KIB: u64 = 64 * 1024;

// ---------------------------------------------------------------------------------------
// Scenarios

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    DownAtStart,
    Restart,
    RestartExpired,
    CutEveryK,
    CutRandom,
    Errors,
    Latency,
    Expired,
    Malformed,
    Writer,
    Replicas,
    RbacLate,
    Rejected,
    Hung,
    Recreated,
    Restored,
}

impl Scenario {
    const ALL: [Scenario; 16] = [
        Scenario::DownAtStart,
        Scenario::Restart,
        Scenario::RestartExpired,
        Scenario::CutEveryK,
        Scenario::CutRandom,
        Scenario::Errors,
        Scenario::Latency,
        Scenario::Expired,
        Scenario::Malformed,
        Scenario::Writer,
        Scenario::Replicas,
        Scenario::RbacLate,
        Scenario::Rejected,
        Scenario::Hung,
        Scenario::Recreated,
        Scenario::Restored,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::DownAtStart => "down-at-start",
            Scenario::Restart => "restart",
            Scenario::RestartExpired => "restart-expired",
            Scenario::CutEveryK => "watch-cut-every-5",
            Scenario::CutRandom => "watch-cut-random",
            Scenario::Errors => "errors-20%-then-100%",
            Scenario::Latency => "latency-200ms",
            Scenario::Expired => "versions-expired",
            Scenario::Malformed => "malformed-watch",
            Scenario::Writer => "concurrent-writer",
            Scenario::Replicas => "3-replicas-kill",
            Scenario::RbacLate => "rbac-late",
            Scenario::Rejected => "rejected",
            Scenario::Hung => "hung",
            Scenario::Recreated => "recreated",
            Scenario::Restored => "restored",
        }
    }

    /// metainit's flags besides `--mode` and `--only`.
    fn args(self) -> Vec<String> {
        let args: &[&str] = match self {
            Scenario::Hung => &["--request-timeout", HUNG_REQUEST_TIMEOUT],
            Scenario::Restored => &["--resync-period", RESYNC_ARG],
            _ => &[],
        };
        args.iter().map(|a| a.to_string()).collect()
    }

    /// The statuses of the PATCHes refused on purpose while the scenario's refusal lasts,
    /// whose number per object is bounded (per-object backoff, no hot loop).
    fn refused(self) -> &'static [u16] {
        match self {
            Scenario::RbacLate => &[403],
            Scenario::Rejected | Scenario::Recreated => &[422],
            _ => &[],
        }
    }
}

/// rbac-late: the token table, before and after RBAC catches up: get, list and watch pods
/// and create events from the start; patch (and on legacy initialize) only when granted.
fn tokens(g: Gen, granted: bool) -> Option<HashMap<String, Vec<String>>> {
    let mut perms: Vec<String> = ["get pods", "list pods", "watch pods", "create events"]
        .map(String::from)
        .into();
    if granted {
        perms.push("patch pods".into());
        if g == Gen::Legacy {
            perms.push("initialize pods".into());
        }
    }
    Some([(TOKEN.to_string(), perms)].into())
}

/// rejected, recreated: the admission refusal.
fn rejection() -> Rejection {
    Rejection {
        name_prefix: REJECT_PREFIX.into(),
        code: 422,
        message: "refused by the chaos suite's policy".into(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gen {
    Legacy,
    Modern,
}

impl Gen {
    fn mode(self) -> &'static str {
        match self {
            Gen::Legacy => "initializers",
            Gen::Modern => "scheduling-gates",
        }
    }
    fn cleared(self) -> &'static str {
        match self {
            Gen::Legacy => INIT_CLEARED,
            Gen::Modern => GATE_CLEARED,
        }
    }
    fn kept(self) -> &'static str {
        match self {
            Gen::Legacy => INIT_KEPT,
            Gen::Modern => GATE_KEPT,
        }
    }
    fn names(self, obj: &Value) -> Vec<String> {
        match self {
            Gen::Legacy => pending_initializers(obj),
            Gen::Modern => gates(obj),
        }
    }
}

/// What an object is, encoded in its name so the request log can be judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cat {
    /// Labelled, both names pending: the `--only` one goes, the other stays.
    Both,
    /// Labelled, only the `--only` name pending: fully cleared.
    One,
    /// Labelled, only the other name pending: never touched.
    Kept,
    /// Labelled and refused: legacy `initializers.result` set; modern a pod being deleted
    /// (held by a finalizer). Never touched.
    Refused,
    /// Labelled, nothing pending.
    None,
    /// Unlabelled, both names pending.
    UnlabelledPending,
    /// Unlabelled, nothing pending.
    UnlabelledNone,
}

impl Cat {
    fn prefix(self) -> &'static str {
        match self {
            Cat::Both => "l-both-",
            Cat::One => "l-one-",
            Cat::Kept => "l-kept-",
            Cat::Refused => "l-refused-",
            Cat::None => "l-none-",
            Cat::UnlabelledPending => "u-pending-",
            Cat::UnlabelledNone => "u-none-",
        }
    }
    fn of(name: &str) -> Option<Cat> {
        [
            Cat::Both,
            Cat::One,
            Cat::Kept,
            Cat::Refused,
            Cat::None,
            Cat::UnlabelledPending,
            Cat::UnlabelledNone,
        ]
        .into_iter()
        .find(|c| name.starts_with(c.prefix()))
    }
    fn labelled(self) -> bool {
        !matches!(self, Cat::UnlabelledPending | Cat::UnlabelledNone)
    }
    /// metainit must clear (some of) its names.
    fn must_clear(self) -> bool {
        matches!(self, Cat::Both | Cat::One)
    }
    /// Pending in the sense of the issue: something holds it back.
    fn pending(self) -> bool {
        !matches!(self, Cat::None | Cat::UnlabelledNone)
    }

    fn object(self, g: Gen, name: &str) -> Value {
        let (c, k) = (g.cleared(), g.kept());
        let labelled = self.labelled();
        match g {
            Gen::Legacy => {
                let mut p = pod(name, labelled);
                // Without an explicit list, admission fills both configured initializers.
                let explicit = match self {
                    Cat::Both | Cat::UnlabelledPending => None,
                    Cat::One => Some(json!({"pending": [{"name": c}]})),
                    Cat::Kept => Some(json!({"pending": [{"name": k}]})),
                    Cat::Refused => Some(json!({
                        "pending": [{"name": c}, {"name": k}],
                        "result": {"status": "Failure", "message": "rejected by the chaos suite",
                                   "reason": "Forbidden", "code": 403}
                    })),
                    Cat::None | Cat::UnlabelledNone => Some(json!({"pending": []})),
                };
                if let Some(init) = explicit {
                    p["metadata"]["initializers"] = init;
                }
                p
            }
            Gen::Modern => match self {
                Cat::Both | Cat::UnlabelledPending => gated_pod(name, labelled, &[c, k]),
                Cat::One => gated_pod(name, labelled, &[c]),
                Cat::Kept => gated_pod(name, labelled, &[k]),
                // A gated pod is never bound (create refuses `spec.nodeName` with gates, the
                // binding refuses a gated pod): one being deleted instead, held by a
                // finalizer. Created unlabelled: `Obj::create` deletes it, then labels it.
                Cat::Refused => {
                    let mut p = gated_pod(name, false, &[c, k]);
                    p["metadata"]["finalizers"] = json!(["chaos.example.com/hold"]);
                    p
                }
                Cat::None | Cat::UnlabelledNone => pod(name, labelled),
            },
        }
    }
}

/// A scenario's seed: the FNV-1a hash of its `name/mode`, so every run makes the same
/// choices.
fn seed_of(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

// ---------------------------------------------------------------------------------------
// The plan of objects

struct Obj {
    ns: &'static str,
    name: String,
    cat: Cat,
    created: Option<Instant>,
    original: Vec<String>,
    cleared: Option<Instant>,
    uid: String,
    /// resourceVersion when created (restored: when it became pending again).
    rv: u64,
    /// recreated: the uid before it was deleted and created again under its name.
    old_uid: Option<String>,
    /// restored: it existed when the snapshot was taken.
    in_snapshot: bool,
    /// restored: it had to be cleared (again) after the restore.
    pending_after_restore: bool,
}

impl Obj {
    /// Creates it on the server now (again, after a restore that lost it), and records
    /// what it was created with.
    fn create(&mut self, double: &Double, g: Gen) {
        let mut created = double
            .create("pods", self.ns, self.cat.object(g, &self.name))
            .unwrap_or_else(|e| panic!("{} not created: {e}", self.name));
        if g == Gen::Modern && self.cat == Cat::Refused {
            // Terminating before it is labelled: metainit never sees it otherwise.
            double
                .delete("pods", self.ns, &self.name)
                .unwrap_or_else(|e| panic!("{} not deleted: {e}", self.name));
            let mut obj = double
                .get("pods", self.ns, &self.name)
                .unwrap_or_else(|| panic!("{} gone: its finalizer should hold it", self.name));
            obj["metadata"]["labels"][LABEL] = json!("true");
            created = double
                .update("pods", self.ns, obj)
                .unwrap_or_else(|e| panic!("{} not labelled: {e}", self.name));
        }
        self.original = g.names(&created);
        self.created = Some(Instant::now());
        self.cleared = None;
        self.uid = uid(&created);
        self.rv = rv(&created);
    }
}

fn uid(obj: &Value) -> String {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn rv(obj: &Value) -> u64 {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn plan(size: &Size, rng: &mut Rng) -> Vec<Obj> {
    let mut objs = Vec::new();
    let labelled = [
        Cat::Both,
        Cat::Both,
        Cat::Both,
        Cat::Both,
        Cat::Both,
        Cat::One,
        Cat::One,
        Cat::Kept,
        Cat::Refused,
        Cat::None,
    ];
    for i in 0..size.labelled {
        let cat = labelled[i % labelled.len()];
        objs.push((cat, i));
    }
    for i in 0..size.unlabelled {
        let cat = if i % 2 == 0 {
            Cat::UnlabelledPending
        } else {
            Cat::UnlabelledNone
        };
        objs.push((cat, i));
    }
    // Fisher-Yates, seeded: labelled objects arrive spread among the others.
    for i in (1..objs.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        objs.swap(i, j);
    }
    objs.into_iter()
        .enumerate()
        .map(|(n, (cat, i))| Obj {
            ns: NAMESPACES[n % NAMESPACES.len()],
            name: format!("{}{i:05}", cat.prefix()),
            cat,
            created: None,
            original: Vec::new(),
            cleared: None,
            uid: String::new(),
            rv: 0,
            old_uid: None,
            in_snapshot: false,
            pending_after_restore: false,
        })
        .collect()
}

/// What the concurrent writer did, for the expected final state.
#[derive(Default)]
struct WriterLog {
    /// `ns/name` to the names it removed itself, as a competing initializer or gate controller.
    removed: HashMap<String, Vec<String>>,
    deleted: HashSet<String>,
    updates: usize,
    conflicts: usize,
}

fn expected(g: Gen, obj: &Obj, removed: &[String]) -> Vec<String> {
    let cleared = if obj.cat.must_clear() {
        Some(g.cleared())
    } else {
        None
    };
    obj.original
        .iter()
        .filter(|n| Some(n.as_str()) != cleared && !removed.contains(n))
        .cloned()
        .collect()
}

// ---------------------------------------------------------------------------------------
// Outages: a listener that counts connection attempts while the double is down

struct Knocks {
    times: Arc<Mutex<Vec<Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Knocks {
    /// Binds the double's (stopped) address; accepts every connection and drops it at once.
    async fn listen(addr: SocketAddr) -> Knocks {
        let start = Instant::now();
        let listener = loop {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(e) => {
                    assert!(
                        start.elapsed() < Duration::from_secs(5),
                        "cannot bind {addr} while the double is down: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        let times = Arc::new(Mutex::new(Vec::new()));
        let t = times.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok((stream, _)) = listener.accept().await {
                    t.lock().unwrap().push(Instant::now());
                    drop(stream);
                }
            }
        });
        Knocks { times, task }
    }

    /// Releases the address; returns when each connection attempt came.
    async fn release(self) -> Vec<Instant> {
        self.task.abort();
        let _ = self.task.await;
        self.times.lock().unwrap().clone()
    }
}

/// The highest count in any one-second window starting at `from`, stepped by 100 ms.
fn peak_per_second(times: &[Instant], from: Instant, to: Instant) -> f64 {
    let mut peak = 0usize;
    let mut start = from;
    while start < to {
        let end = start + Duration::from_secs(1);
        let n = times.iter().filter(|t| **t >= start && **t < end).count();
        peak = peak.max(n);
        start += TICK;
    }
    peak as f64
}

/// When each request metainit sent arrived, on the suite's clock.
fn request_times(double: &Double, t0: Instant, t0_sys: SystemTime) -> Vec<Instant> {
    double
        .requests()
        .iter()
        .filter_map(|r| Some(t0 + r.at.duration_since(t0_sys).ok()?))
        .collect()
}

/// Phases during which the server refuses on purpose: every request failing, RBAC not
/// granted yet, or admission refusing the writes of some objects.
#[derive(Default)]
struct Refusal {
    since: Option<Instant>,
    phases: Vec<(Instant, Instant)>,
    /// First attempts of objects created at the start of this phase.
    first_attempts: usize,
}

impl Refusal {
    fn start(&mut self, at: Instant) {
        self.since = Some(at);
        self.first_attempts = 0;
    }

    /// `n` objects were created as this phase began: each gets a first attempt, which
    /// is not a retry against the refusing server and is not counted.
    fn allow(&mut self, n: usize) {
        self.first_attempts += n;
    }

    /// Ends the phase, if one is under way: the peak requests per second during it.
    fn end(&mut self, double: &Double, t0: Instant, t0_sys: SystemTime) -> Option<f64> {
        let from = self.since.take()?;
        let to = Instant::now();
        self.phases.push((from, to));
        let peak = peak_per_second(&request_times(double, t0, t0_sys), from, to);
        Some((peak - self.first_attempts as f64).max(0.0))
    }
}

/// No hot loop on one object. In each refusal phase, the PATCHes of one object answered
/// with one of `codes` are at most what its backoff allows (0.1 s doubling, drawn down by
/// up to a fifth, capped at 30 s) from its first such PATCH to the end of the phase,
/// T seconds: log2(T / 0.1) + T / 30 + 3. Returns how many such PATCHes there were, and
/// the most one object got in one phase.
fn refused_per_object(
    double: &Double,
    t0: Instant,
    t0_sys: SystemTime,
    phases: &[(Instant, Instant)],
    codes: &[u16],
    problems: &mut Vec<String>,
) -> (usize, usize) {
    let requests = double.requests();
    let (mut total, mut worst) = (0, 0);
    for &(from, to) in phases {
        let mut per: HashMap<&str, Vec<Instant>> = HashMap::new();
        for r in requests
            .iter()
            .filter(|r| r.method == "PATCH" && codes.contains(&r.status))
        {
            let Ok(since) = r.at.duration_since(t0_sys) else {
                continue;
            };
            let at = t0 + since;
            if at >= from && at < to {
                let path = r.path_and_query.split('?').next().unwrap_or("");
                per.entry(path).or_default().push(at);
            }
        }
        for (path, times) in per {
            total += times.len();
            worst = worst.max(times.len());
            let first = times.iter().min().copied().unwrap_or(to);
            let t = to.saturating_duration_since(first).as_secs_f64();
            let bound = (t / 0.1).log2().max(0.0) + t / 30.0 + 3.0;
            if times.len() as f64 > bound {
                problems.push(format!(
                    "{} refused PATCHes of {path} in {t:.1}s, over the backoff's bound of {bound:.1}",
                    times.len()
                ));
            }
        }
    }
    (total, worst)
}

/// restored: what the restore did.
#[derive(Default)]
struct RestoreLog {
    at: Option<Instant>,
    revision_before: u64,
    revision_after: u64,
    /// Objects created after the snapshot, lost, and created again.
    lost: usize,
    /// Objects to clear that were clear before the restore and pending after it.
    pending_again: usize,
}

/// Lines metainit logged that contain every one of `parts`, over its processes.
fn logged(procs: &[Proc], parts: &[&str]) -> Vec<String> {
    procs
        .iter()
        .flat_map(|p| p.m.log())
        .filter(|l| parts.iter().all(|part| l.contains(part)))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Processes

struct Proc {
    m: Metainit,
    pid: u32,
    peak_rss_kib: u64,
    /// Killed on purpose by the scenario: its exit is expected.
    killed: bool,
}

impl Proc {
    fn spawn(bed: &Bed, g: Gen, s: Scenario) -> Proc {
        let extra = s.args();
        let mut args = vec!["--mode", g.mode(), "--only", g.cleared()];
        args.extend(extra.iter().map(String::as_str));
        let m = bed.metainit(&args);
        let pid = m.child.id().expect("metainit runs");
        Proc {
            m,
            pid,
            peak_rss_kib: 0,
            killed: false,
        }
    }

    fn status_kib(&self, field: &str) -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        text.lines()
            .find(|l| l.starts_with(field))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    }

    /// Records the RSS; returns a problem if the process has exited.
    fn check(&mut self) -> Option<String> {
        if self.killed {
            return None;
        }
        if let Some(rss) = self.status_kib("VmRSS:") {
            self.peak_rss_kib = self.peak_rss_kib.max(rss);
        }
        match self.m.child.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => Some(format!(
                "metainit (pid {}) exited while it should run: {status}; last log lines: {:#?}",
                self.pid,
                tail(&self.m.log(), 15)
            )),
            Err(e) => Some(format!("cannot poll metainit (pid {}): {e}", self.pid)),
        }
    }

    /// The peak RSS over the process's life (VmHWM), and any panic in its log.
    fn finish(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.killed
            && let Some(hwm) = self.status_kib("VmHWM:")
        {
            self.peak_rss_kib = self.peak_rss_kib.max(hwm);
        }
        let log = self.m.log();
        if let Some(l) = log.iter().find(|l| l.contains("panicked")) {
            problems.push(format!("metainit (pid {}) panicked: {l}", self.pid));
        }
        if self.peak_rss_kib > RSS_BOUND_KIB {
            problems.push(format!(
                "metainit (pid {}) peak RSS {} KiB over the bound of {} KiB",
                self.pid, self.peak_rss_kib, RSS_BOUND_KIB
            ));
        }
        problems
    }
}

fn tail(lines: &[String], n: usize) -> Vec<String> {
    lines[lines.len().saturating_sub(n)..].to_vec()
}

// ---------------------------------------------------------------------------------------
// One run

#[derive(Default)]
struct Row {
    scenario: &'static str,
    mode: &'static str,
    /// The seed every choice of the run came from (`seed_of`).
    seed: u64,
    labelled: usize,
    labelled_pending: usize,
    unlabelled: usize,
    faults: String,
    must_clear: usize,
    cleared: usize,
    deleted: usize,
    missed: usize,
    wrong: usize,
    worst_after_recovery: Duration,
    worst_from_create: Duration,
    peak_rss_kib: u64,
    outage_rps: Option<f64>,
    wall: Duration,
    problems: Vec<String>,
}

/// Timed steps of a scenario.
enum Step {
    Faults(Faults),
    /// Stop the double and count connection attempts instead.
    Stop,
    /// Expire every resource version (410 on watch and continue).
    Expire,
    /// Release the counting listener and serve again.
    Resume,
    Kill(usize),
    Respawn(usize),
    /// Replace the token table (RBAC catching up); ends a refusal phase.
    Tokens(Option<HashMap<String, Vec<String>>>),
    /// Delete and create again, under the same name, every object named `REJECT_PREFIX…`
    /// (a new uid, pending again).
    Recreate,
    /// Take an etcd snapshot, once metainit has cleared the first objects, with a few
    /// objects to clear still pending in it; then many unrelated writes.
    Snapshot,
    /// Restore the snapshot: the revision goes backwards, open connections are cut.
    Restore,
    /// The last fault has ended.
    Recovered,
}

fn steps(s: Scenario, g: Gen, size: &Size) -> Vec<(Duration, Step)> {
    let c = size.create_over;
    let none = Faults::default;
    match s {
        Scenario::DownAtStart => vec![
            (Duration::ZERO, Step::Stop),
            (size.down, Step::Resume),
            (size.down, Step::Recovered),
        ],
        Scenario::Restart | Scenario::RestartExpired => {
            let at = c.mul_f64(0.3);
            let mut v = vec![(at, Step::Stop)];
            if s == Scenario::RestartExpired {
                v.push((at + size.restart, Step::Expire));
            }
            v.push((at + size.restart, Step::Resume));
            v.push((at + size.restart, Step::Recovered));
            v
        }
        Scenario::CutEveryK => vec![
            (
                Duration::ZERO,
                Step::Faults(Faults {
                    cut_watch_after: Some(5),
                    ..none()
                }),
            ),
            (c, Step::Faults(none())),
            (c, Step::Recovered),
        ],
        Scenario::CutRandom => vec![
            (
                Duration::ZERO,
                Step::Faults(Faults {
                    cut_watch_probability: 0.1,
                    ..none()
                }),
            ),
            (c, Step::Faults(none())),
            (c, Step::Recovered),
        ],
        Scenario::Errors => {
            let total = c.mul_f64(0.5);
            vec![
                (
                    Duration::ZERO,
                    Step::Faults(Faults {
                        error_fraction: 0.2,
                        error_codes: vec![500, 503, 429],
                        retry_after_secs: 1,
                        ..none()
                    }),
                ),
                (
                    total,
                    Step::Faults(Faults {
                        error_fraction: 1.0,
                        error_codes: vec![500, 503, 429],
                        retry_after_secs: 1,
                        ..none()
                    }),
                ),
                (total + size.total_failure, Step::Faults(none())),
                (total + size.total_failure, Step::Recovered),
            ]
        }
        Scenario::Latency => vec![
            (
                Duration::ZERO,
                Step::Faults(Faults {
                    latency: Duration::from_millis(200),
                    ..none()
                }),
            ),
            (c, Step::Faults(none())),
            (c, Step::Recovered),
        ],
        Scenario::Expired => {
            // Latency widens the gap between the pages of a list, where the continue
            // token is expired; random cuts make the watch resume from an expired version.
            let faults = Faults {
                latency: Duration::from_millis(100),
                cut_watch_probability: 0.05,
                ..none()
            };
            let mut v = vec![(Duration::ZERO, Step::Faults(faults))];
            let mut t = Duration::from_millis(1500);
            while t < c {
                v.push((t, Step::Expire));
                t += Duration::from_millis(1500);
            }
            v.push((c, Step::Faults(none())));
            v.push((c, Step::Recovered));
            v
        }
        Scenario::Malformed => vec![
            (
                Duration::ZERO,
                Step::Faults(Faults {
                    malformed_watch_probability: 0.1,
                    ..none()
                }),
            ),
            (c, Step::Faults(none())),
            (c, Step::Recovered),
        ],
        Scenario::Writer => vec![
            // Latency widens the window between metainit's read and its PATCH.
            (
                Duration::ZERO,
                Step::Faults(Faults {
                    latency: Duration::from_millis(100),
                    ..none()
                }),
            ),
            (c, Step::Faults(none())),
            (c + Duration::from_millis(500), Step::Recovered),
        ],
        Scenario::Replicas => {
            let at = c.mul_f64(0.4);
            vec![
                (at, Step::Kill(0)),
                (at + Duration::from_secs(1), Step::Respawn(0)),
                (at + Duration::from_secs(1), Step::Recovered),
            ]
        }
        // Forbidden from the start (the token table of `run`), granted later.
        Scenario::RbacLate => vec![
            (size.total_failure, Step::Tokens(tokens(g, true))),
            (size.total_failure, Step::Recovered),
        ],
        Scenario::Rejected => vec![
            (
                Duration::ZERO,
                Step::Faults(Faults {
                    reject_writes: Some(rejection()),
                    ..none()
                }),
            ),
            (c, Step::Faults(none())),
            (c, Step::Recovered),
        ],
        // The hangs are used up by the first PATCHes; the bound runs from each creation.
        Scenario::Hung => vec![
            (
                Duration::ZERO,
                Step::Faults(Faults {
                    hang_method: Some("PATCH".into()),
                    hang_count: HANG_COUNT,
                    ..none()
                }),
            ),
            (Duration::ZERO, Step::Recovered),
        ],
        // Every object named so is created, and being retried, when it is re-created.
        Scenario::Recreated => {
            let at = c + Duration::from_millis(500);
            let lift = at + size.total_failure / 2;
            vec![
                (
                    Duration::ZERO,
                    Step::Faults(Faults {
                        reject_writes: Some(rejection()),
                        ..none()
                    }),
                ),
                (at, Step::Recreate),
                (lift, Step::Faults(none())),
                (lift, Step::Recovered),
            ]
        }
        // Between the snapshot and the restore, at least one resync of metainit's sees the
        // revision after the unrelated writes.
        Scenario::Restored => {
            // After the restore only the resync finds what the silent watch does not show.
            assert!(
                size.bound > 2 * RESYNC,
                "the liveness bound must leave room for the resync"
            );
            let at = c.mul_f64(0.25);
            let back = at + RESYNC + Duration::from_secs(1);
            vec![
                (at, Step::Snapshot),
                (back, Step::Restore),
                (back, Step::Recovered),
            ]
        }
    }
}

fn describe(s: Scenario, size: &Size) -> String {
    let secs = |d: Duration| format!("{}s", d.as_secs_f64());
    match s {
        Scenario::DownAtStart => format!("no listener for {}", secs(size.down)),
        Scenario::Restart => format!("stopped {} mid-run, state kept", secs(size.restart)),
        Scenario::RestartExpired => format!(
            "stopped {} mid-run, versions expired before resume",
            secs(size.restart)
        ),
        Scenario::CutEveryK => "every watch cut after 5 events".into(),
        Scenario::CutRandom => "watch cut before an event with p=0.1".into(),
        Scenario::Errors => format!(
            "20% of requests 500/503/429 (Retry-After 1s), then 100% for {}",
            secs(size.total_failure)
        ),
        Scenario::Latency => "200 ms added to every response".into(),
        Scenario::Expired => "history window 64, versions expired every 1.5s and between list pages, watch cut p=0.05, 100 ms latency".into(),
        Scenario::Malformed => "malformed line before a watch event with p=0.1".into(),
        Scenario::Writer => "writer changes labels/annotations, removes names, deletes objects between read and PATCH; 100 ms latency".into(),
        Scenario::Replicas => "3 replicas; one SIGKILLed and restarted mid-run".into(),
        Scenario::RbacLate => format!(
            "token may get/list/watch pods and create events but not patch (nor initialize); granted after {}",
            secs(size.total_failure)
        ),
        Scenario::Rejected => format!(
            "PATCHes of {REJECT_PREFIX}* refused as by admission (422 Invalid with causes) for {}, then allowed",
            secs(size.create_over)
        ),
        Scenario::Hung => format!(
            "the first {HANG_COUNT} PATCHes accepted and never answered (--concurrency 16); --request-timeout {HUNG_REQUEST_TIMEOUT}"
        ),
        Scenario::Recreated => format!(
            "PATCHes of {REJECT_PREFIX}* refused (422 with causes); while retried, each deleted and re-created under its name (new uid, pending again); refusal lifted {} later",
            secs(size.total_failure / 2)
        ),
        Scenario::Restored => format!(
            "etcd snapshot after the first clears, {} unrelated writes, restored {} later (revision backwards, connections cut, objects created since lost and created again, cleared ones pending again); --resync-period {RESYNC_ARG}",
            burst(size),
            secs(RESYNC + Duration::from_secs(1))
        ),
    }
}

/// restored: unrelated writes between the snapshot and the restore, more than every write
/// after the restore (the objects created again and the rest of the plan, their clears and
/// Events), so that every object created after the restore has a revision below the one
/// metainit saw, and its watch stays silent.
fn burst(size: &Size) -> usize {
    3 * (size.labelled + size.unlabelled)
}

fn legacy_config() -> Config {
    let mut config = Config::legacy();
    config.initializers = [INIT_CLEARED, INIT_KEPT]
        .iter()
        .map(|n| InitializerRule {
            name: n.to_string(),
            resources: vec!["pods".into()],
        })
        .collect();
    config
}

/// The cluster moves on (one unrelated write), then every resource version before now
/// expires: watches and continue tokens from before the write get 410. Like etcd's
/// compaction, the current revision stays usable.
fn expire(double: &Double, g: Gen, n: &mut usize) {
    *n += 1;
    let name = format!("{}expire-{n:03}", Cat::UnlabelledNone.prefix());
    double
        .create("pods", "default", Cat::UnlabelledNone.object(g, &name))
        .expect("a write before the expiry");
    double.expire_versions();
}

/// Expires every resource version right after the first page of a paged list of labelled
/// pods, until `times` continue requests were answered 410 (a miss, when the second page
/// came first, is tried again on the next list); returns how many lists it expired.
async fn expire_between_pages(double: Double, g: Gen, times: usize, limit: Duration) -> usize {
    let start = Instant::now();
    let mut seen = 0;
    let mut done = 0;
    let mut n = 1000;
    while start.elapsed() < limit {
        let requests = double.requests();
        let lists = |r: &&kube_double::RequestRecord| {
            r.method == "GET"
                && r.path_and_query.contains("limit=500")
                && r.path_and_query.contains("labelSelector")
                && !r.path_and_query.contains("watch=")
        };
        let expired = requests
            .iter()
            .filter(lists)
            .filter(|r| r.status == 410 && r.path_and_query.contains("continue="))
            .count();
        if expired >= times {
            break;
        }
        let firsts = requests
            .iter()
            .filter(lists)
            .filter(|r| r.status == 200 && !r.path_and_query.contains("continue="))
            .count();
        if firsts > seen {
            seen = firsts;
            expire(&double, g, &mut n);
            done += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    done
}

/// The concurrent writer on one freshly created labelled object: between metainit's read
/// and its PATCH it changes labels and annotations (never the pending list), removes one
/// pending name itself (a competing initializer or gate controller), or deletes it.
async fn write_on(
    double: Double,
    g: Gen,
    ns: &'static str,
    name: String,
    seed: u64,
    log: Arc<Mutex<WriterLog>>,
) {
    let mut rng = Rng::new(seed);
    tokio::time::sleep(Duration::from_millis(rng.below(150))).await;
    let key = format!("{ns}/{name}");
    if rng.chance(15) {
        if double.delete("pods", ns, &name).is_ok() {
            log.lock().unwrap().deleted.insert(key);
        }
        return;
    }
    for round in 0..3 {
        let Some(mut obj) = double.get("pods", ns, &name) else {
            return;
        };
        obj["metadata"]["labels"]["chaos.example.com/round"] = json!(round.to_string());
        obj["metadata"]["annotations"]["chaos.example.com/touched"] =
            json!(format!("{seed}-{round}"));
        let mut removed = None;
        let names = g.names(&obj);
        if round == 1 && !names.is_empty() && rng.chance(40) {
            let gone = names[rng.below(names.len() as u64) as usize].clone();
            let rest: Vec<Value> = names
                .iter()
                .filter(|n| **n != gone)
                .map(|n| json!({"name": n}))
                .collect();
            match g {
                Gen::Legacy => obj["metadata"]["initializers"]["pending"] = json!(rest),
                Gen::Modern => obj["spec"]["schedulingGates"] = json!(rest),
            }
            removed = Some(gone);
        }
        // The read's resourceVersion stays in the object: a conflict, not a lost update.
        let result = double.update("pods", ns, obj);
        {
            let mut l = log.lock().unwrap();
            match result {
                Ok(_) => {
                    l.updates += 1;
                    if let Some(gone) = removed {
                        l.removed.entry(key.clone()).or_default().push(gone);
                    }
                }
                Err(_) => l.conflicts += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.below(60))).await;
    }
}

/// Judges every request metainit sent: only labelled objects that are theirs to clear may
/// be PATCHed, and a PATCH may remove only the `--only` name.
fn judge_requests(double: &Double, g: Gen, problems: &mut Vec<String>) -> HashSet<String> {
    let mut wrong = HashSet::new();
    for r in double.requests() {
        if r.method == "GET" {
            continue;
        }
        let path = r.path_and_query.split('?').next().unwrap_or("");
        if path.contains("/events") {
            continue;
        }
        let name = path.rsplit('/').next().unwrap_or("").to_string();
        let cat = Cat::of(&name);
        if r.method != "PATCH" || !path.contains("/pods/") || !cat.is_some_and(Cat::must_clear) {
            wrong.insert(name.clone());
            problems.push(format!(
                "{} {} ({cat:?}) answered {}: metainit may only PATCH labelled objects it clears",
                r.method, r.path_and_query, r.status
            ));
            continue;
        }
        let Ok(body) = serde_json::from_str::<Value>(&r.body) else {
            wrong.insert(name.clone());
            problems.push(format!(
                "PATCH {path} with a body that is not JSON: {}",
                r.body
            ));
            continue;
        };
        let ops = body.as_array().cloned().unwrap_or_default();
        let list = |v: &Value| -> Vec<String> {
            let v = v.get("pending").unwrap_or(v);
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|e| e["name"].as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let tested = ops
            .iter()
            .find(|o| o["op"] == "test")
            .map(|o| list(&o["value"]));
        let kept = ops.iter().find_map(|o| match o["op"].as_str() {
            Some("remove") => Some(Vec::new()),
            Some("replace") => Some(list(&o["value"])),
            _ => None,
        });
        let (Some(tested), Some(kept)) = (tested, kept) else {
            wrong.insert(name.clone());
            problems.push(format!(
                "PATCH {path} without a test and a remove/replace: {body}"
            ));
            continue;
        };
        let removed: Vec<&String> = tested.iter().filter(|n| !kept.contains(n)).collect();
        if removed.iter().any(|n| *n != g.cleared()) || kept.iter().any(|n| n == g.cleared()) {
            wrong.insert(name.clone());
            problems.push(format!(
                "PATCH {path} removes {removed:?} keeps {kept:?}: only {} may go",
                g.cleared()
            ));
        }
    }
    wrong
}

async fn run(s: Scenario, g: Gen, size: &Size) -> Row {
    let started = Instant::now();
    let seed = seed_of(&format!("{}/{}", s.name(), g.mode()));
    let mut rng = Rng::new(seed);
    let mut config = match g {
        Gen::Legacy => legacy_config(),
        Gen::Modern => Config::modern(),
    };
    config.seed = rng.next();
    if s == Scenario::Expired {
        config.history_window = 64;
    }
    if s == Scenario::RbacLate {
        config.tokens = tokens(g, false);
    }
    let bed = Bed::start(config).await;
    if s == Scenario::RbacLate {
        bed.double
            .write_kubeconfig(&bed.kubeconfig, Some(TOKEN))
            .expect("kubeconfig with the token written");
    }
    let double = bed.double.clone();
    let mut objs = plan(size, &mut rng);
    let mut row = Row {
        scenario: s.name(),
        seed,
        mode: g.mode(),
        labelled: objs.iter().filter(|o| o.cat.labelled()).count(),
        labelled_pending: objs
            .iter()
            .filter(|o| o.cat.labelled() && o.cat.pending())
            .count(),
        unlabelled: objs.iter().filter(|o| !o.cat.labelled()).count(),
        faults: describe(s, size),
        ..Row::default()
    };
    let mut problems = Vec::new();

    // Versions expire between the pages of a list only when there are two pages: 520
    // labelled objects with nothing pending, there before metainit starts.
    let mut continue_expiry = None;
    if s == Scenario::Expired {
        for i in 0..520 {
            let name = format!("{}bulk-{i:04}", Cat::None.prefix());
            double
                .create("pods", "default", Cat::None.object(g, &name))
                .expect("bulk object created");
        }
        continue_expiry = Some(tokio::spawn(expire_between_pages(
            double.clone(),
            g,
            2,
            Duration::from_secs(20),
        )));
    }

    let mut steps = steps(s, g, size);
    let mut knocks: Option<(Knocks, Instant)> = None;
    let mut outage_rps: Option<f64> = None;
    let mut recovered: Option<Instant> = None;
    let writer = Arc::new(Mutex::new(WriterLog::default()));
    let replicas = if s == Scenario::Replicas { 3 } else { 1 };

    // Faults from the start are there before metainit starts; so is a server that is down.
    let down_at_start = matches!(steps.first(), Some((d, Step::Stop)) if d.is_zero());
    if steps.first().is_some_and(|(d, _)| d.is_zero()) {
        match steps.remove(0).1 {
            Step::Faults(f) => double.set_faults(f),
            Step::Stop => {
                double.stop();
                knocks = Some((Knocks::listen(double.addr()).await, Instant::now()));
            }
            _ => unreachable!("only faults or a stop come first"),
        }
    }
    let mut procs: Vec<Proc> = (0..replicas).map(|_| Proc::spawn(&bed, g, s)).collect();
    // Otherwise the timeline starts once every replica watches (start-up is part of it only
    // in down-at-start, and under the faults set above).
    if !down_at_start {
        let watching = || {
            double
                .requests()
                .iter()
                .filter(|r| r.status == 200 && r.path_and_query.contains("watch=true"))
                .count()
                >= replicas
        };
        let start = Instant::now();
        while !watching() && start.elapsed() < size.bound {
            tokio::time::sleep(TICK).await;
        }
        if !watching() {
            problems.push(format!(
                "metainit did not start watching within {:?}",
                size.bound
            ));
        }
    }
    let t0 = Instant::now();
    let t0_sys = SystemTime::now();
    let mut retired: Vec<Proc> = Vec::new();
    let mut next_obj = 0;
    let mut refusal = Refusal::default();
    // Refused from the start: RBAC not granted yet, or admission refusing writes.
    if s == Scenario::RbacLate || double.faults().reject_writes.is_some() {
        refusal.start(t0);
    }
    let mut expiries = 0;
    let mut recreated = 0;
    let mut snapshot: Option<kube_double::Snapshot> = None;
    let mut restore = RestoreLog::default();
    let deadline_after =
        |recovered: Instant, t0: Instant| recovered.max(t0 + size.create_over) + size.bound;
    let hard_limit = size.create_over + size.down + size.bound + Duration::from_secs(30);

    loop {
        let now = Instant::now();
        let elapsed = now - t0;
        // Timed steps.
        while steps.first().is_some_and(|(at, _)| *at <= elapsed) {
            if let Some((at, _)) = steps.first()
                && elapsed > *at + TICK
            {
                let late = elapsed - *at;
                for (t, _) in steps.iter_mut().skip(1) {
                    *t += late;
                }
            }
            let (_, step) = steps.remove(0);
            match step {
                Step::Faults(f) => {
                    if let Some(rps) = refusal.end(&double, t0, t0_sys) {
                        outage_rps = Some(rps.max(outage_rps.unwrap_or(0.0)));
                    }
                    if f.error_fraction >= 1.0 || f.reject_writes.is_some() {
                        refusal.start(Instant::now());
                    }
                    double.set_faults(f);
                }
                Step::Tokens(t) => {
                    if let Some(rps) = refusal.end(&double, t0, t0_sys) {
                        outage_rps = Some(rps.max(outage_rps.unwrap_or(0.0)));
                    }
                    double.set_tokens(t);
                }
                Step::Recreate => {
                    // A re-created object starts afresh: its count of refused PATCHes too.
                    if let Some(rps) = refusal.end(&double, t0, t0_sys) {
                        outage_rps = Some(rps.max(outage_rps.unwrap_or(0.0)));
                    }
                    refusal.start(Instant::now());
                    for o in objs
                        .iter_mut()
                        .filter(|o| o.created.is_some() && o.name.starts_with(REJECT_PREFIX))
                    {
                        match double.recreate("pods", o.ns, &o.name) {
                            Ok(new) => {
                                let new_uid = uid(&new);
                                if new_uid.is_empty() || new_uid == o.uid {
                                    problems.push(format!(
                                        "{}/{} re-created with the same uid {new_uid:?}",
                                        o.ns, o.name
                                    ));
                                }
                                o.old_uid = Some(std::mem::replace(&mut o.uid, new_uid));
                                o.original = g.names(&new);
                                o.created = Some(Instant::now());
                                o.cleared = None;
                                o.rv = rv(&new);
                                recreated += 1;
                                refusal.allow(1);
                            }
                            Err(e) => {
                                problems.push(format!("{}/{} not re-created: {e}", o.ns, o.name))
                            }
                        }
                    }
                }
                Step::Snapshot => {
                    // Not before metainit has cleared the first objects: next tick again.
                    if elapsed < size.create_over && !objs.iter().any(|o| o.cleared.is_some()) {
                        steps.insert(0, (elapsed, Step::Snapshot));
                        break;
                    }
                    // A few objects to clear, still pending in the snapshot: created now,
                    // ahead of their turn, and the snapshot taken before metainit can act.
                    for o in objs
                        .iter_mut()
                        .filter(|o| o.cat.must_clear() && o.created.is_none())
                        .take(3)
                    {
                        o.create(&double, g);
                    }
                    snapshot = Some(double.snapshot());
                    for o in objs.iter_mut() {
                        o.in_snapshot = o.created.is_some();
                    }
                    for i in 0..burst(size) {
                        let name = format!("{BURST_PREFIX}{i:05}");
                        double
                            .create("pods", "default", Cat::UnlabelledNone.object(g, &name))
                            .expect("an unrelated write");
                    }
                }
                Step::Restore => {
                    let snap = snapshot.take().expect("a snapshot before the restore");
                    let was_clear: Vec<bool> = objs
                        .iter()
                        .map(|o| {
                            o.cat.must_clear()
                                && double
                                    .get("pods", o.ns, &o.name)
                                    .is_some_and(|cur| g.names(&cur) == expected(g, o, &[]))
                        })
                        .collect();
                    restore.revision_before = double.resource_version();
                    double.restore(&snap);
                    restore.at = Some(Instant::now());
                    restore.revision_after = double.resource_version();
                    for (o, was_clear) in objs.iter_mut().zip(was_clear) {
                        if o.created.is_some() && !o.in_snapshot {
                            // Lost with the etcd state: its controller creates it again.
                            o.create(&double, g);
                            restore.lost += 1;
                            o.pending_after_restore = o.cat.must_clear();
                        } else if o.cat.must_clear() && o.created.is_some() {
                            let cur = double
                                .get("pods", o.ns, &o.name)
                                .expect("an object of the snapshot is back");
                            o.rv = rv(&cur);
                            o.cleared = None;
                            o.pending_after_restore = g.names(&cur) != expected(g, o, &[]);
                            if was_clear && o.pending_after_restore {
                                restore.pending_again += 1;
                            }
                        }
                    }
                }
                Step::Stop => {
                    double.stop();
                    knocks = Some((Knocks::listen(double.addr()).await, Instant::now()));
                }
                Step::Expire => expire(&double, g, &mut expiries),
                Step::Resume => {
                    if let Some((k, from)) = knocks.take() {
                        let to = Instant::now();
                        let times = k.release().await;
                        let rps = peak_per_second(&times, from, to) / replicas as f64;
                        outage_rps = Some(rps.max(outage_rps.unwrap_or(0.0)));
                    }
                    double.resume().await.expect("double serves again");
                }
                Step::Kill(i) => {
                    procs[i].m.signal("KILL");
                    let _ = procs[i].m.wait(Duration::from_secs(10)).await;
                    procs[i].killed = true;
                }
                Step::Respawn(i) => {
                    let fresh = Proc::spawn(&bed, g, s);
                    retired.push(std::mem::replace(&mut procs[i], fresh));
                }
                Step::Recovered => recovered = Some(Instant::now()),
            }
        }

        // Objects due by now.
        let due = if elapsed >= size.create_over {
            objs.len()
        } else {
            (objs.len() as f64 * elapsed.as_secs_f64() / size.create_over.as_secs_f64()) as usize
        };
        while next_obj < due {
            let o = &mut objs[next_obj];
            next_obj += 1;
            if o.created.is_some() {
                // Created ahead of its turn (restored).
                continue;
            }
            o.create(&double, g);
            o.pending_after_restore = restore.at.is_some() && o.cat.must_clear();
            if s == Scenario::Writer && o.cat.must_clear() {
                tokio::spawn(write_on(
                    double.clone(),
                    g,
                    o.ns,
                    o.name.clone(),
                    rng.next(),
                    writer.clone(),
                ));
            }
        }

        // Liveness bookkeeping: when each object reached its expected state.
        let mut waiting = 0;
        {
            let w = writer.lock().unwrap();
            for o in objs
                .iter_mut()
                .filter(|o| o.cat.must_clear() && o.created.is_some())
            {
                let key = format!("{}/{}", o.ns, o.name);
                if o.cleared.is_some() || w.deleted.contains(&key) {
                    continue;
                }
                let removed = w.removed.get(&key).cloned().unwrap_or_default();
                match double.get("pods", o.ns, &o.name) {
                    Some(cur) if g.names(&cur) == expected(g, o, &removed) => {
                        o.cleared = Some(now);
                    }
                    Some(_) => waiting += 1,
                    // Deleted by the writer a moment ago; its log entry comes next.
                    None => {}
                }
            }
        }

        // The processes run, and their memory.
        let exited: Vec<String> = procs.iter_mut().filter_map(Proc::check).collect();
        if !exited.is_empty() {
            problems.extend(exited);
            break;
        }

        let all_created = next_obj == objs.len();
        if steps.is_empty() && all_created && waiting == 0 {
            break;
        }
        if let Some(r) = recovered
            && steps.is_empty()
            && now >= deadline_after(r, t0)
        {
            break;
        }
        if elapsed > hard_limit {
            problems.push(format!("scenario did not finish within {hard_limit:?}"));
            break;
        }
        tokio::time::sleep(TICK).await;
    }

    // Late wrong PATCHes, if any, would come now.
    tokio::time::sleep(size.settle).await;
    for p in procs.iter_mut() {
        if let Some(problem) = p.check() {
            problems.push(problem);
        }
    }
    if let Some(task) = continue_expiry {
        let done = task.await.unwrap_or(0);
        let continue_410 = double
            .requests()
            .iter()
            .filter(|r| r.status == 410 && r.path_and_query.contains("continue="))
            .count();
        row.faults.push_str(&format!(
            "; {done} list(s) expired between pages, {continue_410} continue 410s"
        ));
        if continue_410 < 2 {
            problems.push(format!(
                "{continue_410} continue requests answered 410, wanted 2: the fault did not happen"
            ));
        }
    }

    // Liveness.
    let recovered = recovered.unwrap_or(t0 + size.create_over);
    let w = std::mem::take(&mut *writer.lock().unwrap_or_else(|p| p.into_inner()));
    for o in objs.iter().filter(|o| o.cat.must_clear()) {
        let key = format!("{}/{}", o.ns, o.name);
        if w.deleted.contains(&key) {
            row.deleted += 1;
            if double.get("pods", o.ns, &o.name).is_some() {
                problems.push(format!("{key} was deleted but is back"));
            }
            continue;
        }
        row.must_clear += 1;
        let removed = w.removed.get(&key).cloned().unwrap_or_default();
        let cur = double.get("pods", o.ns, &o.name);
        let want = expected(g, o, &removed);
        match (&cur, o.cleared) {
            (Some(cur), Some(at)) if g.names(cur) == want => {
                row.cleared += 1;
                let created = o.created.unwrap_or(t0);
                row.worst_from_create = row.worst_from_create.max(at - created);
                let after = at.saturating_duration_since(recovered.max(created));
                row.worst_after_recovery = row.worst_after_recovery.max(after);
                if after > size.bound {
                    problems.push(format!(
                        "{key} cleared {after:?} after recovery, over the bound of {:?}",
                        size.bound
                    ));
                }
            }
            _ => {
                row.missed += 1;
                if row.missed <= 5 {
                    problems.push(format!(
                        "{key} ({:?}) not cleared: pending {:?}, expected {want:?}",
                        o.cat,
                        cur.as_ref().map(|c| g.names(c))
                    ));
                }
            }
        }
    }
    if s == Scenario::Writer {
        row.faults.push_str(&format!(
            " ({} updates, {} names removed, {} deleted, {} writer conflicts)",
            w.updates,
            w.removed.values().map(Vec::len).sum::<usize>(),
            w.deleted.len(),
            w.conflicts
        ));
    }

    let (watches, lists) = double
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path_and_query.contains("labelSelector"))
        .fold((0, 0), |(w, l), r| {
            if r.path_and_query.contains("watch=true") {
                (w + 1, l)
            } else {
                (w, l + 1)
            }
        });
    row.faults
        .push_str(&format!(" [{watches} watch and {lists} list requests]"));
    if s == Scenario::Malformed {
        // The double's malformed line is a syntax error mid-line: metainit must have seen
        // (and survived) at least one.
        let seen: usize = procs
            .iter()
            .map(|p| {
                p.m.log()
                    .iter()
                    .filter(|l| l.contains("watch failed"))
                    .count()
            })
            .sum();
        assert!(seen > 0, "no malformed watch line reached metainit");
        row.faults
            .push_str(&format!("; metainit logged {seen} watch errors"));
    }
    scenario_checks(
        s,
        &double,
        &procs,
        &objs,
        (t0, t0_sys),
        &refusal,
        recreated,
        &restore,
        &mut row,
        &mut problems,
    )
    .await;
    let raced = double
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && matches!(r.status, 409 | 422))
        .count();
    let gone = double
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.status == 404)
        .count();
    if matches!(s, Scenario::Writer | Scenario::Replicas) {
        row.faults.push_str(&format!(
            "; {raced} PATCHes lost a race (409/422), {gone} found the object deleted (404)"
        ));
    }
    if let Ok(dir) = std::env::var("METAINIT_CHAOS_DUMP") {
        let mut text = String::new();
        for r in double.requests() {
            let at = r.at.duration_since(t0_sys).unwrap_or_default();
            let _ = writeln!(
                text,
                "{:8.3} {} {} {}",
                at.as_secs_f64(),
                r.status,
                r.method,
                r.path_and_query
            );
        }
        let file = format!("{}-{}.log", s.name().replace('%', "pct"), g.mode());
        let _ = std::fs::write(std::path::Path::new(&dir).join(file), text);
    }

    // Safety: the request log, then the final state of every object metainit must leave.
    let mut wrong = judge_requests(&double, g, &mut problems);
    for o in objs.iter().filter(|o| !o.cat.must_clear()) {
        let cur = double.get("pods", o.ns, &o.name);
        let ok = match &cur {
            None => false,
            Some(cur) => {
                g.names(cur) == o.original
                    && (g != Gen::Legacy
                        || o.cat != Cat::Refused
                        || cur.pointer("/metadata/initializers/result").is_some())
            }
        };
        if !ok {
            wrong.insert(o.name.clone());
            problems.push(format!(
                "{}/{} ({:?}) changed: was {:?}, now {:?}",
                o.ns,
                o.name,
                o.cat,
                o.original,
                cur.as_ref().map(|c| g.names(c))
            ));
        }
    }
    row.wrong = wrong.len();
    if !wrong.is_empty() {
        problems.truncate(20);
    }

    // Requests per second to a failing server.
    if let Some(rps) = outage_rps {
        row.outage_rps = Some(rps);
        if rps > OUTAGE_RPS_BOUND {
            problems.push(format!(
                "{rps} requests/s per process during the outage, over the bound of {OUTAGE_RPS_BOUND}"
            ));
        }
    }

    for p in procs.iter_mut().chain(retired.iter_mut()) {
        problems.extend(p.finish());
        row.peak_rss_kib = row.peak_rss_kib.max(p.peak_rss_kib);
    }
    for p in procs {
        let status = p.m.stop().await;
        if !status.success() {
            problems.push(format!(
                "metainit did not stop cleanly on SIGTERM: {status}"
            ));
        }
    }
    row.problems = problems;
    row.wall = started.elapsed();
    row
}

/// The sum of the samples of metainit's metrics whose name and labels start with
/// `prefix`, over its running processes.
async fn metric(procs: &[Proc], prefix: &str) -> f64 {
    let mut sum = 0.0;
    for p in procs.iter().filter(|p| !p.killed) {
        let addr = p.m.admin_addr().await;
        let text = admin_get(&addr, "/metrics").await.1;
        sum += text
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    sum
}

/// The number after `key` (e.g. `from=`) in a log line.
fn number_after(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(key)? + key.len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The scenarios of refusals, hangs, re-creations and restores: evidence that the fault
/// happened (or the scenario fails: it would prove nothing), what metainit logged at WARN
/// and counted about it, and no hot loop on any one refused object. Liveness, safety,
/// memory and the request rate are judged as for every scenario.
#[allow(clippy::too_many_arguments)]
async fn scenario_checks(
    s: Scenario,
    double: &Double,
    procs: &[Proc],
    objs: &[Obj],
    (t0, t0_sys): (Instant, SystemTime),
    refusal: &Refusal,
    recreated: usize,
    restore: &RestoreLog,
    row: &mut Row,
    problems: &mut Vec<String>,
) {
    let refused = |what: &str, problems: &mut Vec<String>| {
        let (n, worst) =
            refused_per_object(double, t0, t0_sys, &refusal.phases, s.refused(), problems);
        if n == 0 {
            problems.push(format!("no PATCH was {what}: the fault did not happen"));
        }
        format!("{n} PATCHes {what}, at most {worst} per object")
    };
    let warned = |parts: &[&str], reason: &str, counted: f64, problems: &mut Vec<String>| {
        let n = logged(procs, parts).len();
        if n == 0 || counted < 1.0 {
            problems.push(format!(
                "metainit logged {n} WARN lines with {parts:?} and counted {counted} failures with reason {reason:?}, wanted at least 1 of each"
            ));
        }
        format!("{n} WARN lines, {counted} counted as {reason:?}")
    };
    let failures = |reason: &str| format!("metainit_clear_failures_total{{reason=\"{reason}\"}}");
    match s {
        Scenario::RbacLate => {
            let patches = refused("forbidden (403)", problems);
            let counted = metric(procs, &failures("forbidden")).await;
            let warns = warned(
                &["WARN", "403 Forbidden", "cannot clear yet"],
                "forbidden",
                counted,
                problems,
            );
            row.faults.push_str(&format!("; {patches}; {warns}"));
        }
        Scenario::Rejected | Scenario::Recreated => {
            let patches = refused("refused (422)", problems);
            let counted = metric(procs, &failures("rejected")).await;
            let warns = warned(
                &["WARN", "422 Invalid", "cannot clear yet"],
                "rejected",
                counted,
                problems,
            );
            if s == Scenario::Recreated {
                if recreated == 0 {
                    problems.push("no object was re-created: the fault did not happen".into());
                }
                // The object cleared is the new one, under the old name.
                for o in objs.iter().filter(|o| o.old_uid.is_some()) {
                    let now = double.get("pods", o.ns, &o.name).map(|cur| uid(&cur));
                    if now.as_deref() != Some(o.uid.as_str()) || o.old_uid.as_ref() == now.as_ref()
                    {
                        problems.push(format!(
                            "{}/{}: uid {now:?} at the end, re-created as {:?} (was {:?})",
                            o.ns, o.name, o.uid, o.old_uid
                        ));
                    }
                }
                row.faults
                    .push_str(&format!("; {recreated} re-created (new uid)"));
            }
            row.faults.push_str(&format!("; {patches}; {warns}"));
        }
        Scenario::Hung => {
            let left = double.faults().hang_count;
            if left > 0 {
                problems.push(format!(
                    "only {} of the {HANG_COUNT} hanging PATCHes used up: metainit stopped sending PATCHes, or the fault did not happen",
                    HANG_COUNT - left
                ));
            }
            let counted = metric(procs, &failures("timeout")).await;
            let warns = warned(
                &["WARN", "--request-timeout", "cannot clear yet"],
                "timeout",
                counted,
                problems,
            );
            row.faults
                .push_str(&format!("; {} PATCHes hung; {warns}", HANG_COUNT - left));
        }
        Scenario::Restored => {
            let warns = logged(procs, &["WARN", "revision went backwards"]);
            let counted = metric(
                procs,
                "metainit_watch_restarts_total{cause=\"revision_backwards\"}",
            )
            .await;
            // The revision metainit had seen, as it said when it found the server below it.
            let seen = warns.iter().filter_map(|l| number_after(l, "from=")).max();
            if warns.is_empty() || counted < 1.0 {
                problems.push(format!(
                    "metainit logged {} WARN lines \"revision went backwards\" and counted {counted} restarts with cause \"revision_backwards\", wanted at least 1 of each",
                    warns.len()
                ));
            }
            let after: Vec<&Obj> = objs.iter().filter(|o| o.pending_after_restore).collect();
            let below = after
                .iter()
                .filter(|o| seen.is_some_and(|r| o.rv < r))
                .count();
            if restore.pending_again == 0 {
                problems.push(
                    "no cleared object was pending again after the restore: the fault did not happen"
                        .into(),
                );
            }
            if let Some(seen) = seen
                && below == 0
            {
                problems.push(format!(
                    "no object to clear after the restore had a revision below the {seen} metainit had seen: the fault did not happen"
                ));
            }
            row.faults.push_str(&format!(
                "; revision {} -> {}, {} objects lost and created again, {} cleared ones pending again; {below} of the {} to clear after it below the revision metainit had seen ({}); {} WARN lines, {counted} counted as \"revision_backwards\"",
                restore.revision_before,
                restore.revision_after,
                restore.lost,
                restore.pending_again,
                after.len(),
                seen.map_or("-".to_string(), |r| r.to_string()),
                warns.len()
            ));
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------
// The table

fn table(rows: &[Row], size: &Size, wall: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Chaos suite, {} run: {} labelled / {} unlabelled objects per scenario, liveness bound {}s after the last fault, outage bound {} req/s per process, RSS bound {} MiB; wall time {:.0}s.\n",
        if size.full { "FULL" } else { "SHORT" },
        size.labelled,
        size.unlabelled,
        size.bound.as_secs(),
        OUTAGE_RPS_BOUND,
        RSS_BOUND_KIB / 1024,
        wall.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "| scenario | mode | objects (labelled pending/labelled/unlabelled) | faults injected | cleared | missed | wrongly touched | worst time-to-clear after recovery | worst time-to-clear from create | peak RSS | peak req/s during outage | result |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {}/{}/{} | {} | {}/{}{} | {} | {} | {:.1}s | {:.1}s | {:.1} MiB | {} | {} |",
            r.scenario,
            r.mode,
            r.labelled_pending,
            r.labelled,
            r.unlabelled,
            r.faults,
            r.cleared,
            r.must_clear,
            if r.deleted > 0 {
                format!(" (+{} deleted)", r.deleted)
            } else {
                String::new()
            },
            r.missed,
            r.wrong,
            r.worst_after_recovery.as_secs_f64(),
            r.worst_from_create.as_secs_f64(),
            r.peak_rss_kib as f64 / 1024.0,
            r.outage_rps.map_or("-".to_string(), |v| format!("{v:.0}")),
            if r.problems.is_empty() { "ok" } else { "FAIL" },
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn chaos() {
    let size = Arc::new(Size::from_env());
    let only = std::env::var("METAINIT_CHAOS_ONLY").unwrap_or_default();
    let started = Instant::now();
    let permits = Arc::new(tokio::sync::Semaphore::new(size.parallel));
    let mut runs = Vec::new();
    for s in Scenario::ALL {
        for g in [Gen::Legacy, Gen::Modern] {
            if !format!("{}/{}", s.name(), g.mode()).contains(&only) {
                continue;
            }
            let (size, permits) = (size.clone(), permits.clone());
            runs.push(tokio::spawn(async move {
                let _permit = permits.acquire_owned().await.expect("semaphore");
                run(s, g, &size).await
            }));
        }
    }
    let mut rows = Vec::new();
    for r in runs {
        rows.push(r.await.expect("scenario task"));
    }
    let wall = started.elapsed();
    let report = table(&rows, &size, wall);
    println!("\n{report}");
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("chaos-report.md");
    std::fs::write(&target, &report).expect("report written");
    println!("written to {}", target.display());
    let failures: Vec<String> = rows
        .iter()
        .filter(|r| !r.problems.is_empty())
        .map(|r| {
            format!(
                "{} / {} (seed {}):\n  {}",
                r.scenario,
                r.mode,
                r.seed,
                r.problems.join("\n  ")
            )
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
