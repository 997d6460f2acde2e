//! The floor under every request of the process: token buckets by kind of request, the
//! watch starts and LISTs of each collection apart (client-go puts one bucket under every
//! REST client: 5 a second, bursts of 10, for all kinds together). Whatever a server or a proxy answers, and whatever a loop above does with the
//! answer, no kind is sent more often than its bucket allows: the bound holds by
//! construction, not by a list of failures someone thought of. `build` puts it over both ways
//! an API request leaves the process (the `Client` path and the clearing path), outside their timeouts:
//! a wait here is not a slow answer.
//!
//! The buckets are sized so that ordinary work never waits (docs, "Request ceiling"): the
//! clearing PATCHes of a burst of 1,000 pods fit in the PATCHes' burst and their Events in
//! the writes', a paged list of the largest size a list may have (`list::MOST_PAGES`) in
//! its collection's, and a watch starts again every five minutes or so (its timeout), far
//! below its ceiling of 20 a minute.
//!
//! The pages of one list are one list for the ceiling: only its first page takes from the
//! collection's LISTs, and the later ones (each with a new `continue` token) from a bucket
//! of their own, which a whole list passes at once. Those cannot loop unbounded: a token
//! seen before in the same list, or more pages than `MOST_PAGES`, ends the list
//! (`list::Pages`), and a list starts again only with a first page. When each page took a
//! LIST's token, 120,000 pods (240 pages) took 140 s to list instead of 2 s.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::Duration,
};

use futures::future::BoxFuture;
use http::{Method, Request, Response};
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};
use tracing::info;

use super::guard::is_watch;

/// A kind of request, each with a bucket of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A GET with `watch=true`.
    WatchStart,
    /// A GET of a collection: a LIST, or the first page of a paged one.
    List,
    /// A later page of a paged LIST: a GET of a collection with a `continue` token.
    Continue,
    /// Any other GET: one object, discovery, `/version`, `/readyz`.
    Get,
    /// A PATCH: the clearing PATCHes, the webhook configurations' changes.
    Patch,
    /// A POST, PUT or DELETE: the Events, one per object cleared.
    Write,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::WatchStart,
        Kind::List,
        Kind::Get,
        Kind::Patch,
        Kind::Write,
        Kind::Continue,
    ];

    /// The burst, and the requests a second after it.
    pub const fn bucket(self) -> (u32, f64) {
        match self {
            Kind::WatchStart => (10, 1.0 / 6.0),
            Kind::List => (100, 1.0),
            // A whole list of `list::MOST_PAGES` at once (its test is in list.rs: the
            // client sits below the listing), and refilled in 200 s, within the default
            // resync period (5 minutes): a relist of the largest cluster never waits.
            Kind::Continue => (2_000, 10.0),
            Kind::Get => (100, 5.0),
            Kind::Patch | Kind::Write => (1_000, 50.0),
        }
    }

    /// The most requests of this kind sent in any minute: the burst and a minute's refill.
    pub fn per_minute(self) -> u32 {
        let (burst, rate) = self.bucket();
        burst + (rate * 60.0).round() as u32
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::WatchStart => "watch",
            Kind::List => "list",
            Kind::Continue => "continue",
            Kind::Get => "get",
            Kind::Patch => "patch",
            Kind::Write => "write",
        }
    }

    /// The kind of a request, by its method and URL, as the API server's RequestInfo tells
    /// a LIST from a GET: a collection's path is `/api/v1/PLURAL`,
    /// `/api/v1/namespaces/NS/PLURAL` or the same under `/apis/GROUP/VERSION`.
    pub fn of<B>(req: &Request<B>) -> Kind {
        if req.method() == Method::PATCH {
            return Kind::Patch;
        }
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return Kind::Write;
        }
        if is_watch(req) {
            return Kind::WatchStart;
        }
        let segments: Vec<&str> = req
            .uri()
            .path()
            .split('/')
            .filter(|s| !s.is_empty())
            .collect();
        let rest = match segments.as_slice() {
            ["api", _, rest @ ..] => rest,
            ["apis", _, _, rest @ ..] => rest,
            _ => return Kind::Get,
        };
        // `namespaces/NS/PLURAL`, or a PLURAL of its own (`namespaces` itself included).
        if !matches!(rest, ["namespaces", _, _] | [_]) {
            Kind::Get
        } else if continued(req) {
            Kind::Continue
        } else {
            Kind::List
        }
    }
}

/// Whether a LIST asks for a later page: a `continue` token that is not empty (an empty
/// one asks for the first page, as the API server reads it).
fn continued<B>(req: &Request<B>) -> bool {
    let query = req.uri().query().unwrap_or("");
    query
        .split('&')
        .any(|kv| kv.strip_prefix("continue=").is_some_and(|t| !t.is_empty()))
}

