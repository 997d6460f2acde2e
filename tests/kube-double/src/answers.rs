// `Faults::answers`: requests answered with a chosen answer in place of being served: an
// error code worded as the real kube-apiserver words it, a reset connection, no answer at
// all, a body that is not JSON, or a watch whose stream is one ERROR event.

use std::collections::HashMap;

use http::{HeaderMap, Method, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::auth;
use crate::config::{Answer, Reply};
use crate::resources::ResourceInfo;
use crate::routes::{Body, error_response, full, throttled};
use crate::state::Shared;
use crate::status::{self, ApiError, Cause};

/// What to do with a request an answer rule matched.
pub enum Outcome {
    Respond(Response<Body>),
    /// Reset the connection without answering (`server.rs` sees [`ResetConnection`]).
    Reset,
    /// Never answer.
    Hang,
}

/// Put in a response's extensions: the server resets the connection instead of writing it.
#[derive(Clone, Copy, Debug)]
pub struct ResetConnection;

/// The request a rule names, as far as the path says.
struct Target<'a> {
    res: Option<ResourceInfo>,
    namespace: Option<&'a str>,
    name: &'a str,
}

fn target<'a>(shared: &Shared, path: &'a str) -> Option<Target<'a>> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] if !rest.is_empty() => ("", *v, rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
        _ => return None,
    };
    let (namespace, plural, name) = match rest {
        ["namespaces", ns, plural, tail @ ..] => (Some(*ns), *plural, tail.first().copied()),
        [plural, tail @ ..] => (None, *plural, tail.first().copied()),
        [] => return None,
    };
    Some(Target {
        res: shared.registry.by_url(group, version, plural).cloned(),
        namespace,
        name: name.unwrap_or(""),
    })
}

pub fn answer(
    shared: &Shared,
    a: &Answer,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Outcome {
    let watch = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    let e = match a.reply {
        Reply::Reset => return Outcome::Reset,
        Reply::Hang => return Outcome::Hang,
        Reply::NotJson => return Outcome::Respond(not_json()),
        Reply::WatchError if watch => {
            let st = error_for(shared, a, method, path, query, headers).status;
            let line = format!("{}\n", json!({"type": "ERROR", "object": st}));
            let mut r = Response::new(full(line));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            return Outcome::Respond(r);
        }
        Reply::Status | Reply::WatchError => error_for(shared, a, method, path, query, headers),
    };
    Outcome::Respond(match (a.code, a.retry_after_secs, a.reply) {
        // API Priority and Fairness's rejection: plain text and the header, no Status.
        (429, Some(n), Reply::Status) => throttled(n),
        // kube-apiserver never answers 502 itself: a proxy in front of it does, in HTML.
        (502, _, Reply::Status) => bad_gateway(),
        _ => error_response(&e),
    })
}

/// The Status the real server sends with `a.code` for this request.
fn error_for(
    shared: &Shared,
    a: &Answer,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> ApiError {
    let generation = shared.config.generation;
    let t = target(shared, path);
    let res = t.as_ref().and_then(|t| t.res.clone());
    let name = t.as_ref().map_or("", |t| t.name);
    match a.code {
        400 => status::bad_request("the server rejected our request for an unknown reason"),
        401 => status::unauthorized(),
        403 => {
            let tokens = shared.tokens();
            let user = auth::authenticate(
                tokens.as_deref(),
                headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok()),
            )
            .map(|c| c.user)
            .unwrap_or_else(|_| "system:anonymous".into());
            let verb = crate::routes::request_kind(method, path, query).unwrap_or("get");
            match (&res, t.as_ref().and_then(|t| t.namespace)) {
                // RBAC's words (`rbac.go`, `DefaultRuleResolver` as the authorizer reports it).
                (Some(r), ns) => {
                    let scope = match ns {
                        Some(ns) => format!("in the namespace \"{ns}\""),
                        None => "at the cluster scope".into(),
                    };
                    status::forbidden(
                        r,
                        name,
                        &format!(
                            "User \"{user}\" cannot {verb} resource \"{}\" in API group \"{}\" {scope}",
                            r.plural, r.group
                        ),
                    )
                }
                (None, _) => status::forbidden_path(&user, verb, path),
            }
        }
        404 => match &res {
            Some(r) if !name.is_empty() => status::not_found(r, name),
            _ => status::path_not_found(),
        },
        409 => match &res {
            Some(r) => status::conflict(r, name),
            None => generic(409, "Conflict", "the object has been modified"),
        },
        410 => {
            let requested = query
                .get("resourceVersion")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            status::injected_gone(generation, requested, shared.store.lock().revision())
        }
        422 if a.causes => match &res {
            Some(r) => status::invalid(r, name, &[Cause::forbidden("spec", "a policy refuses it")]),
            None => generic(422, "Invalid", "a policy refuses it"),
        },
        // A JSON patch whose `test` failed: `NewGenericServerResponse(422, ...)`, empty details.
        422 => status::patch_unprocessable(),
        429 => {
            let mut d = serde_json::Map::new();
            if let Some(n) = a.retry_after_secs {
                d.insert("retryAfterSeconds".into(), json!(n));
            }
            ApiError {
                status: status::status(
                    429,
                    "TooManyRequests",
                    "Too many requests, please try again later.",
                    Some(Value::Object(d)),
                ),
                retry_after: a.retry_after_secs,
            }
        }
        500 => status::internal("injected fault"),
        503 => match a.retry_after_secs {
            Some(n) => status::service_unavailable(n),
            None => generic(
                503,
                "ServiceUnavailable",
                "The server is currently unable to handle the request",
            ),
        },
        504 => status::injected_timeout(
            generation,
            matches!(
                *method,
                Method::POST | Method::PUT | Method::PATCH | Method::DELETE
            ),
        ),
        // `NewGenericServerResponse`'s wording for the other codes.
        code if code >= 500 => generic(
            code,
            "InternalError",
            "an error on the server (\"unknown\") has prevented the request from succeeding",
        ),
        code => generic(code, "BadRequest", "the server rejected our request"),
    }
}

fn generic(code: u16, reason: &str, message: &str) -> ApiError {
    ApiError {
        status: status::status(code, reason, message, Some(json!({}))),
        retry_after: None,
    }
}

fn html(code: StatusCode, page: &'static str) -> Response<Body> {
    let mut r = Response::new(full(page));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/html"),
    );
    r
}

/// nginx's page, as a load balancer in front of the API server sends it.
fn bad_gateway() -> Response<Body> {
    html(
        StatusCode::BAD_GATEWAY,
        "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n",
    )
}

/// A proxy's sign-in page, answered 200.
fn not_json() -> Response<Body> {
    html(
        StatusCode::OK,
        "<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body><h1>Sign in to continue</h1></body></html>\n",
    )
}
