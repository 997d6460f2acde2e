//! Sharing the work between instances: the static pods of several control-plane nodes, the
//! Deployment's replicas. Each keeps a Lease `metainit-IDENTITY` in `--peers-namespace`,
//! renewed every 2 s and lasting 10 s, and lists the others' at the same pace. For each
//! object the instances agree on an owner without a word (rank.rs), which patches at
//! once; the next in rank waits `--peer-delay`, the next twice that, each counting from
//! the last time it saw one of those ranked before it at work if that is later (a loaded
//! control plane makes an owner slow, not gone), and each looks again before it patches: with every instance
//! up, one PATCH an object; with its owner gone (its process, its API server, its node),
//! one delay more, never a lease's expiry.
//!
//! Nothing here can stop clearing: without the Lease API (Kubernetes 1.13) or the rights
//! (a cluster whose RBAC predates them), or while this instance's API server is away, this
//! instance patches every object at once, as a single instance does; it asks for the Lease
//! again in minutes when the API or the rights are missing (`retry_in`), else each period.

mod rank;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::{
    api::coordination::v1::Lease, apimachinery::pkg::apis::meta::v1::MicroTime, jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::{failure, metrics::Metrics, text};
pub use rank::{Renewal, Seen, rank};

/// How often the Lease is renewed and the others' listed.
pub const PERIOD: Duration = Duration::from_secs(2);
/// How long a Lease not seen renewed counts as alive.
pub const LEASE_SECONDS: i32 = 10;
/// How long a Lease not renewed is kept before an instance deletes it.
const FORGOTTEN: Duration = Duration::from_secs(3600);
/// The labels of the instances' Leases (and their selector).
const NAME_LABEL: (&str, &str) = ("app.kubernetes.io/name", "metainit");
const COMPONENT_LABEL: (&str, &str) = ("app.kubernetes.io/component", "peer");

/// This instance among its peers: its name, its delay per rank, the instances alive as
/// last listed (`None`: not sharing now, every object at once), and when it last saw
/// each of the others at work.
pub struct Peers {
    me: String,
    delay: Duration,
    live: Mutex<Option<Vec<String>>>,
    at_work: Mutex<HashMap<String, Instant>>,
}

/// Where this instance stands for one object: its rank (0: the owner) and how long after
/// first seeing the object it patches it (`rank::turn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    pub rank: u32,
    pub after: Duration,
}

impl Turn {
    const NOW: Turn = Turn {
        rank: 0,
        after: Duration::ZERO,
    };
}

impl Peers {
    pub fn new(me: String, delay: Duration) -> Arc<Peers> {
        Arc::new(Peers {
            me,
            delay,
            live: Mutex::new(None),
            at_work: Mutex::new(HashMap::new()),
        })
    }

    /// An instance that shares nothing: every object at once.
    pub fn alone() -> Arc<Peers> {
        Peers::new(String::new(), Duration::ZERO)
    }

    /// Whether it shares the work at all (keeps a Lease); not when made `alone`.
    pub fn shares(&self) -> bool {
        !self.delay.is_zero()
    }

    /// This instance's turn at the object `uid`, which it first saw at `first`: later
    /// while it sees one of the instances ranked before it at work.
    pub fn turn(&self, uid: Option<&str>, first: Instant) -> Turn {
        let Some(above) = self.above(uid).filter(|a| !a.is_empty()) else {
            return Turn::NOW;
        };
        let seen = {
            let at_work = self.lock_at_work();
            above
                .iter()
                .filter_map(|name| at_work.get(name))
                .max()
                .copied()
        };
        let rank = u32::try_from(above.len()).unwrap_or(u32::MAX);
        Turn {
            rank,
            after: rank::turn(rank, self.delay, first, seen),
        }
    }

    /// The object `uid`, which this instance left to the ones ranked before it, was
    /// cleared by another (or won the race at this one's turn). When this instance was
    /// next in rank after the owner alone, the owner cleared it: it is at work. (Further
    /// down, which of those before cleared it is not known: an owner gone would be seen
    /// at work in its backup's stead.)
    pub fn handed_over(&self, uid: Option<&str>) {
        if let Some([owner]) = self.above(uid).as_deref() {
            self.lock_at_work().insert(owner.clone(), Instant::now());
        }
    }

