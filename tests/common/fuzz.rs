//! A proxy of ours on 127.0.0.1 between metainit and an API server (the double, or the real
//! kube-apiserver), which forwards every request while healthy and, while faulty, answers
//! each one from a fault plan: one fixed answer per request kind (the rows of the ceiling's
//! table, tests/cluster_ceiling.rs), or an answer drawn at random from a large space with a seed
//! (tests/fuzz.rs): any status with any `Retry-After`, redirects, resets, delays, bodies
//! that are not JSON or are cut off, watch streams that end at once or after bookmarks,
//! ERROR events of any code, garbage lines, objects, and continue tokens that repeat, cycle
//! or never end; and answers whose content misleads (#58): a watch that repeats what the
//! server holds, a body that streams a line with no end, a PATCH answered 200 with the object
//! unpatched, a watch's first line cut short, a list answered from a page recorded earlier, an
//! API that is not there. It counts what it received, by the limiter's kinds, with the time.

use std::{
    convert::Infallible,
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Bytes, Frame, Incoming};
use metainit::client::RequestKind;
use serde_json::{Value, json};

/// The proxy's errors: a concrete type (hyper's bounds and a boxed error's lifetime do not
/// get on inside a spawned connection).
type BoxError = std::io::Error;

type Body = UnsyncBoxBody<Bytes, BoxError>;

fn err(e: impl std::fmt::Display) -> BoxError {
    std::io::Error::other(e.to_string())
}

/// A small deterministic generator (splitmix64): a seed replays the same answers.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// How a list's continue token misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tokens {
    /// The same token on every page.
    Same,
    /// Tokens that go round among this many.
    Cycle(u32),
    /// A new token on every page, for ever.
    Endless,
}

/// A watch stream made up here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stream {
    pub bookmarks: u32,
    /// ERROR events: code, reason, message (any of them may be odd or empty).
    pub errors: Vec<(u16, String, String)>,
    pub garbage: u32,
    /// ADDED events of a made-up labelled, gated pod.
    pub objects: u32,
    /// How long it stays open after its lines.
    pub linger: Duration,
    /// Cut off (the connection dropped) rather than ended.
    pub cut: bool,
}

/// One answer to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The upstream's answer, whole.
    Forward,
    /// The upstream's answer to a watch, ended after this long.
    ForwardFor(Duration),
    /// A status of the proxy's own: code, `Retry-After` (any text), and a body (`None`: a
    /// Status with random words; `Some`: this text).
    Status(u16, Option<String>, Option<String>),
    /// A redirect: code and where to (`None`: the request's own URL).
    Redirect(u16, Option<String>),
    /// The connection dropped with no answer.
    Reset,
    /// Waits, then answers.
    Delay(Duration, Box<Fault>),
    /// 200 with a body that is not JSON.
    NotJson,
    /// 200 with the start of a JSON body, then the connection dropped.
    CutBody,
    /// A watch answered 200 with this stream.
    Watch(Stream),
    /// A list forwarded, with its continue token replaced.
    List(Tokens),
    /// A watch answered 200 with the objects it selects, as the upstream lists them when it
    /// starts, sent again and again as MODIFIED events (each time the same resourceVersion),
    /// one every this long, until the proxy is healthy again.
    Repeat(Duration),
    /// 200 whose body streams this many bytes a second and never a newline, until the proxy
    /// is healthy again (then it is cut): the start of a watch event, a list or an object, by
    /// the request's kind, whose string never ends.
    Endless(u64),
    /// A PATCH answered 200 with the object as the upstream has it, unpatched (a mutating
    /// webhook that puts the gates back on update: the server writes nothing).
    Unchanged,
    /// A watch forwarded until its first line, which is sent cut in the middle; then the
    /// stream ends cleanly.
    CutLine,
    /// A list's first page answered with the first one the proxy forwarded for the same
    /// request (a cache lagging behind: objects at older versions); forwarded if none was.
    Stale,
    /// 404 NotFound for a request whose path holds this (an API the server does not serve,
    /// `/apis/coordination.k8s.io/`); any other request forwarded.
    Absent(String),
    /// The fault for a request whose path is exactly this (`/version`); any other
    /// forwarded.
    At(String, Box<Fault>),
}

