//! The watch of the objects to clear (the labelled objects, or every unbound pod when
//! release rules are given), on the one watch (`Events`): the objects go into the
//! reflector's store (trimmed), and the key of every applied one that needs work is
//! yielded for the work queue; a list's objects only once the list is done, when the store
//! holds them, since a worker looks each key up there.

use std::{sync::Arc, time::Duration};

use futures::Stream;
use kube::{
    Api,
    runtime::{
        reflector::{ObjectRef, Store, store::Writer},
        watcher,
    },
};
use tracing::info;

use super::{Events, Filter, Spec};
use crate::{
    admin::Health,
    metrics::Metrics,
    object::{Held, Kind},
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
    /// metainit's own patch, most often) is only stored, not queued.
    pub wanted: Box<dyn Fn(&Held) -> bool + Send + Sync>,
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
    wanted: Box<dyn Fn(&Held) -> bool + Send + Sync>,
    writer: Writer<Held>,
    store: Store<Held>,
    dyntype: Kind,
    /// Objects of a list just completed, still to hand to the queue.
    replay: Vec<Arc<Held>>,
    listed: usize,
}

impl Watch {
    /// The keys of objects that need work; the store behind `writer` is kept up to date
    /// first. The stream never ends and never yields an error: failures are handled here.
    pub fn stream(
        self,
        writer: Writer<Held>,
        dyntype: Kind,
    ) -> impl Stream<Item = ObjectRef<Held>> + Send + 'static {
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
            store: writer.as_reader(),
            writer,
            dyntype,
            replay: Vec::new(),
            listed: 0,
        };
        futures::stream::unfold(state, |mut st| async move {
            let key = st.next().await;
            Some((key, st))
        })
    }
}

/// The queue's key of an object: its names and the resource, without the uid and version
/// `ObjectRef::from_obj` copies in (the store's lookups ignore them, and the queue clones a
/// key a few times per object).
fn queue_key(obj: &Held, kind: &Kind) -> ObjectRef<Held> {
    let key = ObjectRef::new_with(obj.name(), kind.clone());
    match obj.namespace() {
        Some(ns) => key.within(ns),
        None => key,
    }
}

impl State {
    async fn next(&mut self) -> ObjectRef<Held> {
        loop {
            if let Some(obj) = self.replay.pop() {
                if (self.wanted)(&obj) {
                    return queue_key(&obj, &self.dyntype);
                }
                continue;
            }
            let key = &self.label_key;
            let event = self.events.next().await.modify(|o| o.trim(key));
            if let Some(obj) = self.apply(event)
                && (self.wanted)(&obj)
            {
                return queue_key(&obj, &self.dyntype);
            }
        }
    }

    fn apply(&mut self, event: watcher::Event<Held>) -> Option<Held> {
        self.writer.apply_watcher_event(&event);
        match event {
            watcher::Event::Init => {
                self.listed = 0;
                None
            }
            // A listed object reaches the store only when the whole list is done: the
            // queue, whose workers read the store, hears of it then (see `InitDone`).
            watcher::Event::InitApply(_) => {
                self.listed += 1;
                None
            }
            watcher::Event::Apply(obj) => Some(obj),
            watcher::Event::Delete(_) => None,
            watcher::Event::InitDone => {
                match self.selector {
                    Selector::Labelled => {
                        info!(resource = %self.resource, labelled = self.listed, label_key = %self.label_key, "listed; watching")
                    }
                    Selector::Unbound => {
                        info!(resource = %self.resource, unbound = self.listed, field_selector = UNBOUND, "listed; watching")
                    }
                }
                self.replay = self.store.state();
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::ApiResource;
    use serde_json::json;

    fn pods() -> Kind {
        Kind::from(ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()))
    }

    #[test]
    fn the_queue_key_finds_what_the_reflector_stored() {
        // The store keys by `ObjectRef::from_obj` (uid and version in `extra`), under its
        // own copy of the resource; the queue's key has neither.
        let mut writer = Writer::new(pods());
        let store = writer.as_reader();
        let obj = crate::object::held(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7"}
        }));
        writer.apply_watcher_event(&watcher::Event::Apply(obj.clone()));
        let found = store
            .get(&queue_key(&obj, &pods()))
            .expect("found by the queue's key");
        assert_eq!(found.uid(), Some("u"));
        let other = crate::object::held(json!({"metadata": {"name": "p", "namespace": "other"}}));
        assert!(
            store.get(&queue_key(&other, &pods())).is_none(),
            "namespaces differ"
        );
        let mut nodes = (*pods()).clone();
        nodes.plural = "nodes".into();
        assert!(
            store.get(&queue_key(&obj, &Kind::from(nodes))).is_none(),
            "resources differ"
        );
    }
}
