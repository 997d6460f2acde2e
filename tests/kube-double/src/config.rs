// Configuration of a double: which API generation it imitates, initializer rules, faults.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which kube-apiserver generation the double imitates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generation {
    /// Kubernetes 1.13: alpha initializers.
    Legacy,
    /// Kubernetes 1.33: scheduling gates.
    Modern,
}

impl FromStr for Generation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "legacy" => Ok(Generation::Legacy),
            "modern" => Ok(Generation::Modern),
            other => Err(format!(
                "unknown generation {other:?}: expected \"legacy\" or \"modern\""
            )),
        }
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Generation::Legacy => "legacy",
            Generation::Modern => "modern",
        })
    }
}

/// One entry of an InitializerConfiguration: the initializer `name` is put in
/// `metadata.initializers.pending` of every new object of `resources`
/// (`"pods"`, `"deployments.apps"`, ...).
#[derive(Clone, Debug)]
pub struct InitializerRule {
    pub name: String,
    pub resources: Vec<String>,
}

impl FromStr for InitializerRule {
    type Err = String;
    /// `NAME=RESOURCE[,RESOURCE]`
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, resources) = s
            .split_once('=')
            .ok_or_else(|| format!("initializer {s:?}: expected NAME=RESOURCE[,RESOURCE]"))?;
        let resources: Vec<String> = resources
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_string)
            .collect();
        if name.trim().is_empty() || resources.is_empty() {
            return Err(format!(
                "initializer {s:?}: expected NAME=RESOURCE[,RESOURCE]"
            ));
        }
        Ok(InitializerRule {
            name: name.trim().to_string(),
            resources,
        })
    }
}

/// A validating admission (a webhook, a ValidatingAdmissionPolicy, or the strategy's own
/// validation) that refuses every update of some objects: see [`Faults::reject_writes`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejection {
    /// Objects whose name starts with this are refused (must not be empty).
    pub name_prefix: String,
    /// 422 (`Invalid`, with `details.causes`) or 400 (`BadRequest`, no details).
    #[serde(default = "Rejection::default_code")]
    pub code: u16,
    /// The detail: `Pod "p" is invalid: spec: Forbidden: <message>` for 422, the whole
    /// message for 400.
    #[serde(default)]
    pub message: String,
}

impl Rejection {
    fn default_code() -> u16 {
        422
    }
}

/// Request kinds `Faults::error_only` can name: the verbs of the API server's RequestInfo
/// (`staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`).
pub const REQUEST_KINDS: [&str; 7] = [
    "watch", "list", "get", "create", "update", "patch", "delete",
];

/// HTTP methods `Faults::hang_method` can name.
pub const HANG_METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/// What an [`Answer`] answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Reply {
    /// An error answer of `code` (400 to 599), as the real server words it (`answers.rs`).
    Status,
    /// The connection reset (`SO_LINGER` 0, then closed) with no answer: a crashed server or
    /// a proxy dropping the connection.
    Reset,
    /// Read completely and never answered (a half-open connection behind a load balancer).
    Hang,
    /// `200 OK` with an HTML page: a captive portal or a proxy's login page, not JSON.
    NotJson,
    /// A watch answered `200 OK` whose stream is one `ERROR` event carrying the Status of
    /// `code`, then its end (the real server ends a watch after an `ERROR` event); other
    /// requests get that Status as an error answer.
    WatchError,
}

