//! The webhook deadlock on a real kube-apiserver: a labelled webhook configuration that
//! fails closed on pod creation, whose Service has no ready endpoint, so that no pod can be
//! created in the webhook's own namespace. metainit `--webhooks`, as the user `metainit`
//! with exactly manifests/rbac.yaml and manifests/rbac-webhooks.yaml, exempts that namespace
//! and only it, and restores the configuration byte for byte once an endpoint is ready.
//!
//! Each test has a control plane of its own: its webhook intercepts every namespace. The
//! ready endpoint is 192.0.2.10 (TEST-NET-1, never a private-range address), and no pod is
//! created after it is ready, so the API server dials nothing (checked from its logs).

mod common;

use std::time::{Duration, Instant};

use common::{
    LABEL,
    control_plane::{ControlPlane, WAIT, until},
    pod,
};
use serde_json::{Value, json};

const ANNOTATION: &str = "k8s.opsani.io/metainit-exempted";

/// The real API server's refusal while the webhook's Service has no ready endpoint.
fn refusal(hook: &str) -> String {
    format!(
        "Internal error occurred: failed calling webhook \"{hook}\": failed to call webhook: Post \"https://gk-svc.gk.svc:443/validate?timeout=10s\": no endpoints available for service \"gk-svc\""
    )
}

struct Deadlock {
    cp: ControlPlane,
    /// The configuration's resource: `validatingwebhookconfiguration` or `mutating…`.
    kind: &'static str,
    hook: &'static str,
}

impl Deadlock {
    /// A control plane with the RBAC files, namespaces `gk` (the webhook's) and `team`,
    /// the Service `gk/gk-svc` with one endpoint not ready, and the labelled configuration
    /// `gk` of `kind` with the webhook `hook` and `selector` as its namespaceSelector.
    fn new(kind: &'static str, hook: &'static str, selector: Option<Value>) -> Deadlock {
        let cp = ControlPlane::own();
        cp.apply_manifest("manifests/rbac.yaml");
        cp.apply_manifest("manifests/rbac-webhooks.yaml");
        for ns in ["gk", "team"] {
            cp.kubectl_ok(&["create", "namespace", ns]);
            cp.kubectl_ok(&["create", "serviceaccount", "default", "-n", ns]);
        }
        cp.create(
            "gk",
            &json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "gk-svc"},
                "spec": {"ports": [{"port": 443, "targetPort": 8443}]},
            }),
        );
        cp.create(
            "gk",
            &json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "gk-svc-abc", "labels": {"kubernetes.io/service-name": "gk-svc"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["192.0.2.10"], "conditions": {"ready": false}}],
                "ports": [{"port": 8443, "protocol": "TCP"}],
            }),
        );
        let mut webhook = json!({
            "name": hook,
            "clientConfig": {"service": {"namespace": "gk", "name": "gk-svc", "path": "/validate"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        });
        if let Some(s) = selector {
            webhook["namespaceSelector"] = s;
        }
        let kind_name = if kind.starts_with("mutating") {
            "MutatingWebhookConfiguration"
        } else {
            "ValidatingWebhookConfiguration"
        };
        cp.create(
            "default",
            &json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind_name,
                "metadata": {"name": "gk", "labels": {LABEL: "", "app": "policy"}},
                "webhooks": [webhook],
            }),
        );
        Deadlock { cp, kind, hook }
    }

    /// The configuration as the admin reads it.
    fn config(&self) -> Value {
        let out = self.cp.kubectl_ok(&["get", self.kind, "gk", "-o", "json"]);
        serde_json::from_str(&out).expect("json")
    }

    /// `kubectl run NAME -n NS`: its output, and whether the pod was created.
    fn run(&self, ns: &str, name: &str) -> (bool, String) {
        let body = pod(name, false).to_string();
        self.cp
            .kubectl_in(&["create", "-n", ns, "-f", "-"], Some(&body))
    }

    fn exempted(&self) -> bool {
        self.config()["webhooks"][0]["namespaceSelector"]["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["operator"] == "NotIn" && e["values"] == json!(["gk"]))
    }

    /// `kubectl get events -n default` for the configuration: the reasons, in order.
    fn event_reasons(&self) -> Vec<String> {
        let out = self.cp.kubectl_ok(&[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            "involvedObject.name=gk",
            "--sort-by",
            ".metadata.creationTimestamp",
            "-o",
            "custom-columns=REASON:.reason,KIND:.involvedObject.kind",
            "--no-headers",
        ]);
        out.lines()
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .filter(|r| !r.is_empty())
            .collect()
    }
}

