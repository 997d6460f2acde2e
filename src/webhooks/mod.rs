//! `--webhooks`: the deadlock of an admission webhook that intercepts its own pods. A
//! webhook that fails closed cannot get its own pods created once its service has no
//! endpoints: every pod creation in its namespace calls it, and nothing answers. On each
//! webhook configuration that carries the label key, metainit watches the service of every
//! webhook that fails closed (`endpoints.rs`); when one has had no ready endpoint for
//! `--webhook-grace`, it exempts that service's own namespace from that webhook alone
//! (`decide.rs`), and once the service has had ready endpoints for the grace again, it
//! removes exactly what it added (`patch.rs`, as `record.rs` remembers it). Patches to
//! webhook configurations are never sent to webhooks, so this always works; every other
//! namespace keeps failing closed.
//!
//! Shape: the two configuration kinds are watched by label (`configs.rs`, on the one watch
//! of `watch.rs`, and a reflector store each) and feed one work queue (`queue.rs`) keyed by
//! `plural/name`; a service's change of state queues the configurations that name it; a
//! grace period still running is a timer on the queue.

mod configs;
pub mod decide;
pub mod endpoints;
pub mod hook;
pub mod once;
pub mod patch;
pub mod record;
pub mod status;

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ApiResource, DynamicObject},
    runtime::reflector::{ObjectRef, Store, store::Writer},
};
use serde::de::IgnoredAny;
use serde_json::Value;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::{
    admin::Health,
    clear::{self, Counted},
    events::{self, Sink},
    failure::{self, Failure},
    metrics::Metrics,
    queue::Queue,
    text, watch,
};
use configs::follow;
pub use configs::{ConfigKind, GROUP, kinds};
use decide::{Endpoints, Step};
use endpoints::{Services, Watches};
use hook::{Hook, Service};
use record::records_of;

/// What the engine needs from the command line.
pub struct Settings {
    pub label_key: String,
    pub grace: Duration,
    pub dry_run: bool,
    pub node: String,
    pub concurrency: usize,
    /// How often every watch lists everything again (`--resync-period`).
    pub resync: Duration,
}

/// Where the state of a service's endpoints comes from: the watches of the daemon, or
/// for `--once` one LIST each (`true`: a ready endpoint), with no grace to wait for.
enum Source {
    Watch(Arc<Services>),
    Once(HashMap<Service, bool>),
}

impl Source {
    fn track(&self, config: &str, services: &[Service]) {
        if let Source::Watch(w) = self {
            w.track(config, services);
        }
    }

    fn endpoints(&self, service: &Service) -> Endpoints {
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

    fn outage(&self, service: &Service) -> Option<Duration> {
        match self {
            Source::Watch(w) => w.outage(service),
            Source::Once(_) => None,
        }
    }

    fn once(&self) -> bool {
        matches!(self, Source::Once(_))
    }
}

/// What one look at a configuration did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    /// Look again after this long (a grace period still running).
    wait: Option<Duration>,
    pub exempted: usize,
    pub restored: usize,
    pub would_exempt: usize,
    pub would_restore: usize,
}

/// What this process added, per configuration uid and webhook: when (for the once-per-grace
/// rule) and how many times someone else took it away again.
#[derive(Clone, Copy)]
struct Added {
    at: Duration,
    reverts: u32,
}

