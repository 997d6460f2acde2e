//! The timeline of each scenario: its timed steps (faults set and lifted, the server
//! stopped and resumed, versions expired, a replica killed, RBAC granted, objects
//! re-created, a snapshot taken and restored) and the line of the table that describes it.

use super::*;

/// Timed steps of a scenario.
pub enum Step {
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

/// Faults from the start until `until`, then none: recovered then.
fn during(f: Faults, until: Duration) -> Vec<(Duration, Step)> {
    vec![
        (Duration::ZERO, Step::Faults(f)),
        (until, Step::Faults(Faults::default())),
        (until, Step::Recovered),
    ]
}

pub fn steps(s: Scenario, g: Gen, size: &Size) -> Vec<(Duration, Step)> {
    let c = size.create_over;
    let none = Faults::default;
    match s {
        Scenario::DownAtStart | Scenario::Restart | Scenario::RestartExpired => outage(s, size),
        Scenario::CutEveryK => during(
            Faults {
                cut_watch_after: Some(5),
                ..none()
            },
            c,
        ),
        Scenario::CutRandom => during(
            Faults {
                cut_watch_probability: 0.1,
                ..none()
            },
            c,
        ),
        Scenario::Errors => errors(size),
        Scenario::Latency => during(
            Faults {
                latency: Duration::from_millis(200),
                ..none()
            },
            c,
        ),
        Scenario::Expired => expired(c),
        Scenario::Malformed => during(
            Faults {
                malformed_watch_probability: 0.1,
                ..none()
            },
            c,
        ),
        Scenario::Writer => {
            // Latency widens the window between metainit's read and its PATCH.
            let mut v = during(
                Faults {
                    latency: Duration::from_millis(100),
                    ..none()
                },
                c,
            );
            v[2].0 = c + Duration::from_millis(500);
            v
        }
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
        Scenario::Rejected => during(
            Faults {
                reject_writes: Some(rejection()),
                ..none()
            },
            c,
        ),
        Scenario::Hung => hung(),
        Scenario::Recreated => recreated(size),
        Scenario::Restored => restored(size),
    }
}

/// The server stopped: from the start until `down`, or for `restart` mid-run (its versions
/// expired before it serves again, in restart-expired).
fn outage(s: Scenario, size: &Size) -> Vec<(Duration, Step)> {
    if s == Scenario::DownAtStart {
        return vec![
            (Duration::ZERO, Step::Stop),
            (size.down, Step::Resume),
            (size.down, Step::Recovered),
        ];
    }
    let at = size.create_over.mul_f64(0.3);
    let mut v = vec![(at, Step::Stop)];
    if s == Scenario::RestartExpired {
        v.push((at + size.restart, Step::Expire));
    }
    v.push((at + size.restart, Step::Resume));
    v.push((at + size.restart, Step::Recovered));
    v
}

/// The hangs are used up by the first PATCHes; the bound runs from each creation.
fn hung() -> Vec<(Duration, Step)> {
    let hanging = Faults {
        hang_method: Some("PATCH".into()),
        hang_count: HANG_COUNT,
        ..Faults::default()
    };
    vec![
        (Duration::ZERO, Step::Faults(hanging)),
        (Duration::ZERO, Step::Recovered),
    ]
}

/// 20 % of requests failing, then every one for `total_failure`.
fn errors(size: &Size) -> Vec<(Duration, Step)> {
    let total = size.create_over.mul_f64(0.5);
    let failing = |fraction: f64| Faults {
        error_fraction: fraction,
        error_codes: vec![500, 503, 429],
        retry_after_secs: 1,
        ..Faults::default()
    };
    vec![
        (Duration::ZERO, Step::Faults(failing(0.2))),
        (total, Step::Faults(failing(1.0))),
        (total + size.total_failure, Step::Faults(Faults::default())),
        (total + size.total_failure, Step::Recovered),
    ]
}

/// Latency widens the gap between the pages of a list, where the continue token is
/// expired; random cuts make the watch resume from an expired version.
fn expired(c: Duration) -> Vec<(Duration, Step)> {
    let faults = Faults {
        latency: Duration::from_millis(100),
        cut_watch_probability: 0.05,
        ..Faults::default()
    };
    let mut v = vec![(Duration::ZERO, Step::Faults(faults))];
    let mut t = Duration::from_millis(1500);
    while t < c {
        v.push((t, Step::Expire));
        t += Duration::from_millis(1500);
    }
    v.push((c, Step::Faults(Faults::default())));
    v.push((c, Step::Recovered));
    v
}

/// Every object named so is created, and being retried, when it is re-created.
fn recreated(size: &Size) -> Vec<(Duration, Step)> {
    let at = size.create_over + Duration::from_millis(500);
    let lift = at + size.total_failure / 2;
    let refusing = Faults {
        reject_writes: Some(rejection()),
        ..Faults::default()
    };
    vec![
        (Duration::ZERO, Step::Faults(refusing)),
        (at, Step::Recreate),
        (lift, Step::Faults(Faults::default())),
        (lift, Step::Recovered),
    ]
}

/// Between the snapshot and the restore, at least one resync of metainit's sees the
/// revision after the unrelated writes.
fn restored(size: &Size) -> Vec<(Duration, Step)> {
    // After the restore only the resync finds what the silent watch does not show.
    assert!(
        size.bound > 2 * RESYNC,
        "the liveness bound must leave room for the resync"
    );
    let at = size.create_over.mul_f64(0.25);
    let back = at + RESYNC + Duration::from_secs(1);
    vec![
        (at, Step::Snapshot),
        (back, Step::Restore),
        (back, Step::Recovered),
    ]
}

pub fn describe(s: Scenario, size: &Size) -> String {
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
pub fn burst(size: &Size) -> usize {
    3 * (size.labelled + size.unlabelled)
}

pub fn legacy_config() -> Config {
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
