//! The watch of the objects to clear (the labelled objects, or every unbound pod when
//! release rules are given), on the one watch (`Events`): the objects go into the engine's
//! store (`store.rs`: slim, and only those `keep` accepts), and the key of every applied
//! one that needs work is yielded for the work queue. The store takes a listed object at
//! once (a relist marks and sweeps, no second store), so a listed key is yielded at once
//! too: a worker finds it there.

use std::{sync::Arc, time::Duration};

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
    label_key: String,
    selector: Selector,
    resource: String,
    wanted: Test,
    keep: Test,
    store: Arc<Store>,
    listed: usize,
}

impl Watch {
    /// The keys of objects that need work; `store` is kept up to date first. The stream
    /// never ends and never yields an error: failures are handled here. A relist's object
    /// at the version already stored is `Unchanged`: a retry waiting for it stands.
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
            metrics: self.metrics,
        };
        let state = State {
            events: Events::new(self.api, spec),
            label_key: self.label_key,
            selector: self.selector,
            resource: self.resource,
            wanted: self.wanted,
            keep: self.keep,
            store,
            listed: 0,
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
            let key = &self.label_key;
            let event = self.events.next().await.modify(|o| o.trim(key));
            if let Some(key) = self.apply(&event) {
                return key;
            }
        }
    }

    /// Stores the event's object; its key if it needs work.
    fn apply(&mut self, event: &watcher::Event<Held>) -> Option<Arrival<Key>> {
        let before = match event {
            watcher::Event::InitApply(o) => self.store.version(&o.key()),
            _ => None,
        };
        let key = self.store.apply(event, &self.keep);
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
        match event {
            watcher::Event::InitApply(o) if (self.wanted)(o) => {
                let now = o.metadata.meta.resource_version.as_deref();
                let unchanged = before.is_some() && before == now.and_then(|v| v.parse().ok());
                key.map(|k| {
                    if unchanged {
                        Arrival::Unchanged(k)
                    } else {
                        Arrival::News(k)
                    }
                })
            }
            watcher::Event::Apply(o) if (self.wanted)(o) => key.map(Arrival::News),
            _ => None,
        }
    }
}
