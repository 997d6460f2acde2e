//! The sweep's table (tests/sweep.rs): the requests, the answers, the proxy's fault for each
//! cell, and what each cell may do: its bound, its exit, how long it is held.

use std::{fmt, time::Duration};

use metainit::client::RequestKind;
use serde_json::{Value, json};

use super::common::{fuzz::Fault, webhooks::Scene};

pub const HELD: Duration = Duration::from_secs(60);
pub const RETRY_AFTER: u64 = 20;

/// A request of metainit's, as the fault rule selects it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    Discovery,
    List,
    WatchStart,
    WatchError,
    Patch,
    Event,
    WebhookList,
    WebhookPatch,
    SliceList,
}

use Request::*;

pub const REQUESTS: [Request; 9] = [
    Discovery,
    List,
    WatchStart,
    WatchError,
    Patch,
    Event,
    WebhookList,
    WebhookPatch,
    SliceList,
];

impl Request {
    /// The proxy's kind for it, and its exact path where the kind alone would take other
    /// requests too (`Fault::At`); `None`: every request of the kind. Discovery is every
    /// non-resource GET (`/version`, `/api`, `/apis/G/V`, the server's `/readyz`), as on
    /// the double; a cell's PATCHes are its pods' or (`WebhookPatch`) its configuration's.
    pub fn select(self, s: &Scene) -> (RequestKind, Option<String>) {
        let pods = format!("/api/v1/namespaces/{}/pods", s.home);
        match self {
            Discovery => (RequestKind::Get, None),
            List => (RequestKind::List, Some(pods)),
            WatchStart | WatchError => (RequestKind::WatchStart, Some(pods)),
            Patch => (RequestKind::Patch, None),
            Event => (RequestKind::Write, None),
            WebhookList => (RequestKind::List, Some(VWCS.into())),
            WebhookPatch => (RequestKind::Patch, Some(format!("{VWCS}/{}", s.name("gk")))),
            SliceList => (
                RequestKind::List,
                Some(format!(
                    "/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices",
                    s.ns("gk")
                )),
            ),
        }
    }

    pub fn webhooks(self) -> bool {
        matches!(self, WebhookList | WebhookPatch | SliceList)
    }

    /// Whether `/readyz` must say 503 while this request fails: only the watches count
    /// (`src/admin/mod.rs`); before discovery ends nothing is watched yet.
    pub fn unready_while_failing(self) -> bool {
        matches!(
            self,
            Discovery | List | WatchStart | WatchError | WebhookList | SliceList
        )
    }
}

pub const VWCS: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";

/// An answer of the server, or of a proxy in front of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply_ {
    Code(u16),
    Invalid,
    RetryAfter,
    Reset,
    Hang,
    NotJson,
}

use Reply_::*;

pub const ANSWERS: [Reply_; 17] = [
    Code(400),
    Code(401),
    Code(403),
    Code(404),
    Code(409),
    Code(410),
    Invalid,
    Code(422),
    RetryAfter,
    Code(429),
    Code(500),
    Code(502),
    Code(503),
    Code(504),
    Reset,
    Hang,
    NotJson,
];

impl fmt::Display for Reply_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Code(c) => write!(f, "{c}"),
            Invalid => f.write_str("422+causes"),
            RetryAfter => write!(f, "429+RA{RETRY_AFTER}"),
            Reset => f.write_str("reset"),
            Hang => f.write_str("hang"),
            NotJson => f.write_str("not-json"),
        }
    }
}

/// The Status a kube-apiserver writes for `code` (its reason, as `k8s.io/apimachinery`'s
/// errors name it), with `details.causes` for `Invalid` and `retryAfterSeconds` for a 429
/// with Retry-After.
pub fn status(code: u16, reply: Reply_) -> Value {
    let reason = match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    };
    let mut details = json!({});
    if reply == Invalid {
        details["causes"] = json!([{"reason": "FieldValueForbidden", "message": "a policy refuses it", "field": "spec"}]);
    }
    if reply == RetryAfter {
        details["retryAfterSeconds"] = json!(RETRY_AFTER);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": format!("sweep: {reason}"), "reason": reason, "details": details,
           "code": code})
}