/// One token bucket. A caller takes a token, or reserves the next one and waits for it
/// (golang.org/x/time/rate's `Reserve`): callers are served in the order they came.
struct Bucket {
    burst: f64,
    rate: f64,
    /// Tokens left (below zero: reserved ahead) as of `at`.
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    fn new(kind: Kind) -> Bucket {
        let (burst, rate) = kind.bucket();
        Bucket {
            burst: f64::from(burst),
            rate,
            state: Mutex::new((f64::from(burst), Instant::now())),
        }
    }

    /// A token back: the request it was taken for never reached a server.
    fn refund(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.0 = (state.0 + 1.0).min(self.burst);
    }

    /// How long the caller waits for its token, which is taken now.
    fn reserve(&self) -> Duration {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, at) = *state;
        let refilled = (tokens + now.duration_since(at).as_secs_f64() * self.rate).min(self.burst);
        let left = refilled - 1.0;
        *state = (left, now);
        if left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-left / self.rate)
        }
    }
}

/// The buckets of the process: one per watched or listed collection and kind (its path
/// and selectors: each watch of the process has its own, so that a process with many watches, a
/// webhook service's each, is not held back by their number, and one watch's storm does not
/// starve the others), and one each for all GETs, all PATCHes and all other writes (the
/// Events do not take the clearing PATCHes' turns).
pub struct Limiter {
    gets: Arc<Bucket>,
    patches: Arc<Bucket>,
    writes: Arc<Bucket>,
    collections: Mutex<HashMap<(Kind, String), Arc<Bucket>>>,
}

/// A request let through: what to give back if it never reached a server.
pub struct Admitted {
    bucket: Arc<Bucket>,
    /// How long the request waits for its token.
    wait: Duration,
}

impl Admitted {
    /// Waits for the request's turn.
    pub async fn wait(&self) {
        if !self.wait.is_zero() {
            tokio::time::sleep(self.wait).await;
        }
    }

    /// The request found no server listening (its connection refused): it does not count,
    /// so that a server that is down is still tried about once a second (`retry::WATCH`) however
    /// long it stays down.
    pub fn failed(&self, e: &(dyn std::error::Error + 'static)) {
        if crate::failure::refused(e) {
            self.bucket.refund();
        }
    }
}

impl Default for Limiter {
    fn default() -> Self {
        Limiter::new()
    }
}

impl Limiter {
    pub fn new() -> Limiter {
        Limiter {
            gets: Arc::new(Bucket::new(Kind::Get)),
            patches: Arc::new(Bucket::new(Kind::Patch)),
            writes: Arc::new(Bucket::new(Kind::Write)),
            collections: Mutex::default(),
        }
    }

    fn bucket<B>(&self, kind: Kind, req: &Request<B>) -> Arc<Bucket> {
        match kind {
            Kind::Get => self.gets.clone(),
            Kind::Patch => self.patches.clone(),
            Kind::Write => self.writes.clone(),
            Kind::WatchStart | Kind::List | Kind::Continue => {
                let key = (kind, collection(req));
                let mut all = self.collections.lock().unwrap_or_else(|p| p.into_inner());
                all.entry(key)
                    .or_insert_with(|| Arc::new(Bucket::new(kind)))
                    .clone()
            }
        }
    }