    /// The instances ranked before this one for the object `uid`, the owner first; `None`
    /// when not sharing (every object at once).
    fn above(&self, uid: Option<&str>) -> Option<Vec<String>> {
        let uid = uid.filter(|_| self.shares())?;
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let live = live.as_deref().filter(|live| live.contains(&self.me))?;
        Some(
            rank::above(uid, &self.me, live)
                .into_iter()
                .map(str::to_string)
                .collect(),
        )
    }

    fn lock_at_work(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.at_work.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, live: Option<Vec<String>>) {
        if let Some(live) = &live {
            self.lock_at_work().retain(|name, _| live.contains(name));
        }
        *self.live.lock().unwrap_or_else(|p| p.into_inner()) = live;
    }

    fn lease_name(&self) -> String {
        format!("metainit-{}", self.me)
    }
}

/// Keeps this instance's Lease and the list of those alive until `stop`; then deletes its
/// Lease, so that the others stop counting it at once. A round that fails is tried again
/// the next period, unless the server said there is no Lease API or no right to it
/// (`retry_in`): then in minutes.
pub async fn run(
    peers: Arc<Peers>,
    client: Client,
    namespace: String,
    metrics: Arc<Metrics>,
    stop: impl std::future::Future<Output = ()>,
) {
    let api: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let mut seen = Seen::default();
    let mut said = Said::default();
    let mut next = Instant::now();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = &mut stop => break,
        }
        let began = Instant::now();
        let (live, wait) = match round(&peers, &api, &mut seen).await {
            Ok(live) => {
                said.sharing(&namespace, &live);
                (Some(live), PERIOD)
            }
            Err(e) => {
                let starting = tokio::time::timeout(
                    PERIOD,
                    crate::discovery::starting(&client, &e, &mut said.denied_since),
                )
                .await
                .ok()
                .flatten();
                let wait = retry_in(&e, starting.is_some());
                let old_server = matches!(&e, kube::Error::Api(s) if s.code == 404);
                said.failing(
                    describe(&e, &namespace, starting.as_deref()),
                    old_server,
                    wait,
                );
                (None, wait)
            }
        };
        let n = live.as_ref().map_or(0, Vec::len);
        metrics.peers.set(i64::try_from(n).unwrap_or(i64::MAX));
        peers.set(live);
        // From the round's start, as a ticker would: a slow round does not slow the pace.
        next = began + wait;
    }
    let _ = tokio::time::timeout(
        PERIOD,
        api.delete(&peers.lease_name(), &DeleteParams::default()),
    )
    .await;
}

/// When to try again after a failed round: in `failure::ABSENT` when the server has no
/// Lease API or no such namespace (404) or denies the rights (403, unless it is `starting`,
/// whose denial lasts a second or so), for those end only by someone's hand; the next
/// period after anything else (an error answer, a timeout, no connection), which passes.
fn retry_in(e: &kube::Error, starting: bool) -> Duration {
    if failure::absent(e) && !starting {
        failure::ABSENT
    } else {
        PERIOD
    }
}

/// What was said last, so that a state is logged once when it begins.
#[derive(Default)]
struct Said {
    failing: Option<String>,
    sharing: bool,
    /// Since when the server has denied the Lease and its `/readyz` (`discovery::starting`).
    denied_since: Option<std::time::Instant>,
}

impl Said {
    fn sharing(&mut self, namespace: &str, live: &[String]) {
        if !self.sharing {
            info!(namespace = %namespace, instances = %live.join(","), "sharing the work with the instances alive");
        }
        (self.sharing, self.failing, self.denied_since) = (true, None, None);
    }

    /// Not sharing, for the reason `said`, looking again after `wait`; a warning unless it
    /// is the server's age. A wait of minutes is said with the line (the next look that
    /// finds the same is not news).
    fn failing(&mut self, said: String, old_server: bool, wait: Duration) {
        let again = match wait {
            w if w > PERIOD => format!("; looking again in {}", text::duration(w)),
            _ => String::new(),
        };
        if self.failing.as_deref() != Some(said.as_str()) {
            if old_server {
                info!("{said}: every instance clears every object at once{again}");
            } else if again.is_empty() {
                warn!("{said}: every object at once until it works");
            } else {
                warn!("{said}: every object at once{again}");
            }
            self.failing = Some(said);
        } else if !again.is_empty() {
            debug!("{said}: still{again}");
        }
        self.sharing = false;
    }
}

