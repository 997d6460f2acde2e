//! Orphaned gates: `--release-gate NAME=AGE` removes gate NAME from any unbound pod in
//! scope older than AGE (gates are set only at creation, so the pod's age is the gate's),
//! that gate only, at most `--release-rate` across the process. What is decided here is
//! pure (`verdict`, `patch`); the pacing is a reservation per pod, so a pod waiting for its
//! slot waits in the work queue's timers, not in a worker.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use crate::{
    blocker::{self, Decision},
    object::Held,
    validation::later,
};

/// `--release-gate NAME=AGE`: gate NAME goes once its pod is older than `after`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseRule {
    pub gate: String,
    pub after: Duration,
}

impl std::fmt::Display for ReleaseRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.gate, crate::text::duration(self.after))
    }
}

/// `--release-rate`: one release every `every`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub every: Duration,
    /// As the user wrote it, for logs.
    pub count: u32,
    pub unit: char,
}

impl Default for Rate {
    fn default() -> Rate {
        Rate {
            every: Duration::from_secs(1),
            count: 60,
            unit: 'm',
        }
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.count, self.unit)
    }
}

pub fn parse_rate(s: &str) -> Result<Rate, String> {
    const RULE: &str = "a rate is a whole number of releases per second, minute or hour: N/s, N/m or N/h (e.g. '60/m')";
    let (n, unit) = s.trim().split_once('/').ok_or(RULE)?;
    let count: u32 = n.trim().parse().map_err(|_| RULE.to_string())?;
    let (unit, secs) = match unit.trim() {
        "s" => ('s', 1),
        "m" => ('m', 60),
        "h" => ('h', 3600),
        _ => return Err(RULE.into()),
    };
    if count == 0 {
        return Err(
            "a rate of 0 would never release anything: give at least 1 (e.g. '1/h')".into(),
        );
    }
    Ok(Rate {
        every: Duration::from_secs(secs) / count,
        count,
        unit,
    })
}

pub fn parse_release_rule(s: &str) -> Result<ReleaseRule, String> {
    const RULE: &str = "a release rule is GATE=AGE, a scheduling gate name and how old its pod must be \
                        (e.g. 'example.com/quota=2h')";
    let (gate, age) = s.rsplit_once('=').ok_or(RULE)?;
    crate::validation::gate_name(gate).map_err(|e| format!("{RULE}: {e}"))?;
    let after = crate::validation::duration(age).map_err(|e| format!("{RULE}: {e}"))?;
    if after.is_zero() {
        return Err(format!(
            "{RULE}: an AGE of 0 releases the gate at once, which makes metainit its owner; \
             to clear every gate of a controller's own pods, label them instead"
        ));
    }
    Ok(ReleaseRule {
        gate: gate.to_string(),
        after,
    })
}

/// The rules in force, and where they do not apply.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    pub rules: Vec<ReleaseRule>,
    pub exclude: Vec<String>,
}

/// One gate due to go, with its pod's age and the rule that lets it go.
#[derive(Clone, Debug, PartialEq)]
pub struct Due {
    pub gate: String,
    pub age: Duration,
    pub rule: ReleaseRule,
}

/// What the rules say of one pod now.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// No rule applies (no gate of a rule, excluded, bound, terminating, no creation time).
    None,
    /// These gates are due (a gate of another rule not due yet is looked at again after
    /// the patch, when the pod's next state arrives).
    Due(Vec<Due>),
    /// The first of its gates is due in this long.
    Later(Duration),
}

impl Rules {
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    fn rule(&self, gate: &str) -> Option<&ReleaseRule> {
        self.rules.iter().find(|r| r.gate == gate)
    }

    /// Whether the pod is for the rules at all: unbound, not terminating, in scope, with
    /// a gate some rule names (due or not). The watch's filter, on every event.
    pub fn applies(&self, pod: &Held) -> bool {
        !self.is_empty()
            && in_scope(pod, &self.exclude)
            && blocker::gates::names_of(pod)
                .iter()
                .any(|g| self.rule(g).is_some())
    }

    /// What the rules say of `pod` at `now`. A pod without a creation time is never
    /// released: its age is unknown, and nothing must go early.
    pub fn verdict(&self, pod: &Held, now: Timestamp) -> Verdict {
        if self.is_empty() || !in_scope(pod, &self.exclude) {
            return Verdict::None;
        }
        let Some(age) = pod.age(now) else {
            return Verdict::None;
        };
        let mut due = Vec::new();
        let mut later: Option<Duration> = None;
        for gate in blocker::gates::names_of(pod) {
            let Some(rule) = self.rule(&gate) else {
                continue;
            };
            if age >= rule.after {
                due.push(Due {
                    gate,
                    age,
                    rule: rule.clone(),
                });
            } else {
                let wait = rule.after - age;
                later = Some(later.map_or(wait, |l| l.min(wait)));
            }
        }
        match (due.is_empty(), later) {
            (false, _) => Verdict::Due(due),
            (true, Some(wait)) => Verdict::Later(wait),
            (true, None) => Verdict::None,
        }
    }
}

