//! A kubeadm-like HA control plane for the instances that share the work: three
//! kube-apiservers on one etcd (`ControlPlane::own_ha`), `manifests/rbac.yaml` applied, and
//! one metainit a server, each with its own server's kubeconfig for the user metainit and
//! its own `--identity`, as the static pod of each control-plane node runs. What it
//! measures comes from the API servers' audit logs: every PATCH of a pod by the user
//! metainit (any answer), and each pod's latency from its create's answer to its clearing
//! PATCH's (200), both stamped by the servers; and their CPU from /proc.
//! tests/control_plane_ha.rs asserts on it, `cargo bench --bench peers` prints it.

use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use serde_json::Value;

use super::{
    Metainit, admin_get,
    control_plane::{ControlPlane, WAIT, gate_names, until},
    gated_pod,
};

const KUEUE: &str = "kueue.x-k8s.io/admission";
/// Pods created a second (`Ha::create`).
pub const RATE: u32 = 100;

pub struct Ha {
    pub cp: ControlPlane,
    pub namespace: String,
    /// Instance `i` runs against server `i`; `None` once killed.
    pub instances: Vec<Option<(Metainit, String)>>,
}

/// What one round of pods cost, from the audit logs.
pub struct Figures {
    pub pods: usize,
    pub patches: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// Each PATCH after a pod's first (`Extra`): what answered it and when, for a failure
    /// to say why there were more than one.
    pub extra: Vec<Extra>,
}

/// A PATCH of a pod that was not its first: its answer, and its time from the pod's create
/// and from its first PATCH (answered), in ms, as the server stamped them, and the server (from
/// 1: instance `server - 1`'s).
#[derive(Debug)]
pub struct Extra {
    pub code: i64,
    pub after_create_ms: i64,
    pub after_first_ms: i64,
    pub server: u64,
    /// The server of the pod's first PATCH.
    pub first_server: u64,
}

/// The figures, and the first 30 extra PATCHes (a line each).
impl std::fmt::Debug for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (p50, p99, max) = (self.p50, self.p99, self.max);
        write!(
            f,
            "{} pods, {} PATCHes, p50 {p50:?}, p99 {p99:?}, max {max:?}, {} extra",
            self.pods,
            self.patches,
            self.extra.len()
        )?;
        for e in self.extra.iter().take(30) {
            write!(f, "\n  {e:?}")?;
        }
        Ok(())
    }
}

impl Figures {
    pub fn per_pod(&self) -> f64 {
        self.patches as f64 / self.pods as f64
    }
}

impl Ha {
    /// Three API servers, `instances` of metainit sharing the work with `args` (none:
    /// `--peer-delay 500ms`, the default, spelled out: the test harness turns it off).
    pub async fn start(instances: usize, args: &[&str]) -> Ha {
        let cp = ControlPlane::own_ha(3, &[]);
        cp.apply_manifest("manifests/rbac.yaml");
        let namespace = cp.namespace("ha");
        let mut ha = Ha {
            cp,
            namespace,
            instances: Vec::new(),
        };
        for i in 0..instances {
            let identity = format!("node-{}", i + 1);
            let mut all = vec!["--peer-delay", "500ms", "--identity", &identity];
            all.extend_from_slice(args);
            let m = ha.cp.metainit(&ha.cp.metainits[i], &all);
            let addr = m.admin_addr().await;
            ha.instances.push(Some((m, addr)));
        }
        ha.until_peers(instances).await;
        ha
    }

    /// Waits until every running instance counts `n` alive.
    pub async fn until_peers(&self, n: usize) {
        let want = format!("\nmetainit_peers {n}\n");
        for (_, addr) in self.instances.iter().flatten() {
            until(&format!("{addr} counting {n} alive"), WAIT, || async {
                admin_get(addr, "/metrics")
                    .await
                    .1
                    .contains(&want)
                    .then_some(())
            })
            .await;
        }
    }

