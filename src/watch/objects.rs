//! The watch of the objects to clear (the labelled objects, or every unbound pod when
//! release rules are given), on the one watch (`Events`): the objects go into the engine's
//! store (`store.rs`: slim, and only those `keep` accepts), and the key of every applied
//! one that needs work is yielded for the work queue, and so is the key of every one the
//! store drops (a timer waiting for it goes with it). The store takes a listed object at
//! once (a relist marks and sweeps, no second store), so a listed key is yielded at once
//! too: a worker finds it there.

use std::{collections::VecDeque, sync::Arc, time::Duration};

use futures::Stream;
use kube::{Api, runtime::watcher};
use tracing::info;

use super::{Events, Filter, Spec};
use crate::{
    admin::Health,
    metrics::Metrics,
    object::Held,
    queue::Arrival,
    store::{Key, Store},
};

/// Which objects the server sends.
#[derive(Clone, Debug)]
pub enum Selector {
    /// The objects that carry the label key.
    Labelled,
    /// Every pod not bound to a node (`spec.nodeName=`), labelled or not: the scope of the
    /// release rules. A gated pod is never bound, so no labelled gated pod is missed, and
    /// the cluster's running pods are never sent.
    Unbound,
}

/// Whether an object is wanted (queued), or kept in the store.
pub type Test = Box<dyn Fn(&Held) -> bool + Send + Sync>;

/// One watched resource.
pub struct Watch {
    pub api: Api<Held>,
    pub label_key: String,
    pub selector: Selector,
    /// How the user named the resource, for logs.
    pub resource: String,
    pub resync: Duration,
    pub health: Arc<Health>,
    pub metrics: Arc<Metrics>,
    /// Whether an object needs work: one that holds nothing back (the state after
    /// metainit's own patch, most often) is not queued.
    pub wanted: Test,
    /// Whether the store keeps it: what is wanted, and what the gauges count (a pod with
    /// a watched gate). Anything else costs nothing once parsed.
    pub keep: Test,
}

/// The field selector of unbound pods.
pub const UNBOUND: &str = "spec.nodeName=";

impl Selector {
    fn filter(&self, label_key: &str) -> Filter {
        match self {
            Selector::Labelled => Filter::labels(label_key),
            Selector::Unbound => Filter {
                labels: None,
                fields: Some(UNBOUND.to_string()),
            },
        }
    }
}

struct State {
    events: Events<Held>,
    feed: Feed,
    /// What the last event told the queue, not handed to it yet.
    out: VecDeque<Arrival<Key>>,
}

/// What the stream does with each event: the store kept up to date, and what the queue is
/// told of it.
struct Feed {
    label_key: String,
    selector: Selector,
    resource: String,
    wanted: Test,
    keep: Test,
    store: Arc<Store>,
    listed: usize,
    metrics: Arc<Metrics>,
}

impl Watch {
    /// The keys of objects that need work; `store` is kept up to date first. The stream
    /// never ends and never yields an error: failures are handled here. An object whose work
    /// depends on nothing new (a repeated event, a relist of it as it was) is `Unchanged`: a
    /// retry waiting for it stands.
    pub fn stream(self, store: Arc<Store>) -> impl Stream<Item = Arrival<Key>> + Send + 'static {
        let index = self
            .health
            .add_watch(&self.resource, self.api.resource_url());
        let spec = Spec {
            name: self.resource.clone(),
            filter: self.selector.filter(&self.label_key),
            resync: self.resync,
            rbac_hint: crate::failure::RBAC_HINT,
            health: self.health,
            index,
            metrics: self.metrics.clone(),
        };
        let state = State {
            events: Events::new(self.api, spec),
            feed: Feed {
                label_key: self.label_key,
                selector: self.selector,
                resource: self.resource,
                wanted: self.wanted,
                keep: self.keep,
                store,
                listed: 0,
                metrics: self.metrics,
            },
            out: VecDeque::new(),
        };
        futures::stream::unfold(state, |mut st| async move {
            let key = st.next().await;
            Some((key, st))
        })
    }
}

impl State {
    async fn next(&mut self) -> Arrival<Key> {
        loop {
            if let Some(arrival) = self.out.pop_front() {
                return arrival;
            }
            let key = &self.feed.label_key;
            let event = self.events.next().await.modify(|o| o.trim(key));
            self.feed.apply(&event, &mut self.out);
        }
    }
}

impl Feed {
    /// Stores the event's object; in `out`, its key if it needs work, and the keys of the
    /// objects the store dropped (so that no timer waits for them).
    fn apply(&mut self, event: &watcher::Event<Held>, out: &mut VecDeque<Arrival<Key>>) {
        let mut gone = Vec::new();
        if let watcher::Event::InitApply(o) | watcher::Event::Apply(o) = event {
            self.held_for(o);
        }
        let key = self.store.apply(event, &self.keep, &mut gone);
        match event {
            watcher::Event::Init => self.listed = 0,
            watcher::Event::InitApply(_) => self.listed += 1,
            watcher::Event::InitDone => match self.selector {
                Selector::Labelled => {
                    info!(resource = %self.resource, labelled = self.listed, label_key = %self.label_key, "listed; watching")
                }
                Selector::Unbound => {
                    info!(resource = %self.resource, unbound = self.listed, field_selector = UNBOUND, "listed; watching")
                }
            },
            watcher::Event::Apply(_) | watcher::Event::Delete(_) => {}
        }
        // A listed or watched object is news only if what its work depends on changed
        // (`Store::apply`): a repeated event, or a relist of it as it was, leaves a waiting
        // retry alone.
        let arrival = match event {
            watcher::Event::InitApply(o) | watcher::Event::Apply(o) if (self.wanted)(o) => {
                key.map(|(k, news)| {
                    if news {
                        Arrival::News(k)
                    } else {
                        Arrival::Unchanged(k)
                    }
                })
            }
            _ => None,
        };
        out.extend(arrival);
        out.extend(gone.into_iter().map(Arrival::Gone));
    }
}

