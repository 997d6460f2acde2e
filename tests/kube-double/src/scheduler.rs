// The optional stand-in scheduler (`Config::scheduler`, `--scheduler NODE`): binds every
// pod kube-scheduler would pick up to one node, through the same binding as
// `POST pods/NAME/binding`. Off by default: nothing schedules, and a pod whose last gate
// was removed keeps its `PodScheduled=False/SchedulingGated` condition, as on a real
// server with no scheduler running.
//
// What kube-scheduler considers (1.13.12 and 1.33.4 `pkg/scheduler`): pods with no
// `spec.nodeName`, not terminating, whose `spec.schedulerName` is empty or
// `default-scheduler`; its informer lists without `includeUninitialized` (1.13, so only
// initialized pods), and 1.33's `SchedulingGates` PreEnqueue plugin keeps gated pods out
// of the active queue. The stand-in binds at once to its node: no filters, no scoring.

use std::sync::Arc;

use serde_json::Value;

use crate::api;
use crate::legacy;
use crate::resources::ResourceInfo;
use crate::state::Shared;

/// Whether kube-scheduler would try to bind this pod now.
pub fn wants(pod: &Value) -> bool {
    let unbound = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    let ours = pod
        .pointer("/spec/schedulerName")
        .and_then(Value::as_str)
        .is_none_or(|s| s.is_empty() || s == "default-scheduler");
    let terminating = pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null());
    let gated = pod
        .pointer("/spec/schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(|g| !g.is_empty());
    unbound && ours && !terminating && !gated && legacy::is_initialized(pod)
}

/// Runs for the life of the runtime; sleeps while no node is set.
pub fn spawn(shared: Arc<Shared>) {
    tokio::spawn(async move { run(shared).await });
}

async fn run(shared: Arc<Shared>) {
    let Some(res) = shared.registry.by_key("pods").cloned() else {
        return;
    };
    let mut changes = shared.store.subscribe();
    // `None`: look at every pod (just switched on, or the change log moved past us).
    let mut cursor: Option<u64> = None;
    loop {
        let Some(node) = shared.scheduler() else {
            cursor = None;
            shared.scheduler_changed.notified().await;
            continue;
        };
        let candidates = {
            let inner = shared.store.lock();
            let full = || {
                inner
                    .all(&res.key)
                    .into_iter()
                    .filter(|p| wants(p))
                    .map(|p| key_of(&p))
                    .collect::<Vec<_>>()
            };
            let found = match cursor {
                None => full(),
                Some(c) => match inner.events_after(c, usize::MAX) {
                    Ok(events) => events
                        .iter()
                        .filter(|e| e.resource == res.key && wants(&e.object))
                        .map(|e| (e.namespace.clone(), e.name.clone()))
                        .collect(),
                    Err(_) => full(),
                },
            };
            cursor = Some(inner.revision());
            found
        };
        for (ns, name) in candidates {
            bind(&shared, &res, &ns, &name, &node);
        }
        tokio::select! {
            r = changes.changed() => {
                if r.is_err() {
                    return;
                }
            }
            _ = shared.scheduler_changed.notified() => cursor = None,
        }
    }
}

fn key_of(pod: &Value) -> (String, String) {
    let s = |f: &str| {
        pod.pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (s("namespace"), s("name"))
}

/// Binds if the pod still wants it (it may have changed since the event); a refusal
/// (bound meanwhile, gated again after a re-create) is left for the next change.
fn bind(shared: &Shared, res: &ResourceInfo, ns: &str, name: &str, node: &str) {
    let current = shared.store.lock().get(&res.key, ns, name);
    if current.is_some_and(|p| wants(&p)) {
        let _ = api::bind(shared, res, ns, name, node, None);
    }
}
