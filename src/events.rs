//! A Kubernetes Event on each cleared object. Written as core/v1 Events, which both API
//! generations serve (events.k8s.io/v1 does not exist on 1.13), with the reporting
//! controller and instance set as events.k8s.io expects.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ApiResource;

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use backon::{ExponentialBuilder, Retryable};
use tokio::sync::Notify;
use tracing::{debug, warn};

use crate::{
    blocker::Mode,
    client::Direct,
    failure::{Class, Failure, retry_after},
    metrics::Metrics,
    object::Held,
    release::Due,
};

pub const REPORTING_CONTROLLER: &str = "metainit";

/// The reason of each Event metainit writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    InitializersCleared,
    SchedulingGatesCleared,
    /// A `--release-gate` rule released a pod's orphaned gate.
    SchedulingGateReleased,
    /// metainit exempted a webhook's own namespace (type Warning: a policy is lifted for a
    /// namespace).
    WebhookSelfExempted,
    /// metainit removed its exemption.
    WebhookRestored,
}

impl Reason {
    /// The Event's `reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InitializersCleared => "InitializersCleared",
            Reason::SchedulingGatesCleared => "SchedulingGatesCleared",
            Reason::SchedulingGateReleased => "SchedulingGateReleased",
            Reason::WebhookSelfExempted => "WebhookSelfExempted",
            Reason::WebhookRestored => "WebhookRestored",
        }
    }

    /// The Event's `action` and `type`.
    fn action_and_type(self) -> (&'static str, &'static str) {
        match self {
            Reason::InitializersCleared | Reason::SchedulingGatesCleared => ("Clear", "Normal"),
            Reason::SchedulingGateReleased => ("Release", "Normal"),
            Reason::WebhookSelfExempted => ("Exempt", "Warning"),
            Reason::WebhookRestored => ("Restore", "Normal"),
        }
    }

    /// The reason of the Event on an object cleared in `mode`.
    pub fn cleared(mode: Mode) -> Reason {
        match mode {
            Mode::Initializers => Reason::InitializersCleared,
            Mode::SchedulingGates => Reason::SchedulingGatesCleared,
        }
    }
}

/// Builds the Event for an object whose `names` were cleared in `mode`.
pub fn cleared_event<'a>(
    resource: &'a ApiResource,
    obj: &'a Held,
    mode: Mode,
    names: &[String],
    node: &'a str,
) -> Event<'a> {
    let what = match mode {
        Mode::Initializers => "initializers",
        Mode::SchedulingGates => "scheduling gates",
    };
    let message = format!("metainit removed {what}: {}", names.join(", "));
    event(
        resource,
        &obj.metadata.meta,
        Reason::cleared(mode),
        message,
        node,
    )
}

/// Builds the Event for a pod whose orphaned `gates` were released.
pub fn released_event<'a>(
    resource: &'a ApiResource,
    obj: &'a Held,
    gates: &[Due],
    node: &'a str,
) -> Event<'a> {
    let each: Vec<String> = gates
        .iter()
        .map(|d| {
            format!(
                "gate {} after {} (rule --release-gate {})",
                d.gate,
                crate::text::age_of(d.age),
                d.rule
            )
        })
        .collect();
    let message = format!("metainit released {}", each.join("; "));
    event(
        resource,
        &obj.metadata.meta,
        Reason::SchedulingGateReleased,
        message,
        node,
    )
}

/// Builds the Event on a webhook configuration (a cluster-scoped object: the Event goes
/// to `default`, as client-go's recorder puts it).
pub fn webhook_event<'a>(
    resource: &'a ApiResource,
    meta: &'a ObjectMeta,
    reason: Reason,
    message: String,
    node: &'a str,
) -> Event<'a> {
    event(resource, meta, reason, message, node)
}

