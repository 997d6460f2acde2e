//! The guard of the webhook deadlock (tests/node_webhook.rs, benches/node_webhook.rs): a
//! webhook server of ours (tests/node/installer/main.go, `guard`) as a Deployment of two
//! replicas on the node's pod network, and two configurations that fail closed on every pod
//! created in its namespace, its own pods included, labelled with metainit's key (by
//! `install`, or by the webhooks page's block) (tests/node/guard/*.yaml). The API server calls it at its pods' addresses
//! (`--enable-aggregator-routing`), inside the node's network namespace.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{Node, WAIT, installer::base64, running_and_ready, until};
use crate::common::LABEL;

pub const NS: &str = "guard";
const SELECTOR: &str = "app=guard";
/// The annotation metainit records an exemption in.
const EXEMPTED: &str = "k8s.opsani.io/metainit-exempted";

/// A manifest of tests/node/guard with its `${NAME}`s replaced.
fn manifest(file: &str, values: &[(&str, &str)]) -> String {
    super::manifest("tests/node/guard", file, values)
}

/// The guard, its Secret, both replicas Ready, then its configurations, carrying metainit's
/// label key if `labelled` (else as a user has them before the webhooks page).
pub fn install(node: &Node, labelled: bool) {
    let pki = node.path("NODE_PKI");
    node.apply(&manifest("guard.yaml", &[]));
    node.tls_secret(NS, "guard-tls", "guard-webhook");
    until("both guard replicas Running and ready", WAIT, || {
        (ready(node).len() == 2).then_some(())
    });
    let ca = base64(&std::fs::read(pki.join("ca.crt")).unwrap());
    let labels = if labelled {
        format!("{{\"{LABEL}\": \"\"}}")
    } else {
        "{}".to_string()
    };
    node.apply(&manifest(
        "webhook-configuration.yaml",
        &[("LABELS", labels.as_str()), ("CA_BUNDLE", ca.as_str())],
    ));
}

/// The names of the guard's pods that run and are ready (and are not being deleted).
pub fn ready(node: &Node) -> Vec<String> {
    node.pods(NS, SELECTOR)
        .into_iter()
        .filter(|p| running_and_ready(p) && p["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|p| p["metadata"]["name"].as_str().map(String::from))
        .collect()
}

/// Whether both replicas run containers started at `since` or later (epoch seconds), are
/// Ready, and are exactly the ready endpoints of the guard's Service (a restart gives pods
/// new addresses; the EndpointSlice follows).
pub fn serving_since(node: &Node, since: i64) -> bool {
    let pods: Vec<Value> = node
        .pods(NS, SELECTOR)
        .into_iter()
        .filter(|p| running_and_ready(p) && super::started(p).is_some_and(|t| t >= since))
        .collect();
    let mut ips: Vec<String> = pods
        .iter()
        .filter_map(|p| p["status"]["podIP"].as_str().map(String::from))
        .collect();
    let slices = node
        .json(&[
            "-n",
            NS,
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=guard",
        ])
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default();
    let mut ready: Vec<String> = slices
        .iter()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["conditions"]["ready"] == true)
        .filter_map(|e| e["addresses"][0].as_str().map(String::from))
        .collect();
    ips.sort();
    ready.sort();
    pods.len() == 2 && ips == ready
}

/// Both configurations as the API server holds them: their webhooks and annotations.
pub fn configs(node: &Node) -> Value {
    let get = |kind: &str| {
        let c = node
            .json(&["get", kind, NS])
            .unwrap_or_else(|| panic!("the {kind} {NS}"));
        serde_json::json!({"webhooks": c["webhooks"], "annotations": c["metadata"]["annotations"]})
    };
    serde_json::json!({
        "validating": get("validatingwebhookconfiguration"),
        "mutating": get("mutatingwebhookconfiguration"),
    })
}

/// Whether metainit holds an exemption on both configurations.
pub fn exempted(node: &Node) -> bool {
    let c = configs(node);
    ["validating", "mutating"]
        .iter()
        .all(|k| !c[k]["annotations"][EXEMPTED].is_null())
}

/// The ReplicaSet controller's refused creates in the guard's namespace, as its Events
/// count them: (how many, the last message).
pub fn refusals(node: &Node) -> (i64, String) {
    let events = node
        .json(&[
            "-n",
            NS,
            "get",
            "events",
            "--field-selector",
            "reason=FailedCreate",
        ])
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default();
    events
        .iter()
        .filter(|e| {
            e["source"]["component"] == "replicaset-controller"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("failed calling webhook"))
        })
        .fold((0, String::new()), |(n, _), e| {
            let count = e["count"].as_i64().unwrap_or(1);
            (n + count, e["message"].as_str().unwrap_or("").to_string())
        })
}

