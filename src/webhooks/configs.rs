//! The labelled webhook configurations: their two kinds, and the watch of each kind that
//! tells the engine which configurations to look at.

use std::collections::HashSet;

use futures::{Stream, StreamExt};
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DynamicObject},
    runtime::{reflector::store::Writer, watcher},
};
use tracing::{info, warn};

use super::{
    key_of,
    record::{ANNOTATION, records_of},
};
use crate::watch;

pub const GROUP: &str = "admissionregistration.k8s.io";

/// The two kinds of webhook configuration (admissionregistration.k8s.io/v1, cluster-scoped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigKind {
    Mutating,
    Validating,
}

impl ConfigKind {
    pub const ALL: [ConfigKind; 2] = [ConfigKind::Mutating, ConfigKind::Validating];

    /// `mutating` or `validating`, as `status` shows it.
    pub fn label(self) -> &'static str {
        match self {
            ConfigKind::Mutating => "mutating",
            ConfigKind::Validating => "validating",
        }
    }

    pub fn resource(self) -> ApiResource {
        let (kind, plural) = match self {
            ConfigKind::Mutating => (
                "MutatingWebhookConfiguration",
                "mutatingwebhookconfigurations",
            ),
            ConfigKind::Validating => (
                "ValidatingWebhookConfiguration",
                "validatingwebhookconfigurations",
            ),
        };
        ApiResource {
            group: GROUP.into(),
            version: "v1".into(),
            api_version: format!("{GROUP}/v1"),
            kind: kind.into(),
            plural: plural.into(),
        }
    }
}

/// The resources of the two kinds of webhook configuration.
pub fn kinds() -> [ApiResource; 2] {
    ConfigKind::ALL.map(ConfigKind::resource)
}

/// The labelled configurations of one kind, by one LIST retried as start-up requests are
/// (for `--once` and `status`; the daemon watches them).
pub async fn list_labelled(
    client: &kube::Client,
    kind: ConfigKind,
    label_key: &str,
    url: &str,
    budget: Option<crate::budget::Budget>,
) -> crate::Result<Vec<DynamicObject>> {
    let ar = kind.resource();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let params = kube::api::ListParams::default().labels(label_key);
    let what = format!("LIST {}", ar.plural);
    let list =
        crate::discovery::with_retries(client, &what, url, budget, || api.list(&params)).await?;
    Ok(list.items)
}

/// The keys of configurations to look at, as a watch yields them.
pub(super) type Keys = std::pin::Pin<Box<dyn Stream<Item = String> + Send>>;

/// The keys of the labelled configurations of one kind, as the watch sees them change;
/// the store behind `writer` is kept up to date first. After a relist, every key known
/// before is yielded too, so a configuration deleted meanwhile lets go of its services.
pub(super) fn follow(
    api: Api<DynamicObject>,
    ar: ApiResource,
    label_key: String,
    writer: Writer<DynamicObject>,
    spec: watch::Spec,
) -> Keys {
    let state = Configs {
        events: watch::Events::new(api, spec),
        ar,
        label_key,
        writer,
        known: HashSet::new(),
        listed: HashSet::new(),
    };
    futures::stream::unfold(state, |mut st| async move {
        let keys = st.next().await;
        Some((futures::stream::iter(keys), st))
    })
    .flatten()
    .boxed()
}

/// The watch of one kind of configuration, and the keys it knows.
struct Configs {
    events: watch::Events<DynamicObject>,
    ar: ApiResource,
    label_key: String,
    writer: Writer<DynamicObject>,
    known: HashSet<String>,
    listed: HashSet<String>,
}

impl Configs {
    /// The keys the next event names (none for most events of a list).
    async fn next(&mut self) -> Vec<String> {
        let event = self.events.next().await;
        self.writer.apply_watcher_event(&event);
        match event {
            watcher::Event::Init => {
                self.listed.clear();
                Vec::new()
            }
            watcher::Event::InitApply(o) => {
                self.listed.insert(key_of(&self.ar, &o.name_any()));
                Vec::new()
            }
            watcher::Event::InitDone => {
                info!(resource = %self.ar.plural, labelled = self.listed.len(), label_key = %self.label_key, "listed; watching");
                let all: Vec<String> = self.known.union(&self.listed).cloned().collect();
                self.known = std::mem::take(&mut self.listed);
                all
            }
            watcher::Event::Apply(o) => {
                let k = key_of(&self.ar, &o.name_any());
                self.known.insert(k.clone());
                vec![k]
            }
            watcher::Event::Delete(o) => {
                let k = key_of(&self.ar, &o.name_any());
                if records_of(&o).is_ok_and(|r| !r.is_empty()) {
                    warn!(config = %k, annotation = ANNOTATION,
                          "a configuration metainit had exempted was deleted or lost the label key: \
                           metainit no longer sees it, and its exemption stays until removed by hand");
                }
                self.known.remove(&k);
                vec![k]
            }
        }
    }
}