struct Engine {
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    events: Arc<Sink>,
    stores: Vec<(ApiResource, Store<DynamicObject>)>,
    services: Source,
    origin: Instant,
    added: Mutex<HashMap<(String, String), Added>>,
    failures: Mutex<HashMap<String, u32>>,
    /// Lines already said, so each is logged once per state: `KEY/...`, forgotten when
    /// the state ends or the configuration goes.
    said: Mutex<HashSet<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The `said` entry of a dry-run line on a webhook of configuration `key` (uid `uid`).
fn dry_run_line(key: &str, uid: &str, hook: &str, what: &str) -> String {
    format!("{key}/{uid}/{hook}/{what}")
}

/// The queue's key of a configuration: `plural/name`.
fn key_of(ar: &ApiResource, name: &str) -> String {
    format!("{}/{name}", ar.plural)
}

/// Runs the engine until `stop` resolves.
pub async fn run(
    client: Client,
    settings: Settings,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    events: Arc<Sink>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let queue: Arc<Queue<String>> = Queue::new(settings.concurrency);
    let wake = {
        let queue = queue.clone();
        Arc::new(move |key: &str| queue.add(key.to_string())) as Arc<dyn Fn(&str) + Send + Sync>
    };
    let origin = Instant::now();
    let services = Services::new(Watches {
        client: client.clone(),
        origin,
        health: health.clone(),
        metrics: metrics.clone(),
        resync: settings.resync,
        wake,
    });
    let mut stores = Vec::new();
    let mut sources = Vec::new();
    for ar in kinds() {
        let writer: Writer<DynamicObject> = Writer::new(ar.clone());
        stores.push((ar.clone(), writer.as_reader()));
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let spec = watch::Spec {
            name: ar.plural.clone(),
            filter: watch::Filter::labels(&settings.label_key),
            resync: settings.resync,
            rbac_hint: RBAC_HINT,
            health: health.clone(),
            index: health.add_watch(&ar.plural, api.resource_url()),
            metrics: metrics.clone(),
        };
        sources.push(follow(api, ar, settings.label_key.clone(), writer, spec));
    }
    {
        let stores: Vec<Store<DynamicObject>> = stores.iter().map(|(_, s)| s.clone()).collect();
        metrics.exempted_from(Box::new(move || {
            stores
                .iter()
                .flat_map(|s| s.state())
                .map(|o| records_of(&o).map_or(0, |r| r.len()))
                .sum()
        }));
    }
    info!(label_key = %settings.label_key, grace = %text::duration(settings.grace), dry_run = settings.dry_run,
          "watching labelled webhook configurations and their services' endpoints");
    let concurrency = settings.concurrency;
    let engine = Arc::new(Engine {
        client,
        settings,
        metrics,
        events,
        stores,
        services: Source::Watch(services),
        origin,
        added: Mutex::default(),
        failures: Mutex::default(),
        said: Mutex::default(),
    });
    let source = futures::stream::select_all(sources);
    let worker_queue = queue.clone();
    queue
        .run(
            source,
            concurrency,
            move |key| {
                let engine = engine.clone();
                let queue = worker_queue.clone();
                async move { engine.work(&queue, key).await }
            },
            stop,
        )
        .await;
}

impl Engine {
    async fn work(self: Arc<Self>, queue: &Queue<String>, key: String) {
        match self.reconcile(&key).await {
            Ok(look) => {
                lock(&self.failures).remove(&key);
                if let Some(wait) = look.wait {
                    queue.add_at(key, Instant::now() + wait);
                }
            }
            Err(f) => {
                let failures = {
                    let mut all = lock(&self.failures);
                    let n = all.entry(key.clone()).or_insert(0);
                    *n = n.saturating_add(1);
                    *n
                };
                let backoff = failure::backoff(failures, failure::retry_after(&f.error));
                let wait = queue.add_after(key.clone(), backoff);
                self.report(&key, &f, failures, Some(wait));
            }
        }
    }

    fn find(&self, key: &str) -> Option<(ApiResource, Option<Arc<DynamicObject>>)> {
        let (plural, name) = key.split_once('/')?;
        let (ar, store) = self.stores.iter().find(|(ar, _)| ar.plural == plural)?;
        Some((
            ar.clone(),
            store.get(&ObjectRef::new_with(name, ar.clone())),
        ))
    }

