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
    policies, select,
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
    read_policies(client, url, each, &mut world).await?;
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

/// The admission policies' kinds: the findings' word, the kind, its plural, its binding's.
const POLICY_KINDS: [(&str, &str, &str, &str); 2] = [
    (
        "validating",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
    ),
    (
        "mutating",
        "MutatingAdmissionPolicy",
        "mutatingadmissionpolicies",
        "mutatingadmissionpolicybindings",
    ),
];

/// The admission policies and bindings of admissionregistration.k8s.io/v1 the server
/// serves (mutating ones from 1.36), and whether the parameter each `Deny` binding needs
/// is there.
async fn read_policies(
    client: &Client,
    url: &str,
    each: Duration,
    world: &mut World,
) -> Result<()> {
    const GROUP: &str = "admissionregistration.k8s.io";
    let budget = Some(crate::budget::Budget::from_now(each));
    let served = crate::discovery::with_retries(client, "discovery", url, budget, || {
        client.list_api_group_resources("admissionregistration.k8s.io/v1")
    })
    .await?;
    let serves = |plural: &str| served.resources.iter().any(|r| r.name == plural);
    for (word, kind, plural, bindings) in POLICY_KINDS {
        if !serves(plural) || !serves(bindings) {
            continue;
        }
        let mut policies = Vec::new();
        for p in all(client, &resource(GROUP, kind, plural), url, each).await? {
            let name = p.metadata.name.clone().unwrap_or_default();
            let spec = p.data.get("spec").unwrap_or(&Value::Null);
            policies.push(policies::policy(word, &name, spec));
        }
        let binding_kind = format!("{kind}Binding");
        for b in all(client, &resource(GROUP, &binding_kind, bindings), url, each).await? {
            world
                .bindings
                .push(binding(client, word, &b, &policies).await);
        }
        world.policies.extend(policies);
    }
    Ok(())
}

/// A binding of a `word` policy, and whether the parameter it cannot do without is there.
async fn binding(
    client: &Client,
    word: &str,
    b: &DynamicObject,
    policies: &[policies::Policy],
) -> policies::Binding {
    let spec = b.data.get("spec").unwrap_or(&Value::Null);
    let policy = spec
        .get("policyName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let param_kind = policies
        .iter()
        .find(|p| p.name == policy)
        .and_then(|p| p.param_kind.clone());
    let deny = policies::denies_without(spec, param_kind.as_deref());
    let param = match (&deny, &param_kind) {
        (Some((_, r)), Some(k)) => param_state(client, k, r).await,
        (Some(_), None) => policies::Param::Unchecked("its policy names no paramKind".into()),
        (None, _) => policies::Param::There,
    };
    policies::Binding {
        kind: word.into(),
        name: b.metadata.name.clone().unwrap_or_default(),
        policy: policy.into(),
        denies_without: deny.map(|(what, _)| what),
        param,
    }
}

/// Whether the parameter `r` of kind `param_kind` (`Kind apiVersion`) is there, missing,
/// or cannot be told: a kind not served, no right to read it (status --risks' role reads no
/// parameters: grant `get` on their kind to check), a namespace that is each request's own,
/// a selector of expressions.
async fn param_state(client: &Client, param_kind: &str, r: &policies::ParamRef) -> policies::Param {
    use policies::Param;
    let Some((kind, api_version)) = param_kind.split_once(' ') else {
        return Param::Unchecked(format!("paramKind {param_kind}"));
    };
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = match kube::discovery::pinned_kind(client, &gvk).await {
        Ok(found) => found,
        Err(e) => return Param::Unchecked(format!("{kind} {api_version}: {e}")),
    };
    let namespaced = caps.scope == kube::discovery::Scope::Namespaced;
    let api: Api<DynamicObject> = match (&r.namespace, namespaced) {
        (Some(ns), true) => Api::namespaced_with(client.clone(), ns, &ar),
        (None, true) => {
            return Param::Unchecked("it is looked up in each request's own namespace".into());
        }
        (_, false) => Api::all_with(client.clone(), &ar),
    };
    let found = match (&r.name, &r.selector) {
        (Some(name), _) => api.get_opt(name).await.map(|o| o.is_some()),
        (None, Some(selector)) if selector.get("matchExpressions").is_none() => {
            let labels = select::labels(selector.get("matchLabels").unwrap_or(&Value::Null));
            let query: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let params = ListParams::default().labels(&query.join(",")).limit(1);
            api.list(&params).await.map(|l| !l.items.is_empty())
        }
        _ => return Param::Unchecked("a selector of matchExpressions".into()),
    };
    match found {
        Ok(true) => Param::There,
        Ok(false) => Param::Missing,
        Err(e) => Param::Unchecked(crate::failure::describe(&e)),
    }
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
