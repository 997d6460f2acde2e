//! Prometheus metrics, all prefixed `metainit_`.

mod cause;

pub use cause::WatchCause;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram, info::Info},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClearedLabels {
    pub mode: String,
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GateLabels {
    pub gate: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabels {
    pub cause: String,
}

/// The registry and each metric in it, by its name under `metainit_`.
pub struct Metrics {
    pub registry: Registry,
    /// `objects_cleared_total`, by mode and resource.
    pub cleared: Family<ClearedLabels, Counter>,
    /// `clear_failures_total`, by reason.
    pub clear_failures: Family<ReasonLabels, Counter>,
    /// `watch_restarts_total`, by cause.
    pub watch_restarts: Family<CauseLabels, Counter>,
    /// `objects_pending`.
    pub pending: Gauge,
    /// `clear_latency_seconds`.
    pub clear_latency: Histogram,
    /// `event_failures_total`.
    pub event_failures: Counter,
    /// `events_dropped_total`.
    pub events_dropped: Counter,
    /// `gates_released_total`, by gate.
    pub gates_released: Family<GateLabels, Counter>,
    /// `gated_pods`, by gate.
    pub gated_pods: Family<GateLabels, Gauge>,
    /// `gated_oldest_seconds`, by gate.
    pub gated_oldest: Family<GateLabels, Gauge>,
    /// `gate_held_seconds`, by gate.
    pub gate_held: Family<GateLabels, Histogram, fn() -> Histogram>,
    /// `webhooks_exempted`.
    pub webhooks_exempted: Gauge,
    /// `webhook_exemptions_total`.
    pub webhook_exemptions: Counter,
    /// `webhook_restorations_total`.
    pub webhook_restorations: Counter,
    /// `peers`.
    pub peers: Gauge,
    /// `objects_left_to_peers_total`.
    pub left_to_peers: Counter,
    /// Counts the webhooks exempted now, from the configurations' store, when scraped.
    exempted_source: std::sync::Mutex<Option<PendingSource>>,
    /// Counts the objects pending now, from the stores, when scraped.
    pending_sources: std::sync::Mutex<Vec<PendingSource>>,
    /// The watched gates and the unbound pods, read when scraped.
    gated_source: std::sync::Mutex<Option<(Vec<String>, PodsSource)>>,
}

/// What the gauges of watched gates read of a pod.
pub struct GatedPod<'a> {
    /// `spec.schedulingGates` as sent.
    pub gates: &'a str,
    /// `metadata.creationTimestamp`, in seconds since the epoch.
    pub created: Option<i64>,
    pub terminating: bool,
}

/// Hands every pod of one store to the visitor, for the gauges of watched gates.
pub type PodsSource = Box<dyn Fn(&mut dyn FnMut(GatedPod<'_>)) + Send + Sync>;

/// Counts pending objects in one store.
pub type PendingSource = Box<dyn Fn() -> usize + Send + Sync>;

impl Default for Metrics {
    fn default() -> Self {
        let mut metrics = Metrics {
            registry: Registry::with_prefix("metainit"),
            cleared: Family::default(),
            clear_failures: Family::default(),
            watch_restarts: Family::default(),
            pending: Gauge::default(),
            // 1 ms to about 65 s: 0.001 × 2^i, the bounds of prometheus-client's
            // `exponential_buckets(0.001, 2.0, 17)`, without its `powf` (a libm call, `exp2`,
            // the only one metainit makes: its pages stay out of memory).
            clear_latency: Histogram::new((0..17).map(|i| 0.001 * f64::from(1u32 << i))),
            event_failures: Counter::default(),
            events_dropped: Counter::default(),
            gates_released: Family::default(),
            gated_pods: Family::default(),
            gated_oldest: Family::default(),
            gate_held: Family::new_with_constructor(held_buckets),
            webhooks_exempted: Gauge::default(),
            webhook_exemptions: Counter::default(),
            webhook_restorations: Counter::default(),
            peers: Gauge::default(),
            left_to_peers: Counter::default(),
            exempted_source: std::sync::Mutex::default(),
            pending_sources: std::sync::Mutex::default(),
            gated_source: std::sync::Mutex::default(),
        };
        // In the order `/metrics` lists them.
        metrics.register_webhooks_and_gates();
        metrics.register_clearing();
        metrics.register_build();
        metrics.zero_known_labels();
        metrics
    }
}

/// 1 s to a day: a gate is held while a controller starts (seconds), while it waits for
/// quota or a node (minutes), or until someone notices (hours).
fn held_buckets() -> Histogram {
    Histogram::new([
        1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0,
    ])
}

impl Metrics {
    fn register_webhooks_and_gates(&mut self) {
        self.registry.register(
            "webhooks_exempted",
            "Webhooks whose own namespace metainit exempts now (--webhooks)",
            self.webhooks_exempted.clone(),
        );
        self.registry.register(
            "webhook_exemptions",
            "Exemptions of a webhook's own namespace added (--webhooks)",
            self.webhook_exemptions.clone(),
        );
        self.registry.register(
            "webhook_restorations",
            "Exemptions removed again once the webhook's service was back (--webhooks)",
            self.webhook_restorations.clone(),
        );
        self.registry.register(
            "gates_released",
            "Scheduling gates released by a --release-gate rule, by gate",
            self.gates_released.clone(),
        );
        self.registry.register(
            "gated_pods",
            "Unbound pods held by a watched gate now (--watch-gates, --release-gate)",
            self.gated_pods.clone(),
        );
        self.registry.register(
            "gate_held_seconds",
            "Time from a watched pod's creation to a scheduling gate's removal, by whoever removed it, by gate",
            self.gate_held.clone(),
        );
        self.registry.register(
            "gated_oldest_seconds",
            "Age of the oldest unbound pod held by a watched gate now; 0 if none",
            self.gated_oldest.clone(),
        );
    }

    fn register_clearing(&mut self) {
        self.registry.register(
            "objects_cleared",
            "Objects whose initializers or gates were cleared",
            self.cleared.clone(),
        );
        self.registry.register(
            "clear_failures",
            "Failed attempts to clear an object, by reason",
            self.clear_failures.clone(),
        );
        self.registry.register(
            "watch_restarts",
            "Watch or list failures that restarted the watch, by cause",
            self.watch_restarts.clone(),
        );
        self.registry.register(
            "objects_pending",
            "Labelled objects held back now, as last seen",
            self.pending.clone(),
        );
        self.registry.register(
            "clear_latency_seconds",
            "Time from an object first seen pending to its clearing patch accepted",
            self.clear_latency.clone(),
        );
        self.registry.register(
            "peers",
            "Instances sharing the work as last listed, this one included; 0: not sharing, every object at once",
            self.peers.clone(),
        );
        self.registry.register(
            "objects_left_to_peers",
            "Objects another instance cleared while this one waited its turn (--peer-delay)",
            self.left_to_peers.clone(),
        );
        self.registry.register(
            "event_failures",
            "Events that could not be written",
            self.event_failures.clone(),
        );
        self.registry.register(
            "events_dropped",
            "Events dropped because too many were waiting to be written",
            self.events_dropped.clone(),
        );
    }

    fn register_build(&mut self) {
        self.registry.register(
            "build",
            "Build information",
            Info::new(vec![
                ("version", env!("CARGO_PKG_VERSION")),
                ("revision", crate::GIT_COMMIT),
            ]),
        );
    }

    /// Every known label value exists from the start, at 0: a dashboard shows 0, not
    /// "no data", and `rate()` sees the first increment.
    fn zero_known_labels(&self) {
        for reason in crate::failure::Class::ALL
            .iter()
            .filter_map(|c| c.policy().reason)
        {
            drop(self.clear_failures.get_or_create(&ReasonLabels {
                reason: reason.into(),
            }));
        }
        for cause in WatchCause::ALL {
            drop(self.watch_restarts.get_or_create(&CauseLabels {
                cause: cause.label().into(),
            }));
        }
    }

    pub fn cleared(&self, mode: &str, resource: &str) {
        self.cleared
            .get_or_create(&ClearedLabels {
                mode: mode.into(),
                resource: resource.into(),
            })
            .inc();
    }

    /// Creates `metainit_objects_cleared_total` for a resource at 0, once it is known.
    pub fn known_resource(&self, mode: &str, resource: &str) {
        drop(self.cleared.get_or_create(&ClearedLabels {
            mode: mode.into(),
            resource: resource.into(),
        }));
    }

    pub fn failure(&self, reason: &str) {
        self.clear_failures
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .inc();
    }

    pub fn watch_restart(&self, cause: WatchCause) {
        self.watch_restarts
            .get_or_create(&CauseLabels {
                cause: cause.label().into(),
            })
            .inc();
    }

    /// Adds a count of pending objects to `metainit_objects_pending`.
    pub fn pending_from(&self, source: PendingSource) {
        self.pending_sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(source);
    }

    /// A gate gone from a watched pod `held` after its creation (gates are set only then).
    pub fn gate_lifted(&self, gate: &str, held: std::time::Duration) {
        self.gate_held
            .get_or_create(&GateLabels { gate: gate.into() })
            .observe(held.as_secs_f64());
    }

    /// A gate released by a rule.
    pub fn released(&self, gate: &str) {
        self.gates_released
            .get_or_create(&GateLabels { gate: gate.into() })
            .inc();
    }

    /// Watches `gates` in the pods `source` gives, for `metainit_gated_pods` and
    /// `metainit_gated_oldest_seconds`; each starts at 0, and so does the released count
    /// of each gate of a rule (`released`).
    pub fn gated_from(&self, gates: Vec<String>, released: &[String], source: PodsSource) {
        for gate in &gates {
            let labels = GateLabels { gate: gate.clone() };
            drop(self.gated_pods.get_or_create(&labels));
            drop(self.gated_oldest.get_or_create(&labels));
            drop(self.gate_held.get_or_create(&labels));
        }
        for gate in released {
            drop(
                self.gates_released
                    .get_or_create(&GateLabels { gate: gate.clone() }),
            );
        }
        *self.gated_source.lock().unwrap_or_else(|p| p.into_inner()) = Some((gates, source));
    }

    fn count_gated(&self) {
        let source = self.gated_source.lock().unwrap_or_else(|p| p.into_inner());
        let Some((gates, pods)) = source.as_ref() else {
            return;
        };
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let mut counts: std::collections::HashMap<&str, (i64, i64)> =
            gates.iter().map(|g| (g.as_str(), (0, 0))).collect();
        // Most pods share a few lists of gates: each text is read once.
        let mut names: std::collections::HashMap<String, Vec<String>> = Default::default();
        pods(&mut |pod| {
            // A gated pod is never bound; a terminating one is on its way out.
            if pod.terminating {
                return;
            }
            let age = pod.created.map_or(0, |c| now.saturating_sub(c).max(0));
            if !names.contains_key(pod.gates) {
                let parsed = serde_json::from_str(pod.gates).ok();
                names.insert(
                    pod.gates.to_string(),
                    crate::blocker::names(parsed.as_ref()),
                );
            }
            for gate in &names[pod.gates] {
                if let Some((n, oldest)) = counts.get_mut(gate.as_str()) {
                    *n += 1;
                    *oldest = (*oldest).max(age);
                }
            }
        });
        for (gate, (n, oldest)) in counts {
            let labels = GateLabels { gate: gate.into() };
            self.gated_pods.get_or_create(&labels).set(n);
            self.gated_oldest.get_or_create(&labels).set(oldest);
        }
    }

    /// Counts the exempted webhooks from the configurations, when scraped.
    pub fn exempted_from(&self, source: PendingSource) {
        *self
            .exempted_source
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(source);
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        self.count_gated();
        if let Some(count) = self
            .exempted_source
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            self.webhooks_exempted
                .set(i64::try_from(count()).unwrap_or(i64::MAX));
        }
        let sources = self
            .pending_sources
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if !sources.is_empty() {
            let n: usize = sources.iter().map(|count| count()).sum();
            self.pending.set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        drop(sources);
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latency_buckets_are_prometheus_clients_exponential_ones() {
        let text = Metrics::default().encode();
        let bounds: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with("metainit_clear_latency_seconds_bucket{le=\""))
            .filter_map(|l| l.split('"').nth(1).map(str::to_string))
            .collect();
        let mut want: Vec<String> =
            prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 17)
                .map(|b| format!("{b}"))
                .collect();
        want.push("+Inf".into());
        assert_eq!(bounds, want, "{text}");
    }

    #[test]
    fn every_label_value_is_there_at_zero() {
        let m = Metrics::default();
        m.known_resource("scheduling-gates", "pods");
        let text = m.encode();
        for reason in [
            "race",
            "rejected",
            "forbidden",
            "unauthorized",
            "throttled",
            "server_error",
            "timeout",
            "unreachable",
        ] {
            let want = format!("metainit_clear_failures_total{{reason=\"{reason}\"}} 0\n");
            assert!(text.contains(&want), "{want} missing from\n{text}");
        }
        for cause in WatchCause::ALL {
            let cause = cause.label();
            let want = format!("metainit_watch_restarts_total{{cause=\"{cause}\"}} 0\n");
            assert!(text.contains(&want), "{want} missing from\n{text}");
        }
        assert!(text.contains(
            "metainit_objects_cleared_total{mode=\"scheduling-gates\",resource=\"pods\"} 0\n"
        ));
    }

    /// Every cause is exported: `ALL` holds each one once, with a label of its own.
    #[test]
    fn every_watch_cause_is_in_all_once() {
        // Exhaustive: a new cause does not compile until it has a place here and in `ALL`.
        let place = |c: WatchCause| match c {
            WatchCause::ListFailed => 0,
            WatchCause::WatchStartFailed => 1,
            WatchCause::Expired => 2,
            WatchCause::WatchError => 3,
            WatchCause::StreamFailed => 4,
            WatchCause::NoResourceVersion => 5,
            WatchCause::RevisionBackwards => 6,
            WatchCause::ShortWatch => 7,
            WatchCause::ListLoop => 8,
        };
        for (i, c) in WatchCause::ALL.into_iter().enumerate() {
            assert_eq!(place(c), i, "{c:?}");
        }
        let mut labels: Vec<&str> = WatchCause::ALL.iter().map(|c| c.label()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), WatchCause::ALL.len());
    }

    #[test]
    fn names_are_prefixed() {
        let m = Metrics::default();
        m.cleared("initializers", "pods");
        m.failure("server_error");
        m.watch_restart(WatchCause::Expired);
        m.pending.set(3);
        m.clear_latency.observe(0.01);
        let text = m.encode();
        for want in [
            "metainit_objects_cleared_total{mode=\"initializers\",resource=\"pods\"} 1",
            "metainit_clear_failures_total{reason=\"server_error\"} 1",
            "metainit_watch_restarts_total{cause=\"expired\"} 1",
            "metainit_objects_pending 3",
            "metainit_clear_latency_seconds_count 1",
        ] {
            assert!(text.contains(want), "{want} missing from\n{text}");
        }
        let build = format!(
            "metainit_build_info{{version=\"{}\",revision=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            crate::GIT_COMMIT
        );
        assert!(text.contains(&build), "{build} missing from\n{text}");
    }
}