fn event<'a>(
    resource: &'a ApiResource,
    meta: &'a ObjectMeta,
    reason: Reason,
    message: String,
    node: &'a str,
) -> Event<'a> {
    let (action, type_) = reason.action_and_type();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let name = meta.name.as_deref().unwrap_or_default();
    // As k8s-openapi writes a `Time`: whole seconds, UTC.
    let at = crate::text::rfc3339_seconds(now.as_secs());
    Event {
        api_version: "v1",
        kind: "Event",
        metadata: EventMeta {
            // client-go's naming: the object's name and a unique suffix.
            name: format!("{name}.{:x}", now.as_nanos()),
            namespace: meta.namespace.as_deref().unwrap_or("default"),
        },
        involved_object: Involved {
            api_version: &resource.api_version,
            kind: &resource.kind,
            name: meta.name.as_deref(),
            namespace: meta.namespace.as_deref(),
            uid: meta.uid.as_deref(),
            resource_version: meta.resource_version.as_deref(),
        },
        reason,
        message,
        type_,
        action,
        source: Source {
            component: REPORTING_CONTROLLER,
            host: node,
        },
        reporting_component: REPORTING_CONTROLLER,
        reporting_instance: node,
        first_timestamp: at.clone(),
        last_timestamp: at,
        count: 1,
    }
}

/// A core/v1 Event as metainit writes it, borrowing what it can from the object: the
/// fields k8s-openapi's `Event` would send for it, in the same order, without building
/// that `Event` (its owned copies and its time formatting were about 5 % of the
/// instructions per cleared object), and written as JSON text directly (`to_json`).
#[derive(Debug)]
pub struct Event<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: EventMeta<'a>,
    involved_object: Involved<'a>,
    reason: Reason,
    message: String,
    type_: &'static str,
    action: &'static str,
    source: Source<'a>,
    reporting_component: &'static str,
    reporting_instance: &'a str,
    first_timestamp: String,
    last_timestamp: String,
    count: u32,
}

#[derive(Debug)]
struct EventMeta<'a> {
    name: String,
    namespace: &'a str,
}

#[derive(Debug)]
struct Involved<'a> {
    api_version: &'a str,
    kind: &'a str,
    name: Option<&'a str>,
    namespace: Option<&'a str>,
    uid: Option<&'a str>,
    resource_version: Option<&'a str>,
}

#[derive(Debug)]
struct Source<'a> {
    component: &'static str,
    host: &'a str,
}

impl Event<'_> {
    /// The Event as JSON text: what serde would write for the fields above (camelCase,
    /// absent `involvedObject` fields left out), each string escaped once, in one buffer.
    /// (Through serde it cost about 7 k instructions per cleared object.)
    pub fn to_json(&self) -> String {
        fn field(out: &mut String, first: bool, key: &str, value: &str) {
            out.push_str(if first { "\"" } else { ",\"" });
            out.push_str(key);
            out.push_str("\":");
            crate::blocker::push_json_string(out, value);
        }
        let mut out = String::with_capacity(768 + self.message.len());
        out.push('{');
        field(&mut out, true, "apiVersion", self.api_version);
        field(&mut out, false, "kind", self.kind);
        out.push_str(",\"metadata\":{");
        field(&mut out, true, "name", &self.metadata.name);
        field(&mut out, false, "namespace", self.metadata.namespace);
        out.push_str("},\"involvedObject\":{");
        let o = &self.involved_object;
        field(&mut out, true, "apiVersion", o.api_version);
        field(&mut out, false, "kind", o.kind);
        for (key, value) in [
            ("name", o.name),
            ("namespace", o.namespace),
            ("uid", o.uid),
            ("resourceVersion", o.resource_version),
        ] {
            if let Some(value) = value {
                field(&mut out, false, key, value);
            }
        }
        out.push('}');
        field(&mut out, false, "reason", self.reason.as_str());
        field(&mut out, false, "message", &self.message);
        field(&mut out, false, "type", self.type_);
        field(&mut out, false, "action", self.action);
        out.push_str(",\"source\":{");
        field(&mut out, true, "component", self.source.component);
        field(&mut out, false, "host", self.source.host);
        out.push('}');
        field(
            &mut out,
            false,
            "reportingComponent",
            self.reporting_component,
        );
        field(
            &mut out,
            false,
            "reportingInstance",
            self.reporting_instance,
        );
        field(&mut out, false, "firstTimestamp", &self.first_timestamp);
        field(&mut out, false, "lastTimestamp", &self.last_timestamp);
        out.push_str(",\"count\":");
        out.push_str(&self.count.to_string());
        out.push('}');
        out
    }
}