fn scale(node: &Node, replicas: u32) {
    node.kubectl(
        &[
            "-n",
            NS,
            "scale",
            "deployment/guard",
            &format!("--replicas={replicas}"),
        ],
        None,
    )
    .expect("kubectl scale the guard");
}

/// The guard's pods gone and wanted back, as a recreating upgrade or a maintenance makes it:
/// scaled to zero, its pods gone, scaled to two (its ReplicaSet creates them). When it was
/// scaled up. (Deleting running pods is no outage: their replacements are created while
/// the terminating ones still serve, and are admitted.)
pub fn outage(node: &Node) -> Instant {
    scale(node, 0);
    until("the guard's pods gone", WAIT, || {
        node.pods(NS, SELECTOR).is_empty().then_some(())
    });
    scale(node, 2);
    Instant::now()
}

/// A pod created in the guard's namespace, admitted by the guard: the mutating webhook's
/// annotation names the replica the API server called, and that replica's log (the
/// validating webhook's line) names the pod. The replica's name.
pub fn called_by_the_api_server(node: &Node, name: &str) -> String {
    node.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  containers: [{{name: c, image: localhost/node/pause:test, imagePullPolicy: Never}}]\n"
    ));
    let pod = node.pod(NS, name).expect("the pod just created");
    let by = pod["metadata"]["annotations"]["example.com/admitted-by"]
        .as_str()
        .unwrap_or_else(|| panic!("not admitted by the guard's mutating webhook: {pod}"))
        .to_string();
    let validated = format!("/validate called for pod {NS}/{name}");
    until(
        "the guard's log: the validating webhook called",
        WAIT,
        || {
            ready(node).into_iter().find(|replica| {
                node.kubectl(&["-n", NS, "logs", replica], None)
                    .is_ok_and(|log| log.contains(&validated))
            })
        },
    );
    node.kubectl(&["-n", NS, "delete", "pod", name, "--wait=false"], None)
        .expect("kubectl delete");
    by
}

/// metainit's static pod with `--webhooks` and `--webhook-grace=GRACE` (and the rights of
/// manifests/rbac-webhooks.yaml), in one rename; its new mirror pod Running and ready.
pub fn with_webhooks(node: &Node, grace: &str) {
    let rbac = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/rbac-webhooks.yaml");
    node.kubectl(&["apply", "-f", rbac.to_str().unwrap()], None)
        .expect("kubectl apply rbac-webhooks.yaml");
    let shipped = std::fs::read_to_string(node.path("NODE_METAINIT_MANIFEST")).unwrap();
    let anchor = "    - --admin-addr=127.0.0.1:10275\n";
    assert!(shipped.contains(anchor), "no {anchor:?} in the manifest");
    let text = shipped.replace(
        anchor,
        &format!("{anchor}    - --webhooks\n    - --webhook-grace={grace}\n"),
    );
    let staged = node.path("METAINIT_NODE").join("metainit.webhooks.yaml");
    std::fs::write(&staged, text).unwrap();
    let old = node.metainit().map(|p| p["metadata"]["uid"].clone());
    std::fs::rename(&staged, node.path("NODE_MANIFESTS").join("metainit.yaml")).unwrap();
    until("metainit with --webhooks Running and ready", WAIT, || {
        node.metainit().filter(|p| {
            Some(&p["metadata"]["uid"]) != old.as_ref()
                && running_and_ready(p)
                && p["spec"]["containers"][0]["args"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|a| a == "--webhooks"))
        })
    });
}

/// One deadlock broken, with metainit `--webhooks` running: an `outage`; the time from the
/// scale-up to both new replicas Ready, and from then to both configurations as `before`
/// again (byte for byte), metainit's exemption gone.
pub fn cycle(node: &Node, before: &Value) -> (Duration, Duration) {
    let deleted = outage(node);
    until("the guard's namespace exempted", WAIT, || {
        exempted(node).then_some(())
    });
    until("both new guard replicas Running and ready", WAIT, || {
        (ready(node).len() == 2).then_some(())
    });
    let to_ready = deleted.elapsed();
    let back = Instant::now();
    until("both configurations restored as they were", WAIT, || {
        (configs(node) == *before).then_some(())
    });
    (to_ready, back.elapsed())
}
