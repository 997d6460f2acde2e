//! After an exemption: wake the controllers whose creates the webhook refused. A workload
//! controller (ReplicaSet, StatefulSet, DaemonSet, Job) retries a failed sync on its queue's
//! backoff, 5 ms doubling to 1,000 s, and counts every failure, the ones its own events
//! trigger too: a ReplicaSet whose pods were deleted fails twenty times in its first three
//! seconds, and its next try after the exemption can be a quarter of an hour away (seen on
//! the real node, tests/node_webhook.rs). Any change to the object wakes its controller at
//! once, so metainit annotates each one that the API server's Events show refused by that
//! webhook in the exempted namespace: `k8s.opsani.io/metainit-retry` with the time, on
//! the object's metadata (not its pod template: nothing rolls out). Best effort: a failure
//! here is logged and the exemption stands; the controller tries again on its own backoff.

use std::time::Duration;

use k8s_openapi::{api::core::v1::Event, jiff::Timestamp};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams},
};
use serde_json::json;
use tracing::{info, warn};

use super::LOG;

/// The annotation that wakes a controller.
pub const ANNOTATION: &str = "k8s.opsani.io/metainit-retry";
/// Events older than this are not read: the outage they tell of is over.
const RECENT: Duration = Duration::from_secs(3600);
/// At most this many objects woken for one exemption.
const MOST: usize = 100;

/// The kinds whose controllers create pods, as an Event's involvedObject names them.
fn resource(api_version: &str, kind: &str) -> Option<ApiResource> {
    let (group, version, plural) = match (api_version, kind) {
        ("apps/v1", "ReplicaSet") => ("apps", "v1", "replicasets"),
        ("apps/v1", "StatefulSet") => ("apps", "v1", "statefulsets"),
        ("apps/v1", "DaemonSet") => ("apps", "v1", "daemonsets"),
        ("batch/v1", "Job") => ("batch", "v1", "jobs"),
        _ => return None,
    };
    Some(ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    })
}

/// The objects of `events` refused by `webhook` since `since`: (resource, name), each once.
pub fn refused(events: &[Event], webhook: &str, since: Timestamp) -> Vec<(ApiResource, String)> {
    let phrase = format!("failed calling webhook \"{webhook}\"");
    let mut out: Vec<(ApiResource, String)> = Vec::new();
    for e in events {
        let last = e
            .last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or(e.event_time.as_ref().map(|t| t.0));
        let recent = last.is_some_and(|t| t >= since);
        let ours = e.message.as_deref().is_some_and(|m| m.contains(&phrase));
        let o = &e.involved_object;
        let (Some(v), Some(k), Some(name)) = (&o.api_version, &o.kind, &o.name) else {
            continue;
        };
        let Some(ar) = resource(v, k).filter(|_| recent && ours) else {
            continue;
        };
        if out.len() < MOST && !out.iter().any(|(a, n)| a.kind == ar.kind && n == name) {
            out.push((ar, name.clone()));
        }
    }
    out
}

/// Wakes the controllers `webhook` refused in `namespace`; logs what it did.
pub async fn nudge(client: &Client, namespace: &str, webhook: &str) {
    let since = Timestamp::now() - RECENT;
    let events = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields("reason=FailedCreate"))
        .await;
    let events = match events {
        Ok(list) => list.items,
        Err(e) => {
            warn!(target: LOG, namespace, webhook, error = %crate::failure::Failure::from(e),
                  "cannot read the Events of the controllers the webhook refused: they try again on their own backoff (up to 1000s)");
            return;
        }
    };
    let stamp = json!({"metadata": {"annotations": {ANNOTATION: Timestamp::now().to_string()}}});
    let mut woken = Vec::new();
    for (ar, name) in refused(&events, webhook, since) {
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &ar);
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&stamp))
            .await
        {
            Ok(_) => woken.push(format!("{}/{name}", ar.plural)),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                warn!(target: LOG, namespace, webhook, object = %format!("{}/{name}", ar.plural),
                      error = %crate::failure::Failure::from(e),
                      "cannot wake the controller the webhook refused: it tries again on its own backoff (up to 1000s)");
            }
        }
    }
    if !woken.is_empty() {
        info!(target: LOG, namespace, webhook, objects = %woken.join(","),
              "asked the controllers the webhook refused to try again now (annotation {ANNOTATION})");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn event(kind: &str, api_version: &str, name: &str, message: &str, ago: i64) -> Event {
        let mut e = Event::default();
        e.involved_object.kind = Some(kind.into());
        e.involved_object.api_version = Some(api_version.into());
        e.involved_object.name = Some(name.into());
        e.message = Some(message.into());
        e.last_timestamp = Some(Time(
            Timestamp::now() - Duration::from_secs(ago.unsigned_abs()),
        ));
        e
    }

    #[test]
    fn only_the_recent_refusals_of_that_webhook_of_a_pod_creating_kind_each_once() {
        let refusal = "Error creating: Internal error occurred: failed calling webhook \"v.guard\": no endpoints";
        let events = [
            event("ReplicaSet", "apps/v1", "a", refusal, 5),
            event("ReplicaSet", "apps/v1", "a", refusal, 3),
            event("StatefulSet", "apps/v1", "s", refusal, 5),
            event("Job", "batch/v1", "j", refusal, 5),
            event("DaemonSet", "apps/v1", "d", refusal, 7200),
            event(
                "ReplicaSet",
                "apps/v1",
                "other",
                "failed calling webhook \"x\"",
                5,
            ),
            event("Deployment", "apps/v1", "dep", refusal, 5),
        ];
        let since = Timestamp::now() - RECENT;
        let got: Vec<String> = refused(&events, "v.guard", since)
            .into_iter()
            .map(|(ar, n)| format!("{}/{n}", ar.plural))
            .collect();
        assert_eq!(got, ["replicasets/a", "statefulsets/s", "jobs/j"]);
    }
}
