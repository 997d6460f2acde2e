//! The Event written as JSON text from fields borrowed from the object, not a k8s-openapi
//! `Event` built and serialized: fewer instructions per cleared object (BENCHMARKS.md, "CPU
//! per object: user and system time, and the kernel's floor", change 2).

use super::Reason;

/// A core/v1 Event as metainit writes it, borrowing what it can from the object: the
/// fields k8s-openapi's `Event` would send for it, in the same order, written as JSON
/// text directly (`to_json`).
#[derive(Debug)]
pub struct Event<'a> {
    pub(super) api_version: &'static str,
    pub(super) kind: &'static str,
    pub(super) metadata: EventMeta<'a>,
    pub(super) involved_object: Involved<'a>,
    pub(super) reason: Reason,
    pub(super) message: String,
    pub(super) type_: &'static str,
    pub(super) action: &'static str,
    pub(super) source: Source<'a>,
    pub(super) reporting_component: &'static str,
    pub(super) reporting_instance: &'a str,
    pub(super) first_timestamp: String,
    pub(super) last_timestamp: String,
    pub(super) count: u32,
}

#[derive(Debug)]
pub(super) struct EventMeta<'a> {
    pub(super) name: String,
    pub(super) namespace: &'a str,
}

#[derive(Debug)]
pub(super) struct Involved<'a> {
    pub(super) api_version: &'a str,
    pub(super) kind: &'a str,
    pub(super) name: Option<&'a str>,
    pub(super) namespace: Option<&'a str>,
    pub(super) uid: Option<&'a str>,
    pub(super) resource_version: Option<&'a str>,
}

#[derive(Debug)]
pub(super) struct Source<'a> {
    pub(super) component: &'static str,
    pub(super) host: &'a str,
}

impl<'a> Event<'a> {
    /// The namespace the Event is written to.
    pub(super) fn namespace(&self) -> &'a str {
        self.metadata.namespace
    }

    /// The Event as JSON text: what serde would write for the fields above (camelCase,
    /// absent `involvedObject` fields left out), each string escaped once, in one buffer.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        blocker::Mode,
        events::{cleared_event, webhook_event},
    };
    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use kube::api::ApiResource;
    use serde_json::{Value, json};

    /// What k8s-openapi's `Event` would send with the same name and times as `ours`, about
    /// the object `involved` (its apiVersion, kind, name, namespace, uid, resourceVersion),
    /// saying `said` (its reason, message, type and action).
    fn theirs(ours: &Value, involved: [Option<&str>; 6], said: [&str; 4]) -> Value {
        let [api_version, kind, name, namespace, uid, resource_version] =
            involved.map(|v| v.map(String::from));
        let involved = core::ObjectReference {
            api_version,
            kind,
            name,
            namespace,
            uid,
            resource_version,
            ..core::ObjectReference::default()
        };
        let [reason, message, type_, action] = said.map(|s| Some(s.to_string()));
        let at: Time = serde_json::from_value(ours["firstTimestamp"].clone()).unwrap();
        let event = core::Event {
            metadata: ObjectMeta {
                name: ours["metadata"]["name"].as_str().map(String::from),
                namespace: ours["metadata"]["namespace"].as_str().map(String::from),
                ..ObjectMeta::default()
            },
            involved_object: involved,
            reason,
            message,
            type_,
            action,
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
        let pod_ref = [
            Some("v1"),
            Some("Pod"),
            Some("p"),
            Some("ns"),
            Some("u-1"),
            Some("7"),
        ];
        let said = [
            "SchedulingGatesCleared",
            "metainit removed scheduling gates: a, b",
            "Normal",
            "Clear",
        ];
        assert_eq!(ours, theirs(&ours, pod_ref, said));

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
        let config_ref = [
            Some("admissionregistration.k8s.io/v1"),
            Some("ValidatingWebhookConfiguration"),
            Some("g\"k"),
            None,
            Some("u-2"),
            Some("9"),
        ];
        let said = ["WebhookSelfExempted", why, "Warning", "Exempt"];
        assert_eq!(ours, theirs(&ours, config_ref, said));
    }
}
