//! What a failed API request means for metainit: one function sorts every `kube::Error`
//! into a small set of classes, and one table says, for each class, whether to try
//! again, which `reason` label the failures metric gets and how loud the log line is.

use std::time::Duration;

use tracing::Level;

/// The classes of API failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Someone else changed the object first: 409, or a 422 without causes (a failed
    /// JSON-patch `test`). The newest state is looked at again.
    Race,
    /// The object is gone (404).
    Gone,
    /// Validation or admission refused the change: a 422 with causes, a 400, any other
    /// 4xx. It does not go away by itself, but a policy can change: retried, slowly.
    Rejected,
    /// 403: RBAC not (yet) granting what metainit needs.
    Forbidden,
    /// 401: the credentials are not (yet, or any more) accepted.
    Unauthorized,
    /// 429: the server asks to slow down.
    Throttled,
    /// 5xx: the server (or a webhook behind it) failed.
    ServerError,
    /// No answer within `--request-timeout`, or the server's own timeout (504, 408).
    Timeout,
    /// No connection, or the connection broke.
    Unreachable,
    /// The PATCH was answered with success, but the object it returned still holds what it
    /// removed (`blocker::kept`): a webhook or policy puts it back. Never from `classify`.
    Kept,
    /// `--once`'s `--timeout` ended with the attempt in flight, or before it started: never
    /// an answer of the server (`classify` does not give it), and never tried again.
    Spent,
}

/// What to do about a class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub retry: bool,
    /// The `reason` label of `metainit_clear_failures_total`; `None`: not a failure.
    pub reason: Option<&'static str>,
    pub level: Level,
    /// What the operator can do about it, for the log line.
    pub hint: Option<&'static str>,
}

pub const RBAC_HINT: &str = "grant get, list, watch and patch (and initialize on Kubernetes 1.7 to 1.13) to metainit's user: manifests/rbac.yaml";

impl Class {
    /// Every class, for the metric's label values.
    pub const ALL: [Class; 11] = [
        Class::Race,
        Class::Gone,
        Class::Rejected,
        Class::Forbidden,
        Class::Unauthorized,
        Class::Throttled,
        Class::ServerError,
        Class::Timeout,
        Class::Unreachable,
        Class::Kept,
        Class::Spent,
    ];

    /// The one table.
    pub fn policy(self) -> Policy {
        let (retry, reason, level, hint) = match self {
            Class::Race => (true, Some("race"), Level::DEBUG, None),
            Class::Gone => (false, None, Level::DEBUG, None),
            Class::Rejected => (
                true,
                Some("rejected"),
                Level::WARN,
                Some("an admission webhook or policy, or validation, refuses the patch"),
            ),
            Class::Forbidden => (true, Some("forbidden"), Level::WARN, Some(RBAC_HINT)),
            Class::Unauthorized => (
                true,
                Some("unauthorized"),
                Level::WARN,
                Some("the API server does not accept the kubeconfig's credentials"),
            ),
            Class::Throttled => (true, Some("throttled"), Level::DEBUG, None),
            Class::ServerError => (true, Some("server_error"), Level::DEBUG, None),
            Class::Timeout => (
                true,
                Some("timeout"),
                Level::WARN,
                Some("no answer within --request-timeout"),
            ),
            Class::Unreachable => (true, Some("unreachable"), Level::DEBUG, None),
            Class::Kept => (
                true,
                Some("kept"),
                Level::WARN,
                Some(
                    "a mutating admission webhook or policy puts back what metainit removes: \
                     exempt metainit's user from it, or fix it",
                ),
            ),
            // No answer in time, as `Timeout`, but it is the whole run's time that ran out.
            Class::Spent => (
                false,
                Some("timeout"),
                Level::WARN,
                Some(
                    "--timeout bounds the whole --once run: give it more, or see why the server is slow to answer",
                ),
            ),
        };
        Policy {
            retry,
            reason,
            level,
            hint,
        }
    }
}

