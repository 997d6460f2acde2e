// HTTP routing of the Kubernetes API paths: request log, faults, authentication,
// then discovery, LIST/WATCH/GET/POST/PUT/PATCH/DELETE on the served resources.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};

use crate::answers;
use crate::api::{self, ListOptions, Subresource};
use crate::auth::{self, Caller};
use crate::config::Generation;
use crate::control;
use crate::discovery;
use crate::legacy;
use crate::patch::PatchType;
use crate::resources::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::server::Server;
use crate::state::{RequestRecord, Shared};
use crate::status::{self, ApiError};
use crate::table;
use crate::watch::{self, WatchRequest};

pub type Body = BoxBody<Bytes, io::Error>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

pub fn json_response(code: u16, value: &Value) -> Response<Body> {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut r = Response::new(full(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

pub fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = json_response(e.code(), &e.status);
    if let Some(s) = e.retry_after
        && let Ok(v) = header::HeaderValue::from_str(&s.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// API Priority and Fairness's rejection (`tooManyRequests` in the real server's
/// filters): a 429 with a `Retry-After` header and Go's `http.Error` plain text, no `Status`.
pub(crate) fn throttled(retry_after: u64) -> Response<Body> {
    let mut r = Response::new(full(
        b"Too many requests, please try again later.\n".to_vec(),
    ));
    *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = r.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::RETRY_AFTER, header::HeaderValue::from(retry_after));
    r
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Entry point for every request.
pub async fn handle(server: Arc<Server>, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return error_response(&status::bad_request(format!(
                "error reading the request body: {e}"
            )));
        }
    };
    let path = parts.uri.path().to_string();
    let query: HashMap<String, String> = parts
        .uri
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    if let Some(rest) = path.strip_prefix("/_double/") {
        let spare = parts.extensions.get::<crate::server::Spare>();
        return control::handle(&server, &parts.method, rest, &query, &body, spare).await;
    }
    let shared = server.shared.clone();
    let record = RequestRecord {
        at: SystemTime::now(),
        method: parts.method.to_string(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_else(|| path.clone()),
        content_type: header_str(&parts.headers, header::CONTENT_TYPE),
        user_agent: header_str(&parts.headers, header::USER_AGENT),
        body: String::from_utf8_lossy(&body).into_owned(),
        status: 0,
    };
    let kind = request_kind(&parts.method, &path, &query);
    let faults = shared.faults();
    if let Some(a) = faults
        .answers
        .iter()
        .find(|a| a.matches(parts.method.as_str(), &path, kind))
    {
        shared.arrive(parts.method.as_str());
        let outcome = answers::answer(&shared, a, &parts.method, &path, &query, &parts.headers);
        let (response, code) = match outcome {
            answers::Outcome::Respond(r) => {
                let code = r.status().as_u16();
                (r, code)
            }
            answers::Outcome::Reset => {
                let mut r = Response::new(full(Bytes::new()));
                r.extensions_mut().insert(answers::ResetConnection);
                (r, 0)
            }
            answers::Outcome::Hang => {
                shared.log_request(record);
                // Dropped when the client closes the connection or the double stops.
                return std::future::pending().await;
            }
        };
        shared.log_request(RequestRecord {
            status: code,
            ..record
        });
        return response;
    }
    let response = respond(&shared, &parts.method, &path, &query, &parts.headers, &body).await;
    shared.log_request(RequestRecord {
        status: response.status().as_u16(),
        ..record
    });
    response
}

async fn respond(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response<Body> {
    shared.arrive(method.as_str());
    if shared.take_hang(method.as_str(), path) {
        // Read completely, never answered: a half-open connection through a load
        // balancer. Not logged (never answered); the future is dropped when the client
        // closes the connection (hyper sees the EOF mid-message) or the double stops.
        std::future::pending::<()>().await;
    }
    let faults = shared.faults();
    if !faults.latency.is_zero() {
        tokio::time::sleep(faults.latency).await;
    }
    if faults.error_fraction > 0.0
        && faults.errors_apply_to(request_kind(method, path, query))
        && shared.chance(faults.error_fraction)
    {
        let code = shared.pick(&faults.codes()).unwrap_or(500);
        let generation = shared.config.generation;
        let e = match code {
            429 => return throttled(faults.retry_after_secs),
            503 => status::service_unavailable(faults.retry_after_secs),
            410 => {
                let requested = parse_rv(query).ok().flatten().unwrap_or(0);
                status::injected_gone(generation, requested, shared.store.lock().revision())
            }
            504 => status::injected_timeout(
                generation,
                matches!(
                    *method,
                    Method::POST | Method::PUT | Method::PATCH | Method::DELETE
                ),
            ),
            _ => status::internal("injected fault"),
        };
        return error_response(&e);
    }
    let tokens = shared.tokens();
    let caller = match auth::authenticate(
        tokens.as_deref(),
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    ) {
        Ok(c) => c,
        Err(e) => return error_response(&e),
    };
    if faults.starting {
        return starting(&caller, method, path, query);
    }
    match route(shared, method, path, query, headers, body, &caller).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

/// An answer of a server still starting (`Faults::starting`): its health checks failing, every
/// other request forbidden as its authorizer answers before the RBAC policy is in place.
fn starting(
    caller: &Caller,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
) -> Response<Body> {
    if matches!(path, "/readyz" | "/healthz" | "/livez") {
        let checks = "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]informer-sync ok\n\
                      [-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n\
                      [+]poststarthook/bootstrap-controller ok\n";
        let mut r = Response::new(full(format!("{checks}{} check failed\n", &path[1..])));
        *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        return r;
    }
    let verb = request_kind(method, path, query).unwrap_or("get");
    error_response(&status::forbidden_path(&caller.user, verb, path))
}

/// The request's verb as the API server's RequestInfo names it (`watch`, `list`, `get`,
/// `create`, `update`, `patch`, `delete`, `deletecollection`); `None` for requests that
/// are not resource requests (discovery, `/version`, health). See
/// `staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`: a GET without a
/// name is `list`, or `watch` with `?watch`; a DELETE without a name `deletecollection`.
pub fn request_kind(
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
) -> Option<&'static str> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segs.as_slice() {
        ["api", _, rest @ ..] if !rest.is_empty() => rest,
        ["apis", _, _, rest @ ..] if !rest.is_empty() => rest,
        _ => return None,
    };
    // namespaces/NS/plural[/name[/sub]] or plural[/name[/sub]] (namespaces/NS is itself
    // an object of the namespaces collection).
    let parts = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        _ => rest,
    };
    let named = parts.len() >= 2;
    Some(match (method, named) {
        (&Method::GET | &Method::HEAD, true) => "get",
        (&Method::GET | &Method::HEAD, false) if flag(query, "watch") => "watch",
        (&Method::GET | &Method::HEAD, false) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => return None,
    })
}

fn flag(query: &HashMap<String, String>, key: &str) -> bool {
    matches!(query.get(key).map(String::as_str), Some("true" | "1"))
}

/// Where a path points inside the API.
enum Target<'a> {
    Collection {
        res: ResourceInfo,
        ns: Option<&'a str>,
    },
    Object {
        res: ResourceInfo,
        ns: &'a str,
        name: &'a str,
        sub: Subresource,
    },
    /// `pods/NAME/binding` (POST only).
    Binding {
        res: ResourceInfo,
        ns: &'a str,
        name: &'a str,
    },
}

fn resolve<'a>(
    shared: &Shared,
    group: &str,
    version: &str,
    rest: &[&'a str],
) -> Result<Target<'a>, ApiError> {
    let find = |plural: &str| {
        shared
            .registry
            .by_url(group, version, plural)
            .cloned()
            .ok_or_else(status::path_not_found)
    };
    // A resource is served only at the paths of its scope (`APIInstaller.registerResourceHandlers`,
    // k8s.io/apiserver `pkg/endpoints/installer.go`): a cluster-scoped one at `PLURAL[/NAME]`,
    // a namespaced one at `namespaces/NS/PLURAL[/NAME]` (and `PLURAL` to list across
    // namespaces); any other shape is a 404.
    let cluster = |plural: &str| find(plural).ok().filter(|r| !r.namespaced);
    let namespaced = |plural: &str| {
        find(plural).and_then(|r| {
            if r.namespaced {
                Ok(r)
            } else {
                Err(status::path_not_found())
            }
        })
    };
    match rest {
        [plural] => Ok(Target::Collection {
            res: find(plural)?,
            ns: None,
        }),
        [plural, name] if cluster(plural).is_some() => Ok(Target::Object {
            res: find(plural)?,
            ns: "",
            name,
            sub: Subresource::Main,
        }),
        [plural, name, "status"] if cluster(plural).is_some() => Ok(Target::Object {
            res: find(plural)?,
            ns: "",
            name,
            sub: Subresource::Status,
        }),
        ["namespaces", ns, plural] => Ok(Target::Collection {
            res: namespaced(plural)?,
            ns: Some(ns),
        }),
        ["namespaces", ns, plural, name] => Ok(Target::Object {
            res: namespaced(plural)?,
            ns,
            name,
            sub: Subresource::Main,
        }),
        ["namespaces", ns, plural, name, "status"] => Ok(Target::Object {
            res: namespaced(plural)?,
            ns,
            name,
            sub: Subresource::Status,
        }),
        ["namespaces", ns, plural, name, "binding"] if *plural == "pods" && group.is_empty() => {
            Ok(Target::Binding {
                res: find(plural)?,
                ns,
                name,
            })
        }
        _ => Err(status::path_not_found()),
    }
}

