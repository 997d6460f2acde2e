//! Whether each webhook's service has a ready endpoint, and since when: one watch per
//! service, of its EndpointSlices only (`labelSelector=kubernetes.io/service-name=NAME`
//! in its namespace), started when a configuration names the service and stopped when
//! none does any more. An endpoint is ready unless its `conditions.ready` is `false` (the
//! EndpointSlice API: "a nil value should be interpreted as true").

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, Client, runtime::watcher};
use tokio::{task::AbortHandle, time::Instant};
use tracing::info;

use super::{decide::Endpoints, hook::Service};
use crate::{admin::Health, metrics::Metrics, watch};

/// The label EndpointSlices carry with their service's name.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The label selector of a service's EndpointSlices.
pub fn selector(service: &Service) -> String {
    format!("{SERVICE_NAME_LABEL}={}", service.name)
}

/// The EndpointSlices of `service`, read now by one LIST.
pub async fn slices(client: &Client, service: &Service) -> Result<Vec<EndpointSlice>, kube::Error> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &service.namespace);
    let params = kube::api::ListParams::default().labels(&selector(service));
    Ok(api.list(&params).await?.items)
}

/// How many endpoints of `service` are ready, read now (the LIST retried as start-up
/// requests are): for `--once` and `status`.
pub async fn ready_now(
    client: &Client,
    service: &Service,
    url: &str,
    budget: Option<crate::budget::Budget>,
) -> crate::Result<usize> {
    let what = format!("LIST endpointslices of {service}");
    let slices =
        crate::discovery::with_retries(client, &what, url, budget, || slices(client, service))
            .await?;
    Ok(ready_count(&slices))
}

/// The EndpointSlices' verdict: is any endpoint ready?
pub fn any_ready<'a>(slices: impl IntoIterator<Item = &'a EndpointSlice>) -> bool {
    ready_count(slices) > 0
}

/// How many endpoints of the EndpointSlices are ready.
pub fn ready_count<'a>(slices: impl IntoIterator<Item = &'a EndpointSlice>) -> usize {
    slices
        .into_iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .count()
}

struct Entry {
    state: Endpoints,
    /// How long the last outage lasted, once it ended.
    outage: Option<Duration>,
    /// The configurations (queue keys) that name this service.
    refs: HashSet<String>,
    task: AbortHandle,
    health: usize,
}

/// What the watch of a service's EndpointSlices needs.
pub struct Watches {
    pub client: Client,
    pub origin: Instant,
    pub health: Arc<Health>,
    pub metrics: Arc<Metrics>,
    /// How often each watch lists everything again.
    pub resync: Duration,
    /// Called with the configurations to look at again when a service's state changes.
    pub wake: Arc<dyn Fn(&str) + Send + Sync>,
}

/// Every watched service, shared by the workers and the watch tasks.
pub struct Services {
    watches: Watches,
    entries: Mutex<HashMap<Service, Entry>>,
}