/// Which answer each request gets while the proxy is faulty.
#[derive(Clone, Debug)]
pub enum Plan {
    /// The same answer to every request of one kind; the others forwarded.
    Fixed(RequestKind, Fault),
    /// The same answer to every request of each kind named; the others forwarded.
    Each(Vec<(RequestKind, Fault)>),
    /// An answer drawn from the whole space; `watch_works` says whether a watch may ever
    /// run (be forwarded long enough, or deliver an object).
    Random { seed: u64, watch_works: bool },
}

/// What the proxy received: when, and of which kind.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at: Instant,
    pub kind: RequestKind,
    pub what: String,
}

struct Shared {
    upstream: kube::Client,
    plan: Plan,
    rng: Mutex<Rng>,
    /// A `Random` plan's answers to draw from, by kind (`palettes`).
    palettes: Vec<(RequestKind, Vec<Fault>)>,
    faulty: AtomicBool,
    /// Bumped when the proxy turns faulty: forwarded watches end.
    generation: AtomicU64,
    seen: Mutex<Vec<Seen>>,
    /// Continue tokens handed out, for `Tokens::Cycle` and `Endless`.
    tokens: AtomicU64,
    /// The first page forwarded for each list request (`page_key`), for `Stale`.
    pages: Mutex<std::collections::HashMap<String, Bytes>>,
    url: String,
}

/// The running proxy.
pub struct Proxy {
    shared: Arc<Shared>,
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// A proxy in front of the server `kubeconfig` names, healthy until `faulty(true)`.
    pub async fn start(kubeconfig: &Path, plan: Plan) -> Proxy {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig read");
        let options = kube::config::KubeConfigOptions::default();
        let mut config = kube::Config::from_custom_kubeconfig(kc, &options)
            .await
            .expect("kubeconfig usable");
        config.default_retry = false;
        let upstream = kube::Client::try_from(config).expect("upstream client");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (seed, palettes) = match &plan {
            Plan::Random { seed, watch_works } => (*seed, palettes(*seed, *watch_works)),
            Plan::Fixed(..) | Plan::Each(..) => (0, Vec::new()),
        };
        let shared = Arc::new(Shared {
            upstream,
            plan,
            rng: Mutex::new(Rng::new(seed)),
            palettes,
            faulty: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            seen: Mutex::new(Vec::new()),
            tokens: AtomicU64::new(0),
            pages: Mutex::default(),
            url: url.clone(),
        });
        let task = tokio::spawn(accept(listener, shared.clone()));
        Proxy { shared, url, task }
    }

