//! What a failed API request means for metainit: one function (`classify`) sorts every
//! `kube::Error` into a small set of classes, and one table (`Class::policy`) says, for each
//! class, whether a unit of work tries again, whether a request that stands for the process
//! (start-up, a `--once` LIST) gives up or waits, which step of a retry schedule it takes
//! (`crate::retry`), which `reason` label the failures metric gets and how loud the log line
//! is. No other code matches on status codes to decide whether to retry.

use std::time::Duration;

use tracing::Level;

mod words;
pub use words::{NOT_A_STATUS, body_text, chain, describe, one_line, status_fields, status_text};

/// The classes of API failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Someone else changed the object first: 409, or a 422 without causes (a failed
    /// JSON-patch `test`). The newest state is looked at again.
    Race,
    /// A resourceVersion or continue token too old (410): a race with etcd's compaction. A
    /// watch or a list starts again from the newest state.
    Expired,
    /// The object is gone (404).
    Gone,
    /// Validation or admission refused the change: a 422 with causes, a 400, any other
    /// 4xx. It does not go away by itself, but a policy can change: retried, slowly.
    Rejected,
    /// 403: RBAC not (yet) granting what metainit needs.
    Forbidden,
    /// 401: the credentials are not (yet, or any more) accepted.
    Unauthorized,
    /// 429: the server asks to slow down (its Retry-After is kept to).
    Throttled,
    /// 5xx but 504: the server (or a webhook behind it) failed.
    ServerError,
    /// A success whose body is not the JSON expected: not a Kubernetes API server, or one
    /// behind something that rewrites its answers.
    Undecodable,
    /// No answer within `--request-timeout`, or the server's own timeout: 504, and 408
    /// (kube-apiserver's `timeout` filter answers a request over its `--request-timeout`
    /// with 408 or 504 and a Status "Timeout"; the same request may succeed next time).
    Timeout,
    /// Nothing listens at the server's address (connection refused).
    Refused,
    /// No connection, or the connection broke.
    Unreachable,
    /// The request cannot succeed as it is made: TLS with the server failed (a wrong CA, a
    /// plain-HTTP server behind an `https://` URL), an answer over its cap (`TooLarge`), the
    /// kubeconfig's credentials could not be had, or the request could not be built.
    Unusable,
    /// The PATCH was answered with success, but the object it returned still holds what it
    /// removed (`blocker::kept`): a webhook or policy puts it back. Never from `classify`.
    Kept,
    /// `--once`'s `--timeout` ended with the attempt in flight, or before it started: never
    /// an answer of the server (`classify` does not give it), and never tried again.
    Spent,
}

/// The wait a class takes on a retry schedule (`crate::retry::Backoff`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The schedule's next step, never before the server's Retry-After.
    Step,
    /// About a second, and the schedule starts again: nothing listens, so an attempt costs
    /// the server nothing, and what a server answered before it went away says nothing of the
    /// next one. On a schedule that has no such step (each object's), the next step.
    Soon,
    /// At once the first time in a row (a relist is due), then the schedule's next step.
    AtOnce,
}

/// What to do about a class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// A unit of work (an object, a webhook configuration) is tried again.
    pub retry: bool,
    /// A request that stands for the process (`/version`, discovery, a `--once` LIST) gives
    /// up with a message that says what to fix; otherwise it waits and tries again.
    pub fatal: bool,
    pub wait: Wait,
    /// The `reason` label of `metainit_clear_failures_total`; `None`: not a failure.
    pub reason: Option<&'static str>,
    pub level: Level,
    /// What the operator can do about it, for the log line.
    pub hint: Option<&'static str>,
}

pub const RBAC_HINT: &str = "grant get, list, watch and patch (and initialize on Kubernetes 1.7 to 1.13) to metainit's user: manifests/rbac.yaml";

const REJECTED_HINT: &str = "an admission webhook or policy, or validation, refuses the patch";
const UNAUTHORIZED_HINT: &str = "the API server does not accept the kubeconfig's credentials";
const TIMEOUT_HINT: &str = "no answer within --request-timeout";
const KEPT_HINT: &str = "a mutating admission webhook or policy puts back what metainit removes: \
                         exempt metainit's user from it, or fix it";
const SPENT_HINT: &str =
    "--timeout bounds the whole --once run: give it more, or see why the server is slow to answer";

impl Class {
    /// Every class, for the metric's label values.
    pub const ALL: [Class; 15] = [
        Class::Race,
        Class::Expired,
        Class::Gone,
        Class::Rejected,
        Class::Forbidden,
        Class::Unauthorized,
        Class::Throttled,
        Class::ServerError,
        Class::Undecodable,
        Class::Timeout,
        Class::Refused,
        Class::Unreachable,
        Class::Unusable,
        Class::Kept,
        Class::Spent,
    ];