/// Unbound, not terminating, in a namespace the rules cover.
fn in_scope(pod: &Held, exclude: &[String]) -> bool {
    let bound = pod
        .spec
        .as_ref()
        .is_some_and(|s| s.node_name.as_deref().is_some_and(|n| !n.is_empty()));
    !bound
        && !pod.is_terminating()
        && pod
            .namespace()
            .is_none_or(|ns| !exclude.iter().any(|e| e == ns))
}

/// The patch that removes the due gates and keeps every other one: the uid and the gates
/// as seen are tested first, so a pod re-created under the same name, or whose gates
/// changed meanwhile, is not touched (the newest state is looked at again).
pub fn patch(pod: &Held, due: &[Due]) -> Option<blocker::Patch> {
    let names: Vec<String> = due.iter().map(|d| d.gate.clone()).collect();
    match blocker::gates::decide(pod, &names) {
        Decision::Clear { patch, .. } => Some(blocker::guard_uid(pod, patch)),
        Decision::Leave(_) => None,
    }
}

/// `--release-rate`: releases spaced `every` apart across the process. A pod whose turn
/// is later holds a reservation until it comes back for it; the reservation is its own,
/// by uid, not its name's.
pub struct Pace {
    every: Duration,
    state: Mutex<PaceState>,
}

struct PaceState {
    /// When the next free slot is.
    next: Instant,
    /// Reservations by pod name (`namespace/name`, the store's own key): the uid of the
    /// pod that holds it and its slot. A pod re-created under the name has another uid
    /// and does not inherit the slot.
    held: HashMap<Arc<str>, (Option<Box<str>>, Instant), ahash::RandomState>,
}

impl Pace {
    pub fn new(rate: Rate) -> Pace {
        Pace {
            every: rate.every,
            state: Mutex::new(PaceState {
                next: Instant::now(),
                held: HashMap::default(),
            }),
        }
    }

    /// A slot for the pod `key` with `uid`: `Ok` to release now, or how long until its
    /// reserved slot. A reservation made for another uid (a pod deleted and re-created
    /// under the name) is dropped, not used: the new pod takes the next slot, in order.
    pub fn slot(&self, key: &Arc<str>, uid: Option<&str>, now: Instant) -> Result<(), Duration> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match s.held.get(key) {
            Some((held_by, at)) if held_by.as_deref() == uid => {
                let at = *at;
                if at <= now {
                    s.held.remove(key);
                    return Ok(());
                }
                return Err(at - now);
            }
            Some(_) => {
                s.held.remove(key);
            }
            None => {}
        }
        let at = s.next.max(now);
        s.next = later(at, self.every);
        if at <= now {
            return Ok(());
        }
        s.held.insert(key.clone(), (uid.map(Box::from), at));
        Err(at - now)
    }

    /// Drops the reservation of a pod that no longer needs it (deleted, released by its
    /// owner). Its slot is not given to another: the pace only ever slows down.
    pub fn forget(&self, key: &str) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.held.remove(key);
    }
}

/// Dry run: what was said of each pod, so that each is reported once, not at every event.
#[derive(Default)]
pub struct Said(Mutex<HashMap<String, (Option<String>, bool)>>);

impl Said {
    /// Whether this (pod, uid, due) is new to the log.
    pub fn first(&self, key: &str, uid: Option<&str>, due: bool) -> bool {
        let mut said = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = (uid.map(str::to_string), due);
        if said.get(key) == Some(&now) {
            return false;
        }
        said.insert(key.to_string(), now);
        true
    }