/// One rule of [`Faults::answers`]: requests matching every field given are answered with
/// `reply` instead of being served.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// The HTTP method (`GET`, `POST`, `PUT`, `PATCH`, `DELETE`); `None`: any.
    #[serde(default)]
    pub method: Option<String>,
    /// The path (query aside) starts with this; `None`: any.
    #[serde(default)]
    pub path_prefix: Option<String>,
    /// The request kind: one of [`REQUEST_KINDS`] (a resource request, classified as the
    /// server's RequestInfo does: `list` and `watch` tell a LIST from a watch start) or
    /// `nonresource` (`/version`, discovery, `/readyz`, openapi); `None`: any.
    #[serde(default)]
    pub kind: Option<String>,
    pub reply: Reply,
    /// The HTTP code of `status` and `watchError` replies.
    #[serde(default)]
    pub code: u16,
    /// A 422 with `details.causes` (validation or admission refusing the change: `Invalid`)
    /// or without (a JSON patch's failed `test`: empty details).
    #[serde(default)]
    pub causes: bool,
    /// A 429 with this `Retry-After` is API Priority and Fairness's plain-text rejection;
    /// without one, a `TooManyRequests` Status. A 503 carries it in the header and in
    /// `details.retryAfterSeconds`.
    #[serde(default)]
    pub retry_after_secs: Option<u64>,
}

impl Answer {
    /// A rule answering `reply` (with `code` for `Status` and `WatchError`) to requests of
    /// `kind` whose path starts with `path_prefix`.
    pub fn new(kind: Option<&str>, path_prefix: Option<&str>, reply: Reply, code: u16) -> Answer {
        Answer {
            method: None,
            path_prefix: path_prefix.map(str::to_string),
            kind: kind.map(str::to_string),
            reply,
            code,
            causes: false,
            retry_after_secs: None,
        }
    }

    /// Whether the rule applies to a request (`kind` as `routes::request_kind` gives it).
    pub fn matches(&self, method: &str, path: &str, kind: Option<&str>) -> bool {
        self.method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && self
                .path_prefix
                .as_deref()
                .is_none_or(|p| path.starts_with(p))
            && self
                .kind
                .as_deref()
                .is_none_or(|k| k == kind.unwrap_or(NONRESOURCE))
    }

    fn validate(&self) -> Result<(), String> {
        if let Some(m) = &self.method
            && !HANG_METHODS.iter().any(|h| h.eq_ignore_ascii_case(m))
        {
            return Err(format!(
                "answer method {m:?} is not one of {}",
                HANG_METHODS.join(", ")
            ));
        }
        if let Some(k) = &self.kind
            && k != NONRESOURCE
            && !REQUEST_KINDS.contains(&k.as_str())
        {
            return Err(format!(
                "answer kind {k:?} is not one of {}, {NONRESOURCE}",
                REQUEST_KINDS.join(", ")
            ));
        }
        if matches!(self.reply, Reply::Status | Reply::WatchError)
            && !(400..=599).contains(&self.code)
        {
            return Err(format!(
                "answer code {} is not between 400 and 599",
                self.code
            ));
        }
        Ok(())
    }
}

/// The kind of [`Answer`] that names requests outside the resources: `/version`,
/// discovery, health, openapi.
pub const NONRESOURCE: &str = "nonresource";

/// Codes `Faults::error_codes` can name.
pub const ERROR_CODES: [u16; 5] = [500, 503, 429, 410, 504];