    /// Whether the state worked from was stale (a race lost, or a version expired): the
    /// next attempt reads the newest.
    pub fn stale(self) -> bool {
        matches!(self, Class::Race | Class::Expired)
    }

    /// The one table. A 401 or 403 is fatal to the process unless the server is still
    /// starting (`discovery::starting` looks): the caller's to ask.
    pub fn policy(self) -> Policy {
        use Level as L;
        use Wait::{AtOnce, Soon, Step};
        #[rustfmt::skip]
        let (retry, fatal, wait, reason, level, hint) = match self {
            Class::Race =>         (true,  true,  Step,   Some("race"),         L::DEBUG, None),
            Class::Expired =>      (true,  true,  AtOnce, Some("race"),         L::DEBUG, None),
            Class::Gone =>         (false, true,  Step,   None,                 L::DEBUG, None),
            Class::Rejected =>     (true,  true,  Step,   Some("rejected"),     L::WARN,  Some(REJECTED_HINT)),
            Class::Forbidden =>    (true,  true,  Step,   Some("forbidden"),    L::WARN,  Some(RBAC_HINT)),
            Class::Unauthorized => (true,  true,  Step,   Some("unauthorized"), L::WARN,  Some(UNAUTHORIZED_HINT)),
            Class::Throttled =>    (true,  false, Step,   Some("throttled"),    L::DEBUG, None),
            Class::ServerError =>  (true,  false, Step,   Some("server_error"), L::DEBUG, None),
            Class::Undecodable =>  (true,  true,  Step,   Some("server_error"), L::DEBUG, None),
            Class::Timeout =>      (true,  false, Step,   Some("timeout"),      L::WARN,  Some(TIMEOUT_HINT)),
            Class::Refused =>      (true,  false, Soon,   Some("unreachable"),  L::DEBUG, None),
            Class::Unreachable =>  (true,  false, Step,   Some("unreachable"),  L::DEBUG, None),
            Class::Unusable =>     (true,  true,  Step,   Some("unreachable"),  L::DEBUG, None),
            Class::Kept =>         (true,  true,  Step,   Some("kept"),         L::WARN,  Some(KEPT_HINT)),
            // No answer in time, as `Timeout`, but it is the whole run's time that ran out.
            Class::Spent =>        (false, true,  Step,   Some("timeout"),      L::WARN,  Some(SPENT_HINT)),
        };
        Policy {
            retry,
            fatal,
            wait,
            reason,
            level,
            hint,
        }
    }
}

/// Sorts an API error into its class.
pub fn classify(e: &kube::Error) -> Class {
    match e {
        kube::Error::Api(s) => class_of(s),
        kube::Error::SerdeError(_) => Class::Undecodable,
        _ if is_timeout(e) => Class::Timeout,
        _ if refused(e) => Class::Refused,
        _ if is_tls_failure(e) || too_large(e).is_some() => Class::Unusable,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            Class::Unreachable
        }
        _ => Class::Unusable,
    }
}

/// Sorts an error answer (or a watch's ERROR event) into its class.
pub fn class_of(s: &kube::core::Status) -> Class {
    match s.code {
        401 => Class::Unauthorized,
        403 => Class::Forbidden,
        404 => Class::Gone,
        409 => Class::Race,
        410 => Class::Expired,
        422 if s.details.as_ref().is_some_and(|d| !d.causes.is_empty()) => Class::Rejected,
        422 => Class::Race,
        429 => Class::Throttled,
        408 | 504 => Class::Timeout,
        500..=599 => Class::ServerError,
        _ => Class::Rejected,
    }
}

/// Whether `T` is somewhere in an error's chain.
fn in_chain<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(t) = err.downcast_ref::<T>() {
            return Some(t);
        }
        cur = err.source();
    }
    None
}

fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    in_chain::<RequestTimeout>(e).is_some()
}

/// Whether a connection was refused (nothing listens at the address).
pub fn refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Whether TLS with the server failed.
pub fn is_tls_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        let text = err.to_string();
        if err.is::<rustls::Error>()
            || text.contains("InvalidContentType")
            || text.contains("invalid peer certificate")
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// An answer cut at its cap (`client::cap`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the answer was longer than {} (the most metainit reads of {what}): a server or \
     proxy that sends a body without end, or an object far larger than etcd stores",
    crate::text::bytes(*limit as u64)
)]
pub struct TooLarge {
    pub limit: usize,
    pub what: &'static str,
}

