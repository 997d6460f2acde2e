//! What the forecast reads, by one paged LIST of each kind (read-only): both kinds of
//! webhook configuration, namespaces, services, and the pod templates of Deployments,
//! StatefulSets, DaemonSets, Jobs, ReplicaSets and pods that no controller owns
//! (manifests/rbac-status.yaml grants exactly these), and the EndpointSlices of the
//! services fail-closed webhooks call (which are down now).

use std::time::Duration;

use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, ListParams},
};
use serde_json::Value;

use super::{
    graph::{Template, Webhook, World},
    select,
};
use crate::{
    Error, Result,
    list::{self, Bound},
    webhooks::{ConfigKind, hook},
};

/// The workload kinds whose pod templates count, with their group and plural.
const WORKLOADS: [(&str, &str, &str); 5] = [
    ("apps", "Deployment", "deployments"),
    ("apps", "StatefulSet", "statefulsets"),
    ("apps", "DaemonSet", "daemonsets"),
    ("apps", "ReplicaSet", "replicasets"),
    ("batch", "Job", "jobs"),
];

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    let api_version = match group {
        "" => "v1".to_string(),
        g => format!("{g}/v1"),
    };
    ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version,
        kind: kind.into(),
        plural: plural.into(),
    }
}

async fn all(
    client: &Client,
    ar: &ApiResource,
    url: &str,
    each: Duration,
) -> Result<Vec<DynamicObject>> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    list::all(
        client,
        &api,
        ListParams::default(),
        url,
        Bound::EachPage(each),
    )
    .await
}

/// Everything the forecast needs, each request bounded by `each`; a refusal names the
/// role that grants it all.
pub async fn world(client: &Client, url: &str, label_key: &str, each: Duration) -> Result<World> {
    read_all(client, url, label_key, each)
        .await
        .map_err(|e| match e {
            Error::Config(m) if m.contains("forbidden") => Error::Config(format!(
                "{m} (status --risks needs what manifests/rbac-status.yaml grants)"
            )),
            e => e,
        })
}

async fn read_all(client: &Client, url: &str, label_key: &str, each: Duration) -> Result<World> {
    let mut world = World::default();
    for kind in ConfigKind::ALL {
        for config in all(client, &kind.resource(), url, each).await? {
            world.webhooks.extend(webhooks(kind, &config, label_key));
        }
    }
    for ns in all(client, &resource("", "Namespace", "namespaces"), url, each).await? {
        let name = ns.metadata.name.clone().unwrap_or_default();
        world
            .namespaces
            .insert(name, ns.metadata.labels.clone().unwrap_or_default());
    }
    for svc in all(client, &resource("", "Service", "services"), url, each).await? {
        let key = hook::Service {
            namespace: svc.metadata.namespace.clone().unwrap_or_default(),
            name: svc.metadata.name.clone().unwrap_or_default(),
        };
        world
            .services
            .insert(key, select::service_selector(&svc.data));
    }
    mark_down(client, &mut world).await;
    for (group, kind, plural) in WORKLOADS {
        for obj in all(client, &resource(group, kind, plural), url, each).await? {
            if kind == "ReplicaSet" && controlled(&obj) {
                continue;
            }
            let t = obj.data.pointer("/spec/template").unwrap_or(&Value::Null);
            world.templates.push(template(kind, &obj, t));
        }
    }
    for pod in all(client, &resource("", "Pod", "pods"), url, each).await? {
        if !controlled(&pod) || owned_by_node(&pod) {
            world
                .templates
                .push(template("Pod", &pod, &pod_as_template(&pod)));
        }
    }
    Ok(world)
}

/// The services of fail-closed webhooks with no ready endpoint now (one LIST of each
/// one's EndpointSlices; one that cannot be read is not called down).
async fn mark_down(client: &Client, world: &mut World) {
    let services: std::collections::BTreeSet<hook::Service> = world
        .webhooks
        .iter()
        .filter(|w| w.fails_closed)
        .filter_map(|w| w.service.clone())
        .collect();
    for service in services {
        if let Ok(slices) = crate::webhooks::endpoints::slices(client, &service).await
            && !crate::webhooks::endpoints::any_ready(&slices)
        {
            world.down.insert(service);
        }
    }
}

/// A pod as a template: its labels and spec.
fn pod_as_template(pod: &DynamicObject) -> Value {
    serde_json::json!({
        "metadata": {"labels": pod.metadata.labels.clone().unwrap_or_default()},
        "spec": pod.data.get("spec").cloned().unwrap_or(Value::Null),
    })
}

/// Whether a controller owns the object (its template is its controller's).
fn controlled(obj: &DynamicObject) -> bool {
    obj.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true))
}

/// A static pod's mirror: the kubelet creates it, through admission, from its own file.
fn owned_by_node(obj: &DynamicObject) -> bool {
    obj.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Node")
}

/// The webhooks of one configuration.
pub fn webhooks(kind: ConfigKind, config: &DynamicObject, label_key: &str) -> Vec<Webhook> {
    let labelled = config
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(label_key));
    let name = config.metadata.name.clone().unwrap_or_default();
    hook::hooks(&config.data)
        .into_iter()
        .map(|h| Webhook {
            kind: kind.label().into(),
            config: name.clone(),
            labelled,
            rules: h.entry.get("rules").cloned().unwrap_or(Value::Null),
            namespace_selector: h
                .entry
                .get("namespaceSelector")
                .cloned()
                .unwrap_or(Value::Null),
            object_selector: h
                .entry
                .get("objectSelector")
                .cloned()
                .unwrap_or(Value::Null),
            match_conditions: h
                .entry
                .get("matchConditions")
                .and_then(Value::as_array)
                .map_or(0, Vec::len),
            name: h.name,
            service: h.service,
            fails_closed: h.fails_closed,
        })
        .collect()
}

/// A pod template (`{metadata, spec}`) of object `obj`, a `kind`.
pub fn template(kind: &str, obj: &DynamicObject, t: &Value) -> Template {
    let spec = t.get("spec").unwrap_or(&Value::Null);
    Template {
        kind: kind.into(),
        namespace: obj.metadata.namespace.clone().unwrap_or_default(),
        name: obj.metadata.name.clone().unwrap_or_default(),
        labels: select::labels(t.pointer("/metadata/labels").unwrap_or(&Value::Null)),
        host_network: spec
            .get("hostNetwork")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        gates: spec
            .get("schedulingGates")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|g| g.get("name")?.as_str().map(str::to_string))
            .collect(),
    }
}