/// Faults injected into API requests (never into `/_double/*` control routes, never into
/// the library's own `Double::create/update/patch/…`).
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Fraction (0..=1) of API requests answered with one of `error_codes`.
    pub error_fraction: f64,
    /// Codes to pick from (500, 503, 429, 410, 504); empty means `[500, 503, 429]`.
    pub error_codes: Vec<u16>,
    /// Limits `error_fraction` to these request kinds: `watch`, `list`, `get`, `create`,
    /// `update`, `patch`, `delete`; empty means every API request (discovery included).
    pub error_only: Vec<String>,
    /// `Retry-After` seconds on 429 and 503 answers.
    pub retry_after_secs: u64,
    /// Added before every API response.
    pub latency: Duration,
    /// Cut every watch stream (abruptly) after this many events.
    pub cut_watch_after: Option<u32>,
    /// Probability of cutting a watch stream before each event.
    pub cut_watch_probability: f64,
    /// Probability of sending a malformed line before each watch event.
    pub malformed_watch_probability: f64,
    /// Refuse every PUT/PATCH of the main resource (not create, delete or `/status`) of
    /// objects whose name has this prefix, after the patch applied; nothing is stored.
    pub reject_writes: Option<Rejection>,
    /// HTTP method (`GET`, `POST`, `PUT`, `PATCH`, `DELETE`) of requests that are read
    /// completely and never answered (a half-open connection behind a load balancer).
    pub hang_method: Option<String>,
    /// How many more requests of `hang_method` hang; decremented as each one does.
    pub hang_count: u32,
    /// Limits `hang_method` to requests whose path (query aside) starts with this, such as
    /// `/apis/apps/v1/deployments`; `None`: every path.
    pub hang_path: Option<String>,
    /// How many requests that would hang are answered first (a server that stops answering
    /// halfway through a paged list); decremented as each one is.
    pub hang_after: u32,
    /// kube-apiserver's first second or so, before its RBAC policy is in place (measured on
    /// 1.37.2): every request, `/version` and discovery included, answered 403 `forbidden:
    /// User "U" cannot get path "/P"` (resources: the RBAC message), while `/readyz` answers
    /// 500 with its checks, `poststarthook/rbac/bootstrap-roles` failing.
    pub starting: bool,
    /// Requests answered with a chosen answer, before any other fault: the first rule that
    /// matches applies. Such requests are logged as they are answered; one reset or never
    /// answered is logged with status 0 as it arrives.
    pub answers: Vec<Answer>,
}

/// Wire form of [`Faults`] for `PUT /_double/faults` (durations in milliseconds).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct FaultsWire {
    pub error_fraction: f64,
    pub error_codes: Vec<u16>,
    pub error_only: Vec<String>,
    pub retry_after_secs: u64,
    pub latency_ms: u64,
    pub cut_watch_after: Option<u32>,
    pub cut_watch_probability: f64,
    pub malformed_watch_probability: f64,
    pub reject_writes: Option<Rejection>,
    pub hang_method: Option<String>,
    pub hang_count: u32,
    pub hang_path: Option<String>,
    pub hang_after: u32,
    pub starting: bool,
    pub answers: Vec<Answer>,
}

impl From<FaultsWire> for Faults {
    fn from(w: FaultsWire) -> Self {
        Faults {
            error_fraction: w.error_fraction,
            error_codes: w.error_codes,
            error_only: w.error_only,
            retry_after_secs: w.retry_after_secs,
            latency: Duration::from_millis(w.latency_ms),
            cut_watch_after: w.cut_watch_after,
            cut_watch_probability: w.cut_watch_probability,
            malformed_watch_probability: w.malformed_watch_probability,
            reject_writes: w.reject_writes,
            hang_method: w.hang_method,
            hang_count: w.hang_count,
            hang_path: w.hang_path,
            hang_after: w.hang_after,
            starting: w.starting,
            answers: w.answers,
        }
    }
}

impl From<&Faults> for FaultsWire {
    fn from(f: &Faults) -> Self {
        FaultsWire {
            error_fraction: f.error_fraction,
            error_codes: f.error_codes.clone(),
            error_only: f.error_only.clone(),
            retry_after_secs: f.retry_after_secs,
            latency_ms: u64::try_from(f.latency.as_millis()).unwrap_or(u64::MAX),
            cut_watch_after: f.cut_watch_after,
            cut_watch_probability: f.cut_watch_probability,
            malformed_watch_probability: f.malformed_watch_probability,
            reject_writes: f.reject_writes.clone(),
            hang_method: f.hang_method.clone(),
            hang_count: f.hang_count,
            hang_path: f.hang_path.clone(),
            hang_after: f.hang_after,
            starting: f.starting,
            answers: f.answers.clone(),
        }
    }
}

impl Faults {
    /// The codes actually used for injected errors.
    pub fn codes(&self) -> Vec<u16> {
        if self.error_codes.is_empty() {
            vec![500, 503, 429]
        } else {
            self.error_codes.clone()
        }
    }

    /// Whether `error_fraction` applies to a request of this kind (`None`: not a
    /// resource request, e.g. discovery).
    pub fn errors_apply_to(&self, kind: Option<&str>) -> bool {
        self.error_only.is_empty() || kind.is_some_and(|k| self.error_only.iter().any(|o| o == k))
    }

