// What a current API server adds to every new pod before storing it, as the real
// kube-apiserver 1.37.2 does (and 1.33.4's `pkg/apis/core/v1/defaults.go` and admission
// plugins): the spec's and the containers' defaults (`SetDefaults_PodSpec`,
// `SetDefaults_Container`), the tolerations of DefaultTolerationSeconds, the priority of
// the Priority plugin, and the ServiceAccount plugin's account and token volume. A
// pod of the real server is three times the size of the bare one a test sends (1,845
// against 650 bytes for a one-container gated pod, before managedFields), which is what a
// watch client parses.

use serde_json::{Map, Value, json};

use crate::resources::ResourceInfo;
use crate::status::{self, ApiError};

const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The built-in PriorityClasses every API server creates at start.
const BUILT_IN_PRIORITIES: [(&str, i64); 2] = [
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];

fn set_default(map: &mut Map<String, Value>, key: &str, value: Value) {
    map.entry(key).or_insert(value);
}

/// `Always` for an image without a tag or tagged `latest`, else `IfNotPresent`.
fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// The pod's init containers, then its containers.
fn containers_mut(spec: &mut Map<String, Value>) -> Vec<&mut Map<String, Value>> {
    spec.iter_mut()
        .filter(|(k, _)| *k == "initContainers" || *k == "containers")
        .filter_map(|(_, v)| v.as_array_mut())
        .flat_map(|list| list.iter_mut())
        .filter_map(Value::as_object_mut)
        .collect()
}

/// Defaults and admission for a new pod. `suffix` names the token volume
/// (`kube-api-access-SUFFIX`, five random characters on a real server).
pub fn on_create(
    pod: &mut Value,
    res: &ResourceInfo,
    name: &str,
    suffix: &str,
) -> Result<(), ApiError> {
    let mirror = pod
        .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
        .is_some();
    defaults(pod);
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    priority(spec, res, name)?;
    tolerations(spec);
    if !mirror {
        service_account(spec, suffix);
    }
    Ok(())
}

/// The defaults every decoded pod gets, on create and on update.
pub fn defaults(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "enableServiceLinks", json!(true));
    for c in containers_mut(spec) {
        let image = c
            .get("image")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        set_default(c, "imagePullPolicy", json!(pull_policy(&image)));
        set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
        set_default(c, "terminationMessagePolicy", json!("File"));
        set_default(c, "resources", json!({}));
        for port in c
            .get_mut("ports")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            set_default(port, "protocol", json!("TCP"));
        }
    }
}

/// The Priority plugin: the class's value, or 0 without a class; an unknown class is
/// refused as the real plugin refuses it.
fn priority(spec: &mut Map<String, Value>, res: &ResourceInfo, name: &str) -> Result<(), ApiError> {
    let class = spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .unwrap_or("");
    let value = match class {
        "" => 0,
        c => match BUILT_IN_PRIORITIES.iter().find(|(n, _)| *n == c) {
            Some((_, v)) => *v,
            None => {
                return Err(status::forbidden(
                    res,
                    name,
                    &format!("no PriorityClass with name {c} was found"),
                ));
            }
        },
    };
    spec.insert("priority".into(), json!(value));
    set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    Ok(())
}

/// DefaultTolerationSeconds: 300 s on not-ready and unreachable nodes, unless the pod
/// tolerates them already.
fn tolerations(spec: &mut Map<String, Value>) {
    let list = spec
        .entry("tolerations")
        .or_insert_with(|| Value::Array(vec![]));
    let Some(list) = list.as_array_mut() else {
        return;
    };
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let tolerated = list.iter().any(|t| {
            let k = t.get("key").and_then(Value::as_str);
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            let exists = t.get("operator").and_then(Value::as_str) == Some("Exists");
            (k == Some(key) || (k.is_none() && exists)) && matches!(effect, "" | "NoExecute")
        });
        if !tolerated {
            list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
}

/// The ServiceAccount plugin: the account `default` and its projected token in every
/// container, unless the pod opts out. (The real plugin also refuses a pod whose account
/// does not exist; the double has no ServiceAccounts and takes every name.)
fn service_account(spec: &mut Map<String, Value>, suffix: &str) {
    let account = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_string();
    spec.insert("serviceAccountName".into(), json!(account));
    spec.insert("serviceAccount".into(), json!(account));
    if spec.get("automountServiceAccountToken") == Some(&json!(false)) {
        return;
    }
    let volume = format!("kube-api-access-{suffix}");
    let mut mounted = false;
    for c in containers_mut(spec) {
        let mounts = c
            .entry("volumeMounts")
            .or_insert_with(|| Value::Array(vec![]));
        let Some(mounts) = mounts.as_array_mut() else {
            continue;
        };
        if mounts
            .iter()
            .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(TOKEN_PATH))
        {
            continue;
        }
        mounts.push(json!({"name": volume, "readOnly": true, "mountPath": TOKEN_PATH}));
        mounted = true;
    }
    if !mounted {
        return;
    }
    let volumes = spec
        .entry("volumes")
        .or_insert_with(|| Value::Array(vec![]));
    if let Some(volumes) = volumes.as_array_mut() {
        volumes.push(json!({
            "name": volume,
            "projected": {
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ],
                "defaultMode": 420,
            },
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_follows_the_tag() {
        for (image, want) in [
            ("busybox", "Always"),
            ("busybox:latest", "Always"),
            ("busybox:1.36", "IfNotPresent"),
            ("registry.example:5000/c", "Always"),
            ("registry.example:5000/c:1", "IfNotPresent"),
            ("c@sha256:abc", "IfNotPresent"),
        ] {
            assert_eq!(pull_policy(image), want, "{image}");
        }
    }
}