    /// Forgets a pod deleted or no longer under a rule: what was said of it is over.
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Keeps only the pods `keep` names (the ones still in the store).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|k, _| keep(k));
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Option<String>, bool)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What the daemon's work on unlabelled pods needs: the rules, the pace, and in a dry run
/// what was said already.
pub struct Releaser {
    pub rules: Rules,
    pub pace: Pace,
    pub said: Said,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn rules(rules: &[(&str, u64)], exclude: &[&str]) -> Rules {
        Rules {
            rules: rules
                .iter()
                .map(|(g, s)| ReleaseRule {
                    gate: g.to_string(),
                    after: Duration::from_secs(*s),
                })
                .collect(),
            exclude: exclude.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn pod(ns: &str, created: &str, gates: &[&str], node: Option<&str>, deleting: bool) -> Held {
        let mut meta =
            json!({"name": "p", "namespace": ns, "uid": "u-1", "creationTimestamp": created});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        let gates: Vec<Value> = gates.iter().map(|g| json!({"name": g})).collect();
        let mut spec = json!({"schedulingGates": gates});
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        crate::object::held(json!({"metadata": meta, "spec": spec}))
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn due(gate: &str, age: u64, after: u64) -> Due {
        Due {
            gate: gate.into(),
            age: Duration::from_secs(age),
            rule: ReleaseRule {
                gate: gate.into(),
                after: Duration::from_secs(after),
            },
        }
    }

    #[test]
    fn verdicts() {
        let r = rules(&[("a.io/x", 3600), ("b.io/y", 7200)], &["kube-system"]);
        let now = at("2026-01-01T03:00:00Z");
        let cases = [
            (
                "young",
                pod("ns", "2026-01-01T02:30:00Z", &["a.io/x"], None, false),
                Verdict::Later(Duration::from_secs(1800)),
            ),
            (
                "exactly the age",
                pod("ns", "2026-01-01T02:00:00Z", &["a.io/x"], None, false),
                Verdict::Due(vec![due("a.io/x", 3600, 3600)]),
            ),
            (
                "old, one gate of two rules due",
                pod(
                    "ns",
                    "2026-01-01T01:30:00Z",
                    &["b.io/y", "a.io/x"],
                    None,
                    false,
                ),
                Verdict::Due(vec![due("a.io/x", 5400, 3600)]),
            ),
            (
                "old, both due",
                pod(
                    "ns",
                    "2026-01-01T00:00:00Z",
                    &["b.io/y", "other.io/z", "a.io/x"],
                    None,
                    false,
                ),
                Verdict::Due(vec![due("b.io/y", 10800, 7200), due("a.io/x", 10800, 3600)]),
            ),
            (
                "young, the sooner rule counts",
                pod(
                    "ns",
                    "2026-01-01T02:59:00Z",
                    &["b.io/y", "a.io/x"],
                    None,
                    false,
                ),
                Verdict::Later(Duration::from_secs(3540)),
            ),
            (
                "no gate of a rule",
                pod("ns", "2026-01-01T00:00:00Z", &["other.io/z"], None, false),
                Verdict::None,
            ),
            (
                "excluded namespace",
                pod(
                    "kube-system",
                    "2026-01-01T00:00:00Z",
                    &["a.io/x"],
                    None,
                    false,
                ),
                Verdict::None,
            ),
            (
                "bound",
                pod("ns", "2026-01-01T00:00:00Z", &["a.io/x"], Some("n1"), false),
                Verdict::None,
            ),
            (
                "empty nodeName is unbound",
                pod("ns", "2026-01-01T00:00:00Z", &["a.io/x"], Some(""), false),
                Verdict::Due(vec![due("a.io/x", 10800, 3600)]),
            ),
            (
                "terminating",
                pod("ns", "2026-01-01T00:00:00Z", &["a.io/x"], None, true),
                Verdict::None,
            ),
            (
                "created in the future (clock skew)",
                pod("ns", "2026-01-01T04:00:00Z", &["a.io/x"], None, false),
                Verdict::Later(Duration::from_secs(3600)),
            ),
        ];
        for (what, p, want) in cases {
            assert_eq!(r.verdict(&p, now), want, "{what}");
            assert_eq!(r.applies(&p), want != Verdict::None, "{what}: applies");
        }
        let no_time = crate::object::held(json!({"metadata": {"name": "p", "namespace": "ns"},
                                                  "spec": {"schedulingGates": [{"name": "a.io/x"}]}}));
        assert_eq!(
            r.verdict(&no_time, now),
            Verdict::None,
            "no creation time: never"
        );
        assert_eq!(rules(&[], &[]).verdict(&no_time, now), Verdict::None);
    }

    #[test]
    fn the_patch_removes_the_due_gates_only_and_tests_uid_and_gates() {
        let p = pod(
            "ns",
            "2026-01-01T00:00:00Z",
            &["b.io/y", "other.io/z", "a.io/x"],
            None,
            false,
        );
        let seen = json!([{"name": "b.io/y"}, {"name": "other.io/z"}, {"name": "a.io/x"}]);
        assert_eq!(
            patch(&p, &[due("a.io/x", 1, 1)]).map(|p| p.value()),
            Some(json!([
                {"op": "test", "path": "/metadata/uid", "value": "u-1"},
                {"op": "test", "path": "/spec/schedulingGates", "value": seen},
                {"op": "replace", "path": "/spec/schedulingGates", "value": [{"name": "b.io/y"}, {"name": "other.io/z"}]}
            ]))
        );
        let one = pod("ns", "2026-01-01T00:00:00Z", &["a.io/x"], None, false);
        assert_eq!(
            patch(&one, &[due("a.io/x", 1, 1)]).map(|p| p.value()),
            Some(json!([
                {"op": "test", "path": "/metadata/uid", "value": "u-1"},
                {"op": "test", "path": "/spec/schedulingGates", "value": [{"name": "a.io/x"}]},
                {"op": "remove", "path": "/spec/schedulingGates"}
            ]))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_pace_spaces_releases_and_keeps_each_reservation() {
        let pace = Pace::new(parse_rate("60/m").unwrap());
        let slot = |name: &str, now| pace.slot(&Arc::from(name), Some("u"), now);
        let t0 = Instant::now();
        assert_eq!(slot("a", t0), Ok(()), "the first goes at once");
        assert_eq!(slot("b", t0), Err(Duration::from_secs(1)));
        assert_eq!(slot("c", t0), Err(Duration::from_secs(2)));
        // b asks again early: same slot, not a new one.
        assert_eq!(
            slot("b", t0 + Duration::from_millis(500)),
            Err(Duration::from_millis(500))
        );
        assert_eq!(slot("b", t0 + Duration::from_secs(1)), Ok(()));
        // c's reservation dropped: its slot is not reused, the next one is after it.
        pace.forget("c");
        assert_eq!(
            slot("d", t0 + Duration::from_secs(1)),
            Err(Duration::from_secs(2))
        );
        // After a quiet spell the next goes at once: no burst is saved up.
        let later = t0 + Duration::from_secs(100);
        assert_eq!(slot("e", later), Ok(()));
        assert_eq!(slot("f", later), Err(Duration::from_secs(1)));
    }

    /// A pod deleted and re-created under the same name is a new pod: it does not take
    /// the old one's reservation, passed or not, but the next free slot, in order.
    #[tokio::test(start_paused = true)]
    async fn a_pod_re_created_under_the_same_name_gets_a_fresh_slot() {
        let pace = Pace::new(parse_rate("60/m").unwrap());
        let t0 = Instant::now();
        // `uid` asks for a slot at `ms` after t0: `Ok`, or the wait in ms.
        let slot = |name: &str, uid: &str, ms: u64| {
            let now = t0 + Duration::from_millis(ms);
            (pace.slot(&Arc::from(name), Some(uid), now)).map_err(|w| w.as_millis())
        };
        assert_eq!(slot("ns/a", "a1", 0), Ok(()));
        assert_eq!(slot("ns/b", "b1", 0), Err(1000));
        assert_eq!(slot("ns/c", "c1", 0), Err(2000));
        // b re-created before its slot: not b1's slot (at 1s), the next one (at 3s).
        assert_eq!(slot("ns/b", "b2", 500), Err(2500));
        assert_eq!(slot("ns/b", "b2", 1000), Err(2000), "b1's slot is not b2's");
        assert_eq!(slot("ns/c", "c1", 2000), Ok(()));
        assert_eq!(slot("ns/b", "b2", 3000), Ok(()));
        // d re-created after its slot passed: the passed slot is not used at once, the
        // new d goes after e, which asked meanwhile.
        assert_eq!(slot("ns/d", "d1", 3000), Err(1000));
        assert_eq!(slot("ns/e", "e1", 3000), Err(2000));
        assert_eq!(slot("ns/d", "d2", 5000), Err(1000), "not d1's passed slot");
        assert_eq!(slot("ns/e", "e1", 5000), Ok(()));
        assert_eq!(slot("ns/d", "d2", 6000), Ok(()));
    }

    #[test]
    fn said_once_per_pod_uid_and_state() {
        let said = Said::default();
        assert!(said.first("ns/p", Some("u"), false));
        assert!(!said.first("ns/p", Some("u"), false));
        assert!(said.first("ns/p", Some("u"), true));
        assert!(!said.first("ns/p", Some("u"), true));
        assert!(said.first("ns/p", Some("v"), true), "re-created");
    }

    #[test]
    fn said_forgets_a_pod_gone_or_no_longer_ruled() {
        let said = Said::default();
        said.first("ns/p", Some("u"), false);
        said.first("ns/q", Some("w"), true);
        said.forget("ns/p");
        assert_eq!(said.len(), 1);
        said.retain(|k| k != "ns/q");
        assert!(said.is_empty(), "nothing left behind");
        assert!(said.first("ns/p", Some("u"), false), "said again");
    }
}
