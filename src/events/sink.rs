//! Sends the Events in the background, a bounded number waiting, through the clearing
//! path (`client::ClearingPath`). A namespace whose Events the server refuses as a whole (403: no right to
//! write them there, or it is being deleted; 404: no such namespace) gets none for
//! `failure::ABSENT`, then is asked again: not a refused POST and a warning for every object
//! cleared there.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use backon::Retryable;
use tokio::{sync::Notify, time::Instant};
use tracing::{debug, warn};

use super::Event;
use crate::{
    client::ClearingPath,
    failure::{self, Failure, retry_after},
    metrics::Metrics,
    retry::{EVENT_RETRIES, EVENTS},
    text,
};

/// An Event ready to be written: its namespace and its body.
struct Prepared {
    namespace: String,
    body: Vec<u8>,
    /// The object's `namespace/name`, for the log.
    key: String,
}

impl Prepared {
    fn new(event: &Event<'_>, key: String) -> Prepared {
        Prepared {
            namespace: event.namespace().to_string(),
            body: event.to_json().into_bytes(),
            key,
        }
    }

    /// `POST /api/v1/namespaces/NS/events`, as `Api::<Event>::create` sends it (the same
    /// path, content type and verb for kube's tracing layer), its URL written directly.
    fn request(&self) -> Result<http::Request<Vec<u8>>, kube::Error> {
        let mut url = String::with_capacity(32 + self.namespace.len());
        url.push_str("/api/v1/namespaces/");
        url.push_str(&self.namespace);
        url.push_str("/events");
        http::Request::post(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .extension("create")
            .body(self.body.clone())
            .map_err(kube::Error::HttpError)
    }
}

/// Writes the Event. The caller logs and counts a failure; it never fails a clearing.
/// The server's copy of the Event in the answer is not decoded: nothing reads it.
async fn publish(path: &ClearingPath, event: &Prepared) -> Result<(), kube::Error> {
    path.send(event.request()?).await.map(drop)
}

/// At most this many Events wait to be written; more are dropped, and counted.
pub const QUEUE_LIMIT: usize = 1024;

/// The namespaces whose Events the server refused as a whole, each until it is asked again.
#[derive(Default)]
struct Refused(Mutex<HashMap<String, Instant>>);

impl Refused {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `namespace`'s Events are not sent now; one whose time is up is forgotten, and
    /// its next Event asks again.
    fn holds(&self, namespace: &str) -> bool {
        let mut all = self.lock();
        match all.get(namespace) {
            Some(until) if Instant::now() < *until => true,
            Some(_) => {
                all.remove(namespace);
                false
            }
            None => false,
        }
    }

