//! The held objects a running metainit could not clear because the server kept what its
//! PATCH removed (`blocker::kept`): it says so in an Event on the object
//! (`InitializersKept`, `SchedulingGatesKept`), and `status` reads those Events back, so that
//! such an object is named with the field manager that puts its gates back, not only as
//! held. Events are read only if the user may list them: without, the rows say nothing more.

use std::time::Duration;

use k8s_openapi::{api::core::v1::Event, jiff::Timestamp};
use kube::{Api, Client, api::ListParams};
use tracing::debug;

use super::Row;
use crate::blocker::Mode;

/// The Event's reason in `mode`, as `events::Reason` writes it.
fn reason(mode: Mode) -> &'static str {
    match mode {
        Mode::Initializers => "InitializersKept",
        Mode::SchedulingGates => "SchedulingGatesKept",
    }
}

/// Marks the rows whose object has such an Event since it was created (an Event of an
/// older object of the same name is not its): `kept_by`, the field manager it names.
pub async fn mark(
    client: &Client,
    namespace: Option<&str>,
    mode: Mode,
    rows: &mut [Row],
    timeout: Duration,
) {
    if rows.is_empty() {
        return;
    }
    let api: Api<Event> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let params = ListParams::default().fields(&format!("reason={}", reason(mode)));
    let events = match tokio::time::timeout(timeout, api.list(&params)).await {
        Ok(Ok(list)) => list.items,
        Ok(Err(e)) => {
            debug!(error = %crate::failure::describe(&e), "the Events of kept objects not read");
            return;
        }
        Err(_) => return,
    };
    let now = Timestamp::now().as_second();
    for row in rows.iter_mut() {
        let created = now - i64::try_from(row.age_seconds).unwrap_or(i64::MAX);
        row.kept_by = events
            .iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(row.name.as_str()))
            .filter(|e| e.involved_object.namespace == row.namespace)
            .filter(|e| e.involved_object.kind.as_deref() == Some(row.kind.as_str()))
            .filter(|e| seconds(e) >= Some(created))
            .max_by_key(|e| seconds(e))
            .map(|e| manager_of(e.message.as_deref().unwrap_or_default()));
    }
}

/// When the Event was last seen, in seconds.
fn seconds(e: &Event) -> Option<i64> {
    e.last_timestamp
        .as_ref()
        .or(e.first_timestamp.as_ref())
        .map(|t| t.0.as_second())
}

/// The field manager an Event's message names ("... (last written by M): ...").
fn manager_of(message: &str) -> String {
    message
        .split_once("(last written by ")
        .and_then(|(_, rest)| rest.split_once("):"))
        .map_or_else(|| "unknown".to_string(), |(m, _)| m.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manager_is_read_from_the_events_message() {
        let m = "metainit removed scheduling gates a and the server answered with success, but \
                 kept them (last written by kubectl-create (Update)): a mutating admission \
                 webhook or policy puts them back on update";
        assert_eq!(manager_of(m), "kubectl-create (Update)");
        assert_eq!(manager_of("something else"), "unknown");
    }
}