/// Sorts an API error into its class.
pub fn classify(e: &kube::Error) -> Class {
    match e {
        kube::Error::Api(s) => match s.code {
            401 => Class::Unauthorized,
            403 => Class::Forbidden,
            404 => Class::Gone,
            409 | 410 => Class::Race,
            422 if s.details.as_ref().is_some_and(|d| !d.causes.is_empty()) => Class::Rejected,
            422 => Class::Race,
            429 => Class::Throttled,
            408 | 504 => Class::Timeout,
            500..=599 => Class::ServerError,
            _ => Class::Rejected,
        },
        kube::Error::SerdeError(_) => Class::ServerError,
        _ if is_timeout(e) => Class::Timeout,
        _ => Class::Unreachable,
    }
}

fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<RequestTimeout>() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// The server's Retry-After, from the Status details of a 429 or 503, capped at 30 s.
pub fn retry_after(e: &kube::Error) -> Duration {
    match e {
        kube::Error::Api(s) => s
            .details
            .as_ref()
            .map(|d| Duration::from_secs(u64::from(d.retry_after_seconds).min(30)))
            .unwrap_or_default(),
        _ => Duration::ZERO,
    }
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
    /// The wait before attempt `failures + 1` after this failure: the backoff, never before
    /// the server's Retry-After.
    pub fn delay(&self, failures: u32) -> Duration {
        backoff(failures, retry_after(&self.error))
    }
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

/// kube's reason for an error answer whose body is not a Status (a proxy's HTML page,
/// a plain-text 404, an empty body).
pub const NOT_A_STATUS: &str = "Failed to parse error data";

/// An error answer's body that is not a Status, in words: never a bare colon.
pub fn body_text(body: &str) -> String {
    let one_line = one_line(body, 120);
    if one_line.is_empty() {
        "an empty body, not a Status".into()
    } else {
        format!("a body that is not a Status: {one_line}")
    }
}

/// On one line, at most `n` characters.
pub fn one_line(s: &str, n: usize) -> String {
    let one_line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= n {
        one_line
    } else {
        format!("{}...", one_line.chars().take(n).collect::<String>())
    }
}

/// The server's answer behind an error, as log fields of their own: the HTTP code, and
/// the Status's reason when the server sent a Status (for any other body kube makes one up,
/// which is not the server's word).
pub fn status_fields(e: &kube::Error) -> (Option<u16>, Option<&str>) {
    match e {
        kube::Error::Api(s) if s.reason == NOT_A_STATUS => (Some(s.code), None),
        kube::Error::Api(s) => (
            Some(s.code),
            Some(s.reason.as_str()).filter(|r| !r.is_empty()),
        ),
        _ => (None, None),
    }
}

/// One line for a log or a message: a Status as `CODE Reason: message`, anything else
/// with its causes (kube's own text often hides them in a source).
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.reason == NOT_A_STATUS => {
            format!("{} with {}", s.code, body_text(&s.message))
        }
        kube::Error::Api(s) => {
            let reason = if s.reason.is_empty() {
                "Failure"
            } else {
                &s.reason
            };
            format!("{} {reason}: {}", s.code, s.message)
        }
        // Said as it is: no answer of the server failed.
        kube::Error::Service(kept) if kept.is::<crate::blocker::Kept>() => kept.to_string(),
        other => chain(other),
    }
}

/// A Status as one line, `CODE Reason: message`, leaving out what the server left empty
/// (an ERROR event with no reason once read "500 : ").
pub fn status_text(s: &kube::core::Status) -> String {
    let mut out = s.code.to_string();
    if !s.reason.is_empty() {
        out.push(' ');
        out.push_str(&s.reason);
    }
    if !s.message.is_empty() {
        out.push_str(": ");
        out.push_str(&s.message);
    }
    out
}

/// The delay before attempt `failures + 1`: 100 ms doubling to 30 s, jittered by up to
/// a fifth so that replicas and objects spread out; never before the server's Retry-After.
pub fn backoff(failures: u32, retry_after: Duration) -> Duration {
    let base = Duration::from_millis(100)
        .saturating_mul(1u32 << failures.saturating_sub(1).min(12))
        .min(Duration::from_secs(30));
    let jitter = base.mul_f64(random_fraction() * 0.2);
    (base - jitter).max(retry_after)
}

/// A cheap pseudo-random fraction in [0, 1), good enough for jitter.
pub fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// No answer within `--request-timeout`.
#[derive(Debug, thiserror::Error)]
#[error("no answer within {0:?} (--request-timeout)")]
pub struct RequestTimeout(pub Duration);