    /// Checks the values are usable; returns a message saying what to fix.
    pub fn validate(&self) -> Result<(), String> {
        for (name, p) in [
            ("error fraction", self.error_fraction),
            ("cut-watch probability", self.cut_watch_probability),
            (
                "malformed-watch probability",
                self.malformed_watch_probability,
            ),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{name} {p} is not between 0 and 1"));
            }
        }
        for c in &self.error_codes {
            if !ERROR_CODES.contains(c) {
                return Err(format!(
                    "error code {c} is not one of 500, 503, 429, 410, 504"
                ));
            }
        }
        for k in &self.error_only {
            if !REQUEST_KINDS.contains(&k.as_str()) {
                return Err(format!(
                    "error-only request kind {k:?} is not one of {}",
                    REQUEST_KINDS.join(", ")
                ));
            }
        }
        if let Some(r) = &self.reject_writes {
            if r.name_prefix.is_empty() {
                return Err("reject-writes name prefix is empty".to_string());
            }
            if !matches!(r.code, 422 | 400) {
                return Err(format!("reject-writes code {} is not 422 or 400", r.code));
            }
        }
        for a in &self.answers {
            a.validate()?;
        }
        match &self.hang_method {
            Some(m) if !HANG_METHODS.iter().any(|h| h.eq_ignore_ascii_case(m)) => {
                return Err(format!(
                    "hang method {m:?} is not one of {}",
                    HANG_METHODS.join(", ")
                ));
            }
            None if self.hang_count > 0 => {
                return Err(format!(
                    "hang count {} needs a hang method",
                    self.hang_count
                ));
            }
            _ => {}
        }
        Ok(())
    }
}

/// Everything a double needs to start.
#[derive(Clone, Debug)]
pub struct Config {
    pub generation: Generation,
    pub listen: SocketAddr,
    pub initializers: Vec<InitializerRule>,
    /// Extra namespaced resources: `"configmaps"` (core) or `"statefulsets.apps"`.
    pub extra_resources: Vec<String>,
    /// How long a create blocked on pending initializers waits (legacy).
    pub post_timeout: Duration,
    /// How many changes are retained for watch resumption and continue tokens.
    pub history_window: usize,
    pub bookmark_interval: Duration,
    /// Bearer token to permissions (`"verb resource"`, `"*"`); `None` disables auth.
    /// The table the double starts with; `Double::set_tokens` replaces it at run time.
    pub tokens: Option<HashMap<String, Vec<String>>>,
    pub faults: Faults,
    pub seed: u64,
    pub down_at_start: Option<Duration>,
}

impl Config {
    fn with_generation(generation: Generation) -> Config {
        Config {
            generation,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            initializers: Vec::new(),
            extra_resources: Vec::new(),
            post_timeout: Duration::from_secs(30),
            history_window: 100_000,
            bookmark_interval: Duration::from_secs(1),
            tokens: None,
            faults: Faults::default(),
            seed: 0,
            down_at_start: None,
        }
    }

    /// A Kubernetes 1.13 double without initializer rules.
    pub fn legacy() -> Config {
        Config::with_generation(Generation::Legacy)
    }

    /// A Kubernetes 1.33 double.
    pub fn modern() -> Config {
        Config::with_generation(Generation::Modern)
    }
}

/// Parses `30s`, `200ms`, `1m`, `1.5s` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 30s, 200ms, 1m"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("invalid duration {s:?}: must not be negative"));
    }
    let secs = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(format!(
                "invalid duration {s:?}: unit must be ms, s, m or h"
            ));
        }
    };
    Ok(Duration::from_secs_f64(secs))
}

/// Parses `TOKEN=PERMS` where PERMS is `*` or `verb resource;verb resource`.
pub fn parse_token(s: &str) -> Result<(String, Vec<String>), String> {
    let (token, perms) = s
        .split_once('=')
        .ok_or_else(|| format!("token {s:?}: expected TOKEN=PERMS"))?;
    if token.is_empty() {
        return Err(format!("token {s:?}: the token is empty"));
    }
    let perms: Vec<String> = perms
        .split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    check_permissions(token, &perms)?;
    Ok((token.to_string(), perms))
}

