// The modern double's per-kind create and update strategies for the kinds `--webhooks`
// reads (pods' own rules are in `modern.rs`): what `PrepareForCreate`,
// `PrepareForUpdate`, `Validate` and `Canonicalize` do for Namespaces
// (`namespaces.rs`), webhook configurations (`webhookconfig.rs`), Services and
// EndpointSlices (`services.rs`).

use serde_json::Value;

use crate::namespaces;
use crate::resources::ResourceInfo;
use crate::services;
use crate::status::{self, ApiError};
use crate::webhookconfig;

fn is_mutating(res: &ResourceInfo) -> bool {
    res.kind == "MutatingWebhookConfiguration"
}

/// After the generic create preparation (name, uid, timestamps), before validating
/// admission: `Err` is the 422 of the kind's validation (webhook configurations: their
/// defaults only, `webhookconfig.rs`).
pub fn on_create(
    res: &ResourceInfo,
    obj: &mut Value,
    namespace: &str,
    name: &str,
) -> Result<(), ApiError> {
    if res.is_namespaces() {
        namespaces::on_create(obj, name);
    } else if res.is_webhook_configuration() {
        webhookconfig::default(obj, is_mutating(res));
    } else if res.key == "services" {
        services::service_on_create(obj, namespace, name);
    } else if res.key == "endpointslices.discovery.k8s.io" {
        services::endpointslice_defaults(obj);
        let causes = services::endpointslice_causes(obj);
        if !causes.is_empty() {
            return Err(status::invalid(res, name, &causes));
        }
    }
    Ok(())
}

/// A PUT or PATCH of the main resource, after the generic update preparation.
pub fn on_update(
    res: &ResourceInfo,
    new: &mut Value,
    old: &Value,
    name: &str,
) -> Result<(), ApiError> {
    if res.is_namespaces() {
        namespaces::on_update(new, old, name);
    } else if res.is_webhook_configuration() {
        webhookconfig::default(new, is_mutating(res));
    } else if res.key == "services" {
        services::service_on_update(new, old);
    } else if res.key == "endpointslices.discovery.k8s.io" {
        services::endpointslice_defaults(new);
        let causes = services::endpointslice_causes(new);
        if !causes.is_empty() {
            return Err(status::invalid(res, name, &causes));
        }
    }
    Ok(())
}
