//! A Kubernetes Event on each cleared object. Written as core/v1 Events, which both API
//! generations serve (events.k8s.io/v1 does not exist on 1.13), with the reporting
//! controller and instance set as events.k8s.io expects. What each Event says is here; how
//! it is written as text is `text.rs`, how it is sent `sink.rs`, and which node reports it
//! `node.rs`.

mod node;
mod sink;
mod text;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ApiResource;

use crate::{
    blocker::{Kept, Mode},
    object::Held,
    release::Due,
};

pub use node::{hostname, node_name, pick_node_name};
pub use sink::{QUEUE_LIMIT, Sink};
pub use text::Event;
use text::{EventMeta, Involved, Source};

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
    /// A clearing PATCH was answered with success, but the object kept what it removed
    /// (type Warning: something puts it back).
    InitializersKept,
    SchedulingGatesKept,
    /// A pod created in a namespace while metainit exempted it from a webhook: the webhook
    /// never saw it (type Warning: it may lack what the webhook adds).
    AdmittedWithoutWebhook,
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
            Reason::InitializersKept => "InitializersKept",
            Reason::SchedulingGatesKept => "SchedulingGatesKept",
            Reason::AdmittedWithoutWebhook => "AdmittedWithoutWebhook",
        }
    }

    /// The Event's `action` and `type`.
    fn action_and_type(self) -> (&'static str, &'static str) {
        match self {
            Reason::InitializersCleared | Reason::SchedulingGatesCleared => ("Clear", "Normal"),
            Reason::SchedulingGateReleased => ("Release", "Normal"),
            Reason::WebhookSelfExempted => ("Exempt", "Warning"),
            Reason::WebhookRestored => ("Restore", "Normal"),
            Reason::InitializersKept | Reason::SchedulingGatesKept => ("Clear", "Warning"),
            Reason::AdmittedWithoutWebhook => ("Restore", "Warning"),
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

/// Builds the Event for an object whose clearing PATCH the server answered with success
/// while keeping what it removed.
pub fn kept_event<'a>(resource: &'a ApiResource, kept: &'a Kept, node: &'a str) -> Event<'a> {
    let (reason, what) = match kept.what {
        "initializers" => (Reason::InitializersKept, "initializers"),
        _ => (Reason::SchedulingGatesKept, "scheduling gates"),
    };
    let message = format!(
        "metainit removed {what} {} and the server answered with success, but kept them (last \
         written by {}): a mutating admission webhook or policy puts them back on update",
        kept.names.join(", "),
        kept.manager
            .as_deref()
            .unwrap_or("an unknown field manager")
    );
    event(resource, &kept.object.metadata.meta, reason, message, node)
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
pub use event as webhook_event;

/// Builds the Event about the object with `meta`, of the kind `resource`.
pub fn event<'a>(
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
