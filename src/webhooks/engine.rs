//! One look at one configuration, the same for the daemon and `--once`: decide each
//! webhook on what is known of its service's endpoints, check the steps against a fresh
//! read, send the one patch, and say when to look again.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;
use kube::{
    Client, Resource, ResourceExt,
    api::{ApiResource, DynamicObject},
    runtime::reflector::{ObjectRef, Store},
};
use serde_json::Value;
use tokio::time::Instant;
use tracing::{info, warn};

use super::{
    LOG, Settings,
    decide::{self, Endpoints, Step},
    endpoints::{self, Source},
    hook::{self, Hook, Service},
    nudge, patch,
    record::{Record, records_of},
};
use crate::{
    clear, events::Sink, failure::Failure, metrics::Metrics, queue::Queue, validation::later,
};

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

impl Look {
    /// Look again after `wait` at the latest.
    fn wait_at_most(&mut self, wait: Duration) {
        self.wait = Some(self.wait.map_or(wait, |w| w.min(wait)));
    }

    /// Counts a step: made, or in a dry run, one that would be.
    fn count(&mut self, step: &Step, dry_run: bool) {
        match (step, dry_run) {
            (Step::Exempt { .. }, false) => self.exempted += 1,
            (Step::Restore { .. }, false) => self.restored += 1,
            (Step::Exempt { .. }, true) => self.would_exempt += 1,
            (Step::Restore { .. }, true) => self.would_restore += 1,
            (Step::Nothing | Step::Wait(_), _) => {}
        }
    }
}

/// What this process added, per configuration uid and webhook: when (for the once-per-grace
/// rule) and how many times someone else took it away again.
#[derive(Clone, Copy)]
pub(super) struct Added {
    pub(super) at: Duration,
    pub(super) reverts: u32,
}

/// The feature's worker: the configurations' stores, where the endpoints' state comes
/// from, and what this process remembers between looks.
pub(super) struct Engine {
    pub(super) client: Client,
    pub(super) settings: Settings,
    pub(super) metrics: Arc<Metrics>,
    pub(super) events: Arc<Sink>,
    pub(super) stores: Vec<(ApiResource, Store<DynamicObject>)>,
    pub(super) services: Source,
    pub(super) origin: Instant,
    pub(super) added: Mutex<HashMap<(String, String), Added>>,
    pub(super) failures: Mutex<HashMap<String, u32>>,
    /// Lines already said, so each is logged once per state: `KEY/...`, forgotten when
    /// the state ends or the configuration goes.
    pub(super) said: Mutex<HashSet<String>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A configuration as one look sees it.
pub(super) struct Seen<'a> {
    pub(super) key: &'a str,
    pub(super) ar: ApiResource,
    pub(super) obj: Arc<DynamicObject>,
    pub(super) uid: String,
    pub(super) hooks: Vec<Hook>,
    /// What the annotation says metainit added, by webhook name.
    pub(super) records: BTreeMap<String, Record>,
}

impl Seen<'_> {
    pub(super) fn hook(&self, index: usize) -> Option<&Hook> {
        self.hooks.iter().find(|h| h.index == index)
    }
}

impl Engine {
    pub(super) async fn work(self: Arc<Self>, queue: &Queue<String>, key: String) {
        match self.reconcile(&key).await {
            Ok(look) => {
                lock(&self.failures).remove(&key);
                if let Some(wait) = look.wait {
                    queue.add_at(key, later(Instant::now(), wait));
                }
            }
            Err(f) => {
                let failures = {
                    let mut all = lock(&self.failures);
                    let n = all.entry(key.clone()).or_insert(0);
                    *n = n.saturating_add(1);
                    *n
                };
                let backoff = crate::retry::PER_OBJECT.after(failures, &f.error);
                let wait = queue.add_after(key.clone(), backoff);
                self.report(&key, &f, failures, Some(wait));
            }
        }
    }

