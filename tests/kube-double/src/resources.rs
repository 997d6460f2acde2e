// The resources a double serves: names, kinds, groups, and lookup by key or URL.

use crate::config::Config;

/// One served resource (always version v1 of its group).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    /// `pods`, `deployments.apps`, `events.events.k8s.io`: plural, then `.group` if any.
    pub key: String,
    pub group: String,
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub short_names: Vec<String>,
    /// False for cluster-scoped resources (namespaces, webhook configurations): served at
    /// `/api/v1/PLURAL[/NAME]` or `/apis/GROUP/v1/PLURAL[/NAME]`, stored under namespace "".
    pub namespaced: bool,
}

/// The cluster-scoped resources the double knows, by key; every other resource is
/// namespaced (`namespaced: false` in the real discovery of 1.33.4).
const CLUSTER_SCOPED: &[&str] = &[
    "namespaces",
    "validatingwebhookconfigurations.admissionregistration.k8s.io",
    "mutatingwebhookconfigurations.admissionregistration.k8s.io",
];

/// What a modern (1.33) double serves besides pods, deployments and events: the objects
/// admission webhooks are configured and called with, and the Leases instances of
/// metainit share the work by.
pub const MODERN_KEYS: &[&str] = &[
    "namespaces",
    "leases.coordination.k8s.io",
    "services",
    "endpointslices.discovery.k8s.io",
    "validatingwebhookconfigurations.admissionregistration.k8s.io",
    "mutatingwebhookconfigurations.admissionregistration.k8s.io",
];

impl ResourceInfo {
    pub fn new(key: &str) -> ResourceInfo {
        let (plural, group) = match key.split_once('.') {
            Some((p, g)) => (p.to_string(), g.to_string()),
            None => (key.to_string(), String::new()),
        };
        let (kind, short): (String, &[&str]) = match plural.as_str() {
            "pods" => ("Pod".into(), &["po"]),
            "deployments" => ("Deployment".into(), &["deploy"]),
            "events" => ("Event".into(), &["ev"]),
            "configmaps" => ("ConfigMap".into(), &["cm"]),
            "secrets" => ("Secret".into(), &[]),
            "services" => ("Service".into(), &["svc"]),
            "serviceaccounts" => ("ServiceAccount".into(), &["sa"]),
            "statefulsets" => ("StatefulSet".into(), &["sts"]),
            "daemonsets" => ("DaemonSet".into(), &["ds"]),
            "replicasets" => ("ReplicaSet".into(), &["rs"]),
            "jobs" => ("Job".into(), &[]),
            "cronjobs" => ("CronJob".into(), &["cj"]),
            "endpoints" => ("Endpoints".into(), &["ep"]),
            "persistentvolumeclaims" => ("PersistentVolumeClaim".into(), &["pvc"]),
            "namespaces" => ("Namespace".into(), &["ns"]),
            "endpointslices" => ("EndpointSlice".into(), &[]),
            "leases" => ("Lease".into(), &[]),
            "validatingwebhookconfigurations" => ("ValidatingWebhookConfiguration".into(), &[]),
            "mutatingwebhookconfigurations" => ("MutatingWebhookConfiguration".into(), &[]),
            other => (kind_from_plural(other), &[]),
        };
        let singular = if plural == "endpoints" {
            "endpoints".to_string()
        } else {
            plural.strip_suffix('s').unwrap_or(&plural).to_string()
        };
        ResourceInfo {
            key: key.to_string(),
            group,
            version: "v1".to_string(),
            plural,
            singular,
            kind,
            short_names: short.iter().map(|s| s.to_string()).collect(),
            namespaced: !CLUSTER_SCOPED.contains(&key),
        }
    }

    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub fn is_pods(&self) -> bool {
        self.key == "pods"
    }

    pub fn is_deployments(&self) -> bool {
        self.key == "deployments.apps"
    }

    /// The core `namespaces` resource.
    pub fn is_namespaces(&self) -> bool {
        self.key == "namespaces"
    }

    /// core/v1 Events (events.k8s.io/v1 ones get the generic table and selectors here; the
    /// real server prints and selects both through the core names).
    pub fn is_events(&self) -> bool {
        self.kind == "Event" && self.group.is_empty()
    }

    /// A Validating- or MutatingWebhookConfiguration.
    pub fn is_webhook_configuration(&self) -> bool {
        self.group == "admissionregistration.k8s.io"
            && matches!(
                self.kind.as_str(),
                "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration"
            )
    }
}

fn kind_from_plural(plural: &str) -> String {
    let singular = if let Some(s) = plural.strip_suffix("ies") {
        format!("{s}y")
    } else if let Some(s) = plural.strip_suffix("ses") {
        format!("{s}s")
    } else {
        plural.strip_suffix('s').unwrap_or(plural).to_string()
    };
    let mut c = singular.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Every resource a double serves.
#[derive(Clone, Debug)]
pub struct Registry {
    pub resources: Vec<ResourceInfo>,
}

impl Registry {
    pub fn from_config(config: &Config) -> Registry {
        let mut keys: Vec<String> = vec![
            "pods".into(),
            "deployments.apps".into(),
            "events".into(),
            "events.events.k8s.io".into(),
        ];
        if config.generation == crate::config::Generation::Modern {
            keys.extend(MODERN_KEYS.iter().map(|k| k.to_string()));
        }
        for extra in &config.extra_resources {
            if !keys.contains(extra) {
                keys.push(extra.clone());
            }
        }
        Registry {
            resources: keys.iter().map(|k| ResourceInfo::new(k)).collect(),
        }
    }

    pub fn by_key(&self, key: &str) -> Option<&ResourceInfo> {
        self.resources.iter().find(|r| r.key == key)
    }

    pub fn by_url(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceInfo> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
    }

    /// Groups other than core, in order of first appearance.
    pub fn groups(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in &self.resources {
            if !r.group.is_empty() && !out.contains(&r.group) {
                out.push(r.group.clone());
            }
        }
        out
    }

    pub fn in_group(&self, group: &str) -> Vec<&ResourceInfo> {
        self.resources.iter().filter(|r| r.group == group).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let d = ResourceInfo::new("deployments.apps");
        assert_eq!(d.kind, "Deployment");
        assert_eq!(d.api_version(), "apps/v1");
        let e = ResourceInfo::new("events.events.k8s.io");
        assert_eq!(e.group, "events.k8s.io");
        assert_eq!(e.kind, "Event");
        assert_eq!(ResourceInfo::new("widgets.example.com").kind, "Widget");
        assert_eq!(ResourceInfo::new("policies").kind, "Policy");
        assert!(!ResourceInfo::new("namespaces").namespaced);
        let v = ResourceInfo::new("validatingwebhookconfigurations.admissionregistration.k8s.io");
        assert_eq!(
            (v.kind.as_str(), v.namespaced, v.is_webhook_configuration()),
            ("ValidatingWebhookConfiguration", false, true)
        );
        assert!(ResourceInfo::new("services").namespaced);
    }
}