/// An Event ready to be written: its namespace and its body.
struct Prepared {
    namespace: String,
    body: Vec<u8>,
    /// The object's `namespace/name`, for the log.
    key: String,
}

impl Prepared {
    fn new(event: &Event<'_>, key: String) -> Prepared {
        Prepared {
            namespace: event.metadata.namespace.to_string(),
            body: event.to_json().into_bytes(),
            key,
        }
    }

    /// `POST /api/v1/namespaces/NS/events`, as `Api::<Event>::create` sends it (the same
    /// path, content type and verb for kube's tracing layer), its URL written directly.
    fn request(&self) -> Result<http::Request<Vec<u8>>, kube::Error> {
        let mut url = String::with_capacity(32 + self.namespace.len());
        url.push_str("/api/v1/namespaces/");
        url.push_str(&self.namespace);
        url.push_str("/events");
        http::Request::post(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .extension("create")
            .body(self.body.clone())
            .map_err(kube::Error::HttpError)
    }
}

/// Writes the Event. The caller logs and counts a failure; it never fails a clearing.
/// The server's copy of the Event in the answer is not decoded: nothing reads it.
async fn publish(direct: &Direct, event: &Prepared) -> Result<(), kube::Error> {
    direct.send(event.request()?).await
}

/// This node's name: `--node-name`, then `NODE_NAME`, then the hostname (lower-cased,
/// as the kubelet does); empty values count as absent. A value that is not a valid node
/// name is refused with what to fix.
pub fn node_name(flag: Option<&str>) -> crate::Result<String> {
    let hostname = || {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_ascii_lowercase())
    };
    pick_node_name(flag, std::env::var("NODE_NAME").ok(), hostname)
}

/// `node_name` with its sources given.
pub fn pick_node_name(
    flag: Option<&str>,
    env: Option<String>,
    hostname: impl FnOnce() -> Option<String>,
) -> crate::Result<String> {
    let bad = |what: &str, value: &str| {
        crate::Error::Config(format!(
            "invalid node name '{value}' from {what}: {}",
            crate::validation::NODE_NAME_RULE
        ))
    };
    if let Some(flag) = flag.filter(|f| !f.is_empty()) {
        return crate::validation::node_name(flag)
            .map(|()| flag.to_string())
            .map_err(|_| bad("--node-name", flag));
    }
    if let Some(env) = env.filter(|e| !e.is_empty()) {
        return crate::validation::node_name(&env)
            .map(|()| env.clone())
            .map_err(|_| bad("NODE_NAME", &env));
    }
    match hostname().filter(|h| !h.is_empty()) {
        Some(h) if crate::validation::node_name(&h).is_ok() => Ok(h),
        Some(h) => Err(crate::Error::Config(format!(
            "the hostname '{h}' is not a valid node name: pass --node-name or set NODE_NAME ({})",
            crate::validation::NODE_NAME_RULE
        ))),
        None => Err(crate::Error::Config(
            "cannot tell this node's name: no hostname could be read; pass --node-name or set NODE_NAME".into(),
        )),
    }
}

/// At most this many Events wait to be written; more are dropped, and counted.
pub const QUEUE_LIMIT: usize = 1024;

/// Writes Events in the background, a few at a time (a few workers) so that in a burst
/// they trail the clearing instead of competing with it for the server; retries a
/// transient failure a few times with backoff; bounds what waits, each Event as its
/// serialized body; and lets the process wait for the ones still queued before it exits.
pub struct Sink {
    direct: Direct,
    metrics: Arc<Metrics>,
    waiting: Mutex<VecDeque<Prepared>>,
    /// Wakes an idle worker.
    ready: Notify,
    /// Events queued or being written.
    queued: AtomicUsize,
    idle: Notify,
}