/// What a restore must give back: the webhooks and the metadata a user wrote.
fn written(config: &Value) -> Value {
    json!({
        "webhooks": config["webhooks"],
        "labels": config["metadata"]["labels"],
        "annotations": config["metadata"]["annotations"],
    })
}

async fn breaks_the_deadlock(d: Deadlock) {
    let before = d.config();
    let (created, out) = d.run("gk", "web-0");
    assert!(!created, "refused before metainit: {out}");
    assert!(
        out.contains(&refusal(d.hook)),
        "the real server's refusal, as docs/src/troubleshooting.md quotes it: {out}"
    );
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/src/troubleshooting.md"
    ))
    .expect("docs/src/troubleshooting.md");
    assert!(
        docs.contains("failed calling webhook")
            && docs.contains("no endpoints available for service"),
        "docs/src/troubleshooting.md quotes the refusal"
    );

    // Read before the spawn, and before the patch below: the grace is measured from moments
    // metainit cannot have acted on earlier.
    let started = Instant::now();
    let metainit =
        d.cp.metainit(&d.cp.metainit, &["--webhooks", "--webhook-grace", "2s"]);
    until("the webhook's namespace exempted", WAIT, || async {
        d.exempted().then_some(())
    })
    .await;
    println!(
        "{}: exempted {:?} after metainit started",
        d.kind,
        started.elapsed()
    );
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "not before --webhook-grace"
    );
    let (created, out) = d.run("gk", "web-1");
    assert!(
        created,
        "a pod of the webhook's own namespace is created now: {out}"
    );
    let (created, out) = d.run("team", "web-1");
    assert!(!created, "another namespace still fails closed: {out}");
    assert!(out.contains(&refusal(d.hook)), "{out}");

    // The webhook comes back: a ready endpoint. No pod is created after this.
    let ready = Instant::now();
    d.cp.kubectl_ok(&[
        "patch",
        "endpointslice",
        "gk-svc-abc",
        "-n",
        "gk",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/endpoints/0/conditions/ready","value":true}]"#,
    ]);
    until("the configuration restored", WAIT, || async {
        let now = d.config();
        (written(&now) == written(&before)).then_some(())
    })
    .await;
    let took = ready.elapsed();
    println!("{}: restored {took:?} after the endpoint was ready", d.kind);
    assert!(took >= Duration::from_secs(2), "not before --webhook-grace");
    assert!(
        d.config()["metadata"]["annotations"]
            .get(ANNOTATION)
            .is_none(),
        "no record left"
    );
    let reasons = until("both Events listed", WAIT, || async {
        let r = d.event_reasons();
        (r.len() >= 2).then_some(r)
    })
    .await;
    assert_eq!(reasons, ["WebhookSelfExempted", "WebhookRestored"]);
    assert!(metainit.stop().await.success());
    if let Err(dials) = d.cp.check_network() {
        panic!("the API server dialled off loopback: {dials}");
    }
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_validating_webhook_that_intercepts_its_own_pods() {
    breaks_the_deadlock(Deadlock::new(
        "validatingwebhookconfiguration",
        "validate.gk.example.com",
        None,
    ))
    .await;
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_mutating_webhook_that_intercepts_its_own_pods() {
    breaks_the_deadlock(Deadlock::new(
        "mutatingwebhookconfiguration",
        "mutate.gk.example.com",
        None,
    ))
    .await;
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_webhook_whose_namespace_selector_has_expressions_of_its_own() {
    breaks_the_deadlock(Deadlock::new(
        "validatingwebhookconfiguration",
        "validate.gk.example.com",
        Some(json!({"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
        ]})),
    ))
    .await;
}
