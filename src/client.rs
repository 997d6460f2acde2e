//! The one API client of the process and the layers around it: `includeUninitialized`
//! on the legacy API's GETs, a `User-Agent` that names metainit in audit logs, a timeout
//! on every request but watches (a request accepted and never answered must not hold a
//! worker for ever), and a report of every answered LIST and WATCH for `/readyz`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use futures::future::BoxFuture;
use http::{
    HeaderValue, Method, Request, Response,
    header::{CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER, USER_AGENT},
};
use hyper_util::client::legacy::connect::HttpConnector;
use kube::{
    Client, Config,
    client::{Body, ClientBuilder, ConfigExt, DynBody},
};
use tower::{BoxError, Layer, Service, util::BoxCloneSyncService};

use crate::{Error, Result};

pub const USER_AGENT_VALUE: &str = concat!("metainit/", env!("CARGO_PKG_VERSION"));

/// No answer within `--request-timeout`.
#[derive(Debug, thiserror::Error)]
#[error("no answer within {0:?} (--request-timeout)")]
pub struct RequestTimeout(pub Duration);

/// Told about every LIST or WATCH the server answered with a success.
pub trait Observer: Send + Sync + 'static {
    fn answered(&self, path: &str);
}

/// Whether GETs carry `includeUninitialized=true`: set once the mode is known, so one
/// client serves the version probe, discovery and the work.
#[derive(Clone, Default)]
pub struct Legacy(Arc<AtomicBool>);

impl Legacy {
    pub fn set(&self, on: bool) {
        self.0.store(on, Ordering::Relaxed);
    }
}

/// The stack under the client (base URI, auth, extra headers, hyper's pooled client),
/// cloneable, without the `Buffer` that kube's `Client` puts in front of every request.
type Stack = BoxCloneSyncService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// The way of the requests made for each object (the clearing PATCH, the Event): the
/// client's own stack and `Guard`, called directly, over the same connections. kube's
/// `Client` sends every request through a tower `Buffer` (a channel to a worker task and a
/// oneshot back), about 5 k instructions per request, and reads an answer into a `String`
/// that metainit throws away; watches, lists and the rest keep using the `Client`.
#[derive(Clone)]
pub struct Direct {
    stack: Stack,
    /// `--request-timeout`, over the whole exchange: the `Guard` bounds the wait for the
    /// headers only, and a body that stalls after them would hold a worker for ever.
    timeout: Duration,
}

impl Direct {
    /// Sends a request and reads its answer whole, keeping nothing of it: as
    /// `Client::request_text` does, with the same errors (`Api` with the server's `Status`
    /// for a 4xx or 5xx, or one rebuilt from a body that is not one; `Service` for a
    /// request that got no answer, or no whole answer, within `--request-timeout`).
    pub async fn send(&self, request: Request<Vec<u8>>) -> std::result::Result<(), kube::Error> {
        if self.timeout.is_zero() {
            return self.exchange(request).await;
        }
        match tokio::time::timeout(self.timeout, self.exchange(request)).await {
            Ok(done) => done,
            Err(_) => Err(kube::Error::Service(Box::new(RequestTimeout(self.timeout)))),
        }
    }

    async fn exchange(&self, request: Request<Vec<u8>>) -> std::result::Result<(), kube::Error> {
        use http_body_util::BodyExt;
        use tower::ServiceExt;
        let res = self
            .stack
            .clone()
            .oneshot(request.map(Body::from))
            .await
            // As `Client::send` maps them (hyper's pooled client wraps hyper's own errors).
            .map_err(|e| match e.downcast::<kube::Error>() {
                Ok(e) => *e,
                Err(e) => kube::Error::Service(e),
            })?;
        let code = res.status();
        let body = res
            .into_body()
            .collect()
            .await
            .map_err(kube::Error::Service)?
            .to_bytes();
        if code.is_client_error() || code.is_server_error() {
            return Err(api_error(code, &body));
        }
        Ok(())
    }
}

/// A 4xx or 5xx answer as kube's `handle_api_errors` makes it.
fn api_error(code: http::StatusCode, body: &[u8]) -> kube::Error {
    kube::Error::Api(status_of(code, body).boxed())
}