    /// Faulty (every answer from the plan, forwarded watches ended) or healthy.
    pub fn faulty(&self, on: bool) {
        if on {
            self.shared.generation.fetch_add(1, Ordering::SeqCst);
        }
        self.shared.faulty.store(on, Ordering::SeqCst);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// How many requests of `kind` arrived up to `until`.
    pub fn received(&self, kind: RequestKind, until: Instant) -> usize {
        let seen = self.shared.seen.lock().unwrap();
        seen.iter()
            .filter(|s| s.kind == kind && s.at <= until)
            .count()
    }

    /// A proxy with `plan` in front of the bed's double, and a kubeconfig for metainit in
    /// the bed's directory. Healthy until `faulty(true)`.
    pub async fn in_front(bed: &super::Bed, plan: Plan) -> (Proxy, std::path::PathBuf) {
        let proxy = Proxy::start(&bed.kubeconfig, plan).await;
        let kubeconfig = bed.dir.path().join("proxied");
        proxy.write_kubeconfig(&bed.kubeconfig, &kubeconfig);
        (proxy, kubeconfig)
    }

    /// A kubeconfig for metainit: the proxy's plain-HTTP address, the upstream's user.
    pub fn write_kubeconfig(&self, upstream: &Path, out: &Path) {
        let text = std::fs::read_to_string(upstream).expect("kubeconfig read");
        let mut kc: Value = serde_saphyr::from_str(&text).expect("kubeconfig parsed");
        for cluster in kc["clusters"].as_array_mut().expect("clusters") {
            let c = &mut cluster["cluster"];
            c["server"] = json!(self.url);
            if let Some(m) = c.as_object_mut() {
                m.remove("certificate-authority");
                m.remove("certificate-authority-data");
                m.remove("insecure-skip-tls-verify");
            }
        }
        std::fs::write(out, serde_json::to_string(&kc).unwrap()).expect("kubeconfig written");
    }
}

/// The most requests of `kind` in any `window` of `seen` (a window starts at a request).
pub fn most_in_window(seen: &[Seen], kind: RequestKind, window: Duration) -> usize {
    let times: Vec<Instant> = seen
        .iter()
        .filter(|s| s.kind == kind)
        .map(|s| s.at)
        .collect();
    (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|t| **t < times[i] + window)
                .count()
        })
        .max()
        .unwrap_or(0)
}

async fn accept(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    while let Ok((conn, _)) = listener.accept().await {
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                async move { handle(shared, req).await }
            });
            let io = hyper_util::rt::TokioIo::new(conn);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, BoxError> {
    let kind = RequestKind::of(&req);
    let what = format!("{} {}", req.method(), req.uri());
    shared.seen.lock().unwrap().push(Seen {
        at: Instant::now(),
        kind,
        what,
    });
    // A list's later pages are answered as its first: a plan for LISTs holds for each page.
    let plan_kind = match kind {
        RequestKind::Continue => RequestKind::List,
        other => other,
    };
    let fault = if shared.faulty.load(Ordering::SeqCst) {
        choose(&shared, plan_kind)
    } else {
        Fault::Forward
    };
    answer(shared, req, fault).await
}

fn choose(shared: &Shared, kind: RequestKind) -> Fault {
    match &shared.plan {
        Plan::Fixed(k, f) if *k == kind => f.clone(),
        Plan::Fixed(..) => Fault::Forward,
        Plan::Each(rows) => rows
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(Fault::Forward, |(_, f)| f.clone()),
        Plan::Random { .. } => {
            let mut rng = shared.rng.lock().unwrap();
            let palette = shared
                .palettes
                .iter()
                .find(|(k, _)| *k == kind)
                .map(|(_, p)| p.as_slice())
                .unwrap_or_default();
            match palette {
                [] => Fault::Forward,
                p => rng.pick(p).clone(),
            }
        }
    }
}

/// A seed's answers, by kind: a few drawn from the whole space, which its requests of that
/// kind then draw from (a broken proxy or server answers the same way again and again,
/// which is what makes a client loop; an answer drawn anew each time rarely repeats), or
/// for some seeds many, nearly an answer drawn anew each time.
pub fn palettes(seed: u64, watch_works: bool) -> Vec<(RequestKind, Vec<Fault>)> {
    let mut rng = Rng::new(seed ^ 0xA5A5_5A5A);
    RequestKind::ALL
        .iter()
        .map(|kind| {
            let size = *rng.pick(&[1, 1, 2, 3, 40]);
            let palette = (0..size)
                .map(|_| random_fault(&mut rng, *kind, watch_works, 0))
                .collect();
            (*kind, palette)
        })
        .collect()
}

const ODD_CODES: [u16; 12] = [200, 201, 204, 206, 299, 300, 304, 399, 418, 499, 599, 999];
const REDIRECTS: [u16; 5] = [301, 302, 303, 307, 308];
/// APIs a server may not serve: the Leases (Kubernetes 1.13), the Events, the webhook
/// configurations.
const ABSENT: [&str; 3] = [
    "/apis/coordination.k8s.io/",
    "/events",
    "/apis/admissionregistration.k8s.io/",
];