/// One round: renews this instance's Lease, lists them all; the instances alive.
async fn round(peers: &Peers, api: &Api<Lease>, seen: &mut Seen) -> kube::Result<Vec<String>> {
    renew(peers, api).await?;
    let selector = format!(
        "{}={},{}={}",
        NAME_LABEL.0, NAME_LABEL.1, COMPONENT_LABEL.0, COMPONENT_LABEL.1
    );
    let leases = api.list(&ListParams::default().labels(&selector)).await?;
    let renewals: Vec<Renewal> = leases.items.iter().filter_map(renewal).collect();
    let now = Timestamp::now();
    let age = |renewed: &str| {
        let at: Timestamp = renewed.parse().ok()?;
        Some(Duration::try_from(now.duration_since(at)).unwrap_or_default())
    };
    forget_the_long_gone(api, &leases.items, &age).await;
    Ok(seen.observe(Instant::now(), &renewals, age))
}

/// Deletes the Leases not renewed for `FORGOTTEN` (an instance that crashed and never came
/// back: a Deployment's pod replaced, a node removed), so that they do not pile up; at most
/// a few a round, and a failure is only tried again next round.
async fn forget_the_long_gone(
    api: &Api<Lease>,
    leases: &[Lease],
    age: &impl Fn(&str) -> Option<Duration>,
) {
    let gone = leases.iter().filter(|l| {
        renewal(l)
            .and_then(|r| age(&r.renewed))
            .is_some_and(|a| a > FORGOTTEN)
    });
    for lease in gone.take(3) {
        let Some(name) = &lease.metadata.name else {
            continue;
        };
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                info!(lease = %name, "deleted a Lease not renewed for an hour: its instance is gone")
            }
            Err(e) => {
                debug!(lease = %name, error = %e, "could not delete a Lease not renewed for an hour; next round")
            }
        }
    }
}

fn renewal(lease: &Lease) -> Option<Renewal> {
    let spec = lease.spec.as_ref()?;
    let renewed = spec.renew_time.as_ref()?;
    Some(Renewal {
        holder: spec
            .holder_identity
            .clone()
            .or_else(|| lease.metadata.name.clone())?,
        renewed: renewed.0.to_string(),
        duration: Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(LEASE_SECONDS)).unwrap_or(0),
        ),
    })
}

/// This instance's Lease, renewed now (made if it is not there).
async fn renew(peers: &Peers, api: &Api<Lease>) -> kube::Result<()> {
    let name = peers.lease_name();
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "labels": {NAME_LABEL.0: NAME_LABEL.1, COMPONENT_LABEL.0: COMPONENT_LABEL.1},
        },
        "spec": {
            "holderIdentity": peers.me,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": MicroTime(Timestamp::now()),
        },
    });
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&lease))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 404 => {
            let lease: Lease = serde_json::from_value(lease).map_err(kube::Error::SerdeError)?;
            match api.create(&PostParams::default(), &lease).await {
                // Made meanwhile (this instance's previous run, restarted): renewed next round.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                other => other.map(drop),
            }
        }
        other => other.map(drop),
    }
}