async fn route(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
    caller: &Caller,
) -> Result<Response<Body>, ApiError> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let generation = shared.config.generation;
    let get_only = |v: Value| {
        if method == Method::GET {
            Ok(json_response(200, &v))
        } else {
            Err(status::method_not_allowed(method.as_str()))
        }
    };
    match segs.as_slice() {
        ["version"] => get_only(discovery::version(generation)),
        ["healthz" | "readyz" | "livez"] => {
            let mut r = Response::new(full("ok"));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain"),
            );
            Ok(r)
        }
        ["openapi", "v2"] => {
            if method != Method::GET {
                return Err(status::method_not_allowed(method.as_str()));
            }
            let doc = crate::openapi::v2(generation, &shared.registry);
            let accept = headers
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if accept.contains("protobuf") {
                let mut r = Response::new(full(crate::openapi::v2_protobuf(&doc)));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static(
                        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                    ),
                );
                return Ok(r);
            }
            Ok(json_response(200, &doc))
        }
        // OpenAPI v3 arrived in 1.27 (beta, GA 1.27): 1.13 answers 404.
        ["openapi", "v3"] if generation == Generation::Modern => {
            get_only(crate::openapi::v3_root(generation, &shared.registry))
        }
        ["openapi", "v3", rest @ ..] if generation == Generation::Modern => {
            match crate::openapi::v3_for_path(generation, &shared.registry, &rest.join("/")) {
                Some(doc) => get_only(doc),
                None => Err(status::path_not_found()),
            }
        }
        ["api"] => get_only(discovery::api_versions(&shared.addr.to_string())),
        ["api", "v1"] => get_only(discovery::core_resources(&shared.registry)),
        ["apis"] => get_only(discovery::groups(&shared.registry, generation)),
        ["apis", g] => match discovery::group(&shared.registry, generation, g) {
            Some(v) => get_only(v),
            None => Err(status::path_not_found()),
        },
        ["apis", g, v] => match discovery::group_resources(&shared.registry, generation, g, v) {
            Some(v) => get_only(v),
            None => Err(status::path_not_found()),
        },
        [
            "apis",
            "admissionregistration.k8s.io",
            "v1alpha1",
            "initializerconfigurations",
        ] if generation == Generation::Legacy => get_only(discovery::initializer_configurations(
            &shared.config.initializers,
        )),
        // 1.13's double has no Namespace objects: the namespaces holding objects.
        ["api", "v1", "namespaces"] if generation == Generation::Legacy => {
            if method != Method::GET {
                return Err(status::method_not_allowed(method.as_str()));
            }
            let list = api::namespaces(shared);
            if flag(query, "watch") {
                return Err(status::method_not_allowed("WATCH"));
            }
            Ok(json_response(200, &list))
        }
        ["api", "v1", "namespaces", ns] if generation == Generation::Legacy => get_only(json!({
            "kind": "Namespace",
            "apiVersion": "v1",
            "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        })),
        ["api", "v1", rest @ ..] => {
            let target = resolve(shared, "", "v1", rest)?;
            resource(shared, method, target, query, headers, body, caller).await
        }
        ["apis", g, v, rest @ ..] if !rest.is_empty() => {
            let target = resolve(shared, g, v, rest)?;
            resource(shared, method, target, query, headers, body, caller).await
        }
        _ => Err(status::path_not_found()),
    }
}

fn list_options(
    shared: &Shared,
    res: &ResourceInfo,
    ns: Option<&str>,
    query: &HashMap<String, String>,
) -> Result<ListOptions, ApiError> {
    let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))
        .map_err(|e| match shared.config.generation {
            Generation::Modern => status::bad_request(crate::selectors::modern_message(e)),
            Generation::Legacy => status::bad_request(e),
        })?;
    let fields = FieldSelector::parse_for(
        query.get("fieldSelector").map_or("", String::as_str),
        FieldSelector::fields_of(res.is_pods(), res.is_events()),
    )
    .map_err(status::bad_request)?;
    let limit = match query.get("limit") {
        Some(l) if !l.is_empty() => Some(l.parse::<usize>().map_err(|_| {
            status::bad_request(format!(
                "invalid limit {l:?}: must be a non-negative integer"
            ))
        })?),
        _ => None,
    };
    Ok(ListOptions {
        namespace: ns.map(str::to_string),
        labels,
        fields,
        limit,
        continue_token: query.get("continue").cloned(),
        include_uninitialized: shared.config.generation == Generation::Legacy
            && flag(query, "includeUninitialized"),
    })
}

