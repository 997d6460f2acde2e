// `/_double/*` control routes for out-of-process tests: never faulted, never authenticated.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response};
use serde_json::{Value, json};

use crate::config::FaultsWire;
use crate::routes::{Body, error_response, json_response};
use crate::server::Server;
use crate::state::{RequestRecord, format_time_micro};
use crate::status;

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
