//! Every answer's size bounded, at the bottom of the stack (under the `Retry-After` reading,
//! which reads a 429's body whole): an answer longer than its cap is cut there, as an error
//! that says so, so that a server or proxy that streams a body without end costs the process
//! at most the cap (client-go's decoders refuse frames over 16 MiB; a line of a watch that
//! never ended once grew metainit to 127 MiB, twice its memory limit). The caps:
//!
//! - one object (a GET, a PATCH's answer, an error's Status): `OBJECT`, 4 MiB. The API
//!   server refuses a request body over 3 MiB and etcd an object over 1.5 MiB, so no object
//!   written through the API comes near it;
//! - one page of a LIST: `PAGE`, 8 MiB (500 objects of 16 KB). A page over it is asked for
//!   again in smaller pages (`list::smaller`), so a cluster of large objects is still listed;
//! - a watch: no cap on the whole (it streams for minutes), each of its lines `OBJECT`
//!   (`watch::lines`), and the same for an error answer to a watch start.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use kube::client::{Body, DynBody};
use tower::{BoxError, Layer, Service};

use super::{guard::is_watch, limit::Kind};

/// The most bytes one object's answer, or one line of a watch, may take.
pub const OBJECT: usize = 4 << 20;

/// The most bytes one page of a LIST may take.
pub const PAGE: usize = 8 << 20;

pub use crate::failure::{TooLarge, too_large};

/// The cap of the answer to `req`: `None` for a watch's events (their lines are capped).
fn cap_of<B>(req: &Request<B>) -> Option<TooLarge> {
    if is_watch(req) {
        return None;
    }
    Some(match Kind::of(req) {
        Kind::List | Kind::Continue => TooLarge {
            limit: PAGE,
            what: "one page of a list",
        },
        _ => TooLarge {
            limit: OBJECT,
            what: "one object",
        },
    })
}

/// A body that fails once more than its cap has come.
struct Capped {
    inner: Box<DynBody>,
    left: usize,
    cap: TooLarge,
}

impl HttpBody for Capped {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        if let Some(data) = frame.data_ref() {
            if data.len() > self.left {
                self.left = 0;
                return Poll::Ready(Some(Err(Box::new(self.cap.clone()))));
            }
            self.left -= data.len();
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Caps the body of every answer but a watch's events (an error answer to a watch start
/// included: it is one Status).
#[derive(Clone)]
pub(super) struct CapLayer;

impl<S> Layer<S> for CapLayer {
    type Service = Cap<S>;
    fn layer(&self, inner: S) -> Cap<S> {
        Cap { inner }
    }
}

#[derive(Clone)]
pub(super) struct Cap<S> {
    inner: S,
}

impl<S> Service<Request<Body>> for Cap<S>
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
        let cap = cap_of(&req);
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await?;
            let cap = match cap {
                Some(cap) => cap,
                None if res.status().is_success() => return Ok(res),
                None => TooLarge {
                    limit: OBJECT,
                    what: "one object",
                },
            };
            Ok(res.map(|inner| {
                Box::new(Capped {
                    inner,
                    left: cap.limit,
                    cap,
                }) as Box<DynBody>
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    /// A body of `chunks` chunks of `size` bytes.
    fn body(chunks: usize, size: usize) -> Box<DynBody> {
        let frames =
            (0..chunks).map(move |_| Ok::<_, BoxError>(Frame::data(Bytes::from(vec![b' '; size]))));
        Box::new(StreamBody::new(futures::stream::iter(frames)))
    }

    async fn read(req: Request<Body>, chunks: usize, size: usize) -> Result<usize, BoxError> {
        let inner = tower::service_fn(move |_req: Request<Body>| async move {
            Ok::<_, BoxError>(Response::new(body(chunks, size)))
        });
        let res = CapLayer.layer(inner).call(req).await?;
        Ok(res.into_body().collect().await?.to_bytes().len())
    }

    fn get(uri: &str) -> Request<Body> {
        Request::get(uri).body(Body::empty()).unwrap()
    }

    #[tokio::test]
    async fn each_answer_is_cut_at_its_cap_and_a_watch_is_not() {
        const MIB: usize = 1 << 20;
        let pod = "/api/v1/namespaces/a/pods/b";
        assert_eq!(read(get(pod), 4, MIB).await.unwrap(), OBJECT);
        let over = read(get(pod), 5, MIB).await.unwrap_err();
        let cap = too_large(&*over).expect("a TooLarge");
        assert_eq!(cap.limit, OBJECT);
        assert_eq!(
            over.to_string(),
            "the answer was longer than 4.0 MiB (the most metainit reads of one object): a \
             server or proxy that sends a body without end, or an object far larger than \
             etcd stores"
        );
        let patch = Request::patch(pod).body(Body::empty()).unwrap();
        assert!(read(patch, 5, MIB).await.is_err(), "a PATCH's answer too");
        assert_eq!(
            read(get("/api/v1/pods?limit=500"), 8, MIB).await.unwrap(),
            PAGE
        );
        let page = read(get("/api/v1/pods?limit=500"), 9, MIB)
            .await
            .unwrap_err();
        assert_eq!(too_large(&*page).unwrap().limit, PAGE);
        let later = get("/api/v1/pods?limit=500&continue=abc");
        assert_eq!(read(later, 8, MIB).await.unwrap(), PAGE, "a later page too");
        // A watch streams for minutes: its lines are capped, not the whole.
        let watch = get("/api/v1/pods?watch=true");
        assert_eq!(read(watch, 64, MIB).await.unwrap(), 64 * MIB);
    }
}