/// Server-side field validation (GA in 1.27; modern only): `fieldValidation=Strict`
/// refuses unknown fields with 400 `strict decoding error: unknown field "spec.x"`
/// (`transformDecodeError` → `errors.NewBadRequest`), `Warn` accepts the request with a
/// `Warning` header per unknown field (`addStrictDecodingWarnings`), `Ignore` or no
/// parameter: nothing (the real default is Warn, and the real decoder drops unknown fields;
/// the double keeps them, see the README). 1.13 has no such parameter and ignores it.
/// `before`: the object a patch applies to (its own unknown fields are not the request's).
fn field_validation(
    shared: &Shared,
    res: &ResourceInfo,
    query: &HashMap<String, String>,
    obj: &Value,
    before: Option<&Value>,
) -> Result<Vec<String>, ApiError> {
    if shared.config.generation != Generation::Modern {
        return Ok(Vec::new());
    }
    let directive = query.get("fieldValidation").map(String::as_str);
    if !matches!(directive, Some("Strict" | "Warn")) {
        return Ok(Vec::new());
    }
    let generation = shared.config.generation;
    let old = before
        .map(|b| crate::openapi::unknown_fields(generation, &shared.registry, res, b))
        .unwrap_or_default();
    let unknown: Vec<String> =
        crate::openapi::unknown_fields(generation, &shared.registry, res, obj)
            .into_iter()
            .filter(|f| !old.contains(f))
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
    if unknown.is_empty() {
        return Ok(unknown);
    }
    if directive == Some("Strict") {
        return Err(status::bad_request(format!(
            "strict decoding error: {}",
            unknown.join(", ")
        )));
    }
    Ok(unknown)
}

