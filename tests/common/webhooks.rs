//! The webhook deadlock on the shared real control plane, for the tests of `--webhooks`
//! (tests/cluster_webhooks_*.rs): the webhook configurations, Services and EndpointSlices
//! of a scene (tests/common/scene.rs: a label key, namespaces, configuration names and a
//! ServiceAccount of the test's own, so that the audit log's entries for that user are
//! this test's metainit's and no one else's). Every webhook's namespaceSelector is limited
//! to namespaces of the scene, so no other test's pod is ever sent to it. Endpoints are
//! 192.0.2.10 (TEST-NET-1), and no pod is created in a namespace whose webhook has a ready
//! endpoint: the API server dials nothing (`check_network`).

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, SystemTime},
};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

// The tests of `--webhooks` name the scene from here.
#[allow(unused_imports)]
pub use super::scene::{Rights, Scene, received};
use super::{
    Metainit,
    control_plane::{WAIT, until},
    pod,
};

pub const ANNOTATION: &str = "k8s.opsani.io/metainit-exempted";

/// The two configuration kinds, as their resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Validating,
    Mutating,
}

impl Kind {
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Validating => "validatingwebhookconfigurations",
            Kind::Mutating => "mutatingwebhookconfigurations",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Kind::Validating => "ValidatingWebhookConfiguration",
            Kind::Mutating => "MutatingWebhookConfiguration",
        }
    }

    fn path(self, name: &str) -> String {
        format!(
            "/apis/admissionregistration.k8s.io/v1/{}/{name}",
            self.plural()
        )
    }
}