    pub(super) fn find(&self, key: &str) -> Option<(ApiResource, Option<Arc<DynamicObject>>)> {
        let (plural, name) = key.split_once('/')?;
        let (ar, store) = self.stores.iter().find(|(ar, _)| ar.plural == plural)?;
        Some((
            ar.clone(),
            store.get(&ObjectRef::new_with(name, ar.clone())),
        ))
    }

    /// One look at a configuration: what it did, and when to look again.
    pub(super) async fn reconcile(&self, key: &str) -> Result<Look, Failure> {
        let mut look = Look::default();
        let Some(seen) = self.see(key) else {
            return Ok(look);
        };
        self.services
            .track(key, &hook::guarded_services([&seen.obj.data]));
        self.say_url_hooks(&seen);
        let steps = self.steps(&seen, &mut look);
        let stale = seen
            .records
            .keys()
            .any(|n| !seen.hooks.iter().any(|h| &h.name == n));
        if steps.is_empty() && !stale {
            return Ok(look);
        }
        let (steps, contradicted) = self.confirm(&seen, steps).await?;
        if contradicted {
            // The watch lags behind the server: it will catch up and wake this
            // configuration; look again after the grace at the latest.
            look.wait_at_most(self.settings.grace);
        }
        if steps.is_empty() && !stale {
            return Ok(look);
        }
        if self.settings.dry_run {
            self.say_dry_run(&seen, &steps);
            for (_, step) in &steps {
                look.count(step, true);
            }
            return Ok(look);
        }
        self.apply(&seen, &steps, look).await
    }