/// The answer's cap, if it is over it, in an error's chain.
pub fn too_large<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a TooLarge> {
    in_chain::<TooLarge>(e)
}

/// The longest Retry-After kept to.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(30);

/// The server's Retry-After, from the Status details of a 429 or 503 (`client` carries the
/// header there), capped at `RETRY_AFTER_MAX`; zero when it gave none.
pub fn retry_after(e: &kube::Error) -> Duration {
    match e {
        kube::Error::Api(s) => retry_after_of(s),
        _ => Duration::ZERO,
    }
}

/// A Status's Retry-After, capped at `RETRY_AFTER_MAX`.
pub fn retry_after_of(s: &kube::core::Status) -> Duration {
    s.details.as_ref().map_or(Duration::ZERO, |d| {
        Duration::from_secs(u64::from(d.retry_after_seconds)).min(RETRY_AFTER_MAX)
    })
}

/// How long an API that answered 404 or 403 as a whole is left before it is asked again:
/// the Lease API (absent before Kubernetes 1.14, or its namespace), the rights to it, the
/// Events of a namespace. Such an absence ends only by someone's hand (an upgrade, a Role
/// granted, a namespace made), never within seconds, and nothing waits on it meanwhile
/// (every instance clears at once; an Event is only a record), so asking every round or every
/// object is all cost: 60 Lease requests a minute, for ever. Five minutes is the watches'
/// resync period by default: a fix is seen about as soon as a relist would see it.
pub const ABSENT: Duration = Duration::from_secs(300);

/// Whether an answer says an API, or the rights to it, is not there (404, 403): an absence
/// to remember for `ABSENT`, not a failure to retry soon. The caller rules out a 403 from a
/// server still starting (`discovery::starting`).
pub fn absent(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if matches!(s.code, 403 | 404))
}

/// A failed attempt at an object.
#[derive(Debug, thiserror::Error)]
#[error("{}", describe(.error))]
pub struct Failure {
    pub class: Class,
    #[source]
    pub error: kube::Error,
}

impl Failure {
    /// A success whose object still holds what the PATCH removed.
    pub fn kept(kept: Box<crate::blocker::Kept>) -> Failure {
        Failure {
            class: Class::Kept,
            error: kube::Error::Service(kept),
        }
    }

    /// What a `kept` failure kept.
    pub fn as_kept(&self) -> Option<&crate::blocker::Kept> {
        match (&self.class, &self.error) {
            (Class::Kept, kube::Error::Service(e)) => e.downcast_ref(),
            _ => None,
        }
    }
}

impl From<kube::Error> for Failure {
    fn from(error: kube::Error) -> Self {
        Failure {
            class: classify(&error),
            error,
        }
    }
}