/// One answer from the whole space.
pub fn random_fault(rng: &mut Rng, kind: RequestKind, watch_works: bool, depth: u32) -> Fault {
    let watch = kind == RequestKind::WatchStart;
    match rng.below(15) {
        0 if !watch || watch_works => Fault::Forward,
        1 => {
            let code = if rng.chance(20) {
                *rng.pick(&ODD_CODES)
            } else if watch && rng.chance(25) {
                // The two that make a watch list again: the lists see faults too.
                *rng.pick(&[410, 504])
            } else {
                400 + rng.below(200) as u16
            };
            Fault::Status(code, random_retry_after(rng), random_body(rng))
        }
        2 => {
            let to = rng
                .chance(50)
                .then(|| "http://127.0.0.1:1/elsewhere".to_string());
            Fault::Redirect(*rng.pick(&REDIRECTS), to)
        }
        3 => Fault::Reset,
        4 if depth == 0 => {
            let wait = Duration::from_millis(rng.below(3_000));
            Fault::Delay(wait, Box::new(random_fault(rng, kind, watch_works, 1)))
        }
        5 => Fault::NotJson,
        6 => Fault::CutBody,
        7..=9 if watch => Fault::Watch(random_stream(rng, watch_works)),
        7..=9 if kind == RequestKind::List => Fault::List(match rng.below(3) {
            0 => Tokens::Same,
            1 => Tokens::Cycle(2 + rng.below(3) as u32),
            _ => Tokens::Endless,
        }),
        10 if watch => {
            let most = if watch_works { 5_000 } else { 900 };
            Fault::ForwardFor(Duration::from_millis(rng.below(most)))
        }
        // The answers whose content misleads (#58). A watch that repeats objects, or is
        // forwarded, or streams for long, runs: only where the seed lets a watch run.
        12 if watch && watch_works => {
            Fault::Repeat(Duration::from_millis(*rng.pick(&[20, 50, 200, 1_000])))
        }
        12 if kind == RequestKind::List => Fault::Stale,
        12 if kind == RequestKind::Patch => Fault::Unchanged,
        13 if !watch || watch_works => Fault::Endless(*rng.pick(&[500_000, 2_000_000, 4_000_000])),
        14 if watch && watch_works => Fault::CutLine,
        14 if !watch => Fault::Absent(rng.pick(&ABSENT).to_string()),
        _ => Fault::Status(500 + rng.below(5) as u16, random_retry_after(rng), None),
    }
}

fn random_retry_after(rng: &mut Rng) -> Option<String> {
    match rng.below(7) {
        0 => Some(rng.below(5).to_string()),
        1 => Some(rng.below(100_000).to_string()),
        2 => Some("-3".into()),
        3 => Some("soon".into()),
        4 => Some("Wed, 21 Oct 2015 07:28:00 GMT".into()),
        5 => Some(u64::MAX.to_string()),
        _ => None,
    }
}

fn random_body(rng: &mut Rng) -> Option<String> {
    match rng.below(4) {
        0 => Some(String::new()),
        1 => Some("<html>nope</html>".into()),
        2 => Some("{\"kind\":\"Status\",\"code\":".into()),
        _ => None,
    }
}

fn random_stream(rng: &mut Rng, watch_works: bool) -> Stream {
    let errors = (0..rng.below(3))
        .map(|_| {
            let code = if rng.chance(25) {
                410
            } else {
                rng.below(1_000) as u16
            };
            let reason = if rng.chance(50) {
                String::new()
            } else {
                "Odd".into()
            };
            let message = if rng.chance(50) {
                String::new()
            } else {
                "fuzz".into()
            };
            (code, reason, message)
        })
        .collect();
    let linger = if watch_works {
        Duration::from_millis(rng.below(3_000))
    } else {
        Duration::from_millis(rng.below(600))
    };
    Stream {
        bookmarks: rng.below(4) as u32,
        errors,
        garbage: rng.below(3) as u32,
        objects: if watch_works { rng.below(3) as u32 } else { 0 },
        linger,
        cut: rng.chance(30),
    }
}

