//! The clearing path: the requests made for each cleared object, its clearing PATCH
//! (`clear.rs`) and its Event's POST (`events::Sink`), and no others. They skip the tower
//! `Buffer` that kube's `Client` puts in front of every request, and its copying of each
//! answer into a `String`: fewer instructions per cleared object (BENCHMARKS.md, "CPU per
//! object: user and system time, and the kernel's floor", change 1). Every other API
//! request, a PATCH of a webhook configuration or a Lease included, takes the `Client`.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use http::Request;
use kube::client::Body;

use super::{RequestTimeout, Stack, limit::Limiter};

/// The way of the requests made for each cleared object (the clearing PATCH, the Event):
/// the client's own stack and `Guard`, called directly, over the same connections;
/// watches, lists and the rest keep using the `Client`.
#[derive(Clone)]
pub struct ClearingPath {
    stack: Stack,
    /// `--request-timeout`, over the whole exchange: the `Guard` bounds the wait for the
    /// headers only, and a body that stalls after them would hold a worker for ever.
    timeout: Duration,
    /// The client's limiter: a request waits for its turn before its timeout starts.
    limiter: Arc<Limiter>,
}

impl ClearingPath {
    pub(super) fn new(stack: Stack, timeout: Duration, limiter: Arc<Limiter>) -> ClearingPath {
        ClearingPath {
            stack,
            timeout,
            limiter,
        }
    }

    /// Sends a request and reads its answer whole (at most `cap::OBJECT`): as
    /// `Client::request_text` does, with the same errors (`Api` with the server's `Status`
    /// for a 4xx or 5xx, or one rebuilt from a body that is not one; `Service` for a
    /// request that got no answer, or no whole answer, within `--request-timeout`). The
    /// answer is the object as the server stored it: the caller weighs it.
    pub async fn send(&self, request: Request<Vec<u8>>) -> std::result::Result<Bytes, kube::Error> {
        let admitted = self.limiter.admit(&request);
        admitted.wait().await;
        let res = self.timed(request).await;
        if let Err(e) = &res {
            admitted.failed(e);
        }
        res
    }

    async fn timed(&self, request: Request<Vec<u8>>) -> std::result::Result<Bytes, kube::Error> {
        if self.timeout.is_zero() {
            return self.exchange(request).await;
        }
        match tokio::time::timeout(self.timeout, self.exchange(request)).await {
            Ok(done) => done,
            Err(_) => Err(kube::Error::Service(Box::new(RequestTimeout(self.timeout)))),
        }
    }

    async fn exchange(&self, request: Request<Vec<u8>>) -> std::result::Result<Bytes, kube::Error> {
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
        // An object it must be: a proxy's page answered 200 is no write, and was once taken
        // for one (the pod left gated until a resync).
        if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(not_an_object(&body));
        }
        Ok(body)
    }
}

/// A 4xx or 5xx answer as kube's `handle_api_errors` makes it.
/// The error of a success whose body is no JSON object, as decoding it would fail.
fn not_an_object(body: &[u8]) -> kube::Error {
    let text = crate::failure::one_line(&String::from_utf8_lossy(body), 120);
    kube::Error::SerdeError(<serde_json::Error as serde::de::Error>::custom(format!(
        "a success whose body is not a JSON object: {text:?}"
    )))
}

fn api_error(code: http::StatusCode, body: &[u8]) -> kube::Error {
    kube::Error::Api(super::retry_after::status_of(code, body).boxed())
}
