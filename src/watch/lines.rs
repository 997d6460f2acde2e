//! A watch's answer, read line by line, each line one whole event or the end of the watch:
//! in place of kube's `Api::watch`, whose line decoder reads a line without end into memory
//! (a body streamed with no newline grew the process to 127 MiB, its limit 64) and drops a
//! line cut short at the stream's end as if it never came (the object it carried missed
//! until the next resync, `/readyz` 200). Here:
//!
//! - a line over `cap::OBJECT` is a failure, and nothing more of it is kept;
//! - a line that does not decode as a whole event is a failure (an `ERROR` event's Status
//!   is one too, as kube gives it), whatever it is: garbage, a Status, a cut-off object;
//! - the stream's end, or the connection's (hyper's "unexpected EOF" after a watch's five
//!   minutes, which kube too takes for an end), is the watch's end if no line was begun,
//!   and a line cut short otherwise.
//!
//! The request is kube's own (`Request::watch`), sent through the same client and layers.

use std::{collections::VecDeque, fmt::Debug, marker::PhantomData};

use bytes::{Buf, BytesMut};
use futures::{Stream, StreamExt, stream::BoxStream};
use http_body_util::BodyExt;
use kube::{
    Api, Resource,
    api::{WatchEvent, WatchParams},
    client::Body,
};
use serde::de::DeserializeOwned;

use crate::client::cap::{OBJECT, TooLarge};

/// A line that could not be a whole event.
#[derive(Debug, thiserror::Error)]
pub enum Bad {
    #[error("{0}")]
    TooLong(TooLarge),
    #[error(
        "the watch stream ended in the middle of a line ({0} bytes of it, no newline): an \
         event cut short"
    )]
    Cut(usize),
}

/// Starts a watch of `api` from `version`: its events, each from one whole line.
pub async fn watch<K>(
    api: &Api<K>,
    params: &WatchParams,
    version: &str,
) -> kube::Result<BoxStream<'static, kube::Result<WatchEvent<K>>>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let request = kube::core::Request::new(api.resource_url())
        .watch(params, version)
        .map_err(kube::Error::BuildRequest)?;
    let (mut parts, body) = request.into_parts();
    // As kube asks: a watch is not compressed (its gzip is one member an event).
    parts.headers.insert(
        http::header::ACCEPT_ENCODING,
        http::HeaderValue::from_static("identity"),
    );
    parts.extensions.insert("watch");
    let client = kube::Client::from(api.clone());
    let res = client
        .send(http::Request::from_parts(parts, Body::from(body)))
        .await?;
    let code = res.status();
    if code.is_client_error() || code.is_server_error() {
        // Capped (`cap.rs`): an error answer is one Status.
        let body = res.into_body().collect().await?;
        let status = crate::client::status_of(code, &body.to_bytes());
        return Err(kube::Error::Api(status.boxed()));
    }
    let data = res.into_body().into_data_stream().boxed();
    Ok(events(data).boxed())
}

type Data = BoxStream<'static, kube::Result<bytes::Bytes>>;

/// What is left of the stream: the bytes of a line begun, where the search for its end
/// stopped, and the events of whole lines not handed out yet.
struct Lines<K> {
    data: Data,
    buf: BytesMut,
    searched: usize,
    ready: VecDeque<kube::Result<WatchEvent<K>>>,
    done: bool,
    _k: PhantomData<K>,
}

/// The events of a watch's body.
fn events<K>(data: Data) -> impl Stream<Item = kube::Result<WatchEvent<K>>> + Send + 'static
where
    K: DeserializeOwned + Send + 'static,
{
    let lines = Lines {
        data,
        buf: BytesMut::new(),
        searched: 0,
        ready: VecDeque::new(),
        done: false,
        _k: PhantomData,
    };
    futures::stream::unfold(lines, |mut l| async move {
        let next = l.next().await?;
        Some((next, l))
    })
}

impl<K: DeserializeOwned> Lines<K> {
    async fn next(&mut self) -> Option<kube::Result<WatchEvent<K>>> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                // After a bad line, nothing more: the watch ends there.
                self.done |= event.is_err();
                return Some(event);
            }
            if self.done {
                return None;
            }
            self.split();
            if !self.ready.is_empty() {
                continue;
            }
            if self.buf.len() > OBJECT {
                self.buf = BytesMut::new();
                return self.fail(Bad::TooLong(TooLarge {
                    limit: OBJECT,
                    what: "one line of a watch",
                }));
            }
            match self.data.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(e)) if !ends_the_watch(&e) => {
                    self.done = true;
                    return Some(Err(e));
                }
                // The end of the stream, or of the connection under it.
                Some(Err(_)) | None => return self.end(),
            }
        }
    }

    /// Moves the whole lines of `buf` to `ready`.
    fn split(&mut self) {
        while let Some(at) = self.buf[self.searched..].iter().position(|b| *b == b'\n') {
            let line = self.buf.split_to(self.searched + at + 1);
            self.searched = 0;
            if let Some(event) = decode(&line) {
                let bad = event.is_err();
                self.ready.push_back(event);
                // Nothing after a bad line is read: the watch ends there.
                if bad {
                    self.buf = BytesMut::new();
                    break;
                }
            }
        }
        self.searched = self.buf.len();
    }

    /// The stream ended: what is left of a line begun is an event if it is a whole one.
    fn end(&mut self) -> Option<kube::Result<WatchEvent<K>>> {
        self.done = true;
        let left = std::mem::take(&mut self.buf);
        match decode::<K>(&left) {
            None => None,
            Some(Ok(event)) => Some(Ok(event)),
            Some(Err(_)) => {
                let text = left.chunk().trim_ascii();
                self.fail(Bad::Cut(text.len()))
            }
        }
    }

    fn fail(&mut self, bad: Bad) -> Option<kube::Result<WatchEvent<K>>> {
        self.done = true;
        Some(Err(kube::Error::Service(Box::new(bad))))
    }
}

