//! `--once --webhooks`: one look, no watch. The labelled configurations are listed, and
//! the EndpointSlices of every service they name; then each configuration is decided on
//! the endpoints as they are now, with no grace to wait for (an operator who runs
//! `--once` has decided): a webhook that fails closed on a service with no ready endpoint
//! gets its service's namespace exempted, and one exempted by metainit whose service has a
//! ready endpoint again is restored. A PATCH that fails is tried again on the newest state
//! (a GET) until `--timeout` is spent, as `--once` does for objects; a PATCH or GET in
//! flight at its end is cut there.

use std::{collections::HashMap, sync::Arc};

use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject},
    runtime::{
        reflector::{Store, store::Writer},
        watcher,
    },
};
use tokio::time::Instant;
use tracing::info;

use super::{ConfigKind, Engine, Look, Settings, Source, configs, decide, key_of};
use crate::{
    Result, budget::Budget, events::Sink, failure::Failure, metrics::Metrics, retry,
    shutdown::Shutdown,
};

/// Tallies of one `--once` pass over the webhook configurations.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    pub exempted: usize,
    pub restored: usize,
    pub would_exempt: usize,
    pub would_restore: usize,
    /// The configurations that could not be patched (a line each was logged).
    pub failed: usize,
    /// Not looked at: a signal came first.
    pub not_tried: usize,
    /// A signal came before the configurations were listed.
    pub unlisted: bool,
}

impl Tally {
    fn add(&mut self, look: Look) {
        self.exempted += look.exempted;
        self.restored += look.restored;
        self.would_exempt += look.would_exempt;
        self.would_restore += look.would_restore;
    }

    pub fn all_done(&self) -> bool {
        self.failed == 0 && self.not_tried == 0 && !self.unlisted
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "webhooks: exempted {}, restored {}, would exempt {}, would restore {}, failed {}",
            self.exempted, self.restored, self.would_exempt, self.would_restore, self.failed
        )?;
        crate::retry::write_not_tried(f, self.not_tried)?;
        if self.unlisted {
            write!(f, ", not listed (interrupted before)")?;
        }
        Ok(())
    }
}

type Writers = Vec<(ApiResource, Api<DynamicObject>, Writer<DynamicObject>)>;

/// One pass; `Err` only when the configurations or endpoints cannot be listed. A signal
/// stops the listing at once, and between configurations after that (a PATCH in flight
/// is let finish).
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    events: Arc<Sink>,
    url: &str,
    budget: Budget,
    stop: Shutdown,
) -> Result<Tally> {
    let (stores, mut writers, keys, listed) = tokio::select! {
        state = list(&client, &settings.label_key, url, budget) => state?,
        _ = stop.requested() => return Ok(Tally { unlisted: true, ..Tally::default() }),
    };
    info!(configurations = keys.len(), services = listed.len(), label_key = %settings.label_key,
          "webhooks: deciding on the endpoints as they are now (--once)");
    let engine = Engine {
        client,
        settings,
        metrics,
        events,
        stores,
        services: Source::Once(listed),
        origin: Instant::now(),
        added: Default::default(),
        failures: Default::default(),
        said: Default::default(),
    };
    let mut tally = Tally::default();
    for (i, key) in keys.iter().enumerate() {
        if stop.is_requested() {
            tally.not_tried = keys.len() - i;
            break;
        }
        match settle(&engine, &mut writers, key, budget, &stop).await {
            Ok(look) => tally.add(look),
            Err(_) => tally.failed += 1,
        }
    }
    Ok(tally)
}

/// The labelled configurations (a store each, and their keys) and whether each service
/// they name has a ready endpoint.
#[allow(clippy::type_complexity)]
async fn list(
    client: &Client,
    label_key: &str,
    url: &str,
    budget: Budget,
) -> Result<(
    Vec<(ApiResource, Store<DynamicObject>)>,
    Writers,
    Vec<String>,
    HashMap<decide::Service, bool>,
)> {
    let mut stores = Vec::new();
    let mut writers = Vec::new();
    let mut keys = Vec::new();
    for kind in ConfigKind::ALL {
        let items = configs::list_labelled(client, kind, label_key, url, Some(budget)).await?;
        let ar = kind.resource();
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let mut writer: Writer<DynamicObject> = Writer::new(ar.clone());
        writer.apply_watcher_event(&watcher::Event::Init);
        for obj in items {
            keys.push(key_of(&ar, &obj.metadata.name.clone().unwrap_or_default()));
            writer.apply_watcher_event(&watcher::Event::InitApply(obj));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        stores.push((ar.clone(), writer.as_reader()));
        writers.push((ar, api, writer));
    }
    let configs: Vec<_> = stores.iter().flat_map(|(_, s)| s.state()).collect();
    let mut listed = HashMap::new();
    for s in decide::guarded_services(configs.iter().map(|o| &o.data)) {
        let ready = super::endpoints::ready_now(client, &s, url, Some(budget)).await?;
        listed.insert(s, ready > 0);
    }
    Ok((stores, writers, keys, listed))
}

/// Looks at one configuration until it is done, `budget` is spent (a look in flight is cut
/// at its end) or a signal comes; after a failure, on its newest state.
async fn settle(
    engine: &Engine,
    writers: &mut Writers,
    key: &str,
    budget: Budget,
    stop: &Shutdown,
) -> std::result::Result<Look, Failure> {
    let mut again = false;
    let attempt = async || {
        if again {
            newest(engine, writers, key).await;
        }
        again = true;
        engine.reconcile(key).await
    };
    retry::until_done(budget, stop, attempt, |f, failures, wait| {
        engine.report(key, f, failures, wait)
    })
    .await
}

/// Reads the configuration's newest state into its store: what the next look decides on.
async fn newest(engine: &Engine, writers: &mut Writers, key: &str) {
    // Every key is `plural/name` of a kind with a writer (`list`).
    let Some((plural, name)) = key.split_once('/') else {
        return;
    };
    let Some((_, api, writer)) = writers.iter_mut().find(|(ar, _, _)| ar.plural == plural) else {
        return;
    };
    match api.get_opt(name).await {
        Ok(Some(fresh)) if fresh.labels().contains_key(&engine.settings.label_key) => {
            writer.apply_watcher_event(&watcher::Event::Apply(fresh))
        }
        // Deleted, or no longer labelled: no longer metainit's to touch.
        Ok(Some(fresh)) => writer.apply_watcher_event(&watcher::Event::Delete(fresh)),
        Ok(None) => {
            if let Some(gone) = engine.find(key).and_then(|(_, o)| o) {
                writer.apply_watcher_event(&watcher::Event::Delete((*gone).clone()));
            }
        }
        // Looked at again on the state known; the next failure counts.
        Err(_) => {}
    }
}