/// Each permission must be `*` or `VERB RESOURCE`.
pub fn check_permissions(token: &str, perms: &[String]) -> Result<(), String> {
    if token.is_empty() {
        return Err("a token is empty".to_string());
    }
    for p in perms {
        if p != "*" && p.split_whitespace().count() != 2 {
            return Err(format!(
                "token {token:?}: permission {p:?} must be \"*\" or \"VERB RESOURCE\""
            ));
        }
    }
    Ok(())
}

/// Parses `PREFIX:CODE:MESSAGE` (code 422 or 400; the message may contain colons).
pub fn parse_rejection(s: &str) -> Result<Rejection, String> {
    let mut it = s.splitn(3, ':');
    let (Some(prefix), Some(code), message) = (it.next(), it.next(), it.next()) else {
        return Err(format!("rejection {s:?}: expected PREFIX:CODE:MESSAGE"));
    };
    let code: u16 = code
        .trim()
        .parse()
        .map_err(|_| format!("rejection {s:?}: code {code:?} is not 422 or 400"))?;
    let r = Rejection {
        name_prefix: prefix.to_string(),
        code,
        message: message.unwrap_or("").to_string(),
    };
    Faults {
        reject_writes: Some(r.clone()),
        ..Faults::default()
    }
    .validate()
    .map_err(|e| format!("rejection {s:?}: {e}"))?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("x").is_err());
        assert!(parse_duration("1d").is_err());
    }

    #[test]
    fn rules_and_tokens() {
        let r: InitializerRule = "a.example.com=pods,deployments.apps".parse().unwrap();
        assert_eq!(r.resources, vec!["pods", "deployments.apps"]);
        assert!("nope".parse::<InitializerRule>().is_err());
        let (t, p) = parse_token("abc=get pods;patch pods").unwrap();
        assert_eq!(t, "abc");
        assert_eq!(p, vec!["get pods", "patch pods"]);
        assert!(parse_token("abc=get").is_err());
        let r = parse_rejection("bad-:400:no: not now").unwrap();
        assert_eq!(
            (r.name_prefix.as_str(), r.code, r.message.as_str()),
            ("bad-", 400, "no: not now")
        );
        assert!(parse_rejection("bad-:418:x").is_err());
        assert!(parse_rejection(":422:x").is_err());
        assert!(parse_rejection("bad-").is_err());
        assert_eq!("modern".parse::<Generation>(), Ok(Generation::Modern));
    }

    #[test]
    fn faults_validate_new_fields() {
        let ok = Faults {
            error_codes: vec![410, 504],
            error_only: vec!["watch".into(), "list".into()],
            hang_method: Some("patch".into()),
            hang_count: 2,
            ..Faults::default()
        };
        assert_eq!(ok.validate(), Ok(()));
        for bad in [
            Faults {
                error_only: vec!["deletecollection".into()],
                ..Faults::default()
            },
            Faults {
                hang_method: Some("TRACE".into()),
                ..Faults::default()
            },
            Faults {
                hang_count: 1,
                ..Faults::default()
            },
            Faults {
                reject_writes: Some(Rejection {
                    name_prefix: "x".into(),
                    code: 403,
                    message: String::new(),
                }),
                ..Faults::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        let w: FaultsWire =
            serde_json::from_str(r#"{"rejectWrites": {"namePrefix": "p"}, "hangMethod": "GET", "hangCount": 1, "errorOnly": ["get"]}"#)
                .unwrap();
        let f = Faults::from(w);
        assert_eq!(f.reject_writes.as_ref().map(|r| r.code), Some(422));
        assert_eq!(f.hang_count, 1);
        assert!(f.errors_apply_to(Some("get")));
        assert!(!f.errors_apply_to(Some("list")));
        assert!(!f.errors_apply_to(None));
    }
}
