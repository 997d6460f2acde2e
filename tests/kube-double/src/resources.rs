// The resources a double serves: names, kinds, groups, and lookup by key or URL.

use crate::config::Config;

/// One served resource (always version v1 of its group, always namespaced).
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
}

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

    pub fn is_event(&self) -> bool {
        self.key == "events" || self.key == "events.events.k8s.io"
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
    }
}