/// The `Status` in an error's body, or, when the body is not one (a proxy's page, plain
/// text), a `Status` with the text, as kube's `handle_api_errors` makes it.
fn status_of(code: http::StatusCode, body: &[u8]) -> kube::core::Status {
    let text = String::from_utf8_lossy(body);
    serde_json::from_str::<kube::core::Status>(&text).unwrap_or_else(|_| {
        kube::core::Status::failure(text.trim(), "Failed to parse error data")
            .with_code(code.as_u16())
    })
}

/// A 429's or 503's `Retry-After` header, carried into its `Status` as
/// `details.retryAfterSeconds`, where the failure table reads it: kube reads only the body,
/// and API Priority and Fairness answers 429 with a plain-text body and the header alone.
async fn retry_after_in_status(
    res: Response<Box<DynBody>>,
) -> std::result::Result<Response<Box<DynBody>>, BoxError> {
    use http_body_util::{BodyExt, Full};
    let code = res.status();
    let seconds = match code.as_u16() {
        429 | 503 => res
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u32>().ok()),
        _ => None,
    };
    let Some(seconds) = seconds.filter(|s| *s > 0) else {
        return Ok(res);
    };
    let (mut parts, body) = res.into_parts();
    let mut status = status_of(code, &body.collect().await?.to_bytes());
    match &mut status.details {
        Some(details) if details.retry_after_seconds > 0 => {}
        Some(details) => details.retry_after_seconds = seconds,
        None => {
            status.details = Some(kube::core::response::StatusDetails {
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                causes: Vec::new(),
                retry_after_seconds: seconds,
            })
        }
    }
    parts.headers.remove(CONTENT_LENGTH);
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let body =
        Full::from(serde_json::to_vec(&status)?).map_err(|never| -> BoxError { match never {} });
    Ok(Response::from_parts(parts, Box::new(body) as Box<DynBody>))
}

/// Builds the client, and the direct way of the per-object requests over the same
/// connections.
pub fn build(
    config: Config,
    request_timeout: Duration,
    legacy: Legacy,
    observer: Option<Arc<dyn Observer>>,
) -> Result<(Client, Direct)> {
    // kube's own retry of 429/503/504 (up to 15 times, delays up to 1000 s) would hide
    // failures from the metrics and hold a worker for minutes: every retry is ours.
    let mut config = config;
    config.default_retry = false;
    config
        .headers
        .push((USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE)));
    let url = config.cluster_url.to_string();
    let layer = GuardLayer {
        timeout: request_timeout,
        legacy,
        observer,
    };
    if let Some(proxy) = &config.proxy_url {
        // kube's builder would refuse it too: its proxy features are not built in.
        // kube takes the kubeconfig's proxy-url, else HTTPS_PROXY or https_proxy.
        return Err(Error::Config(format!(
            "a proxy is set for {url} ({proxy}, from the kubeconfig's proxy-url or from \
             HTTPS_PROXY in the environment), but metainit connects to the API server \
             directly: remove proxy-url from the kubeconfig, or unset HTTPS_PROXY for metainit \
             (it does not read NO_PROXY)"
        )));
    }
    let stack = if config.cluster_url.scheme() == Some(&http::uri::Scheme::HTTP) {
        stack(&config, timeouts!(&config, HttpConnector::new())).map_err(|e| {
            Error::Config(format!("cannot set up a client for {url}: {}", chain(&e)))
        })?
    } else {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        let https = config
            .rustls_https_connector_with_connector(http)
            .map_err(|e| tls_error(&url, e))?;
        stack(&config, timeouts!(&config, https)).map_err(|e| tls_error(&url, e))?
    };
    let client = ClientBuilder::new(stack.clone(), config.default_namespace.clone())
        .with_layer(&layer)
        .build();
    let direct = Direct {
        stack: BoxCloneSyncService::new(layer.layer(stack)),
        timeout: request_timeout,
    };
    Ok((client, direct))
}

/// A connector with kube's connect, read and write timeouts.
macro_rules! timeouts {
    ($config:expr, $connector:expr) => {{
        let config: &Config = $config;
        let mut connector = hyper_timeout::TimeoutConnector::new($connector);
        connector.set_connect_timeout(config.connect_timeout);
        connector.set_read_timeout(config.read_timeout);
        connector.set_write_timeout(config.write_timeout);
        connector.set_reset_reader_on_write(config.reset_reader_on_write);
        connector
    }};
}
use timeouts;

