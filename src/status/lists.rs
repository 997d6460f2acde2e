//! What `status` lists: every resource the server lists (in initializers mode) and every
//! object of one, page by page, each page with its own `--timeout`, each object with who
//! added its gates (`Listed`).

use std::{borrow::Cow, time::Duration};

use kube::{
    Api, Client, Resource,
    api::{ApiResource, ListParams},
    core::{DynamicResourceScope, ObjectMeta},
};
use serde::{Deserialize, Deserializer, de::Error as _};
use serde_json::value::RawValue;

use crate::{
    Result,
    budget::Budget,
    discovery::{self, Target},
    list::Bound,
    object::{Held, Kind},
};

/// Every resource the server lists (legacy initializers can be configured on any of them).
pub(super) async fn every_listable_resource(
    client: &Client,
    url: &str,
    timeout: Duration,
) -> Result<Vec<Target>> {
    let fresh = || Some(Budget::from_now(timeout));
    let mut lists = Vec::new();
    let core = discovery::with_retries(client, "discovery", url, fresh(), || {
        client.list_core_api_resources("v1")
    })
    .await?;
    lists.push(("v1".to_string(), core));
    let groups = discovery::with_retries(client, "discovery", url, fresh(), || {
        client.list_api_groups()
    })
    .await?;
    for g in groups.groups {
        let Some(gv) = g
            .preferred_version
            .or_else(|| g.versions.into_iter().next())
        else {
            continue;
        };
        let gv = gv.group_version;
        let list = discovery::with_retries(client, "discovery", url, fresh(), || {
            client.list_api_group_resources(&gv)
        })
        .await?;
        lists.push((gv, list));
    }
    let mut targets = Vec::new();
    for (gv, list) in lists {
        let (group, version) = match gv.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), gv.clone()),
        };
        for r in list.resources {
            if r.name.contains('/') || !r.verbs.iter().any(|v| v == "list") {
                continue;
            }
            targets.push(Target {
                name: if group.is_empty() {
                    r.name.clone()
                } else {
                    format!("{}.{group}", r.name)
                },
                resource: Kind::from(ApiResource {
                    group: group.clone(),
                    version: version.clone(),
                    api_version: gv.clone(),
                    kind: r.kind,
                    plural: r.name,
                }),
                namespaced: r.namespaced,
            });
        }
    }
    Ok(targets)
}

pub(super) async fn list_all(
    client: &Client,
    target: &Target,
    namespace: Option<&str>,
    url: &str,
    timeout: Duration,
) -> Result<Vec<Listed>> {
    if namespace.is_some() && !target.namespaced {
        return Ok(Vec::new());
    }
    let api: Api<Listed> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &target.resource),
        None => Api::all_with(client.clone(), &target.resource),
    };
    crate::list::all(
        client,
        &api,
        ListParams::default(),
        url,
        Bound::EachPage(timeout),
    )
    .await
}

/// An object as `status` lists it: the engine's slim `Held`, and who added each of its
/// gates (`blocker::kept::gate_writers`, from the `managedFields` the engine skips).
#[derive(Clone, Debug)]
pub(super) struct Listed {
    pub held: Held,
    pub writers: Vec<(String, String)>,
}

impl<'de> Deserialize<'de> for Listed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        // The text once, read twice: the slim view, then the managed fields alone.
        let raw = Box::<RawValue>::deserialize(d)?;
        let held: Held = serde_json::from_str(raw.get()).map_err(D::Error::custom)?;
        let writers = match held.has_gates() {
            true => crate::blocker::kept::gate_writers(raw.get()),
            false => Vec::new(),
        };
        Ok(Listed { held, writers })
    }
}

impl Resource for Listed {
    type DynamicType = Kind;
    type Scope = DynamicResourceScope;

    fn group(dt: &Kind) -> Cow<'_, str> {
        Held::group(dt)
    }

    fn version(dt: &Kind) -> Cow<'_, str> {
        Held::version(dt)
    }

    fn kind(dt: &Kind) -> Cow<'_, str> {
        Held::kind(dt)
    }

    fn api_version(dt: &Kind) -> Cow<'_, str> {
        Held::api_version(dt)
    }

    fn plural(dt: &Kind) -> Cow<'_, str> {
        Held::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.held.metadata.meta
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.held.metadata.meta
    }
}
