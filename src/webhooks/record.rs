//! The annotation record: what metainit added to a configuration, one entry per
//! webhook, kept on the configuration itself so that a restore removes exactly it, from any
//! replica and after any restart.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The annotation on a configuration that records metainit's exemptions.
pub const ANNOTATION: &str = "k8s.opsani.io/metainit-exempted";

/// One exemption as the annotation records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The expression added, exactly.
    pub expression: Value,
    /// When it was added (RFC 3339).
    pub since: String,
}

/// The annotation's records by webhook name; `Err` if it is there but not ours to read.
pub fn records(annotation: Option<&str>) -> Result<BTreeMap<String, Record>, String> {
    match annotation {
        None => Ok(BTreeMap::new()),
        Some(text) => serde_json::from_str(text).map_err(|e| {
            format!("the annotation {ANNOTATION} is not metainit's record ({e}); remove it")
        }),
    }
}

/// The records on a configuration (see `records`).
pub fn records_of(obj: &DynamicObject) -> Result<BTreeMap<String, Record>, String> {
    records(
        obj.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION))
            .map(String::as_str),
    )
}