    /// One look at a configuration: what it did, and when to look again.
    async fn reconcile(&self, key: &str) -> Result<Look, Failure> {
        let mut look = Look::default();
        let Some((ar, obj)) = self.find(key) else {
            return Ok(look);
        };
        let Some(obj) = obj else {
            // Deleted, or no longer labelled: its services are no longer watched for it.
            self.services.track(key, &[]);
            let prefix = format!("{key}/");
            lock(&self.said).retain(|s| !s.starts_with(&prefix));
            return Ok(look);
        };
        let hooks = hook::hooks(&obj.data);
        let records = match records_of(&obj) {
            Ok(r) => {
                lock(&self.said).remove(&format!("{key}/unreadable"));
                r
            }
            Err(why) => {
                if lock(&self.said).insert(format!("{key}/unreadable")) {
                    warn!(config = %key, %why, "left alone");
                }
                return Ok(look);
            }
        };
        self.services
            .track(key, &hook::guarded_services([&obj.data]));
        for h in hooks
            .iter()
            .filter(|h| h.fails_closed && h.service.is_none())
        {
            if lock(&self.said).insert(format!("{key}/{}/url", h.name)) {
                info!(config = %key, webhook = %h.name,
                      "a webhook called by url, not through a service: metainit cannot see whether it is up, and leaves it alone");
            }
        }
        let now = self.origin.elapsed();
        let wall_now = Timestamp::now();
        let uid = obj.uid().unwrap_or_default();
        let mut steps = Vec::new();
        for h in &hooks {
            let endpoints = h
                .guarded_service()
                .map_or(Endpoints::Unknown, |s| self.services.endpoints(s));
            let remembered = lock(&self.added)
                .get(&(uid.clone(), h.name.clone()))
                .map(|a| now.saturating_sub(a.at));
            let record = records.get(&h.name);
            let step = decide::decide(
                h,
                record,
                endpoints,
                self.settings.grace,
                now,
                // `--once` is asked for now, by hand: no grace (it refuses --webhook-grace).
                if self.services.once() {
                    None
                } else {
                    decide::added_ago(record, wall_now, remembered)
                },
            );
            match step {
                Step::Wait(w) => {
                    look.wait = Some(look.wait.map_or(w, |o: Duration| o.min(w)));
                    self.nothing_to_say(key, &uid, &h.name);
                }
                Step::Nothing => self.nothing_to_say(key, &uid, &h.name),
                _ => steps.push((h.index, step)),
            }
        }
        let stale = records.keys().any(|n| !hooks.iter().any(|h| &h.name == n));
        if steps.is_empty() && !stale {
            return Ok(look);
        }
        let (steps, contradicted) = self.confirm(key, steps, &hooks).await?;
        if contradicted {
            // The watch lags behind the server: it will catch up and wake this
            // configuration; look again after the grace at the latest.
            let grace = self.settings.grace;
            look.wait = Some(look.wait.map_or(grace, |w| w.min(grace)));
        }
        if steps.is_empty() && !stale {
            return Ok(look);
        }
        if self.settings.dry_run {
            self.say_dry_run(key, &uid, &hooks, &steps);
            for (_, step) in &steps {
                match step {
                    Step::Exempt { .. } => look.would_exempt += 1,
                    Step::Restore { .. } => look.would_restore += 1,
                    Step::Nothing | Step::Wait(_) => {}
                }
            }
            return Ok(look);
        }
        let Some(patch) =
            patch::patch(&obj.metadata, &hooks, &steps, &Timestamp::now().to_string())
        else {
            return Ok(look);
        };
        if !self.send(&ar, &obj.name_any(), &patch).await? {
            return Ok(Look::default());
        }
        for (index, step) in &steps {
            let Some(h) = hooks.iter().find(|h| h.index == *index) else {
                continue;
            };
            match step {
                Step::Exempt { .. } => look.exempted += 1,
                Step::Restore { .. } => look.restored += 1,
                Step::Nothing | Step::Wait(_) => {}
            }
            self.done(&ar, &obj, key, &uid, h, step, records.contains_key(&h.name));
        }
        Ok(look)
    }

    /// A watch can lag behind the server (a cut stream, a relist under errors), and one
    /// replica's stale view would undo what another just did: exempt again a webhook that
    /// was restored because it is up. So before a configuration is changed, the endpoints
    /// of each service a step is about are read afresh (one LIST of its EndpointSlices),
    /// and a step that read contradicts is dropped (`true`: one was). `--once` decides on a
    /// fresh read already.
    async fn confirm(
        &self,
        key: &str,
        steps: Vec<(usize, Step)>,
        hooks: &[Hook],
    ) -> Result<(Vec<(usize, Step)>, bool), Failure> {
        if self.services.once() {
            return Ok((steps, false));
        }
        let mut fresh: HashMap<Service, bool> = HashMap::new();
        let mut kept = Vec::new();
        let mut contradicted = false;
        for (index, step) in steps {
            // A restore because the webhook no longer fails closed on a service, or now
            // calls one in another namespace (no `up_for`), needs no endpoints.
            if matches!(step, Step::Restore { up_for: None, .. }) {
                kept.push((index, step));
                continue;
            }
            let Some(service) = hooks
                .iter()
                .find(|h| h.index == index)
                .and_then(Hook::guarded_service)
            else {
                kept.push((index, step));
                continue;
            };
            let ready = match fresh.get(service) {
                Some(ready) => *ready,
                None => {
                    let ready = self.ready_now(service).await?;
                    fresh.insert(service.clone(), ready);
                    ready
                }
            };
            let agrees = match step {
                Step::Exempt { .. } => !ready,
                Step::Restore { .. } => ready,
                Step::Nothing | Step::Wait(_) => true,
            };
            if agrees {
                kept.push((index, step));
            } else {
                contradicted = true;
                tracing::debug!(config = %key, service = %service, ready,
                                "the endpoints as read now contradict the watch's view; not acting yet");
            }
        }
        Ok((kept, contradicted))
    }