fn full(code: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(
        http_body_util::Full::new(body.into())
            .map_err(|never: Infallible| match never {})
            .boxed_unsync(),
    );
    *r.status_mut() = code;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        "application/json".parse().unwrap(),
    );
    r
}

type Answered = Result<Response<Body>, BoxError>;

fn answer(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    fault: Fault,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Answered> + Send + 'static>> {
    Box::pin(async move {
        match fault {
            Fault::Forward if RequestKind::of(&req) == RequestKind::List => {
                recorded(&shared, req).await
            }
            Fault::Forward => forward(&shared, req, None).await,
            Fault::ForwardFor(d) => forward(&shared, req, Some(d)).await,
            Fault::Status(code, retry_after, body) => Ok(status(code, retry_after, body)),
            Fault::Redirect(code, to) => {
                let to = to.unwrap_or_else(|| format!("{}{}", shared.url, req.uri()));
                let mut r = full(StatusCode::from_u16(code).unwrap(), "<a>moved</a>");
                r.headers_mut()
                    .insert(http::header::LOCATION, to.parse().unwrap());
                Ok(r)
            }
            Fault::Reset => Err(err("reset")),
            Fault::Delay(d, then) => {
                tokio::time::sleep(d).await;
                answer(shared, req, *then).await
            }
            Fault::NotJson => Ok(full(StatusCode::OK, "<html><body>Sign in</body></html>")),
            Fault::CutBody => Ok(cut_body()),
            Fault::Watch(s) => Ok(watch_stream(s, &version_of(&req))),
            Fault::List(tokens) => list(&shared, req, tokens).await,
            Fault::Repeat(every) => repeat(shared, req, every).await,
            Fault::Endless(rate) => Ok(endless(shared, RequestKind::of(&req), rate)),
            Fault::Unchanged => unchanged(&shared, req).await,
            Fault::CutLine => cut_line(&shared, req).await,
            Fault::Stale => {
                match page_key(&req).and_then(|k| shared.pages.lock().unwrap().get(&k).cloned()) {
                    Some(page) => Ok(full(StatusCode::OK, page)),
                    None => recorded(&shared, req).await,
                }
            }
            Fault::Absent(path) if req.uri().path().contains(path.as_str()) => Ok(status(
                404,
                None,
                Some(
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                           "status": "Failure", "reason": "NotFound", "details": {},
                           "message": "the server could not find the requested resource",
                           "code": 404})
                    .to_string(),
                ),
            )),
            Fault::Absent(_) => forward(&shared, req, None).await,
            Fault::At(path, then) if req.uri().path() == path => answer(shared, req, *then).await,
            Fault::At(..) => forward(&shared, req, None).await,
        }
    })
}

/// The key of a list's first page for `Stale`: its path and query but the versions and the
/// timeout; `None` for a later page (its continue token is the upstream's).
fn page_key<B>(req: &Request<B>) -> Option<String> {
    let query = req.uri().query().unwrap_or("");
    let mut kept: Vec<&str> = Vec::new();
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        if kv.starts_with("continue=") {
            return None;
        }
        if !(kv.starts_with("resourceVersion") || kv.starts_with("timeoutSeconds=")) {
            kept.push(kv);
        }
    }
    kept.sort_unstable();
    Some(format!("{}?{}", req.uri().path(), kept.join("&")))
}

