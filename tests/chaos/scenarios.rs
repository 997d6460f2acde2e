//! The scenarios of the chaos grid and what they are run with: the sizes and bounds, the
//! names metainit clears and keeps in each mode, the token table and the admission refusal.

use super::*;

/// Legacy: the initializer metainit clears (`--only`), and the one it must leave.
pub const INIT_CLEARED: &str = "a.chaos.example.com";
pub const INIT_KEPT: &str = "b.chaos.example.com";
/// Modern: the gate metainit clears (`--only`), and the one it must leave.
pub const GATE_CLEARED: &str = "kueue.x-k8s.io/admission";
pub const GATE_KEPT: &str = "example.com/quota";

pub const NAMESPACES: [&str; 2] = ["default", "chaos-b"];
pub const TICK: Duration = Duration::from_millis(100);

/// rbac-late: metainit's bearer token.
pub const TOKEN: &str = "metainit";
/// rejected, recreated: PATCHes of the objects named so are refused as an admission
/// webhook or policy does (422 `Invalid` with causes): the labelled objects with only the
/// `--only` name, 8 of the 28 to clear (48 of 168 in the full run).
pub const REJECT_PREFIX: &str = "l-one-";
/// hung: PATCHes accepted and never answered, more than metainit's default
/// `--concurrency` (16), and metainit's `--request-timeout`.
pub const HANG_COUNT: u32 = 20;
pub const HUNG_REQUEST_TIMEOUT: &str = "2s";
/// restored: metainit's `--resync-period`, and the name prefix of the unrelated writes
/// between the snapshot and the restore.
pub const RESYNC: Duration = Duration::from_secs(2);
pub const RESYNC_ARG: &str = "2s";
pub const BURST_PREFIX: &str = "u-none-burst-";

// ---------------------------------------------------------------------------------------
// Sizes and bounds

pub struct Size {
    pub full: bool,
    pub labelled: usize,
    pub unlabelled: usize,
    /// Objects are created evenly over this long.
    pub create_over: Duration,
    /// Server down at start.
    pub down: Duration,
    /// Server restarted mid-run.
    pub restart: Duration,
    /// Every request answered 500/503/429.
    pub total_failure: Duration,
    /// Every labelled pending object is cleared within this long after the last fault
    /// ends (and after it was created).
    pub bound: Duration,
    /// Watched a little longer after the last clear, to catch a late wrong PATCH.
    pub settle: Duration,
    /// Scenarios run at the same time.
    pub parallel: usize,
}

impl Size {
    pub fn from_env() -> Size {
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
pub const OUTAGE_RPS_BOUND: f64 = 80.0;
/// Peak resident memory of one metainit process (debug or release build).
pub const RSS_BOUND_KIB: u64 = 64 * 1024;

// ---------------------------------------------------------------------------------------
// Scenarios

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
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
    pub const ALL: [Scenario; 16] = [
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

    pub fn name(self) -> &'static str {
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
    pub fn args(self) -> Vec<String> {
        let args: &[&str] = match self {
            Scenario::Hung => &["--request-timeout", HUNG_REQUEST_TIMEOUT],
            Scenario::Restored => &["--resync-period", RESYNC_ARG],
            _ => &[],
        };
        args.iter().map(|a| a.to_string()).collect()
    }

    /// The statuses of the PATCHes refused on purpose while the scenario's refusal lasts,
    /// whose number per object is bounded (per-object backoff, no hot loop).
    pub fn refused(self) -> &'static [u16] {
        match self {
            Scenario::RbacLate => &[403],
            Scenario::Rejected | Scenario::Recreated => &[422],
            _ => &[],
        }
    }
}

/// rbac-late: the token table, before and after RBAC catches up: get, list and watch pods
/// and create events from the start; patch (and on legacy initialize) only when granted.
pub fn tokens(g: Gen, granted: bool) -> Option<HashMap<String, Vec<String>>> {
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
pub fn rejection() -> Rejection {
    Rejection {
        name_prefix: REJECT_PREFIX.into(),
        code: 422,
        message: "refused by the chaos suite's policy".into(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gen {
    Legacy,
    Modern,
}

impl Gen {
    pub fn mode(self) -> &'static str {
        match self {
            Gen::Legacy => "initializers",
            Gen::Modern => "scheduling-gates",
        }
    }
    pub fn cleared(self) -> &'static str {
        match self {
            Gen::Legacy => INIT_CLEARED,
            Gen::Modern => GATE_CLEARED,
        }
    }
    pub fn kept(self) -> &'static str {
        match self {
            Gen::Legacy => INIT_KEPT,
            Gen::Modern => GATE_KEPT,
        }
    }
    /// What metainit's PATCH tests before it removes the name: the pending list.
    pub fn list_path(self) -> &'static str {
        match self {
            Gen::Legacy => "/metadata/initializers",
            Gen::Modern => "/spec/schedulingGates",
        }
    }
    pub fn names(self, obj: &Value) -> Vec<String> {
        match self {
            Gen::Legacy => pending_initializers(obj),
            Gen::Modern => gates(obj),
        }
    }
}