impl Scene {
    /// The Service `svc` in namespace `ns` (short) and its one EndpointSlice `SVC-abc`, of
    /// one endpoint, ready or not.
    pub fn serve(&self, ns: &str, svc: &str, ready: bool) {
        let ns = self.ns(ns);
        self.cp.create(
            ns,
            &json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": svc},
                "spec": {"ports": [{"port": 443, "targetPort": 8443}]},
            }),
        );
        self.cp.create(
            ns,
            &json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": format!("{svc}-abc"), "labels": {"kubernetes.io/service-name": svc}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["192.0.2.10"], "conditions": {"ready": ready}}],
                "ports": [{"port": 8443, "protocol": "TCP"}],
            }),
        );
    }

    /// Makes the endpoint of `serve`'s slice ready or not.
    pub async fn set_ready(&self, ns: &str, svc: &str, ready: bool) {
        let path = format!(
            "/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices/{svc}-abc",
            self.ns(ns)
        );
        let patch =
            json!([{"op": "replace", "path": "/endpoints/0/conditions/ready", "value": ready}]);
        self.send(
            http::Request::patch(path)
                .header("Content-Type", "application/json-patch+json")
                .body(patch.to_string().into_bytes())
                .expect("request"),
        )
        .await
        .expect("the slice patched");
    }

    /// A configuration `short` (validating) with one webhook `hook` on pod creation,
    /// calling the Service `svc` of namespace `ns` (short), labelled with the scene's key
    /// or not; its namespaceSelector holds `ns` and the scene's `team`, if any.
    pub fn config(
        &self,
        short: &str,
        labelled: bool,
        hook: &str,
        policy: &str,
        ns: &str,
        svc: &str,
    ) -> Value {
        let mut labels = json!({"app": "policy"});
        if labelled {
            labels[&self.key] = json!("");
        }
        let mut scope = vec![self.ns(ns).to_string()];
        if let Some(team) = self.namespaces.get("team").filter(|t| *t != &scope[0]) {
            scope.push(team.clone());
        }
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.name(short), "labels": labels},
            "webhooks": [{
                "name": hook,
                "clientConfig": {"service": {"namespace": self.ns(ns), "name": svc, "path": "/validate"}},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
                "namespaceSelector": {"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": scope}
                ]},
                "failurePolicy": policy,
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }],
        })
    }

    /// The usual deadlock: the labelled configuration `gk`, whose one webhook
    /// `validate.gk.example.com` fails closed on pod creation in `gk` and `team`, calling
    /// `gk/gk-svc`, whose one endpoint is `ready` or not.
    pub async fn gatekeeper(&self, ready: bool) {
        self.serve("gk", "gk-svc", ready);
        let c = self.config(
            "gk",
            true,
            "validate.gk.example.com",
            "Fail",
            "gk",
            "gk-svc",
        );
        self.create(Kind::Validating, &c).await;
    }

    /// Creates a configuration of `kind` (its `kind` field set to match).
    pub async fn create(&self, kind: Kind, config: &Value) {
        let mut c = config.clone();
        c["kind"] = json!(kind.kind());
        let path = format!("/apis/admissionregistration.k8s.io/v1/{}", kind.plural());
        self.send(
            http::Request::post(path)
                .header("Content-Type", "application/json")
                .body(c.to_string().into_bytes())
                .expect("request"),
        )
        .await
        .unwrap_or_else(|e| panic!("creating {c}: {e:?}"));
    }

    /// Replaces a configuration as a user's `kubectl replace` would (a PUT of `config`,
    /// whose resourceVersion, if any, must be the stored one).
    pub async fn replace(&self, kind: Kind, config: &Value) -> Result<Value, (u16, String)> {
        let name = config["metadata"]["name"].as_str().expect("a name");
        self.send(
            http::Request::put(kind.path(name))
                .header("Content-Type", "application/json")
                .body(config.to_string().into_bytes())
                .expect("request"),
        )
        .await
    }

    /// The configuration `short` as the server stores it, its JSON as served.
    pub async fn get(&self, kind: Kind, short: &str) -> Value {
        let path = kind.path(&self.name(short));
        self.send(http::Request::get(path).body(Vec::new()).expect("request"))
            .await
            .unwrap_or_else(|e| panic!("GET {short}: {e:?}"))
    }

    /// The first webhook of the validating configuration `short`.
    pub async fn entry(&self, short: &str) -> Value {
        self.get(Kind::Validating, short).await["webhooks"][0].clone()
    }

    /// Creates pod `name` in `ns` (short) as a controller would: `Err` with the server's
    /// code and message when admission refuses it.
    pub async fn create_pod(&self, ns: &str, name: &str) -> Result<(), (u16, String)> {
        let api: Api<Pod> = Api::namespaced(self.admin.clone(), self.ns(ns));
        let pod: Pod = serde_json::from_value(pod(name, false)).expect("pod");
        match api.create(&PostParams::default(), &pod).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) => Err((s.code, s.message)),
            Err(e) => panic!("create {ns}/{name}: {e}"),
        }
    }

    /// A pod creation in `ns` (short) that the webhook must refuse: the server's message.
    pub async fn refused(&self, ns: &str, name: &str) -> String {
        match self.create_pod(ns, name).await {
            Ok(()) => panic!("{ns}/{name} was admitted; the webhook should refuse it"),
            Err((code, message)) => {
                assert_eq!(code, 500, "{message}");
                message
            }
        }
    }

    /// Waits until a pod can be created in `ns` (short), each try a new name.
    pub async fn until_admitted(&self, ns: &str, what: &str) {
        static TRY: AtomicUsize = AtomicUsize::new(0);
        until(what, WAIT, || async {
            let n = TRY.fetch_add(1, Ordering::Relaxed);
            self.create_pod(ns, &format!("try-{n}")).await.ok()
        })
        .await;
    }

    /// The real server's refusal while `svc` of `ns` (short) has no ready endpoint.
    pub fn refusal(&self, hook: &str, ns: &str, svc: &str) -> String {
        format!(
            "Internal error occurred: failed calling webhook \"{hook}\": failed to call webhook: Post \"https://{svc}.{}.svc:443/validate?timeout=10s\": no endpoints available for service \"{svc}\"",
            self.ns(ns)
        )
    }

    /// When each accepted PATCH of the configuration `short` of `kind` was received, in
    /// order.
    pub fn patches(&self, kind: Kind, short: &str) -> Vec<SystemTime> {
        let name = self.name(short);
        self.requests()
            .iter()
            .filter(|e| e["verb"] == "patch" && e["objectRef"]["resource"] == kind.plural())
            .filter(|e| e["objectRef"]["name"] == name.as_str())
            .filter(|e| {
                e["responseStatus"]["code"]
                    .as_u64()
                    .is_some_and(|c| c < 300)
            })
            .map(received)
            .collect()
    }

    /// The Events on the configuration `short`, oldest first.
    pub async fn events(&self, short: &str) -> Vec<Value> {
        let path = format!(
            "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{}",
            self.name(short)
        );
        let list = self
            .send(http::Request::get(path).body(Vec::new()).expect("request"))
            .await
            .expect("events listed");
        let mut events = list["items"].as_array().cloned().unwrap_or_default();
        let version = |e: &Value| {
            e["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        events.sort_by_key(|e| (e["firstTimestamp"].as_str().map(str::to_string), version(e)));
        events
    }

    /// The reasons of those Events, oldest first.
    pub async fn event_reasons(&self, short: &str) -> Vec<String> {
        self.events(short)
            .await
            .iter()
            .filter_map(|e| e["reason"].as_str().map(str::to_string))
            .collect()
    }
}

/// The expression metainit adds to exempt namespace `ns`.
pub fn exemption(ns: &str) -> Value {
    json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [ns]})
}