/// What went wrong, and what to do about it (nothing, while the server is `starting`).
fn describe(e: &kube::Error, namespace: &str, starting: Option<&str>) -> String {
    match e {
        kube::Error::Api(s) if matches!(s.code, 401 | 403) && starting.is_some() => format!(
            "cannot keep this instance's Lease in {namespace} ({} {}): the API server is starting (its /readyz: {}), not missing RBAC",
            s.code,
            s.reason,
            starting.unwrap_or_default()
        ),
        kube::Error::Api(s) if s.code == 403 => format!(
            "cannot keep this instance's Lease in {namespace} ({} {}): grant list, create, patch and delete on leases there (manifests/rbac.yaml)",
            s.code, s.reason
        ),
        kube::Error::Api(s) if s.code == 404 => format!(
            "no Lease API in {namespace} ({} {}): Kubernetes before 1.14, or no such namespace",
            s.code, s.reason
        ),
        e => format!("cannot keep this instance's Lease in {namespace}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const DELAY: Duration = Duration::from_millis(500);

    /// `me` among three instances alive.
    fn setup(me: &str) -> (Arc<Peers>, Vec<String>) {
        let peers = Peers::new(me.to_string(), DELAY);
        let live: Vec<String> = ["node-1", "node-2", "node-3"].map(String::from).to_vec();
        peers.set(Some(live.clone()));
        (peers, live)
    }

    /// A uid for which `me` has rank `r` and `owner` is ranked first.
    fn uid_where(live: &[String], me: &str, r: usize, owner: &str) -> String {
        (0..)
            .map(|i| format!("uid-{i}"))
            .find(|u| rank(u, me, live) == r && rank(u, owner, live) == 0)
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn an_owner_seen_at_work_defers_its_next_in_rank_and_one_gone_does_not() {
        let (peers, live) = setup("node-1");
        let t0 = Instant::now();
        let (x, y) = (
            uid_where(&live, "node-1", 1, "node-2"),
            uid_where(&live, "node-1", 1, "node-3"),
        );
        assert_eq!(
            peers.turn(Some(&x), t0),
            Turn {
                rank: 1,
                after: DELAY
            }
        );

        // node-2 cleared one of its objects while node-1 waited next in rank: node-2's
        // other objects wait a delay from then; node-3's do not.
        tokio::time::advance(Duration::from_millis(300)).await;
        peers.handed_over(Some(&uid_where(&live, "node-1", 1, "node-2")));
        assert_eq!(peers.turn(Some(&x), t0).after, Duration::from_millis(800));
        assert_eq!(peers.turn(Some(&y), t0).after, DELAY);
        // Never more than three delays beyond its turn, however long node-2 is at work.
        tokio::time::advance(Duration::from_secs(5)).await;
        peers.handed_over(Some(&x));
        assert_eq!(peers.turn(Some(&x), t0).after, DELAY * 4);
        // The owner itself never waits.
        let mine = uid_where(&live, "node-1", 0, "node-1");
        assert_eq!(peers.turn(Some(&mine), t0), Turn::NOW);
    }

    #[tokio::test(start_paused = true)]
    async fn further_down_what_was_cleared_says_nothing_of_the_owner() {
        let (peers, live) = setup("node-3");
        let t0 = Instant::now();
        // node-3 ranked third: it cannot tell whether the owner or the next cleared it.
        let third = (0..)
            .map(|i| format!("uid-{i}"))
            .find(|u| rank(u, "node-3", &live) == 2 && rank(u, "node-1", &live) == 0)
            .unwrap();
        tokio::time::advance(Duration::from_millis(300)).await;
        peers.handed_over(Some(&third));
        let x = uid_where(&live, "node-3", 1, "node-1");
        assert_eq!(
            peers.turn(Some(&x), t0).after,
            DELAY,
            "node-1 not seen at work"
        );
        // Seen at work as the owner of an object node-3 is next for, it defers node-3
        // ranked third too (those before it are at work).
        peers.handed_over(Some(&x));
        assert_eq!(
            peers.turn(Some(&third), t0).after,
            DELAY * 2 + Duration::from_millis(300)
        );
    }

    #[test]
    fn not_sharing_or_not_listed_means_at_once() {
        let peers = Peers::new("node-1".into(), DELAY);
        assert_eq!(
            peers.turn(Some("u"), Instant::now()),
            Turn::NOW,
            "nothing listed yet"
        );
        peers.set(Some(vec!["node-2".into()]));
        assert_eq!(
            peers.turn(Some("u"), Instant::now()),
            Turn::NOW,
            "not among the listed"
        );
        assert_eq!(Peers::alone().turn(Some("u"), Instant::now()), Turn::NOW);
    }

    /// A server whose Lease requests are answered `code` (200: as the API server would),
    /// whose `/readyz` is `readyz`; the Lease requests it saw, with when.
    struct Server {
        code: Arc<std::sync::atomic::AtomicU16>,
        seen: Arc<Mutex<Vec<(Instant, String)>>>,
    }

    impl Server {
        fn start(code: u16, readyz: u16) -> (Server, Client) {
            use std::sync::atomic::{AtomicU16, Ordering};
            let server = Server {
                code: Arc::new(AtomicU16::new(code)),
                seen: Arc::default(),
            };
            let (codes, seen) = (server.code.clone(), server.seen.clone());
            let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
                let path = req.uri().path().to_string();
                let (code, body) = if path == "/readyz" {
                    (readyz, json!({}))
                } else {
                    seen.lock()
                        .unwrap()
                        .push((Instant::now(), format!("{} {path}", req.method())));
                    let code = codes.load(Ordering::SeqCst);
                    (code, answer(code, req.method()))
                };
                let res = http::Response::builder()
                    .status(code)
                    .body(kube::client::Body::from(body.to_string().into_bytes()));
                async move { res }
            });
            (server, Client::new(service, "default"))
        }

        /// The Lease requests seen in `[from, to)` after `t0`.
        fn between(&self, t0: Instant, from: u64, to: u64) -> Vec<String> {
            let (from, to) = (Duration::from_secs(from), Duration::from_secs(to));
            let seen = self.seen.lock().unwrap();
            seen.iter()
                .filter(|(at, _)| (from..to).contains(&at.duration_since(t0)))
                .map(|(_, what)| what.clone())
                .collect()
        }
    }

    fn answer(code: u16, method: &http::Method) -> Value {
        match (code, method.as_str()) {
            (200, "GET") => json!({"apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList",
                                   "metadata": {}, "items": []}),
            (200, _) => json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                               "metadata": {"name": "metainit-me", "namespace": "default"}}),
            (code, _) => {
                let reason = match code {
                    403 => "Forbidden",
                    404 => "NotFound",
                    _ => "InternalError",
                };
                json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                       "message": "no", "reason": reason, "code": code})
            }
        }
    }

    /// `run` on `client` until `until` from now.
    fn run_for(client: Client, until: Duration) -> (Arc<Peers>, tokio::task::JoinHandle<()>) {
        let peers = Peers::new("me".into(), DELAY);
        let metrics = Arc::new(Metrics::default());
        let task = tokio::spawn(run(
            peers.clone(),
            client,
            "default".into(),
            metrics,
            tokio::time::sleep(until),
        ));
        (peers, task)
    }

    /// No Lease API (a PATCH and a POST answered 404 each round) or no right to it (the
    /// PATCH answered 403 by a server that is up): a round, then one five minutes later,
    /// where every period used to be one (300 rounds in the ten minutes).
    #[tokio::test(start_paused = true)]
    async fn no_lease_api_or_right_is_asked_again_in_five_minutes() {
        for (code, per_round) in [(404, ["PATCH", "POST"].as_slice()), (403, &["PATCH"])] {
            let (server, client) = Server::start(code, 200);
            let t0 = Instant::now();
            let (_, task) = run_for(client, Duration::from_secs(590));
            task.await.unwrap();
            let methods = |from, to| -> Vec<String> {
                let seen = server.between(t0, from, to);
                seen.iter()
                    .map(|w| w.split(' ').next().unwrap_or("").to_string())
                    .collect()
            };
            assert_eq!(methods(0, 1), per_round, "{code}");
            assert!(methods(1, 300).is_empty(), "{code}: {:?}", methods(1, 300));
            assert_eq!(methods(300, 301), per_round, "{code}");
            assert!(methods(301, 590).is_empty(), "{code}");
            assert_eq!(
                methods(590, 591),
                ["DELETE"],
                "{code}: its Lease at the end"
            );
        }
    }

    /// Anything else is tried again the next period: a 500, and a 403 from a server whose
    /// `/readyz` says it is still starting.
    #[tokio::test(start_paused = true)]
    async fn other_failures_are_tried_again_each_period() {
        for (code, readyz) in [(500, 200), (503, 200), (403, 500)] {
            let (server, client) = Server::start(code, readyz);
            let t0 = Instant::now();
            let (_, task) = run_for(client, Duration::from_secs(21));
            task.await.unwrap();
            // At 0 s, 2 s, ... 20 s: a PATCH each (the DELETE at the end comes at 21 s).
            let rounds = server.between(t0, 0, 21).len();
            assert_eq!(rounds, 11, "{code} /readyz {readyz}");
        }
    }

    /// Once the API answers, the next look finds it and sharing goes on each period.
    #[tokio::test(start_paused = true)]
    async fn sharing_resumes_at_the_next_look() {
        let (server, client) = Server::start(404, 200);
        let t0 = Instant::now();
        let (peers, task) = run_for(client, Duration::from_secs(311));
        tokio::time::sleep(Duration::from_secs(60)).await;
        server.code.store(200, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(250)).await;
        assert!(peers.live.lock().unwrap().is_some(), "sharing again");
        task.await.unwrap();
        assert!(server.between(t0, 1, 300).is_empty());
        // At 300 s, 302 s, ... 310 s: a PATCH and a LIST each, and the DELETE at the end.
        assert_eq!(server.between(t0, 300, 312).len(), 6 * 2 + 1);
    }
}