impl Sink {
    /// Starts `concurrency` workers (at least one) on the current runtime.
    pub fn new(direct: Direct, metrics: Arc<Metrics>, concurrency: usize) -> Arc<Sink> {
        let sink = Arc::new(Sink {
            direct,
            metrics,
            waiting: Mutex::new(VecDeque::new()),
            ready: Notify::new(),
            queued: AtomicUsize::new(0),
            idle: Notify::new(),
        });
        for _ in 0..concurrency.max(1) {
            tokio::spawn(Arc::clone(&sink).work());
        }
        sink
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, VecDeque<Prepared>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues an Event about `key`; a failure is logged and counted, an Event that
    /// finds the queue full is dropped and counted.
    pub fn send(&self, event: Event<'_>, key: String) {
        if self.queued.fetch_add(1, Ordering::SeqCst) >= QUEUE_LIMIT {
            self.done();
            self.metrics.events_dropped.inc();
            debug!(object = %key, "Event queue full; Event dropped");
            return;
        }
        self.waiting().push_back(Prepared::new(&event, key));
        self.ready.notify_one();
    }

    /// One worker: writes the next waiting Event, for ever.
    async fn work(self: Arc<Self>) {
        loop {
            let ready = self.ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            let Some(event) = self.waiting().pop_front() else {
                ready.await;
                continue;
            };
            let retry = ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(200))
                .with_max_delay(Duration::from_secs(5))
                .with_max_times(3)
                .with_jitter();
            let result = (|| async { publish(&self.direct, &event).await.map_err(Failure::from) })
                .retry(retry)
                .when(|f: &Failure| {
                    matches!(
                        f.class,
                        Class::ServerError | Class::Throttled | Class::Timeout | Class::Unreachable
                    )
                })
                .adjust(|f: &Failure, wait| Some(wait?.max(retry_after(&f.error))))
                .await;
            if let Err(f) = result {
                self.metrics.event_failures.inc();
                warn!(object = %event.key, error = %f, "cannot write the Event");
            }
            self.done();
        }
    }

    fn done(&self) {
        if self.queued.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// How many Events wait to be written.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// Waits until every queued Event is written (or failed), at most `limit`.
    pub async fn drained(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, async {
            loop {
                let idle = self.idle.notified();
                tokio::pin!(idle);
                idle.as_mut().enable();
                if self.queued.load(Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        })
        .await
        .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::{Value, json};

    #[test]
    fn the_request_is_what_api_create_sends() {
        let prepared = Prepared {
            namespace: "kube-system".into(),
            body: b"{}".to_vec(),
            key: "kube-system/p".into(),
        };
        let ours = prepared.request().unwrap();
        let kubes = kube::core::Request::new(<core::Event as kube::Resource>::url_path(
            &(),
            Some("kube-system"),
        ))
        .create(&kube::api::PostParams::default(), b"{}".to_vec())
        .unwrap();
        assert_eq!(ours.method(), kubes.method());
        assert_eq!(ours.uri().path(), kubes.uri().path());
        assert_eq!(
            ours.uri().query().unwrap_or(""),
            kubes.uri().query().unwrap_or("")
        );
        assert_eq!(ours.headers(), kubes.headers());
        assert_eq!(ours.body(), kubes.body());
        assert_eq!(ours.extensions().get::<&str>(), Some(&"create"));
    }

    /// What k8s-openapi's `Event` would send with the same fields and times as `ours`.
    fn theirs(
        ours: &Value,
        involved: core::ObjectReference,
        reason: &str,
        message: &str,
        type_: &str,
        action: &str,
    ) -> Value {
        let at: Time = serde_json::from_value(ours["firstTimestamp"].clone()).unwrap();
        let event = core::Event {
            metadata: ObjectMeta {
                name: ours["metadata"]["name"].as_str().map(String::from),
                namespace: ours["metadata"]["namespace"].as_str().map(String::from),
                ..ObjectMeta::default()
            },
            involved_object: involved,
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some(type_.into()),
            action: Some(action.into()),
            source: Some(core::EventSource {
                component: Some("metainit".into()),
                host: Some("cp-1".into()),
            }),
            reporting_component: Some("metainit".into()),
            reporting_instance: Some("cp-1".into()),
            first_timestamp: Some(at.clone()),
            last_timestamp: Some(at),
            count: Some(1),
            ..core::Event::default()
        };
        serde_json::to_value(&event).unwrap()
    }

    #[test]
    fn the_event_is_what_k8s_openapi_would_send() {
        let pods = ApiResource::erase::<core::Pod>(&());
        let pod = crate::object::held(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                         "labels": {"k8s.opsani.io/initializer": ""}},
            "spec": {"schedulingGates": [{"name": "a"}, {"name": "b"}]}
        }));
        let names = ["a".to_string(), "b".to_string()];
        let ours: Value = serde_json::from_str(
            &cleared_event(&pods, &pod, Mode::SchedulingGates, &names, "cp-1").to_json(),
        )
        .unwrap();
        let name = ours["metadata"]["name"].as_str().unwrap();
        assert!(name.starts_with("p.") && name.len() > 4, "{name}");
        assert_eq!(ours["metadata"]["namespace"], "ns");
        let at = ours["firstTimestamp"].as_str().unwrap();
        assert!(
            at.len() == 20 && at.ends_with('Z'),
            "whole seconds, UTC: {at}"
        );
        let involved = core::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some("u-1".into()),
            resource_version: Some("7".into()),
            ..core::ObjectReference::default()
        };
        assert_eq!(
            ours,
            theirs(
                &ours,
                involved,
                "SchedulingGatesCleared",
                "metainit removed scheduling gates: a, b",
                "Normal",
                "Clear"
            )
        );