/// A list forwarded; the first 200 answer to a first page is kept for `Stale`.
async fn recorded(shared: &Arc<Shared>, req: Request<Incoming>) -> Answered {
    let key = page_key(&req).filter(|k| !shared.pages.lock().unwrap().contains_key(k));
    let Some(key) = key else {
        return forward(shared, req, None).await;
    };
    let up = send_upstream(shared, req).await?;
    let code = up.status();
    let bytes = up.into_body().collect().await.map_err(err)?.to_bytes();
    if code == StatusCode::OK {
        shared
            .pages
            .lock()
            .unwrap()
            .entry(key)
            .or_insert_with(|| bytes.clone());
    }
    Ok(full(code, bytes))
}

/// A GET of `uri` from the upstream: its status and body.
async fn upstream_get(shared: &Shared, uri: &str) -> Result<(StatusCode, Bytes), BoxError> {
    let req = Request::get(uri)
        .header(http::header::ACCEPT, "application/json")
        .body(kube::client::Body::empty())
        .map_err(err)?;
    let up = shared.upstream.send(req).await.map_err(err)?;
    let code = up.status();
    let bytes = up.into_body().collect().await.map_err(err)?.to_bytes();
    Ok((code, bytes))
}

/// One watch event's line as an API server writes it: `type` before `object` (Go writes a
/// struct's fields in order; `json!` sorts its keys, and metainit reads a gated pod only with
/// `type` first).
fn event_line(kind: &str, object: &Value) -> String {
    format!("{{\"type\":{},\"object\":{object}}}\n", json!(kind))
}

/// Until the proxy is healthy again, checked every 20 ms.
async fn healed(shared: Arc<Shared>) {
    while shared.faulty.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `Repeat`: the objects the watch selects, listed from the upstream once, sent as MODIFIED
/// events one every `every`, round and round.
async fn repeat(shared: Arc<Shared>, req: Request<Incoming>, every: Duration) -> Answered {
    let query: Vec<&str> = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|kv| kv.starts_with("labelSelector=") || kv.starts_with("fieldSelector="))
        .collect();
    let uri = format!("{}?{}", req.uri().path(), query.join("&"));
    let (code, bytes) = upstream_get(&shared, &uri).await?;
    let list: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let Some(items) = list["items"].as_array().filter(|_| code == StatusCode::OK) else {
        return Ok(full(code, bytes));
    };
    let kind = list["kind"].as_str().unwrap_or("").trim_end_matches("List");
    let lines: Vec<Bytes> = items
        .iter()
        .map(|item| {
            let mut object = item.clone();
            object["kind"] = json!(kind);
            object["apiVersion"] = list["apiVersion"].clone();
            Bytes::from(event_line("MODIFIED", &object))
        })
        .collect();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let events = futures::stream::unfold((tick, 0usize), move |(mut tick, n)| {
        let line = lines.get(n % lines.len().max(1)).cloned();
        async move {
            tick.tick().await;
            // Nothing selected: the stream stays open, silent.
            let frame = Frame::data(line.unwrap_or_default());
            Some((Ok::<_, BoxError>(frame), (tick, n + 1)))
        }
    });
    Ok(stream_body(events.take_until(Box::pin(healed(shared)))))
}