    /// Whether `service` has a ready endpoint, read now from the server.
    async fn ready_now(&self, service: &Service) -> Result<bool, Failure> {
        let api: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
            Api::namespaced(self.client.clone(), &service.namespace);
        let params = kube::api::ListParams::default().labels(&endpoints::selector(service));
        let slices = api.list(&params).await.map_err(Failure::from)?;
        Ok(endpoints::any_ready(&slices.items))
    }

    /// Logs, counts and writes the Event for a step the server accepted.
    #[allow(clippy::too_many_arguments)]
    fn done(
        &self,
        ar: &ApiResource,
        obj: &DynamicObject,
        key: &str,
        uid: &str,
        h: &Hook,
        step: &Step,
        had_record: bool,
    ) {
        let service = h
            .service
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        let node = &self.settings.node;
        match step {
            Step::Exempt {
                namespace,
                down_for,
            } => {
                let now = self.origin.elapsed();
                let reverts = {
                    let mut added = lock(&self.added);
                    let entry = added
                        .entry((uid.to_string(), h.name.clone()))
                        .or_insert(Added {
                            at: now,
                            reverts: 0,
                        });
                    // Added before (by this process, or by any, says the record), and
                    // gone again while the service stayed down: someone took it away.
                    if had_record || entry.at != now {
                        entry.reverts += 1;
                    }
                    entry.at = now;
                    entry.reverts
                };
                if reverts > 0 {
                    warn!(config = %key, webhook = %h.name, namespace = %namespace, reverts,
                          "the exemption was removed by someone else while the service was still down \
                           (a GitOps sync or a Helm upgrade?): added again, at most once per --webhook-grace");
                }
                // `--once` saw the endpoints once: it cannot say for how long they were gone.
                let down_for = if self.services.once() {
                    "unknown".to_string()
                } else {
                    text::duration(*down_for)
                };
                // Counted before it is said: whoever reads the line finds it in the metrics.
                self.metrics.webhook_exemptions.inc();
                info!(config = %key, webhook = %h.name, namespace = %namespace, service = %service,
                      %down_for, "exempted the webhook's own namespace: its service has no ready endpoint");
                let how_long = if self.services.once() {
                    "had no ready endpoint when `metainit --once` looked".to_string()
                } else {
                    format!(
                        "has had no ready endpoint for {down_for} (--webhook-grace {})",
                        text::duration(self.settings.grace)
                    )
                };
                let message = format!(
                    "metainit exempted namespace {namespace} from webhook {}: its service {service} {how_long}; every other namespace is still intercepted",
                    h.name,
                );
                self.events.send(
                    events::webhook_event(
                        ar,
                        &obj.metadata,
                        events::Reason::WebhookSelfExempted,
                        message,
                        node,
                    ),
                    key.to_string(),
                );
            }
            Step::Restore { record, up_for } => {
                lock(&self.added).remove(&(uid.to_string(), h.name.clone()));
                let namespace = record
                    .expression
                    .pointer("/values/0")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let gone = h
                    .service
                    .as_ref()
                    .and_then(|s| self.services.outage(s))
                    .map(text::duration);
                let why = match (up_for, &gone) {
                    (Some(_), _) if self.services.once() => {
                        format!(
                            "its service {service} had a ready endpoint when `metainit --once` looked"
                        )
                    }
                    (Some(up), Some(gone)) => format!(
                        "its service {service} has had ready endpoints for {} after {gone} without",
                        text::duration(*up)
                    ),
                    (Some(up), None) => format!(
                        "its service {service} has had ready endpoints for {}",
                        text::duration(*up)
                    ),
                    (None, _) => match h.guarded_service() {
                        Some(now) => format!(
                            "the webhook now calls {now}, in another namespace: that namespace's exemption, if its service is down, is decided on its own"
                        ),
                        None => "the webhook no longer fails closed on a service".to_string(),
                    },
                };
                self.metrics.webhook_restorations.inc();
                info!(config = %key, webhook = %h.name, namespace = %namespace, service = %service,
                      endpoints_gone_for = gone.as_deref().unwrap_or("-"), "restored the webhook's namespace selector: {why}");
                let message = format!(
                    "metainit restored webhook {} for namespace {namespace}: {why}",
                    h.name
                );
                self.events.send(
                    events::webhook_event(
                        ar,
                        &obj.metadata,
                        events::Reason::WebhookRestored,
                        message,
                        node,
                    ),
                    key.to_string(),
                );
            }
            Step::Nothing | Step::Wait(_) => {}
        }
    }