    /// `namespace` refused, until `failure::ABSENT` from now.
    fn remember(&self, namespace: &str) {
        let until = Instant::now() + failure::ABSENT;
        self.lock().insert(namespace.to_string(), until);
    }
}

/// Writes Events in the background, a few at a time (a few workers) so that in a burst
/// they trail the clearing instead of competing with it for the server; retries a
/// failure the failure table calls not fatal a few times (`retry::EVENTS`); bounds what waits, each Event as its
/// serialized body; and lets the process wait for the ones still queued before it exits.
pub struct Sink {
    clearing_path: ClearingPath,
    metrics: Arc<Metrics>,
    waiting: Mutex<VecDeque<Prepared>>,
    /// Wakes an idle worker.
    ready: Notify,
    /// Events queued or being written.
    queued: AtomicUsize,
    idle: Notify,
    refused: Refused,
}

impl Sink {
    /// Starts `concurrency` workers (at least one) on the current runtime.
    pub fn new(
        clearing_path: ClearingPath,
        metrics: Arc<Metrics>,
        concurrency: usize,
    ) -> Arc<Sink> {
        let sink = Arc::new(Sink {
            clearing_path,
            metrics,
            waiting: Mutex::new(VecDeque::new()),
            ready: Notify::new(),
            queued: AtomicUsize::new(0),
            idle: Notify::new(),
            refused: Refused::default(),
        });
        for _ in 0..concurrency.max(1) {
            tokio::spawn(Arc::clone(&sink).work());
        }
        sink
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, VecDeque<Prepared>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues an Event about `key`; a failure is logged and counted, an Event that
    /// finds the queue full is dropped and counted.
    pub fn send(&self, event: Event<'_>, key: String) {
        if self.queued.fetch_add(1, Ordering::SeqCst) >= QUEUE_LIMIT {
            self.done();
            self.metrics.events_dropped.inc();
            debug!(object = %key, "Event queue full; Event dropped");
            return;
        }
        self.waiting().push_back(Prepared::new(&event, key));
        self.ready.notify_one();
    }

    /// One worker: writes the next waiting Event, for ever.
    async fn work(self: Arc<Self>) {
        loop {
            let ready = self.ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            let Some(event) = self.waiting().pop_front() else {
                ready.await;
                continue;
            };
            if self.refused.holds(&event.namespace) {
                self.metrics.event_failures.inc();
                debug!(object = %event.key, namespace = %event.namespace,
                       "Event not written: the server refused this namespace's Events a moment ago");
                self.done();
                continue;
            }
            let result = self.publish_retried(&event).await;
            if let Err(f) = result {
                self.metrics.event_failures.inc();
                if failure::absent(&f.error) {
                    self.refused.remember(&event.namespace);
                    warn!(object = %event.key, error = %f,
                          "cannot write the Event: none written in {} meanwhile, looking again in {}",
                          event.namespace, text::duration(failure::ABSENT));
                } else {
                    warn!(object = %event.key, error = %f, "cannot write the Event");
                }
            }
            self.done();
        }
    }

    /// Writes the Event, trying again `EVENT_RETRIES` times on the `EVENTS` schedule after a
    /// failure the failure table calls not fatal, never before the server's Retry-After.
    async fn publish_retried(&self, event: &Prepared) -> Result<(), Failure> {
        (|| async {
            publish(&self.clearing_path, event)
                .await
                .map_err(Failure::from)
        })
        .retry(EVENTS.backon(EVENT_RETRIES))
        .when(|f: &Failure| !f.class.policy().fatal)
        .adjust(|f: &Failure, wait| Some(wait?.max(retry_after(&f.error))))
        .await
    }

    fn done(&self) {
        if self.queued.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// How many Events wait to be written.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// Waits until every queued Event is written (or failed), at most `limit`.
    pub async fn drained(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, async {
            loop {
                let idle = self.idle.notified();
                tokio::pin!(idle);
                idle.as_mut().enable();
                if self.queued.load(Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        })
        .await
        .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1 as core;

    #[test]
    fn the_request_is_what_api_create_sends() {
        let prepared = Prepared {
            namespace: "kube-system".into(),
            body: b"{}".to_vec(),
            key: "kube-system/p".into(),
        };
        let ours = prepared.request().unwrap();
        let kubes = kube::core::Request::new(<core::Event as kube::Resource>::url_path(
            &(),
            Some("kube-system"),
        ))
        .create(&kube::api::PostParams::default(), b"{}".to_vec())
        .unwrap();
        assert_eq!(ours.method(), kubes.method());
        assert_eq!(ours.uri().path(), kubes.uri().path());
        assert_eq!(
            ours.uri().query().unwrap_or(""),
            kubes.uri().query().unwrap_or("")
        );
        assert_eq!(ours.headers(), kubes.headers());
        assert_eq!(ours.body(), kubes.body());
        assert_eq!(ours.extensions().get::<&str>(), Some(&"create"));
    }

    /// A namespace refused is held for five minutes, then asked again; the others not.
    #[tokio::test(start_paused = true)]
    async fn a_refused_namespace_is_asked_again_in_minutes() {
        let refused = Refused::default();
        refused.remember("a");
        assert!(refused.holds("a"));
        assert!(!refused.holds("b"));
        tokio::time::advance(failure::ABSENT - Duration::from_secs(1)).await;
        assert!(refused.holds("a"));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!refused.holds("a"), "asked again");
        assert!(refused.lock().is_empty(), "and forgotten");
    }
}