    /// Takes `req`'s token, now or ahead: `Admitted::wait` waits for its turn.
    pub fn admit<B>(&self, req: &Request<B>) -> Admitted {
        let kind = Kind::of(req);
        let bucket = self.bucket(kind, req);
        let wait = bucket.reserve();
        // A second or more is the ceiling at work: something sends far more than it should.
        if wait >= Duration::from_secs(1) {
            info!(kind = kind.label(), path = req.uri().path(), wait = ?wait,
                  ceiling_per_minute = kind.per_minute(),
                  "request held back by the client's rate limit");
        }
        Admitted { bucket, wait }
    }
}

/// A collection's identity: its path and its selectors.
fn collection<B>(req: &Request<B>) -> String {
    let mut key = req.uri().path().to_string();
    for kv in req.uri().query().unwrap_or("").split('&') {
        if kv.starts_with("labelSelector=") || kv.starts_with("fieldSelector=") {
            key.push('&');
            key.push_str(kv);
        }
    }
    key
}

#[derive(Clone)]
pub(super) struct LimitLayer(pub(super) Arc<Limiter>);

impl<S> Layer<S> for LimitLayer {
    type Service = Limit<S>;
    fn layer(&self, inner: S) -> Limit<S> {
        Limit {
            inner,
            limiter: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub(super) struct Limit<S> {
    inner: S,
    limiter: Arc<Limiter>,
}

impl<S, B, R> Service<Request<B>> for Limit<S>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<R>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<R>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // The inner service is made ready when the request is let through.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let mut inner = self.inner.clone();
        let limiter = self.limiter.clone();
        Box::pin(async move {
            let admitted = limiter.admit(&req);
            admitted.wait().await;
            std::future::poll_fn(|cx| inner.poll_ready(cx))
                .await
                .map_err(Into::into)?;
            let res = inner.call(req).await.map_err(Into::into);
            if let Err(e) = &res {
                admitted.failed(&**e);
            }
            res
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(method: &str, uri: &str) -> Kind {
        Kind::of(&Request::builder().method(method).uri(uri).body(()).unwrap())
    }

    #[test]
    fn requests_are_told_apart_as_the_api_server_does() {
        for (method, uri, want) in [
            (
                "GET",
                "/api/v1/pods?labelSelector=a&watch=true",
                Kind::WatchStart,
            ),
            (
                "GET",
                "/api/v1/namespaces/a/pods?watch=1&resourceVersion=5",
                Kind::WatchStart,
            ),
            ("GET", "/api/v1/pods?labelSelector=a&limit=500", Kind::List),
            (
                "GET",
                "/api/v1/namespaces/a/pods?limit=500&continue=x",
                Kind::Continue,
            ),
            (
                "GET",
                "/api/v1/pods?continue=eyJ2IjoibWV0YSJ9&labelSelector=a",
                Kind::Continue,
            ),
            ("GET", "/api/v1/pods?limit=500&continue=", Kind::List),
            ("GET", "/api/v1/pods?limit=500&xcontinue=x", Kind::List),
            ("GET", "/api/v1/namespaces/a/pods/b?continue=x", Kind::Get),
            ("GET", "/api/v1/namespaces", Kind::List),
            ("GET", "/apis/apps/v1/namespaces/a/deployments", Kind::List),
            (
                "GET",
                "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
                Kind::List,
            ),
            ("GET", "/api/v1/namespaces/a", Kind::Get),
            ("GET", "/api/v1/namespaces/a/pods/b", Kind::Get),
            (
                "GET",
                "/apis/apps/v1/namespaces/a/deployments/b/scale",
                Kind::Get,
            ),
            ("GET", "/version", Kind::Get),
            ("GET", "/apis", Kind::Get),
            ("GET", "/api/v1", Kind::Get),
            ("GET", "/readyz", Kind::Get),
            ("GET", "/api/v1/pods?labelSelector=watch%3Dtrue", Kind::List),
            ("PATCH", "/api/v1/namespaces/a/pods/b", Kind::Patch),
            ("POST", "/api/v1/namespaces/a/events", Kind::Write),
            (
                "PUT",
                "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/w",
                Kind::Write,
            ),
            ("DELETE", "/api/v1/namespaces/a/pods/b", Kind::Write),
        ] {
            assert_eq!(kind(method, uri), want, "{method} {uri}");
        }
    }

    #[test]
    fn the_ceilings_are_the_burst_and_a_minutes_refill() {
        let ceilings: Vec<u32> = Kind::ALL.iter().map(|k| k.per_minute()).collect();
        assert_eq!(ceilings, [20, 160, 400, 4_000, 4_000, 2_600]);
    }

    /// A request of each kind.
    fn of(kind: Kind) -> Request<()> {
        let (method, uri) = match kind {
            Kind::WatchStart => ("GET", "/api/v1/pods?labelSelector=a&watch=true"),
            Kind::List => ("GET", "/api/v1/pods?labelSelector=a&limit=500"),
            Kind::Continue => ("GET", "/api/v1/pods?labelSelector=a&limit=500&continue=t"),
            Kind::Get => ("GET", "/api/v1/namespaces/a/pods/b"),
            Kind::Patch => ("PATCH", "/api/v1/namespaces/a/pods/b"),
            Kind::Write => ("POST", "/api/v1/namespaces/a/events"),
        };
        Request::builder().method(method).uri(uri).body(()).unwrap()
    }

    /// Every kind, asked for far more than its ceiling for a minute at once: exactly the
    /// ceiling is let through in the minute, and the burst at once.
    #[tokio::test(start_paused = true)]
    async fn no_kind_passes_more_than_its_ceiling_in_a_minute() {
        for kind in Kind::ALL {
            let limiter = Arc::new(Limiter::new());
            let start = Instant::now();
            let (burst, _) = kind.bucket();
            let mut at_once = 0;
            let mut in_minute = 0;
            for _ in 0..(kind.per_minute() * 3) {
                limiter.admit(&of(kind)).wait().await;
                let t = start.elapsed();
                if t.is_zero() {
                    at_once += 1;
                }
                if t <= Duration::from_secs(60) {
                    in_minute += 1;
                }
            }
            assert_eq!(at_once, burst, "{kind:?}");
            assert_eq!(in_minute, kind.per_minute(), "{kind:?}");
        }
    }

    /// The pages of one list are one list: with the collection's first pages spent, a
    /// whole list of the largest size a list may have passes at once, and the next first
    /// page still waits its second.
    #[tokio::test(start_paused = true)]
    async fn the_later_pages_of_a_list_do_not_wait() {
        let limiter = Limiter::new();
        let first = of(Kind::List);
        let (burst, _) = Kind::List.bucket();
        for _ in 0..burst {
            limiter.admit(&first).wait().await;
        }
        let start = Instant::now();
        for n in 0..2_000 {
            let page = format!("/api/v1/pods?labelSelector=a&limit=500&continue=page-{n}");
            limiter
                .admit(&Request::get(page).body(()).unwrap())
                .wait()
                .await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "2,000 later pages at once");
        limiter.admit(&first).wait().await;
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(1),
            "the next list waits"
        );
    }

    /// A waiting caller that gives up keeps its token: the next caller is not let through
    /// sooner (reservations, not a race for the next token).
    #[tokio::test(start_paused = true)]
    async fn a_cancelled_wait_does_not_make_room() {
        let limiter = Limiter::new();
        let watch = of(Kind::WatchStart);
        let (burst, _) = Kind::WatchStart.bucket();
        for _ in 0..burst {
            limiter.admit(&watch).wait().await;
        }
        let start = Instant::now();
        let ticket = limiter.admit(&watch);
        let cancelled = tokio::time::timeout(Duration::from_secs(1), ticket.wait()).await;
        assert!(cancelled.is_err());
        limiter.admit(&watch).wait().await;
        assert_eq!(start.elapsed(), Duration::from_secs(12));
    }

    /// Each watched collection has its own watch starts and LISTs; GETs and writes are one
    /// bucket each, whatever the object.
    #[tokio::test(start_paused = true)]
    async fn each_collection_has_a_bucket_of_its_own() {
        let limiter = Limiter::new();
        let start = Instant::now();
        for n in 0..30 {
            let slices = format!(
                "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices?labelSelector=\
                 kubernetes.io%2Fservice-name%3Dsvc-{n}&watch=true"
            );
            let watch = Request::get(slices).body(()).unwrap();
            limiter.admit(&watch).wait().await;
            let list = Request::get(format!("/api/v1/namespaces/ns-{n}/pods"));
            limiter.admit(&list.body(()).unwrap()).wait().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "30 watches start at once");
        for n in 0..Kind::Get.bucket().0 + 1 {
            let get = format!("/api/v1/namespaces/a/pods/p-{n}");
            limiter
                .admit(&Request::get(get).body(()).unwrap())
                .wait()
                .await;
        }
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(200),
            "GETs share one"
        );
    }

    /// A request whose connection was refused gives its token back; any other failure not.
    #[tokio::test(start_paused = true)]
    async fn a_refused_connection_does_not_count() {
        let limiter = Arc::new(Limiter::new());
        let refused = tower::service_fn(|_req: Request<()>| async {
            let e = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
            Err::<Response<()>, BoxError>(Box::new(e))
        });
        let mut limited = LimitLayer(limiter.clone()).layer(refused);
        let start = Instant::now();
        for _ in 0..100 {
            let watch = Request::get("/api/v1/pods?watch=true").body(()).unwrap();
            assert!(limited.call(watch).await.is_err());
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        let reset = tower::service_fn(|_req: Request<()>| async {
            let e = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
            Err::<Response<()>, BoxError>(Box::new(e))
        });
        let mut limited = LimitLayer(limiter).layer(reset);
        for _ in 0..11 {
            let watch = Request::get("/api/v1/pods?watch=true").body(()).unwrap();
            assert!(limited.call(watch).await.is_err());
        }
        assert_eq!(start.elapsed(), Duration::from_secs(6));
    }

    /// The layer: requests of one kind wait, others do not.
    #[tokio::test(start_paused = true)]
    async fn the_layer_holds_back_only_the_spent_kind() {
        let limiter = Arc::new(Limiter::new());
        let service =
            tower::service_fn(|_req: Request<()>| async { Ok::<_, BoxError>(Response::new(())) });
        let mut limited = LimitLayer(limiter).layer(service);
        let watch = || Request::get("/api/v1/pods?watch=true").body(()).unwrap();
        let start = Instant::now();
        for _ in 0..11 {
            limited.call(watch()).await.unwrap();
        }
        assert_eq!(start.elapsed(), Duration::from_secs(6));
        let before = Instant::now();
        let list = Request::get("/api/v1/pods").body(()).unwrap();
        limited.call(list).await.unwrap();
        assert_eq!(before.elapsed(), Duration::ZERO);
    }
}
