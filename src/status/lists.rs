//! What `status` lists: every resource the server lists (in initializers mode) and every
//! object of one, page by page, each page with its own `--timeout`.

use std::time::Duration;

use kube::{
    Client,
    api::{ApiResource, ListParams},
};

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
) -> Result<Vec<Held>> {
    if namespace.is_some() && !target.namespaced {
        return Ok(Vec::new());
    }
    let api = target.api(client, namespace);
    crate::list::all(
        client,
        &api,
        ListParams::default(),
        url,
        Bound::EachPage(timeout),
    )
    .await
}