/// No answer within `--request-timeout`.
#[derive(Debug, thiserror::Error)]
#[error("no answer within {0:?} (--request-timeout)")]
pub struct RequestTimeout(pub Duration);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{Status, response::StatusCause, response::StatusDetails};

    fn api(code: u16, causes: usize) -> kube::Error {
        let details = (causes > 0).then(|| StatusDetails {
            causes: (0..causes)
                .map(|_| StatusCause {
                    reason: "FieldValueForbidden".into(),
                    message: "no".into(),
                    field: "spec".into(),
                })
                .collect(),
            name: "p".into(),
            group: String::new(),
            kind: "Pod".into(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
        kube::Error::Api(Box::new(Status {
            code,
            details,
            ..Status::default()
        }))
    }

    fn io(kind: std::io::ErrorKind) -> kube::Error {
        kube::Error::Service(Box::new(std::io::Error::from(kind)))
    }

    /// The one table, row by row: what an error is, and what is done about it.
    #[test]
    fn every_class_and_its_policy() {
        use Wait::{AtOnce, Soon, Step};
        let serde = serde_json::from_str::<u8>("<html>").unwrap_err();
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let cap = TooLarge {
            limit: 8,
            what: "one object",
        };
        let http = http::Request::get("\u{0}").body(()).unwrap_err();
        #[rustfmt::skip]
        let cases = [
            // error,                                  class,               retry, fatal, wait,   reason
            (api(409, 0),                              Class::Race,         true,  true,  Step,   Some("race")),
            (api(422, 0),                              Class::Race,         true,  true,  Step,   Some("race")),
            (api(410, 0),                              Class::Expired,      true,  true,  AtOnce, Some("race")),
            (api(422, 1),                              Class::Rejected,     true,  true,  Step,   Some("rejected")),
            (api(400, 0),                              Class::Rejected,     true,  true,  Step,   Some("rejected")),
            (api(415, 0),                              Class::Rejected,     true,  true,  Step,   Some("rejected")),
            (api(404, 0),                              Class::Gone,         false, true,  Step,   None),
            (api(401, 0),                              Class::Unauthorized, true,  true,  Step,   Some("unauthorized")),
            (api(403, 0),                              Class::Forbidden,    true,  true,  Step,   Some("forbidden")),
            (api(429, 0),                              Class::Throttled,    true,  false, Step,   Some("throttled")),
            (api(500, 0),                              Class::ServerError,  true,  false, Step,   Some("server_error")),
            (api(501, 0),                              Class::ServerError,  true,  false, Step,   Some("server_error")),
            (api(503, 0),                              Class::ServerError,  true,  false, Step,   Some("server_error")),
            (kube::Error::SerdeError(serde),           Class::Undecodable,  true,  true,  Step,   Some("server_error")),
            (api(504, 0),                              Class::Timeout,      true,  false, Step,   Some("timeout")),
            (api(408, 0),                              Class::Timeout,      true,  false, Step,   Some("timeout")),
            (kube::Error::Service(Box::new(RequestTimeout(Duration::from_secs(1)))),
                                                       Class::Timeout,      true,  false, Step,   Some("timeout")),
            (io(std::io::ErrorKind::ConnectionRefused), Class::Refused,     true,  false, Soon,   Some("unreachable")),
            (io(std::io::ErrorKind::ConnectionReset),  Class::Unreachable,  true,  false, Step,   Some("unreachable")),
            (kube::Error::Service("connection refused".into()),
                                                       Class::Unreachable,  true,  false, Step,   Some("unreachable")),
            (kube::Error::Service(Box::new(tls)),      Class::Unusable,     true,  true,  Step,   Some("unreachable")),
            (kube::Error::Service(Box::new(cap)),      Class::Unusable,     true,  true,  Step,   Some("unreachable")),
            (kube::Error::HttpError(http),             Class::Unusable,     true,  true,  Step,   Some("unreachable")),
        ];
        for (e, class, retry, fatal, wait, reason) in cases {
            assert_eq!(classify(&e), class, "{e:?}");
            let p = class.policy();
            assert_eq!(
                (p.retry, p.fatal, p.wait, p.reason),
                (retry, fatal, wait, reason),
                "{class:?}"
            );
        }
        // The budget's end is never tried again: nothing is left of it.
        let p = Class::Spent.policy();
        assert_eq!((p.retry, p.fatal, p.reason), (false, true, Some("timeout")));
        let p = Class::Kept.policy();
        assert_eq!((p.retry, p.reason), (true, Some("kept")));
        // The ones an operator must act on are loud, and say what to do; the others quiet.
        let loud = [
            Class::Rejected,
            Class::Forbidden,
            Class::Unauthorized,
            Class::Timeout,
            Class::Kept,
            Class::Spent,
        ];
        for class in Class::ALL {
            let p = class.policy();
            let want = if loud.contains(&class) {
                Level::WARN
            } else {
                Level::DEBUG
            };
            assert_eq!(p.level, want, "{class:?}");
            assert_eq!(p.hint.is_some(), loud.contains(&class), "{class:?}");
        }
        assert!(
            Class::Forbidden
                .policy()
                .hint
                .unwrap()
                .contains("manifests/rbac.yaml")
        );
    }

    #[test]
    fn retry_after_is_read_from_the_status_and_capped() {
        let with = |seconds| {
            let mut e = api(429, 1);
            if let kube::Error::Api(s) = &mut e
                && let Some(d) = &mut s.details
            {
                d.retry_after_seconds = seconds;
            }
            e
        };
        assert_eq!(retry_after(&with(5)), Duration::from_secs(5));
        assert_eq!(retry_after(&with(3600)), RETRY_AFTER_MAX);
        assert_eq!(retry_after(&api(429, 0)), Duration::ZERO);
        assert_eq!(
            retry_after(&io(std::io::ErrorKind::ConnectionRefused)),
            Duration::ZERO
        );
    }

    #[test]
    fn only_a_404_or_403_is_an_absence() {
        for (code, want) in [
            (403, true),
            (404, true),
            (401, false),
            (410, false),
            (429, false),
        ]
        .into_iter()
        .chain([(500, false), (503, false), (504, false)])
        {
            assert_eq!(absent(&api(code, 0)), want, "{code}");
        }
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!absent(&kube::Error::Service(Box::new(io))));
    }
}