/// A configuration's record of what metainit added (its annotation), as text: empty if none.
pub fn record_text(config: &Value) -> String {
    config["metadata"]["annotations"][ANNOTATION]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A configuration's record of what metainit added, parsed: fails the test if there is none
/// or it is not JSON.
pub fn record(config: &Value) -> Value {
    let text = record_text(config);
    assert!(
        !text.is_empty(),
        "no record on {}",
        config["metadata"]["name"]
    );
    serde_json::from_str(&text).expect("the record is JSON")
}

/// `entry` (a webhook) with `ns` exempted as metainit exempts it: its namespaceSelector's
/// expressions and the exemption after them.
pub fn exempted(entry: &Value, ns: &str) -> Value {
    let mut e = entry.clone();
    let exprs = e["namespaceSelector"]["matchExpressions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut exprs = exprs;
    exprs.push(exemption(ns));
    e["namespaceSelector"]["matchExpressions"] = Value::Array(exprs);
    e
}

/// A gauge or counter without labels in metainit's metrics text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

/// The duration an Event's message gives between `before` and `after` (`2.013s`, `850ms`,
/// `1m`), in seconds.
pub fn seconds_between(event: &Value, before: &str, after: &str) -> f64 {
    let message = event["message"].as_str().unwrap_or_default();
    let text = message
        .split_once(before)
        .and_then(|(_, rest)| rest.split_once(after))
        .map(|(d, _)| d)
        .unwrap_or_else(|| panic!("no {before:?}…{after:?} in {message:?}"));
    let (number, unit) = text.split_at(
        text.find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(text.len()),
    );
    let n: f64 = number
        .parse()
        .unwrap_or_else(|_| panic!("{text:?} in {message:?}"));
    n * match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => panic!("{text:?} in {message:?}"),
    }
}

/// How long after `from` the time `at` is (zero if before).
pub fn after(at: SystemTime, from: SystemTime) -> Duration {
    at.duration_since(from).unwrap_or_default()
}

/// What a user wrote of a configuration: all of it but the server's bookkeeping
/// (resourceVersion, generation, managedFields), which every write changes.
pub fn written(config: &Value) -> Value {
    let mut c = config.clone();
    if let Some(m) = c["metadata"].as_object_mut() {
        for k in ["resourceVersion", "generation", "managedFields"] {
            m.remove(k);
        }
    }
    c
}

impl Scene {
    /// Waits until `metainit` has logged `svc` of `ns` (short) down `times` times in all:
    /// its watch of the slices is fed from the API server's watch cache, as the server's
    /// own resolver is, so a pod created after it is refused without a dial.
    pub async fn seen_down(&self, metainit: &Metainit, ns: &str, svc: &str, times: usize) {
        let service = format!("service={}/{svc}", self.ns(ns));
        let count = || {
            metainit
                .log()
                .iter()
                .filter(|l| {
                    l.contains("a webhook's service has no ready endpoint") && l.contains(&service)
                })
                .count()
        };
        super::eventually("the service seen down", WAIT, || count() >= times).await;
    }
}

impl Scene {
    /// Waits until a pod creation in `ns` (short) is refused (the server's own copy of the
    /// configurations follows a write within moments), each try a new name: its message.
    pub async fn until_refused(&self, ns: &str, what: &str) -> String {
        static TRY: AtomicUsize = AtomicUsize::new(0);
        until(what, WAIT, || async {
            let n = TRY.fetch_add(1, Ordering::Relaxed);
            match self.create_pod(ns, &format!("refused-{n}")).await {
                Ok(()) => None,
                Err((code, message)) => {
                    assert_eq!(code, 500, "{message}");
                    Some(message)
                }
            }
        })
        .await
    }

    /// Waits until the first webhook of the validating configuration `short` has `ns`
    /// (short) exempted.
    pub async fn until_exempted(&self, short: &str, ns: &str) {
        let want = exemption(self.ns(ns));
        until("the exemption on the server", WAIT, || async {
            let entry = self.entry(short).await;
            entry["namespaceSelector"]["matchExpressions"]
                .as_array()
                .is_some_and(|e| e.contains(&want))
                .then_some(())
        })
        .await;
    }
}