/// Whether a body's error is the end of the watch, as kube takes it: the connection closed
/// in the middle of the chunked body (after a watch's timeout, most often).
fn ends_the_watch(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        let eof = err
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof);
        if eof || err.to_string().contains("unexpected EOF during chunk") {
            return true;
        }
        cur = err.source();
    }
    false
}

/// One line as an event (`None`: a blank line). An `ERROR` event comes as an event; a
/// line that is a Status is the server's error, as kube gives it; anything else is no event.
fn decode<K: DeserializeOwned>(line: &[u8]) -> Option<kube::Result<WatchEvent<K>>> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return None;
    }
    Some(match serde_json::from_slice::<WatchEvent<K>>(line) {
        Ok(event) => Ok(event),
        Err(e) => match serde_json::from_slice::<kube::core::Status>(line) {
            Ok(status) if status.code != 0 => Err(kube::Error::Api(status.boxed())),
            _ => Err(kube::Error::SerdeError(e)),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use k8s_openapi::api::core::v1::Pod;

    fn pod_line(name: &str, version: &str) -> String {
        format!(
            "{{\"type\":\"ADDED\",\"object\":{{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\
             \"metadata\":{{\"name\":\"{name}\",\"resourceVersion\":\"{version}\"}}}}}}\n"
        )
    }

    /// The events of a body sent in `chunks`, then `end` (an error of the body, or none).
    async fn read(
        chunks: Vec<Vec<u8>>,
        end: Option<std::io::Error>,
    ) -> Vec<Result<String, String>> {
        let mut items: Vec<kube::Result<Bytes>> =
            chunks.into_iter().map(|c| Ok(Bytes::from(c))).collect();
        items.extend(end.map(|e| Err(kube::Error::Service(Box::new(e)))));
        let stream = events::<Pod>(futures::stream::iter(items).boxed());
        stream
            .map(|e| match e {
                Ok(WatchEvent::Added(p)) => Ok(p.metadata.name.unwrap_or_default()),
                Ok(other) => Ok(format!("{other:?}")),
                Err(e) => Err(e.to_string()),
            })
            .collect()
            .await
    }

    #[tokio::test]
    async fn whole_lines_are_events_split_anywhere() {
        let text = format!("{}\n{}", pod_line("a", "1"), pod_line("b", "2"));
        let bytes = text.into_bytes();
        // Every split point: one chunk a byte, and two halves.
        let one_a_byte: Vec<Vec<u8>> = bytes.iter().map(|b| vec![*b]).collect();
        assert_eq!(
            read(one_a_byte, None).await,
            [Ok("a".into()), Ok("b".into())]
        );
        let (x, y) = bytes.split_at(bytes.len() / 2);
        assert_eq!(
            read(vec![x.to_vec(), y.to_vec()], None).await,
            [Ok("a".into()), Ok("b".into())]
        );
        // A last line without its newline is still a whole event.
        let last = pod_line("c", "3").trim_end().as_bytes().to_vec();
        assert_eq!(read(vec![last], None).await, [Ok("c".into())]);
    }

    #[tokio::test]
    async fn a_line_cut_short_ends_the_watch_as_a_failure() {
        let mut text = pod_line("a", "1").into_bytes();
        text.extend_from_slice(&pod_line("b", "2").as_bytes()[..30]);
        let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        for end in [None, Some(eof)] {
            let got = read(vec![text.clone()], end).await;
            assert_eq!(got.len(), 2, "{got:?}");
            assert_eq!(got[0], Ok("a".into()));
            let err = got[1].as_ref().unwrap_err();
            assert!(
                err.contains("the watch stream ended in the middle of a line (30 bytes"),
                "{err}"
            );
        }
        // The connection closed between lines: the end, as kube takes it.
        let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        assert_eq!(
            read(vec![pod_line("a", "1").into_bytes()], Some(eof)).await,
            [Ok("a".into())]
        );
        // Any other error of the body: a failure.
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let got = read(vec![pod_line("a", "1").into_bytes()], Some(reset)).await;
        assert!(got[1].is_err(), "{got:?}");
    }

    #[tokio::test]
    async fn a_bad_line_ends_the_watch_and_nothing_after_it_is_read() {
        let text = format!(
            "{}this is no event\n{}",
            pod_line("a", "1"),
            pod_line("b", "2")
        );
        let got = read(vec![text.into_bytes()], None).await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[1].as_ref().unwrap_err().contains("expected"), "{got:?}");
        // A Status line is the server's error.
        let status = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"code\":500,\"message\":\"boom\"}\n";
        let got = read(vec![status.as_bytes().to_vec()], None).await;
        assert!(got[0].as_ref().unwrap_err().contains("boom"), "{got:?}");
    }

    #[tokio::test]
    async fn a_line_without_end_is_cut_at_the_cap_and_not_kept() {
        // 64 KiB chunks with no newline: the failure after the cap, not a byte more read.
        let chunk = vec![b'x'; 64 << 10];
        let chunks: Vec<Vec<u8>> = (0..(OBJECT / chunk.len() + 10))
            .map(|_| chunk.clone())
            .collect();
        let got = read(chunks, None).await;
        assert_eq!(got.len(), 1, "{}", got.len());
        let err = got[0].as_ref().unwrap_err();
        assert!(
            err.contains("the answer was longer than 4.0 MiB (the most metainit reads of one line of a watch)"),
            "{err}"
        );
    }
}