impl Services {
    pub fn new(watches: Watches) -> Arc<Self> {
        Arc::new(Services {
            watches,
            entries: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Service, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What is known of a service's endpoints.
    pub fn endpoints(&self, service: &Service) -> Endpoints {
        self.lock()
            .get(service)
            .map_or(Endpoints::Unknown, |e| e.state)
    }

    /// How long the service's last outage lasted, once it is over.
    pub fn outage(&self, service: &Service) -> Option<Duration> {
        self.lock().get(service).and_then(|e| e.outage)
    }

    /// `config` names exactly `services` now: watches start for new ones and stop for
    /// the ones no configuration names any more.
    pub fn track(self: &Arc<Self>, config: &str, services: &[Service]) {
        let mut entries = self.lock();
        for s in services {
            if let Some(e) = entries.get_mut(s) {
                e.refs.insert(config.to_string());
                continue;
            }
            let health = self
                .watches
                .health
                .add_later_watch(&format!("endpointslices of {s}"), &slices_path(s));
            let task = tokio::spawn(self.clone().watch(s.clone(), health)).abort_handle();
            entries.insert(
                s.clone(),
                Entry {
                    state: Endpoints::Unknown,
                    outage: None,
                    refs: HashSet::from([config.to_string()]),
                    task,
                    health,
                },
            );
        }
        let health = &self.watches.health;
        entries.retain(|s, e| {
            if !services.contains(s) {
                e.refs.remove(config);
            }
            let keep = !e.refs.is_empty();
            if !keep {
                e.task.abort();
                health.retire(e.health);
            }
            keep
        });
    }

    /// A new verdict for `service`; wakes its configurations if it changed.
    fn set(&self, service: &Service, ready: bool) {
        let now = self.watches.origin.elapsed();
        let refs: Vec<String> = {
            let mut entries = self.lock();
            let Some(e) = entries.get_mut(service) else {
                return;
            };
            let next = match (e.state, ready) {
                (Endpoints::Ready { .. }, true) | (Endpoints::Down { .. }, false) => return,
                (Endpoints::Down { since }, true) => {
                    e.outage = Some(now.saturating_sub(since));
                    info!(service = %service, after = %crate::text::duration(now.saturating_sub(since)),
                          "a webhook's service has a ready endpoint again");
                    Endpoints::Ready { since: now }
                }
                (_, true) => Endpoints::Ready { since: now },
                (_, false) => {
                    info!(service = %service, "a webhook's service has no ready endpoint");
                    Endpoints::Down { since: now }
                }
            };
            e.state = next;
            e.refs.iter().cloned().collect()
        };
        for r in refs {
            (self.watches.wake)(&r);
        }
    }

    /// The watch of one service's EndpointSlices, for as long as a configuration names it.
    async fn watch(self: Arc<Self>, service: Service, health: usize) {
        let api: Api<EndpointSlice> =
            Api::namespaced(self.watches.client.clone(), &service.namespace);
        let mut events = watch::Events::new(
            api,
            watch::Spec {
                name: format!("endpointslices of {service}"),
                filter: watch::Filter::labels(&selector(&service)),
                resync: self.watches.resync,
                rbac_hint: super::RBAC_HINT,
                health: self.watches.health.clone(),
                index: health,
                metrics: self.watches.metrics.clone(),
            },
        );
        let mut slices: HashMap<String, EndpointSlice> = HashMap::new();
        let mut listing: HashMap<String, EndpointSlice> = HashMap::new();
        let key = |s: &EndpointSlice| s.metadata.name.clone().unwrap_or_default();
        loop {
            match events.next().await {
                watcher::Event::Init => listing.clear(),
                watcher::Event::InitApply(s) => {
                    listing.insert(key(&s), s);
                }
                watcher::Event::InitDone => {
                    slices = std::mem::take(&mut listing);
                    self.set(&service, any_ready(slices.values()));
                }
                watcher::Event::Apply(s) => {
                    slices.insert(key(&s), s);
                    self.set(&service, any_ready(slices.values()));
                }
                watcher::Event::Delete(s) => {
                    slices.remove(&key(&s));
                    self.set(&service, any_ready(slices.values()));
                }
            }
        }
    }
}

/// Where the state of a service's endpoints comes from: the watches of the daemon, or
/// for `--once` one LIST each (`true`: a ready endpoint), with no grace to wait for.
pub(super) enum Source {
    Watch(Arc<Services>),
    Once(HashMap<Service, bool>),
}

impl Source {
    pub(super) fn track(&self, config: &str, services: &[Service]) {
        if let Source::Watch(w) = self {
            w.track(config, services);
        }
    }

    pub(super) fn endpoints(&self, service: &Service) -> Endpoints {
        match self {
            Source::Watch(w) => w.endpoints(service),
            Source::Once(listed) => match listed.get(service) {
                Some(true) => Endpoints::Ready {
                    since: Duration::ZERO,
                },
                Some(false) => Endpoints::Down {
                    since: Duration::ZERO,
                },
                None => Endpoints::Unknown,
            },
        }
    }

    pub(super) fn outage(&self, service: &Service) -> Option<Duration> {
        match self {
            Source::Watch(w) => w.outage(service),
            Source::Once(_) => None,
        }
    }

    pub(super) fn once(&self) -> bool {
        matches!(self, Source::Once(_))
    }
}

fn slices_path(s: &Service) -> String {
    format!(
        "/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices",
        s.namespace
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(ready: &[Option<bool>]) -> EndpointSlice {
        let endpoints: Vec<_> = ready
            .iter()
            .map(|r| match r {
                Some(r) => json!({"addresses": ["10.0.0.1"], "conditions": {"ready": r}}),
                None => json!({"addresses": ["10.0.0.1"]}),
            })
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": endpoints
        }))
        .unwrap()
    }

    #[test]
    fn ready_unless_said_otherwise() {
        assert!(!any_ready(&[]));
        assert!(!any_ready(&[slice(&[])]));
        assert!(!any_ready(&[slice(&[Some(false)]), slice(&[Some(false)])]));
        assert!(any_ready(&[slice(&[Some(false)]), slice(&[Some(true)])]));
        assert!(any_ready(&[slice(&[None])]), "nil means ready");
    }
}
