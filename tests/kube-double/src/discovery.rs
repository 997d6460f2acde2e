// `/version` and the plain (non-aggregated) discovery documents kubectl falls back to.

use serde_json::{Value, json};

use crate::config::Generation;
use crate::resources::{Registry, ResourceInfo};

pub fn version(generation: Generation) -> Value {
    match generation {
        Generation::Legacy => json!({
            "major": "1",
            "minor": "13",
            "gitVersion": "v1.13.12",
            "gitCommit": "a8b52209ee172232b6db7a6e0ce2adc77458829f",
            "gitTreeState": "clean",
            "buildDate": "2019-10-15T12:04:30Z",
            "goVersion": "go1.11.13",
            "compiler": "gc",
            "platform": "linux/amd64",
        }),
        Generation::Modern => json!({
            "major": "1",
            "minor": "33",
            "emulationMajor": "1",
            "emulationMinor": "33",
            "minCompatibilityMajor": "1",
            "minCompatibilityMinor": "32",
            "gitVersion": "v1.33.4",
            "gitCommit": "74cdb426c7ab6a8d7e0b3f3cd1bd63b4fbd58a2b",
            "gitTreeState": "clean",
            "buildDate": "2025-08-12T18:06:01Z",
            "goVersion": "go1.24.5",
            "compiler": "gc",
            "platform": "linux/amd64",
        }),
    }
}

const VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

fn resource_entry(r: &ResourceInfo) -> Value {
    json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": VERBS,
        "shortNames": r.short_names,
    })
}

fn status_entry(r: &ResourceInfo) -> Value {
    json!({
        "name": format!("{}/status", r.plural),
        "singularName": "",
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": ["get", "patch", "update"],
    })
}

pub fn api_versions(addr: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}],
    })
}

fn resource_list(group_version: &str, resources: Vec<Value>) -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}

/// `/api/v1`. Without a `namespaces` resource (legacy) the implicit namespaces are
/// readable only, as before; modern serves them as objects with every verb.
pub fn core_resources(reg: &Registry) -> Value {
    let mut resources = Vec::new();
    if reg.by_key("namespaces").is_none() {
        resources.push(json!({
            "name": "namespaces",
            "singularName": "namespace",
            "namespaced": false,
            "kind": "Namespace",
            "verbs": ["get", "list"],
            "shortNames": ["ns"],
        }));
    }
    for r in reg.in_group("") {
        resources.push(resource_entry(r));
        if r.is_pods() || r.is_namespaces() || r.key == "services" {
            resources.push(status_entry(r));
        }
    }
    resource_list("v1", resources)
}

fn group_entry(group: &str) -> Value {
    let gv = format!("{group}/v1");
    json!({
        "name": group,
        "versions": [{"groupVersion": gv, "version": "v1"}],
        "preferredVersion": {"groupVersion": gv, "version": "v1"},
    })
}

pub fn groups(reg: &Registry, generation: Generation) -> Value {
    let mut groups: Vec<Value> = reg.groups().iter().map(|g| group_entry(g)).collect();
    if generation == Generation::Legacy {
        groups.push(json!({
            "name": "admissionregistration.k8s.io",
            "versions": [{"groupVersion": "admissionregistration.k8s.io/v1alpha1", "version": "v1alpha1"}],
            "preferredVersion": {"groupVersion": "admissionregistration.k8s.io/v1alpha1", "version": "v1alpha1"},
        }));
    }
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(reg: &Registry, generation: Generation, group: &str) -> Option<Value> {
    if generation == Generation::Legacy && group == "admissionregistration.k8s.io" {
        let mut g = json!({
            "name": group,
            "versions": [{"groupVersion": "admissionregistration.k8s.io/v1alpha1", "version": "v1alpha1"}],
            "preferredVersion": {"groupVersion": "admissionregistration.k8s.io/v1alpha1", "version": "v1alpha1"},
        });
        g["kind"] = json!("APIGroup");
        g["apiVersion"] = json!("v1");
        return Some(g);
    }
    if !reg.groups().iter().any(|g| g == group) {
        return None;
    }
    let mut g = group_entry(group);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

pub fn group_resources(
    reg: &Registry,
    generation: Generation,
    group: &str,
    version: &str,
) -> Option<Value> {
    if generation == Generation::Legacy
        && group == "admissionregistration.k8s.io"
        && version == "v1alpha1"
    {
        return Some(resource_list(
            "admissionregistration.k8s.io/v1alpha1",
            vec![json!({
                "name": "initializerconfigurations",
                "singularName": "",
                "namespaced": false,
                "kind": "InitializerConfiguration",
                "verbs": ["get", "list"],
            })],
        ));
    }
    if version != "v1" {
        return None;
    }
    let rs = reg.in_group(group);
    if rs.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for r in rs {
        resources.push(resource_entry(r));
        if r.is_deployments() {
            resources.push(status_entry(r));
        }
    }
    Some(resource_list(&format!("{group}/{version}"), resources))
}

/// The configured rules as an InitializerConfigurationList (legacy only).
pub fn initializer_configurations(rules: &[crate::config::InitializerRule]) -> Value {
    let initializers: Vec<Value> = rules
        .iter()
        .map(|r| {
            let resources: Vec<Value> = r
                .resources
                .iter()
                .map(|res| {
                    let (plural, group) = res.split_once('.').unwrap_or((res.as_str(), ""));
                    json!({"apiGroups": [group], "apiVersions": ["*"], "resources": [plural]})
                })
                .collect();
            json!({"name": r.name, "rules": resources})
        })
        .collect();
    let items = if initializers.is_empty() {
        vec![]
    } else {
        vec![json!({
            "kind": "InitializerConfiguration",
            "apiVersion": "admissionregistration.k8s.io/v1alpha1",
            "metadata": {"name": "kube-double"},
            "initializers": initializers,
        })]
    };
    json!({
        "kind": "InitializerConfigurationList",
        "apiVersion": "admissionregistration.k8s.io/v1alpha1",
        "metadata": {},
        "items": items,
    })
}