impl Feed {
    /// `metainit_gate_held_seconds`: each gate the stored pod held that `obj` holds no
    /// more, held from its creation until now (when the change is seen).
    fn held_for(&self, obj: &Held) {
        let lifted = self.store.lifted(obj);
        if lifted.is_empty() {
            return;
        }
        let held = obj
            .age(k8s_openapi::jiff::Timestamp::now())
            .unwrap_or_default();
        for gate in &lifted {
            self.metrics.gate_lifted(gate, held);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::Queue;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::{sync::Notify, time::Instant};

    const AGE: Duration = Duration::from_secs(3600);

    fn pod(n: usize, gates: &[&str]) -> Held {
        let gates: Vec<_> = gates.iter().map(|g| json!({"name": g})).collect();
        crate::object::held(json!({
            "metadata": {"name": format!("p{n}"), "namespace": "ns", "uid": format!("u{n}"),
                         "resourceVersion": "1", "creationTimestamp": "2026-01-02T03:04:05Z"},
            "spec": {"schedulingGates": gates}
        }))
    }

    fn feed(store: &Arc<Store>) -> Feed {
        Feed {
            label_key: "k".into(),
            selector: Selector::Unbound,
            resource: "pods".into(),
            wanted: Box::new(Held::has_gates),
            keep: Box::new(Held::has_gates),
            store: store.clone(),
            listed: 0,
            metrics: Arc::new(Metrics::default()),
        }
    }

    fn held_counts(metrics: &Metrics) -> Vec<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry).unwrap();
        text.lines()
            .filter(|l| l.starts_with("metainit_gate_held_seconds_count"))
            .map(str::to_string)
            .collect()
    }

    /// Each gate that went is observed once, whoever removed it; a repeated event, a new
    /// pod under the old name and a deletion observe nothing.
    #[test]
    fn each_gate_gone_is_observed_once_with_how_long_it_held() {
        let store = Arc::new(Store::default());
        let mut feed = feed(&store);
        let mut out = VecDeque::new();
        let mut send = |event| feed.apply(&event, &mut out);
        send(watcher::Event::Apply(pod(1, &["a.io/x", "b.io/y"])));
        send(watcher::Event::Apply(pod(1, &["b.io/y"])));
        send(watcher::Event::Apply(pod(1, &["b.io/y"])));
        let mut other = pod(1, &[]);
        other.metadata.meta.uid = Some("another".into());
        send(watcher::Event::Apply(other));
        send(watcher::Event::Apply(pod(2, &["b.io/y"])));
        send(watcher::Event::Delete(pod(2, &["b.io/y"])));
        send(watcher::Event::Apply(pod(3, &["b.io/y"])));
        send(watcher::Event::InitApply(pod(3, &[])));
        let mut counts = held_counts(&feed.metrics);
        counts.sort();
        assert_eq!(
            counts,
            [
                r#"metainit_gate_held_seconds_count{gate="a.io/x"} 1"#,
                r#"metainit_gate_held_seconds_count{gate="b.io/y"} 1"#
            ],
            "{counts:?}"
        );
    }

    /// Unlabelled pods with a `--release-gate` gate, each given a timer for its age (as
    /// the daemon's work does), then dropped from the store well before it: their gates
    /// lifted by their owner, deleted, or not named by a relist. Their timers go with them,
    /// and each gone key is worked on (what forgets what was kept of it) once.
    #[tokio::test(start_paused = true)]
    async fn timers_of_pods_dropped_from_the_store_are_cancelled() {
        const N: usize = 10_000;
        let store = Arc::new(Store::default());
        let queue: Arc<Queue<Key>> = Queue::new(4);
        let gone_worked = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = futures::channel::mpsc::unbounded::<Arrival<Key>>();
        let (s, q, g) = (store.clone(), queue.clone(), gone_worked.clone());
        let work = move |key: Key| {
            if s.contains(&key) {
                q.add_at(key, Instant::now() + AGE);
            } else {
                g.fetch_add(1, Ordering::SeqCst);
            }
            async {}
        };
        let stop = Arc::new(Notify::new());
        let st = stop.clone();
        let task = tokio::spawn(
            queue
                .clone()
                .run(rx, 4, work, async move { st.notified().await }),
        );
        let mut feed = feed(&store);
        let mut send = |event: watcher::Event<Held>| {
            let mut out = VecDeque::new();
            feed.apply(&event, &mut out);
            for a in out {
                tx.unbounded_send(a).unwrap();
            }
        };
        send(watcher::Event::Init);
        (0..N).for_each(|n| send(watcher::Event::InitApply(pod(n, &["example.com/g"]))));
        send(watcher::Event::InitDone);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(queue.timers(), N, "a timer for each pod's age");

        // 8,000 released early by their owner, 1,000 deleted, the last 1,000 not listed.
        (0..8_000).for_each(|n| send(watcher::Event::Apply(pod(n, &[]))));
        (8_000..9_000).for_each(|n| send(watcher::Event::Delete(pod(n, &["example.com/g"]))));
        send(watcher::Event::Init);
        send(watcher::Event::InitDone);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(store.is_empty());
        assert_eq!(queue.timers(), 0, "the timers of the pods dropped");
        assert_eq!(
            gone_worked.load(Ordering::SeqCst),
            N,
            "each gone key forgotten once"
        );
        assert_eq!(queue.counts(), (0, 0));
        stop.notify_one();
        task.await.unwrap();
    }
}