        // A cluster-scoped configuration: the Event goes to `default`, and says Warning.
        let vwc = ApiResource::erase::<
            k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
        >(&());
        let meta = ObjectMeta {
            name: Some("gk".into()),
            uid: Some("u-2".into()),
            resource_version: Some("9".into()),
            ..ObjectMeta::default()
        };
        // What needs escaping, in the message and the names.
        let why = "why: \"quoted\", back\\slash, new\nline, \u{1}, é";
        let meta = ObjectMeta {
            name: Some("g\"k".into()),
            ..meta
        };
        let ours: Value = serde_json::from_str(
            &webhook_event(&vwc, &meta, Reason::WebhookSelfExempted, why.into(), "cp-1").to_json(),
        )
        .unwrap();
        assert_eq!(ours["metadata"]["namespace"], "default");
        let involved = core::ObjectReference {
            api_version: Some("admissionregistration.k8s.io/v1".into()),
            kind: Some("ValidatingWebhookConfiguration".into()),
            name: Some("g\"k".into()),
            uid: Some("u-2".into()),
            resource_version: Some("9".into()),
            ..core::ObjectReference::default()
        };
        assert_eq!(
            ours,
            theirs(
                &ours,
                involved,
                "WebhookSelfExempted",
                why,
                "Warning",
                "Exempt"
            )
        );
    }

    #[test]
    fn node_name_from_flag_then_env_then_hostname() {
        let host = || Some("cp-host".to_string());
        let pick = |flag, env: Option<&str>| pick_node_name(flag, env.map(String::from), host);
        assert_eq!(pick(Some("cp-1"), Some("env-1")).unwrap(), "cp-1");
        assert_eq!(pick(Some(""), Some("env-1")).unwrap(), "env-1");
        assert_eq!(pick(None, Some("")).unwrap(), "cp-host");
        assert_eq!(pick(Some(""), None).unwrap(), "cp-host");
        let err = pick(None, Some("Bad_Node")).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "invalid node name 'Bad_Node' from NODE_NAME: a node name is a DNS-1123 subdomain"
            ),
            "{err}"
        );
        let err = pick_node_name(None, None, || Some("under_score".into()))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("the hostname 'under_score' is not a valid node name: pass --node-name or set NODE_NAME"),
            "{err}"
        );
        assert!(pick_node_name(None, None, || None).is_err());
    }
}