/// The proxy's answer for the cell: a Status of the server's, an ERROR event in a watch
/// answered 200 (its row has the codes only), a reset, no answer (held an hour), or a body
/// that is not JSON.
pub fn fault(request: Request, reply: Reply_) -> Fault {
    let code = match reply {
        Code(c) => c,
        Invalid => 422,
        RetryAfter => 429,
        Reset => return Fault::Reset,
        Hang => return Fault::Delay(Duration::from_secs(3600), Box::new(Fault::Reset)),
        NotJson => return Fault::NotJson,
    };
    let body = status(code, reply);
    if request == WatchError {
        // A watch answered 200 whose one line is the ERROR event, the Status whole
        // (`details.causes`, `retryAfterSeconds`); `type` first, as a server writes it.
        let line = format!("{{\"type\":\"ERROR\",\"object\":{body}}}\n");
        return Fault::Status(200, None, Some(line));
    }
    let retry_after = (reply == RetryAfter).then(|| RETRY_AFTER.to_string());
    Fault::Status(code, retry_after, Some(body.to_string()))
}

/// The cells: every request against every answer; a watch's ERROR event carries a Status,
/// so its row has the codes only (a reset mid-watch, a line that is not JSON and a silent
/// watch are `tests/chaos.rs`'s cut and malformed watches and `tests/never_stuck.rs`).
pub fn cells() -> Vec<(Request, Reply_)> {
    REQUESTS
        .iter()
        .flat_map(|r| ANSWERS.iter().map(move |a| (*r, *a)))
        .filter(|(r, a)| *r != WatchError || !matches!(a, Reset | Hang | NotJson))
        .collect()
}

/// The most requests of the faulted kind a minute may see (derivation at the top).
pub fn bound(request: Request, reply: Reply_) -> usize {
    let watch = match reply {
        RetryAfter => 4,
        Code(410) => 8,
        _ => 7,
    };
    match request {
        Discovery if matches!(reply, Code(401 | 403)) => 152,
        Discovery | List | WatchStart | WatchError | WebhookList | SliceList => watch,
        Patch if reply == RetryAfter => 6,
        Patch => 19,
        WebhookPatch if reply == RetryAfter => 4,
        WebhookPatch => 10,
        Event => 8,
    }
}

/// What metainit must do in a cell, where it is not "runs, bounded, recovers": exit with
/// this code, having said this.
pub fn expected_exit(request: Request, reply: Reply_) -> Option<(i32, &'static str)> {
    match (request, reply) {
        // Refused for good once the server's own `/readyz` has said the same for `STARTING`
        // (60 s): exit 2 with what to fix (tests/starting.rs).
        (Discovery, Code(401)) => Some((2, "refused the kubeconfig's credentials")),
        (Discovery, Code(403)) => Some((2, "forbidden")),
        // Not a Kubernetes API server: exit 2 saying so.
        (Discovery, NotJson) => Some((2, "does not look like a Kubernetes API server")),
        // A start-up request answered with a client error no retry mends: exit 1 with the
        // server's answer; the restarts are the kubelet's backoff (10 s doubling to 5 min).
        (Discovery, Code(c @ (400 | 404 | 409 | 410 | 422))) => Some((1, code_text(c))),
        (Discovery, Invalid) => Some((1, "422 Invalid")),
        _ => None,
    }
}

pub fn code_text(c: u16) -> &'static str {
    match c {
        400 => "400 BadRequest",
        404 => "404 NotFound",
        409 => "409 Conflict",
        410 => "410 Expired",
        _ => "422 Invalid",
    }
}

/// How long the fault is held: a minute, or until the exit that is due (`STARTING` runs a
/// minute from the first 401 or 403, so a little longer there). Requests are counted over
/// the first minute.
pub fn held(request: Request, reply: Reply_) -> Duration {
    if expected_exit(request, reply).is_some() {
        HELD + Duration::from_secs(20)
    } else {
        HELD
    }
}

/// A PATCH answered 404 is the object gone (`failure.rs`: not retried; the watch says
/// when it comes back): only the next relist finds it again. Those cells resync every 20 s.
pub fn resyncs(request: Request, reply: Reply_) -> bool {
    matches!(request, Patch | WebhookPatch) && reply == Code(404)
}