/// The client stack of kube's `ClientBuilder::try_from` (`make_generic_builder`) without a
/// proxy: the same layers in the same order, base URI, auth, extra headers (the
/// User-Agent), over hyper's pooled client with kube's connector timeouts. Not here: kube's
/// `TraceLayer` (its spans are debug, its lines switched off in `logging.rs`) and gzip
/// (not enabled in kube's features). For `http://`, the connector has no TLS at all: kube
/// builds a rustls configuration whatever the URL, and with no certificate-authority in
/// the kubeconfig that means parsing the system's whole CA bundle, which was 91 % of the
/// instructions of a `--once` run (18 of 20 M under callgrind).
fn stack<C>(config: &Config, connector: C) -> std::result::Result<Stack, kube::Error>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    use http_body_util::BodyExt;
    use tower::{ServiceBuilder, ServiceExt};

    let http: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http)
        .map_response(|res| res.map(|body| Box::new(body.map_err(BoxError::from)) as Box<DynBody>))
        .and_then(retry_after_in_status);
    Ok(BoxCloneSyncService::new(service))
}

fn tls_error(url: &str, e: kube::Error) -> Error {
    // kube quotes file names twice ('"/path"'): once is enough.
    let text = chain(&e).replace("'\"", "'").replace("\"'", "'");
    // The CA hint only where it helps: the system has no CA and the kubeconfig none either.
    let hint = if text.contains("No CA certificates") {
        ". If the kubeconfig gives no certificate-authority, add certificate-authority-data \
         to it, or point SSL_CERT_FILE at a CA bundle"
    } else {
        ""
    };
    Error::Config(format!("cannot set up a client for {url}: {text}{hint}"))
}

#[derive(Clone)]
struct GuardLayer {
    timeout: Duration,
    legacy: Legacy,
    observer: Option<Arc<dyn Observer>>,
}

impl<S> Layer<S> for GuardLayer {
    type Service = Guard<S>;
    fn layer(&self, inner: S) -> Guard<S> {
        Guard {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
struct Guard<S> {
    inner: S,
    layer: GuardLayer,
}

impl<S, B> Service<Request<Body>> for Guard<S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<B>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let req = if self.layer.legacy.0.load(Ordering::Relaxed) {
            include_uninitialized(req)
        } else {
            req
        };
        let watch = is_watch(&req);
        let observed = (req.method() == Method::GET)
            .then_some(self.layer.observer.clone())
            .flatten()
            .map(|o| (o, req.uri().path().to_string()));
        let limit = self.layer.timeout;
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = if watch || limit.is_zero() {
                fut.await.map_err(Into::into)
            } else {
                match tokio::time::timeout(limit, fut).await {
                    Ok(r) => r.map_err(Into::into),
                    Err(_) => Err(Box::new(RequestTimeout(limit)) as BoxError),
                }
            };
            if let (Some((observer, path)), Ok(r)) = (observed, &res)
                && r.status().is_success()
            {
                observer.answered(&path);
            }
            res
        })
    }
}

fn is_watch<B>(req: &Request<B>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

/// Adds `includeUninitialized=true` to a GET on the API paths (NOTES §1).
pub fn include_uninitialized<B>(mut req: Request<B>) -> Request<B> {
    if req.method() != Method::GET {
        return req;
    }
    let Some(pq) = req.uri().path_and_query() else {
        return req;
    };
    let path = pq.path();
    if !(path.starts_with("/api/") || path.starts_with("/apis/")) {
        return req;
    }
    let query = pq.query().unwrap_or("");
    if query
        .split('&')
        .any(|kv| kv.starts_with("includeUninitialized="))
    {
        return req;
    }
    let amended = if query.is_empty() {
        format!("{path}?includeUninitialized=true")
    } else {
        format!("{path}?{query}&includeUninitialized=true")
    };
    let mut parts = req.uri().clone().into_parts();
    if let Ok(pq) = amended.parse() {
        parts.path_and_query = Some(pq);
        if let Ok(uri) = http::Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
    }
    req
}

/// Whether a start-up error may go away by itself (server starting, restarting,
/// overloaded, or not answering in time).
pub fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 429 | 500 | 502 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            !is_tls_failure(e)
        }
        _ => false,
    }
}