    /// The configuration behind `key` with its records, if there is one to look at: one
    /// deleted or no longer labelled lets go of its services and what was said of it, and
    /// one whose record is not metainit's is left alone.
    fn see<'a>(&self, key: &'a str) -> Option<Seen<'a>> {
        let (ar, obj) = self.find(key)?;
        let Some(obj) = obj else {
            self.services.track(key, &[]);
            let prefix = format!("{key}/");
            lock(&self.said).retain(|s| !s.starts_with(&prefix));
            return None;
        };
        let hooks = hook::hooks(&obj.data);
        let records = match records_of(&obj) {
            Ok(r) => {
                lock(&self.said).remove(&format!("{key}/unreadable"));
                r
            }
            Err(why) => {
                if lock(&self.said).insert(format!("{key}/unreadable")) {
                    warn!(target: LOG, config = %key, %why, "left alone");
                }
                return None;
            }
        };
        let uid = obj.uid().unwrap_or_default();
        Some(Seen {
            key,
            ar,
            obj,
            uid,
            hooks,
            records,
        })
    }

    /// Says once of each webhook that fails closed on a url that it is left alone.
    fn say_url_hooks(&self, seen: &Seen) {
        for h in seen
            .hooks
            .iter()
            .filter(|h| h.fails_closed && h.service.is_none())
        {
            if lock(&self.said).insert(format!("{}/{}/url", seen.key, h.name)) {
                info!(target: LOG, config = %seen.key, webhook = %h.name,
                      "a webhook called by url, not through a service: metainit cannot see whether it is up, and leaves it alone");
            }
        }
    }

    /// The decision on each webhook (by index) that has something to do now; a grace
    /// period still running goes to `look`.
    fn steps(&self, seen: &Seen, look: &mut Look) -> Vec<(usize, Step)> {
        let now = self.origin.elapsed();
        let wall_now = Timestamp::now();
        let mut steps = Vec::new();
        for h in &seen.hooks {
            let endpoints = h
                .guarded_service()
                .map_or(Endpoints::Unknown, |s| self.services.endpoints(s));
            let remembered = lock(&self.added)
                .get(&(seen.uid.clone(), h.name.clone()))
                .map(|a| now.saturating_sub(a.at));
            let record = seen.records.get(&h.name);
            // `--once` is asked for now, by hand: no grace (it refuses --webhook-grace).
            let added_ago = if self.services.once() {
                None
            } else {
                decide::added_ago(record, wall_now, remembered)
            };
            let step = decide::decide(h, record, endpoints, self.settings.grace, now, added_ago);
            match step {
                Step::Wait(w) => {
                    look.wait_at_most(w);
                    self.nothing_to_say(seen.key, &seen.uid, &h.name);
                }
                Step::Nothing => self.nothing_to_say(seen.key, &seen.uid, &h.name),
                _ => steps.push((h.index, step)),
            }
        }
        steps
    }

    /// A watch can lag behind the server (a cut stream, a relist under errors), and one
    /// replica's stale view would undo what another just did: exempt again a webhook that
    /// was restored because it is up. So before a configuration is changed, the endpoints
    /// of each service a step is about are read afresh (one LIST of its EndpointSlices),
    /// and a step that read contradicts is dropped (`true`: one was). `--once` decides on a
    /// fresh read already.
    async fn confirm(
        &self,
        seen: &Seen<'_>,
        steps: Vec<(usize, Step)>,
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
            let Some(service) = seen.hook(index).and_then(Hook::guarded_service) else {
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
                tracing::debug!(target: LOG, config = %seen.key, service = %service, ready,
                                "the endpoints as read now contradict the watch's view; not acting yet");
            }
        }
        Ok((kept, contradicted))
    }

    /// Whether `service` has a ready endpoint, read now from the server.
    async fn ready_now(&self, service: &Service) -> Result<bool, Failure> {
        let slices = endpoints::slices(&self.client, service)
            .await
            .map_err(Failure::from)?;
        Ok(endpoints::any_ready(&slices))
    }

    /// Sends the one patch that makes `steps`, and says what each did.
    async fn apply(
        &self,
        seen: &Seen<'_>,
        steps: &[(usize, Step)],
        mut look: Look,
    ) -> Result<Look, Failure> {
        let now = Timestamp::now().to_string();
        let Some(patch) = patch::patch(&seen.obj.metadata, &seen.hooks, steps, &now) else {
            return Ok(look);
        };
        let Some(answer) = self.send(&seen.ar, &seen.obj.name_any(), &patch).await? else {
            return Ok(Look::default());
        };
        // Success only when the configuration shows it.
        if !patch::shows(&hook::hooks(&answer.data), &seen.hooks, steps) {
            let names = steps.iter().filter_map(|(i, _)| seen.hook(*i));
            let names = names.map(|h| h.name.clone()).collect();
            return Err(patch::kept(names, &answer));
        }
        for (index, step) in steps {
            let Some(h) = seen.hook(*index) else {
                continue;
            };
            look.count(step, false);
            let slipped = match step {
                Step::Restore { record, .. } => Some(self.slipped(record).await),
                _ => None,
            };
            self.done(seen, h, step, slipped.as_ref());
            if let Step::Exempt { namespace, .. } = step {
                self.wake_later(namespace, &h.name);
            }
        }
        Ok(look)
    }

    /// The controllers `webhook` refused in `namespace`, woken once the API server has had
    /// time to take the exemption in (2 s, then again 15 s later for one that was woken too
    /// early and refused once more: nudge.rs). The daemon only: `--once` exits first.
    fn wake_later(&self, namespace: &str, webhook: &str) {
        if self.services.once() {
            return;
        }
        let (client, namespace, webhook) = (
            self.client.clone(),
            namespace.to_string(),
            webhook.to_string(),
        );
        tokio::spawn(async move {
            for wait in [Duration::from_secs(2), Duration::from_secs(15)] {
                tokio::time::sleep(wait).await;
                nudge::nudge(&client, &namespace, &webhook).await;
            }
        });
    }

    /// Sends the JSON patch: the configuration as stored once accepted, `None` if it is gone.
    async fn send(
        &self,
        ar: &ApiResource,
        name: &str,
        patch: &Value,
    ) -> Result<Option<DynamicObject>, Failure> {
        let url = format!("{}/{name}", DynamicObject::url_path(ar, None));
        let body =
            serde_json::to_vec(patch).map_err(|e| Failure::from(kube::Error::SerdeError(e)))?;
        let request = clear::patch_request(url, body)?;
        clear::outcome(self.client.request::<DynamicObject>(request).await)
    }
}
