// `/_double/*` control routes for out-of-process tests: never faulted, never authenticated.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response};
use serde_json::{Value, json};

use crate::api;
use crate::config::{FaultsWire, check_permissions};
use crate::routes::{Body, error_response, json_response};
use crate::server::{Server, Spare};
use crate::state::{RequestRecord, format_time_micro};
use crate::status;
use crate::store::Snapshot;

pub fn record_json(r: &RequestRecord) -> Value {
    json!({
        "at": format_time_micro(r.at),
        "method": r.method,
        "pathAndQuery": r.path_and_query,
        "contentType": r.content_type,
        "userAgent": r.user_agent,
        "body": r.body,
        "status": r.status,
    })
}

pub async fn handle(
    server: &Arc<Server>,
    method: &Method,
    rest: &str,
    query: &HashMap<String, String>,
    body: &Bytes,
    spare: Option<&Spare>,
) -> Response<Body> {
    let shared = &server.shared;
    let segs: Vec<&str> = rest.trim_matches('/').split('/').collect();
    let ok = || json_response(200, &json!({"ok": true}));
    match (method, segs.as_slice()) {
        (&Method::GET, ["requests"]) => {
            let all: Vec<Value> = shared.requests().iter().map(record_json).collect();
            json_response(200, &Value::Array(all))
        }
        (&Method::DELETE, ["requests"]) => {
            shared.clear_requests();
            ok()
        }
        (&Method::GET, ["events"]) => {
            let inner = shared.store.lock();
            let mut all: Vec<Value> = Vec::new();
            for key in ["events", "events.events.k8s.io"] {
                all.extend(inner.all(key).iter().map(|o| (**o).clone()));
            }
            json_response(200, &Value::Array(all))
        }
        (&Method::GET, ["objects", resource]) => {
            let inner = shared.store.lock();
            let all: Vec<Value> = inner.all(resource).iter().map(|o| (**o).clone()).collect();
            json_response(200, &Value::Array(all))
        }
        (&Method::GET, ["history", resource, ns, name]) => {
            let h = shared.store.lock().history(resource, ns, name);
            let all: Vec<Value> = h
                .iter()
                .map(|c| {
                    json!({
                        "at": format_time_micro(c.at),
                        "kind": c.kind,
                        "resourceVersion": c.resource_version,
                    })
                })
                .collect();
            json_response(200, &Value::Array(all))
        }
        (&Method::GET, ["faults"]) => {
            let wire = FaultsWire::from(&shared.faults());
            json_response(200, &serde_json::to_value(wire).unwrap_or(Value::Null))
        }
        (&Method::PUT, ["faults"]) => match serde_json::from_slice::<FaultsWire>(body) {
            Ok(w) => {
                let f: crate::config::Faults = w.into();
                if let Err(e) = f.validate() {
                    return error_response(&status::bad_request(e));
                }
                shared.set_faults(f);
                ok()
            }
            Err(e) => error_response(&status::bad_request(format!("invalid faults: {e}"))),
        },
        (&Method::GET, ["tokens"]) => {
            let t = shared.tokens();
            json_response(
                200,
                &serde_json::to_value(t.as_deref()).unwrap_or(Value::Null),
            )
        }
        (&Method::PUT, ["tokens"]) => {
            match serde_json::from_slice::<Option<HashMap<String, Vec<String>>>>(body) {
                Ok(t) => {
                    for (token, perms) in t.iter().flatten() {
                        if let Err(e) = check_permissions(token, perms) {
                            return error_response(&status::bad_request(e));
                        }
                    }
                    shared.set_tokens(t);
                    ok()
                }
                Err(e) => error_response(&status::bad_request(format!(
                    "invalid tokens (an object of token to [\"verb resource\"], or null): {e}"
                ))),
            }
        }
        (&Method::POST, ["recreate", resource, ns, name]) => {
            let Some(res) = shared.registry.by_key(resource).cloned() else {
                return error_response(&status::path_not_found());
            };
            match api::recreate(shared, &res, ns, name) {
                Ok(o) => json_response(200, &o),
                Err(e) => error_response(&e),
            }
        }
        (&Method::POST, ["snapshot"]) => {
            let snap = shared.store.lock().snapshot();
            let rv = snap.revision();
            let id = shared.keep_snapshot(snap);
            json_response(200, &json!({"id": id, "resourceVersion": rv.to_string()}))
        }
        (&Method::POST, ["restore"]) => {
            let snap = match query.get("id").map(|s| s.parse::<usize>()) {
                Some(Ok(id)) => match shared.kept_snapshot(id) {
                    Some(s) => s,
                    None => {
                        return error_response(&status::bad_request(format!(
                            "no snapshot with id {id}"
                        )));
                    }
                },
                _ => return error_response(&status::bad_request("restore needs ?id=N")),
            };
            restore(server, &snap, spare)
        }
        (&Method::POST, ["restore-empty"]) => restore(server, &Snapshot::default(), spare),
        (&Method::POST, ["expire"]) => {
            shared.store.lock().expire();
            ok()
        }
        (&Method::POST, ["down"]) => {
            let ms: u64 = match query.get("ms").map(|s| s.parse()) {
                Some(Ok(ms)) => ms,
                _ => return error_response(&status::bad_request("down needs ?ms=N")),
            };
            // Answer first: stopping aborts this very connection.
            let me = server.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                me.down_for(Duration::from_millis(ms));
            });
            ok()
        }
        _ => error_response(&status::path_not_found()),
    }
}

/// Restores the store and aborts every connection but this one, which carries the
/// answer and then closes: the caller can open new connections at once.
fn restore(server: &Arc<Server>, snap: &Snapshot, spare: Option<&Spare>) -> Response<Body> {
    server.shared.store.lock().restore(snap);
    if let Some(s) = spare {
        s.set();
    }
    server.drop_connections();
    let mut r = json_response(
        200,
        &json!({"ok": true, "resourceVersion": snap.revision().to_string()}),
    );
    r.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    r
}