/// `Endless`: the start of what the request asks for, then a string that never ends, `rate`
/// bytes a second in 64 KiB frames; cut once the proxy is healthy again.
fn endless(shared: Arc<Shared>, kind: RequestKind, rate: u64) -> Response<Body> {
    let head: &'static [u8] = match kind {
        RequestKind::WatchStart => {
            br#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"endless","annotations":{"a":""#
        }
        RequestKind::List => {
            br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"endless","annotations":{"a":""#
        }
        _ => br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"endless","annotations":{"a":""#,
    };
    let chunk = Bytes::from(vec![b'a'; 64 * 1024]);
    let every = Duration::from_secs_f64(chunk.len() as f64 / rate.max(1) as f64);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let body = futures::stream::unfold(tick, move |mut tick| {
        let chunk = chunk.clone();
        async move {
            tick.tick().await;
            Some((Ok::<_, BoxError>(Frame::data(chunk)), tick))
        }
    });
    let body = futures::stream::once(async move { Ok(Frame::data(Bytes::from_static(head))) })
        .chain(body.take_until(Box::pin(healed(shared))))
        .chain(futures::stream::once(async { Err(err("cut")) }));
    stream_body(body)
}

/// `Unchanged`: the PATCH's body read and dropped, the object GET from the upstream as it is.
async fn unchanged(shared: &Arc<Shared>, req: Request<Incoming>) -> Answered {
    let path = req.uri().path().to_string();
    drop(req.into_body().collect().await.map_err(err)?);
    let (code, bytes) = upstream_get(shared, &path).await?;
    Ok(full(code, bytes))
}

/// `CutLine`: the upstream's watch, read to the end of its first line that is not a
/// BOOKMARK; the bookmarks before it sent whole, that line's first half, and the end.
async fn cut_line(shared: &Arc<Shared>, req: Request<Incoming>) -> Answered {
    let (parts, body) = send_upstream(shared, req).await?.into_parts();
    let mut data = body.into_data_stream();
    let half = futures::stream::once(async move {
        let mut read = Vec::new();
        let mut from = 0;
        while let Some(chunk) = data.next().await {
            read.extend_from_slice(&chunk.map_err(err)?);
            while let Some(end) = read[from..].iter().position(|b| *b == b'\n') {
                let line = &read[from..from + end];
                if line.windows(10).any(|w| w == b"\"BOOKMARK\"") {
                    from += end + 1;
                    continue;
                }
                read.truncate(from + end / 2);
                return Ok(Frame::data(Bytes::from(read)));
            }
        }
        Ok(Frame::data(Bytes::from(read)))
    });
    let mut r = Response::from_parts(parts, BodyExt::boxed_unsync(StreamBody::new(half)));
    r.headers_mut().remove(http::header::CONTENT_LENGTH);
    Ok(r)
}

fn status(code: u16, retry_after: Option<String>, body: Option<String>) -> Response<Body> {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::IM_A_TEAPOT);
    let body = body.unwrap_or_else(|| {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "code": code.as_u16(), "reason": "", "message": "fuzz"})
        .to_string()
    });
    let mut r = full(code, body);
    if let Some(ra) = retry_after {
        r.headers_mut()
            .insert(http::header::RETRY_AFTER, ra.parse().unwrap());
    }
    r
}

fn stream_body(
    items: impl futures::Stream<Item = Result<Frame<Bytes>, BoxError>> + Send + 'static,
) -> Response<Body> {
    let mut r = Response::new(BodyExt::boxed_unsync(StreamBody::new(items)));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        "application/json".parse().unwrap(),
    );
    r
}

fn cut_body() -> Response<Body> {
    let items = futures::stream::iter([
        Ok(Frame::data(Bytes::from_static(
            b"{\"kind\":\"PodList\",\"items\":[{",
        ))),
        Err::<Frame<Bytes>, BoxError>(err("cut")),
    ]);
    stream_body(items)
}

/// The resourceVersion a watch asked to start from.
fn version_of<B>(req: &Request<B>) -> String {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("resourceVersion="))
        .unwrap_or("0")
        .to_string()
}