/// `Warning: 299 - "TEXT"` headers (the apiserver's warning recorder, RFC 7234 form).
fn with_warnings(mut r: Response<Body>, warnings: &[String]) -> Response<Body> {
    for w in warnings {
        let text = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = header::HeaderValue::from_str(&format!("299 - \"{text}\"")) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

fn parse_rv(query: &HashMap<String, String>) -> Result<Option<u64>, ApiError> {
    match query.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => Ok(None),
        Some(s) => s
            .parse::<u64>()
            .map(Some)
            .map_err(|_| status::bad_request(format!("invalid resource version: {s}"))),
    }
}

fn body_json(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        status::bad_request(format!(
            "the body of the request could not be decoded as JSON: {e}"
        ))
    })
}

fn ok_object(
    code: u16,
    obj: &Value,
    table: Option<&table::TableRequest>,
    res: &ResourceInfo,
) -> Response<Body> {
    match table {
        Some(t) => json_response(
            code,
            &table::table_for(res, std::slice::from_ref(obj), t, None),
        ),
        None => json_response(code, obj),
    }
}

async fn resource(
    shared: &Arc<Shared>,
    method: &Method,
    target: Target<'_>,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
    caller: &Caller,
) -> Result<Response<Body>, ApiError> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let table = table::requested(
        accept,
        query.get("includeObject").map(String::as_str),
        shared.config.generation == Generation::Modern,
    );
    let include_uninit =
        shared.config.generation == Generation::Legacy && flag(query, "includeUninitialized");
    let generation_is_modern = shared.config.generation == Generation::Modern;
    match target {
        Target::Collection { res, ns } => {
            if *method == Method::POST {
                let ns = match ns {
                    Some(ns) => ns,
                    None if !res.namespaced => "",
                    None => return Err(status::method_not_allowed("POST")),
                };
                caller.check("create", &res, None, Some(ns).filter(|n| !n.is_empty()), "")?;
                let obj = body_json(body)?;
                let warnings = field_validation(shared, &res, query, &obj, None)?;
                let created = api::create(shared, &res, ns, obj, caller)?;
                // 1.13.12 `createHandler` (`pkg/endpoints/handlers/create.go`): the
                // request's `?timeout=` (30s when absent or unparsable, `parseTimeout`)
                // bounds `finishRequest`; the double's default is `post_timeout`.
                let timeout = query
                    .get("timeout")
                    .and_then(|t| status::parse_go_duration(t))
                    .unwrap_or(shared.config.post_timeout);
                let created = if !include_uninit
                    && legacy::initializers(&created).is_some()
                    && legacy::failure(&created).is_none()
                {
                    let name = created
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    legacy::wait_initialized(shared, &res, ns, &name, created, timeout).await?
                } else {
                    created
                };
                // "If the object is partially initialized, always indicate it via
                // StatusAccepted" (1.13.12 `createHandler`): 202 while initializers remain.
                let code = if legacy::initializers(&created).is_some() {
                    202
                } else {
                    201
                };
                return Ok(with_warnings(
                    ok_object(code, &created, table.as_ref(), &res),
                    &warnings,
                ));
            }
            if *method != Method::GET {
                return Err(status::method_not_allowed(method.as_str()));
            }
            let opts = list_options(shared, &res, ns, query)?;
            if flag(query, "watch") {
                caller.check("watch", &res, None, ns, "")?;
                let timeout = match query.get("timeoutSeconds") {
                    // 0 means the server's default: no limit here.
                    Some(t) if !t.is_empty() && t != "0" => {
                        Some(Duration::from_secs(t.parse().map_err(|_| {
                            status::bad_request(format!("invalid timeoutSeconds {t:?}"))
                        })?))
                    }
                    _ => None,
                };
                let req = WatchRequest {
                    res,
                    opts,
                    since: parse_rv(query)?,
                    timeout,
                    // Watch bookmarks arrived in 1.15 (`AllowWatchBookmarks` in
                    // apimachinery's `pkg/apis/meta/v1/types.go`); 1.13.12's ListOptions
                    // has no such field and the unknown query parameter is ignored.
                    bookmarks: generation_is_modern && flag(query, "allowWatchBookmarks"),
                    table,
                };
                let rx = watch::spawn(shared.clone(), req);
                let stream = futures::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|f| (f.map(Frame::data), rx))
                });
                let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/json"),
                );
                return Ok(r);
            }
            caller.check("list", &res, None, ns, "")?;
            match table {
                Some(t) => {
                    let list = api::list(shared, &res, &opts)?;
                    let items = list["items"].as_array().cloned().unwrap_or_default();
                    Ok(json_response(
                        200,
                        &table::table_for(&res, &items, &t, list.get("metadata").cloned()),
                    ))
                }
                None => {
                    let mut r = Response::new(full(api::list_body(shared, &res, &opts)?));
                    r.headers_mut().insert(
                        header::CONTENT_TYPE,
                        header::HeaderValue::from_static("application/json"),
                    );
                    Ok(r)
                }
            }
        }
        Target::Binding { res, ns, name } => {
            if *method != Method::POST {
                return Err(status::method_not_allowed(method.as_str()));
            }
            caller.check("create", &res, Some("binding"), Some(ns), name)?;
            let b = body_json(body)?;
            // `BindingREST.Create`: the Binding's name must be the URL's, and
            // `ValidatePodBinding` needs `target.name` (an aggregate error, which the
            // handler answers as a 500 with no reason).
            if b.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
                return Err(status::bad_request(
                    "name in URL does not match name in Binding object",
                ));
            }
            let node = b
                .pointer("/target/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if node.is_empty() {
                return Err(ApiError {
                    status: status::status(500, "", "target.name: Required value", None),
                    retry_after: None,
                });
            }
            api::bind(
                shared,
                &res,
                ns,
                name,
                node,
                b.pointer("/metadata/annotations"),
            )?;
            // The handler fills the Success Status's code with 201.
            Ok(json_response(
                201,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            ))
        }
        Target::Object { res, ns, name, sub } => {
            let scope = Some(ns).filter(|n| !n.is_empty());
            let sub_name = match sub {
                Subresource::Main => None,
                Subresource::Status => Some("status"),
            };
            match *method {
                Method::GET => {
                    caller.check("get", &res, sub_name, scope, name)?;
                    let obj = api::get(shared, &res, ns, name)?;
                    Ok(ok_object(200, &obj, table.as_ref(), &res))
                }
                Method::PUT => {
                    caller.check("update", &res, sub_name, scope, name)?;
                    let obj = body_json(body)?;
                    let warnings = field_validation(shared, &res, query, &obj, None)?;
                    let reject = shared.faults().reject_writes;
                    let out =
                        api::update(shared, &res, ns, name, obj, caller, sub, reject.as_ref())?;
                    Ok(with_warnings(
                        ok_object(200, &out, table.as_ref(), &res),
                        &warnings,
                    ))
                }
                Method::PATCH => {
                    caller.check("patch", &res, sub_name, scope, name)?;
                    let ct = headers
                        .get(header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    let kind = PatchType::from_content_type(ct)?;
                    // Field validation looks at the patched object (fields it already
                    // had are not the request's).
                    let current = shared.store.lock().get(&res.key, ns, name);
                    let warnings = match current
                        .as_deref()
                        .and_then(|c| crate::patch::apply(c, kind, body).ok().map(|p| (c, p)))
                    {
                        Some((c, patched)) => {
                            field_validation(shared, &res, query, &patched, Some(c))?
                        }
                        None => Vec::new(),
                    };
                    let reject = shared.faults().reject_writes;
                    let out = api::patch(
                        shared,
                        &res,
                        ns,
                        name,
                        kind,
                        body,
                        caller,
                        sub,
                        reject.as_ref(),
                    )?;
                    Ok(with_warnings(
                        ok_object(200, &out, table.as_ref(), &res),
                        &warnings,
                    ))
                }
                Method::DELETE if sub == Subresource::Main => {
                    caller.check("delete", &res, None, scope, name)?;
                    let options = if body.is_empty() {
                        None
                    } else {
                        Some(body_json(body)?)
                    };
                    let out = api::delete(shared, &res, ns, name, options.as_ref())?;
                    Ok(ok_object(200, &out, table.as_ref(), &res))
                }
                _ => Err(status::method_not_allowed(method.as_str())),
            }
        }
    }
}
