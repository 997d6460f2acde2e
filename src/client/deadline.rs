//! `--request-timeout` over the whole exchange of a `Client` request but a watch: the
//! `Guard` bounds the wait for the headers only, and an answer that stalls after them
//! would hold its caller (a list, discovery, a webhook's patch) for ever. The clearing path
//! (`ClearingPath`) bounds its own exchange.

use std::{
    future::Future,
    task::{Context, Poll},
    time::Duration,
};

use futures::{StreamExt, future::BoxFuture};
use http::{Request, Response};
use http_body_util::{BodyStream, StreamBody};
use kube::client::{Body, DynBody};
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

use super::{RequestTimeout, guard::is_watch};
use crate::validation::later;

#[derive(Clone)]
pub(super) struct DeadlineLayer(pub(super) Duration);

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;
    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline {
            inner,
            limit: self.0,
        }
    }
}

#[derive(Clone)]
pub(super) struct Deadline<S> {
    inner: S,
    limit: Duration,
}

impl<S> Service<Request<Body>> for Deadline<S>
where
    S: Service<Request<Body>, Response = Response<Box<DynBody>>, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<Box<DynBody>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<Box<DynBody>>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let limit = self.limit;
        let bounded = !(limit.is_zero() || is_watch(&req));
        let deadline = later(Instant::now(), limit);
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await?;
            Ok(if bounded {
                res.map(|body| until(body, deadline, limit))
            } else {
                res
            })
        })
    }
}

/// The body, failing with `RequestTimeout` if its last byte has not come by `deadline`.
fn until(body: Box<DynBody>, deadline: Instant, limit: Duration) -> Box<DynBody> {
    let mut frames = BodyStream::new(body);
    let mut timer = Box::pin(tokio::time::sleep_until(deadline));
    let frames = futures::stream::poll_fn(move |cx| match frames.poll_next_unpin(cx) {
        Poll::Pending if timer.as_mut().poll(cx).is_ready() => {
            Poll::Ready(Some(Err(Box::new(RequestTimeout(limit)) as BoxError)))
        }
        next => next,
    });
    Box::new(StreamBody::new(frames))
}