    /// A webhook with nothing to do now: what a dry run said of it is over, and the next
    /// exemption or restoration it would make is said again.
    fn nothing_to_say(&self, key: &str, uid: &str, hook: &str) {
        if self.settings.dry_run {
            let mut said = lock(&self.said);
            said.remove(&dry_run_line(key, uid, hook, "exempt"));
            said.remove(&dry_run_line(key, uid, hook, "restore"));
        }
    }

    fn say_dry_run(&self, key: &str, uid: &str, hooks: &[Hook], steps: &[(usize, Step)]) {
        for (index, step) in steps {
            let Some(h) = hooks.iter().find(|h| h.index == *index) else {
                continue;
            };
            let service = h
                .service
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            match step {
                Step::Exempt {
                    namespace,
                    down_for,
                } => {
                    if lock(&self.said).insert(dry_run_line(key, uid, &h.name, "exempt")) {
                        info!(config = %key, webhook = %h.name, namespace = %namespace, service = %service,
                              down_for = %text::duration(*down_for), "dry run: would exempt the webhook's own namespace");
                    }
                }
                Step::Restore { .. } => {
                    if lock(&self.said).insert(dry_run_line(key, uid, &h.name, "restore")) {
                        info!(config = %key, webhook = %h.name, service = %service,
                              "dry run: would restore the webhook's namespace selector");
                    }
                }
                Step::Nothing | Step::Wait(_) => {}
            }
        }
    }

    /// Sends the JSON patch: `true` once accepted, `false` if the configuration is gone.
    async fn send(&self, ar: &ApiResource, name: &str, patch: &Value) -> Result<bool, Failure> {
        let url = format!("{}/{name}", DynamicObject::url_path(ar, None));
        let body =
            serde_json::to_vec(patch).map_err(|e| Failure::from(kube::Error::SerdeError(e)))?;
        let request = clear::patch_request(url, body)?;
        clear::outcome(self.client.request::<IgnoredAny>(request).await)
    }

    /// Logs a failed PATCH: `retry_in` is `None` when this was the last try (`--once`).
    fn report(&self, key: &str, failure: &Failure, failures: u32, retry_in: Option<Duration>) {
        let Counted {
            error,
            code,
            reason,
            ..
        } = clear::count(&self.metrics, failure);
        let hint = if failure.class == failure::Class::Forbidden {
            Some(RBAC_HINT)
        } else {
            None
        };
        // A race (two replicas, a GitOps sync) is looked at again on the newest state:
        // worth a line only when it keeps happening.
        let Some(retry_in) = retry_in else {
            warn!(config = %key, %error, status.code = code, status.reason = reason.map(tracing::field::display),
                  failures, hint, "could not patch the webhook configuration: giving up");
            return;
        };
        if failure.class == failure::Class::Race && failures < 5 {
            tracing::debug!(config = %key, %error, failures, retry_in = ?retry_in, "configuration changed meanwhile; looking again");
            return;
        }
        warn!(config = %key, %error, status.code = code, status.reason = reason.map(tracing::field::display),
              failures, retry_in = ?retry_in, hint, "cannot patch the webhook configuration yet; retrying");
    }
}

/// What to do about a 403 on a webhook configuration.
pub const RBAC_HINT: &str = "grant patch on mutatingwebhookconfigurations and validatingwebhookconfigurations, and list and watch on endpointslices, to metainit's user: manifests/rbac-webhooks.yaml";

#[cfg(test)]
mod fixtures;
