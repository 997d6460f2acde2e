//! What slipped through an exemption: while metainit exempts a namespace from a webhook,
//! the pods created there are admitted without it (no sidecar it would inject, no default
//! it would set, no check it would make: linkerd 13702, gatekeeper 2196, kyverno 16281 are
//! users finding such pods later). The pods created in the namespace since the exemption's
//! record (`record::Record::since`) are listed when it is restored (an Event on each, their
//! count in the restore's line) and while it lasts (`status --webhooks`).

use std::time::Duration;

use k8s_openapi::{
    api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::ObjectMeta, jiff::Timestamp,
};
use kube::{Api, Client, api::ListParams};

use crate::events;

/// The most pods a restore names in its log line (all get their Event).
pub const NAMED: usize = 10;

/// The pods of `namespace` created at `since` or later, oldest first, their metadata only;
/// the failure, in words, if they could not be listed within `limit`.
pub async fn created_since(
    client: &Client,
    namespace: &str,
    since: Timestamp,
    limit: Duration,
) -> Result<Vec<ObjectMeta>, String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let listed = tokio::time::timeout(limit, api.list_metadata(&ListParams::default())).await;
    let list = match listed {
        Ok(Ok(list)) => list,
        Ok(Err(e)) => return Err(crate::failure::describe(&e)),
        Err(_) => return Err(format!("no answer within {}", crate::text::duration(limit))),
    };
    let mut pods: Vec<ObjectMeta> = list
        .items
        .into_iter()
        .map(|p| p.metadata)
        // A creationTimestamp has whole seconds: a pod of the exemption's second counts
        // (better one named that the webhook saw than one missed).
        .filter(|m| {
            m.creation_timestamp
                .as_ref()
                .is_some_and(|t| t.0.as_second() >= since.as_second())
        })
        .collect();
    pods.sort_by(|a, b| a.creation_timestamp.cmp(&b.creation_timestamp));
    Ok(pods)
}

/// The Event on a pod `webhook` never saw: created in `namespace` while it was exempted.
pub fn event<'a>(
    pod: &'a ObjectMeta,
    resource: &'a kube::api::ApiResource,
    webhook: &str,
    since: &str,
    node: &'a str,
) -> events::Event<'a> {
    let namespace = pod.namespace.as_deref().unwrap_or_default();
    let message = format!(
        "created while metainit exempted namespace {namespace} from webhook {webhook} (since {since}): the webhook never saw this pod; recreate it if the webhook should have changed or refused it"
    );
    events::event(
        resource,
        pod,
        events::Reason::AdmittedWithoutWebhook,
        message,
        node,
    )
}

/// `a, b, c and 4 more`: the names a line shows of `pods`.
pub fn named(pods: &[ObjectMeta]) -> String {
    let names: Vec<&str> = pods
        .iter()
        .take(NAMED)
        .filter_map(|p| p.name.as_deref())
        .collect();
    match pods.len().saturating_sub(NAMED) {
        0 => names.join(", "),
        more => format!("{} and {more} more", names.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_ten_and_counts_the_rest() {
        let pods: Vec<ObjectMeta> = (0..12)
            .map(|i| ObjectMeta {
                name: Some(format!("p{i}")),
                ..ObjectMeta::default()
            })
            .collect();
        assert_eq!(named(&pods[..2]), "p0, p1");
        assert_eq!(
            named(&pods),
            "p0, p1, p2, p3, p4, p5, p6, p7, p8, p9 and 2 more"
        );
        assert_eq!(named(&[]), "");
    }
}
