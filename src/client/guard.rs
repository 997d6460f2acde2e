//! The layer under every request of the process: `includeUninitialized` on the legacy
//! API's GETs, `--request-timeout` on the wait for an answer's headers (a watch's too: the server
//! sends them when the watch starts, the events after; a watch start never answered once
//! held the watch, and so the clearing, until kube's read timeout), and
//! the report of every answered LIST and WATCH for `/readyz`.

use std::{
    sync::{Arc, atomic::Ordering},
    task::{Context, Poll},
    time::Duration,
};

use futures::future::BoxFuture;
use http::{Method, Request, Response};
use kube::client::Body;
use tower::{BoxError, Layer, Service};

use super::{Legacy, Observer, RequestTimeout};

#[derive(Clone)]
pub(super) struct GuardLayer {
    pub(super) timeout: Duration,
    pub(super) legacy: Legacy,
    pub(super) observer: Option<Arc<dyn Observer>>,
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
pub(super) struct Guard<S> {
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
            let res = if limit.is_zero() {
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
                observer.answered(&path, watch);
            }
            res
        })
    }
}

pub(super) fn is_watch<B>(req: &Request<B>) -> bool {
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
}