/// An error and its sources, as one line: kube's own message often hides the cause
/// ("client error (Connect)") in a source.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

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

    #[test]
    fn every_class_and_its_policy() {
        let cases = [
            (api(409, 0), Class::Race, true, Some("race")),
            (api(422, 0), Class::Race, true, Some("race")),
            (api(422, 1), Class::Rejected, true, Some("rejected")),
            (api(400, 0), Class::Rejected, true, Some("rejected")),
            (api(415, 0), Class::Rejected, true, Some("rejected")),
            (api(404, 0), Class::Gone, false, None),
            (api(401, 0), Class::Unauthorized, true, Some("unauthorized")),
            (api(403, 0), Class::Forbidden, true, Some("forbidden")),
            (api(429, 0), Class::Throttled, true, Some("throttled")),
            (api(500, 0), Class::ServerError, true, Some("server_error")),
            (api(503, 0), Class::ServerError, true, Some("server_error")),
            (api(504, 0), Class::Timeout, true, Some("timeout")),
            (
                kube::Error::Service(Box::new(RequestTimeout(Duration::from_secs(1)))),
                Class::Timeout,
                true,
                Some("timeout"),
            ),
            (
                kube::Error::Service("connection refused".into()),
                Class::Unreachable,
                true,
                Some("unreachable"),
            ),
        ];
        for (e, class, retry, reason) in cases {
            assert_eq!(classify(&e), class, "{e:?}");
            let p = class.policy();
            assert_eq!((p.retry, p.reason), (retry, reason), "{class:?}");
        }
        // The budget's end is never tried again: nothing is left of it.
        let p = Class::Spent.policy();
        assert_eq!((p.retry, p.reason), (false, Some("timeout")));
        // The ones an operator must act on are loud, and say what to do.
        for class in [
            Class::Rejected,
            Class::Forbidden,
            Class::Unauthorized,
            Class::Timeout,
            Class::Spent,
        ] {
            assert_eq!(class.policy().level, Level::WARN, "{class:?}");
            assert!(class.policy().hint.is_some(), "{class:?}");
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
    fn backoff_doubles_to_30s_and_honours_retry_after() {
        let d = |n| backoff(n, Duration::ZERO);
        assert!(d(1) <= Duration::from_millis(100) && d(1) >= Duration::from_millis(80));
        assert!(d(4) <= Duration::from_millis(800) && d(4) >= Duration::from_millis(640));
        assert!(d(30) <= Duration::from_secs(30) && d(30) >= Duration::from_secs(24));
        assert_eq!(backoff(1, Duration::from_secs(5)), Duration::from_secs(5));
    }

    #[test]
    fn a_status_leaves_out_what_is_empty() {
        let status = |code, reason: &str, message: &str| Status {
            code,
            reason: reason.into(),
            message: message.into(),
            ..Status::default()
        };
        assert_eq!(status_text(&status(500, "", "")), "500");
        assert_eq!(status_text(&status(500, "", "boom")), "500: boom");
        assert_eq!(
            status_text(&status(410, "Expired", "too old")),
            "410 Expired: too old"
        );
        assert_eq!(
            status_text(&status(503, "ServiceUnavailable", "")),
            "503 ServiceUnavailable"
        );
    }

    #[test]
    fn describe_gives_code_reason_and_message() {
        let e = kube::Error::Api(Box::new(Status {
            code: 403,
            reason: "Forbidden".into(),
            message: "pods \"p\" is forbidden".into(),
            ..Status::default()
        }));
        assert_eq!(describe(&e), "403 Forbidden: pods \"p\" is forbidden");
        let not_a_status = |body: &str| {
            kube::Error::Api(Box::new(Status::failure(body, NOT_A_STATUS).with_code(502)))
        };
        assert_eq!(
            describe(&not_a_status("")),
            "502 with an empty body, not a Status"
        );
        assert_eq!(
            describe(&not_a_status("<html>\n Bad Gateway </html>")),
            "502 with a body that is not a Status: <html> Bad Gateway </html>"
        );
        assert_eq!(status_fields(&e), (Some(403), Some("Forbidden")));
        assert_eq!(
            status_fields(&not_a_status("")),
            (Some(502), None),
            "kube's made-up reason is not the server's"
        );
        assert_eq!(
            status_fields(&kube::Error::LinesCodecMaxLineLengthExceeded),
            (None, None)
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