/// A stream made up here; its bookmarks and objects at the version the watch asked for (a
/// version from the future would be a server's lie, not a fault a client can survive).
fn watch_stream(s: Stream, version: &str) -> Response<Body> {
    let mut lines = Vec::new();
    for _ in 0..s.bookmarks {
        let object = json!({"kind": "Pod", "apiVersion": "v1",
                            "metadata": {"resourceVersion": version}});
        lines.push(event_line("BOOKMARK", &object));
    }
    for i in 0..s.objects {
        let object = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": format!("fuzz-{i}"), "namespace": "default",
                         "resourceVersion": version,
                         "labels": {super::LABEL: "true"}},
            "spec": {"containers": [{"name": "c", "image": "i"}],
                     "schedulingGates": [{"name": "example.com/fuzz"}]}});
        lines.push(event_line("ADDED", &object));
    }
    for (code, reason, message) in &s.errors {
        let object = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "code": code, "reason": reason, "message": message});
        lines.push(event_line("ERROR", &object));
    }
    for _ in 0..s.garbage {
        lines.push("this is no event\n".to_string());
    }
    let frames = lines.into_iter().map(|l| Ok(Frame::data(Bytes::from(l))));
    let linger = s.linger;
    let cut = s.cut;
    let tail = futures::stream::once(async move {
        tokio::time::sleep(linger).await;
        if cut {
            Err::<Frame<Bytes>, BoxError>(err("cut"))
        } else {
            Ok(Frame::data(Bytes::new()))
        }
    });
    stream_body(futures::stream::iter(frames).chain(tail))
}

/// The request for the upstream: the same method, path, query (less a continue token of
/// ours) and body.
async fn upstream_request(req: Request<Incoming>) -> Result<Request<kube::client::Body>, BoxError> {
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await.map_err(err)?.to_bytes();
    let path = parts.uri.path();
    let query: Vec<&str> = parts
        .uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty() && !kv.starts_with("continue=fuzz-"))
        .collect();
    let uri = if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", query.join("&"))
    };
    let mut out = Request::builder().method(parts.method).uri(uri);
    for (k, v) in &parts.headers {
        if k == http::header::CONTENT_TYPE || k == http::header::ACCEPT {
            out = out.header(k, v);
        }
    }
    out.body(kube::client::Body::from(bytes.to_vec()))
        .map_err(err)
}

async fn send_upstream(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<kube::client::Body>, BoxError> {
    let req = upstream_request(req).await?;
    shared.upstream.send(req).await.map_err(err)
}

async fn forward(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    until: Option<Duration>,
) -> Result<Response<Body>, BoxError> {
    let (parts, body) = send_upstream(shared, req).await?.into_parts();
    let generation = shared.generation.load(Ordering::SeqCst);
    let gen_of = shared.clone();
    let deadline = until.map(|d| tokio::time::Instant::now() + d);
    // Ends when the proxy turns faulty, or at `until`.
    let frames = body
        .into_data_stream()
        .map(|b| b.map(Frame::data).map_err(err));
    let stop = async move {
        loop {
            if gen_of.generation.load(Ordering::SeqCst) != generation {
                return;
            }
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let frames = frames.take_until(Box::pin(stop));
    let mut r = Response::from_parts(parts, BodyExt::boxed_unsync(StreamBody::new(frames)));
    r.headers_mut().remove(http::header::CONTENT_LENGTH);
    Ok(r)
}

async fn list(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    tokens: Tokens,
) -> Result<Response<Body>, BoxError> {
    let up = send_upstream(shared, req).await?;
    let code = up.status();
    let bytes = up.into_body().collect().await.map_err(err)?.to_bytes();
    let Ok(mut list) = serde_json::from_slice::<Value>(&bytes) else {
        return Ok(full(code, bytes));
    };
    let n = shared.tokens.fetch_add(1, Ordering::SeqCst);
    let token = match tokens {
        Tokens::Same => "fuzz-same".to_string(),
        Tokens::Cycle(k) => format!("fuzz-{}", n % u64::from(k)),
        Tokens::Endless => format!("fuzz-n{n}"),
    };
    list["metadata"]["continue"] = json!(token);
    Ok(full(code, list.to_string()))
}

/// The requests of each kind, as one line.
pub fn counts(seen: &[Seen]) -> String {
    let mut out = String::new();
    for kind in RequestKind::ALL {
        let n = seen.iter().filter(|s| s.kind == kind).count();
        out.push_str(&format!("{}={n} ", kind.label()));
    }
    out
}
