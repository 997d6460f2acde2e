//! The one API client of the process and the ways a request leaves it. Three paths:
//!
//! - **the `Client` path**, kube's `Client` that `build` returns: every API request but the
//!   two below. Watches, LISTs, GETs, discovery and `/version`, the Leases' writes, the
//!   PATCHes of webhook configurations and the retry stamp on the controllers a webhook
//!   refused (`webhooks`). Its layers,
//!   from the top: `limit.rs`, `deadline.rs`, `guard.rs`, then the shared stack (`stack`:
//!   kube's base URI, auth and headers, `cap.rs`, `redirect.rs`, `retry_after.rs`).
//! - **the clearing path** (`clearing_path.rs`, `ClearingPath`), over the same connections:
//!   each cleared object's clearing PATCH (`clear.rs`) and its Event's POST
//!   (`events::Sink`), and nothing else. Its layers: `limit.rs` and its own bound to the
//!   last byte (in `ClearingPath`), `guard.rs`, the shared stack.
//! - **the probe's path** (`probe_path.rs`): `probe`'s plain-HTTP GET of a pod's endpoint,
//!   no API server involved, none of these layers.
//!
//! What each layer does: a `User-Agent` that names metainit in audit logs; `guard.rs` under
//! both API paths (`includeUninitialized` on the legacy API's GETs, a timeout on every
//! request's headers (a watch's too), so that a request accepted and never answered does
//! not hold a worker or the watch for ever, and a report of every answered LIST and WATCH
//! for `/readyz`); `deadline.rs` over the `Client`'s requests (the same timeout, to an
//! answer's last byte); `redirect.rs` names a redirect; `retry_after.rs` carries a 429's
//! `Retry-After` header into its `Status`, where the failure table reads it
//! (`failure::retry_after`). Over both API paths, outside their timeouts, `limit.rs`: a
//! token bucket per kind of request, the ceiling of the process's request rate. Under
//! everything that reads an answer, `cap.rs`: every answer's size capped.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use http::{HeaderValue, Request, Response, header::USER_AGENT};
use hyper_util::client::legacy::connect::HttpConnector;
use kube::{
    Client, Config,
    client::{Body, ClientBuilder, ConfigExt, DynBody},
};
use tower::{BoxError, Layer, util::BoxCloneSyncService};

pub use crate::failure::RequestTimeout;
use crate::{Error, Result, failure::chain};

pub mod cap;
mod clearing_path;
mod deadline;
mod guard;
mod limit;
pub mod probe_path;
mod redirect;
mod retry_after;

pub use clearing_path::ClearingPath;
use deadline::DeadlineLayer;
use guard::GuardLayer;
pub use guard::include_uninitialized;
use limit::LimitLayer;
pub use limit::{Kind as RequestKind, Limiter};
pub use retry_after::status_of;

pub const USER_AGENT_VALUE: &str = concat!("metainit/", env!("CARGO_PKG_VERSION"));

/// Told about every LIST or WATCH (`watch`) the server answered with a success.
pub trait Observer: Send + Sync + 'static {
    fn answered(&self, path: &str, watch: bool);
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

/// Builds the `Client` path, and the clearing path over the same connections.
pub fn build(
    config: Config,
    request_timeout: Duration,
    legacy: Legacy,
    observer: Option<Arc<dyn Observer>>,
) -> Result<(Client, ClearingPath)> {
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
    // One limiter for both ways out, outside their timeouts (`limit.rs`).
    let limiter = Arc::new(Limiter::new());
    let client = ClientBuilder::new(stack.clone(), config.default_namespace.clone())
        .with_layer(&layer)
        .with_layer(&DeadlineLayer(request_timeout))
        .with_layer(&LimitLayer(limiter.clone()))
        .build();
    let clearing_path = ClearingPath::new(
        BoxCloneSyncService::new(layer.layer(stack)),
        request_timeout,
        limiter,
    );
    Ok((client, clearing_path))
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
/// (not enabled in kube's features). Ours: every answer's size capped (`cap.rs`), a redirect
/// refused, a 429's `Retry-After` carried into its Status. For `http://`, the connector has no TLS at all: kube
/// builds a rustls configuration whatever the URL, and with no certificate-authority in
/// the kubeconfig that means parsing the system's whole CA bundle, most of the instructions
/// of a `--once` run (BENCHMARKS.md, "Start-up: exec to the first clearing PATCH").
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
        .map_response(|res| res.map(|body| Box::new(body.map_err(BoxError::from)) as Box<DynBody>));
    // Every answer's size capped under everything that reads one (`cap.rs`).
    let service = cap::CapLayer
        .layer(service)
        .and_then(redirect::refuse)
        .and_then(retry_after::in_status);
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers each request with its headers and the first byte of a body of
    /// 1000, and holds the rest back.
    async fn stalling_server() -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut request = [0u8; 4096];
                let _ = conn.read(&mut request).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                            content-length: 1000\r\n\r\n{";
                let _ = conn.write_all(head.as_bytes()).await;
                held.push(conn);
            }
        });
        (url, server)
    }

    #[tokio::test]
    async fn request_timeout_bounds_a_client_request_to_the_last_byte_of_its_answer() {
        let (url, server) = stalling_server().await;
        let config = Config::new(url.parse().unwrap());
        let limit = Duration::from_millis(300);
        let (client, _) = build(config, limit, Legacy::default(), None).unwrap();
        let list = Request::get("/api/v1/namespaces").body(Vec::new()).unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), client.request_text(list)).await;
        server.abort();
        let Ok(Err(kube::Error::Service(e))) = answer else {
            panic!("the stalled answer is not cut at --request-timeout: {answer:?}");
        };
        assert_eq!(e.to_string(), "no answer within 300ms (--request-timeout)");
        assert!(e.is::<RequestTimeout>(), "{e:?}");
    }
}