pub fn is_tls_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        let text = err.to_string();
        if err.is::<rustls::Error>()
            || text.contains("InvalidContentType")
            || text.contains("invalid peer certificate")
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// An error and its sources, as one line: kube's own message often hides the cause
/// ("client error (Connect)") in a source.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_uninitialized_on_gets_only() {
        let get = |uri: &str| Request::get(uri).body(()).unwrap();
        assert_eq!(
            include_uninitialized(get("/api/v1/pods?labelSelector=a")).uri(),
            "/api/v1/pods?labelSelector=a&includeUninitialized=true"
        );
        assert_eq!(
            include_uninitialized(get("/apis/apps/v1/deployments")).uri(),
            "/apis/apps/v1/deployments?includeUninitialized=true"
        );
        assert_eq!(include_uninitialized(get("/version")).uri(), "/version");
        assert_eq!(
            include_uninitialized(get("/api/v1/pods?includeUninitialized=false")).uri(),
            "/api/v1/pods?includeUninitialized=false"
        );
        let patch = Request::patch("/api/v1/namespaces/a/pods/b")
            .body(())
            .unwrap();
        assert_eq!(
            include_uninitialized(patch).uri(),
            "/api/v1/namespaces/a/pods/b"
        );
    }

    #[test]
    fn watches_are_told_apart() {
        let get = |uri: &str| Request::get(uri).body(()).unwrap();
        assert!(is_watch(&get("/api/v1/pods?labelSelector=a&watch=true")));
        assert!(is_watch(&get("/api/v1/pods?watch=1")));
        assert!(!is_watch(&get("/api/v1/pods?labelSelector=watch%3Dtrue")));
        assert!(!is_watch(&get("/api/v1/pods")));
    }

    /// What a request's caller sees after `retry_after_in_status`.
    async fn seen(code: u16, retry_after: Option<&str>, body: &str) -> kube::core::Status {
        use http_body_util::{BodyExt, Full};
        let mut res = Response::builder().status(code);
        if let Some(r) = retry_after {
            res = res.header(RETRY_AFTER, r);
        }
        let body = Full::from(body.to_string()).map_err(|never| -> BoxError { match never {} });
        let res = res.body(Box::new(body) as Box<DynBody>).unwrap();
        let res = retry_after_in_status(res).await.unwrap();
        let code = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        status_of(code, &body)
    }

    #[tokio::test]
    async fn a_retry_after_header_reaches_the_status() {
        // API Priority and Fairness: plain text and the header.
        let apf = seen(
            429,
            Some("3"),
            "Too many requests, please try again later.\n",
        )
        .await;
        assert_eq!(apf.code, 429);
        assert_eq!(apf.message, "Too many requests, please try again later.");
        assert_eq!(apf.reason, "Failed to parse error data");
        assert_eq!(apf.details.map(|d| d.retry_after_seconds), Some(3));
        // A Status of its own: its retryAfterSeconds wins, its other fields are kept.
        let own = r#"{"kind":"Status","status":"Failure","code":429,"reason":"TooManyRequests",
            "message":"slow down","details":{"name":"p","retryAfterSeconds":5}}"#;
        let own = seen(429, Some("1"), own).await;
        assert_eq!(
            (own.reason.as_str(), own.message.as_str()),
            ("TooManyRequests", "slow down")
        );
        let details = own.details.unwrap();
        assert_eq!(
            (details.name.as_str(), details.retry_after_seconds),
            ("p", 5)
        );
        // One without: the header's.
        let bare = r#"{"kind":"Status","status":"Failure","code":503,"message":"starting"}"#;
        assert_eq!(
            seen(503, Some("2"), bare)
                .await
                .details
                .map(|d| d.retry_after_seconds),
            Some(2)
        );
        // Nothing to carry: the body as it came.
        assert_eq!(seen(429, None, "busy").await.details, None);
        assert_eq!(seen(429, Some("soon"), "busy").await.details, None);
        assert_eq!(seen(500, Some("4"), "boom").await.details, None);
    }
}