    /// The lines each running instance logged at WARN or ERROR, and its peers lines: what a
    /// failing figure is printed with.
    pub fn problems(&self) -> Vec<String> {
        self.instances
            .iter()
            .enumerate()
            .filter_map(|(i, m)| Some((i, m.as_ref()?)))
            .flat_map(|(i, (m, _))| {
                m.log()
                    .into_iter()
                    .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("sharing"))
                    .map(move |l| format!("instance {i}: {l}"))
            })
            .collect()
    }

    /// Kills instance `i` (SIGKILL: no Lease deleted, as a crash or a node gone).
    pub fn kill(&mut self, i: usize) {
        if let Some((m, _)) = self.instances[i].take() {
            m.signal("KILL");
        }
    }

    /// Creates `n` labelled gated pods `PREFIX-NNNN` through server 1, `RATE` a second (as
    /// controllers create them, not as fast as the machine can: at that pace one instance
    /// left alone on this machine's two cores falls behind, and the figures would be its
    /// backlog), at most 16 at a time.
    pub async fn create(&self, prefix: &str, n: usize) {
        let pods = self.cp.pods(&self.namespace).await;
        let pods = &pods;
        let start = tokio::time::Instant::now();
        let period = Duration::from_secs(1) / RATE;
        stream::iter(0..n)
            .map(|i| async move {
                tokio::time::sleep_until(start + period * u32::try_from(i).unwrap()).await;
                let name = format!("{prefix}-{i:04}");
                let pod: Pod = serde_json::from_value(gated_pod(&name, true, &[KUEUE])).unwrap();
                pods.create(&PostParams::default(), &pod).await.unwrap();
            })
            .buffer_unordered(16)
            .collect::<Vec<()>>()
            .await;
    }

    /// Waits until none of `PREFIX-*` has a gate left.
    pub async fn until_cleared(&self, prefix: &str, n: usize) {
        let pods = self.cp.pods(&self.namespace).await;
        let start = format!("{prefix}-");
        until(&format!("{n} pods {prefix}-* cleared"), WAIT, || async {
            let list = pods.list(&Default::default()).await.ok()?;
            let mine: Vec<&Pod> = list
                .items
                .iter()
                .filter(|p| {
                    p.metadata
                        .name
                        .as_deref()
                        .is_some_and(|m| m.starts_with(&start))
                })
                .collect();
            (mine.len() == n && mine.iter().all(|p| gate_names(p).is_empty())).then_some(())
        })
        .await;
    }

    /// The round `PREFIX-*` from the three audit logs.
    pub fn figures(&self, prefix: &str) -> Figures {
        let start = format!("{prefix}-");
        let entries: Vec<Value> = (1..=3)
            .flat_map(|i| {
                [
                    self.cp.audit_of(i, "kubernetes-admin"),
                    self.cp.audit_of(i, "metainit"),
                ]
                .into_iter()
                .flatten()
                .map(move |mut e| {
                    e["server"] = i.into();
                    e
                })
            })
            .filter(|e| e["stage"] == "ResponseComplete")
            .filter(|e| {
                e["objectRef"]["resource"] == "pods" && e["objectRef"]["subresource"].is_null()
            })
            .filter(|e| e["objectRef"]["namespace"] == self.namespace.as_str())
            .filter(|e| {
                e["objectRef"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&start))
            })
            .collect();
        let by = |verb: &str, user: &str| {
            entries
                .iter()
                .filter(|e| e["verb"] == verb && e["user"]["username"] == user)
                .collect::<Vec<_>>()
        };
        let (creates, patches) = (by("create", "kubernetes-admin"), by("patch", "metainit"));
        let created: std::collections::HashMap<&str, f64> = creates
            .iter()
            .filter(|e| e["responseStatus"]["code"] == 201)
            .map(|e| (e["objectRef"]["name"].as_str().unwrap(), stamp(e)))
            .collect();
        let mut latencies: Vec<Duration> = patches
            .iter()
            .filter(|e| e["responseStatus"]["code"] == 200)
            .filter_map(|e| {
                let at = created.get(e["objectRef"]["name"].as_str()?)?;
                Some(Duration::from_secs_f64((stamp(e) - at).max(0.0)))
            })
            .collect();
        latencies.sort();
        let q = |f: f64| {
            latencies[((latencies.len() as f64 * f).ceil() as usize).clamp(1, latencies.len()) - 1]
        };
        assert_eq!(
            latencies.len(),
            created.len(),
            "a pod without its clearing PATCH"
        );
        let extra = extras(&patches, &created);
        Figures {
            extra,
            pods: created.len(),
            patches: patches.len(),
            p50: q(0.50),
            p99: q(0.99),
            max: q(1.0),
        }
    }

    /// The CPU time the three API servers have used so far.
    pub fn apiservers_cpu(&self) -> Duration {
        (1..=3)
            .map(|i| {
                let file = if i == 1 {
                    "kube-apiserver.pid".to_string()
                } else {
                    format!("kube-apiserver-{i}.pid")
                };
                std::fs::read_to_string(self.cp.dir.join(file))
                    .ok()
                    .and_then(|pid| cpu_of(pid.trim()))
                    .unwrap_or_default()
            })
            .sum()
    }
}

/// The PATCHes after each pod's first, by the server's stamps.
fn extras(patches: &[&Value], created: &std::collections::HashMap<&str, f64>) -> Vec<Extra> {
    let mut by_pod: std::collections::HashMap<&str, Vec<&Value>> = Default::default();
    for e in patches {
        if let Some(name) = e["objectRef"]["name"].as_str() {
            by_pod.entry(name).or_default().push(e);
        }
    }
    let ms = |s: f64| (s * 1000.0).round() as i64;
    let mut extra = Vec::new();
    for (name, mut all) in by_pod {
        all.sort_by(|a, b| stamp(a).total_cmp(&stamp(b)));
        let (first, created) = (stamp(all[0]), created.get(name).copied().unwrap_or(0.0));
        extra.extend(all[1..].iter().map(|e| Extra {
            code: e["responseStatus"]["code"].as_i64().unwrap_or(0),
            after_create_ms: ms(stamp(e) - created),
            after_first_ms: ms(stamp(e) - first),
            server: e["server"].as_u64().unwrap_or(0),
            first_server: all[0]["server"].as_u64().unwrap_or(0),
        }));
    }
    extra
}

/// An audit entry's stageTimestamp, in seconds since the epoch.
fn stamp(e: &Value) -> f64 {
    let t: k8s_openapi::jiff::Timestamp = e["stageTimestamp"].as_str().unwrap().parse().unwrap();
    t.as_nanosecond() as f64 / 1e9
}

/// utime + stime of process `pid` (clock ticks of 10 ms).
fn cpu_of(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}
