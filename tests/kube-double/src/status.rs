// metav1.Status error bodies, shaped and worded like the real kube-apiserver's.

use serde_json::{Map, Value, json};

use crate::config::Generation;
use crate::resources::ResourceInfo;

/// An API error: the HTTP code is the Status's `code`.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: Value,
    /// `Retry-After` header value, if any.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn code(&self) -> u16 {
        self.status
            .get("code")
            .and_then(Value::as_u64)
            .and_then(|c| u16::try_from(c).ok())
            .filter(|c| *c >= 100)
            .unwrap_or(500)
    }
}

/// A single field error, like k8s.io/apimachinery's field.Error.
#[derive(Clone, Debug)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueForbidden`, ...
    pub reason: &'static str,
    /// "Invalid value: \"x\": must be ..." without the field prefix.
    pub message: String,
    pub field: String,
}

impl Cause {
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Cause {
        Cause {
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {}", detail.into()),
            field: field.into(),
        }
    }

    /// `value` is already rendered the way Go's %#v would show it (quoted strings).
    pub fn invalid(
        field: impl Into<String>,
        value: impl Into<String>,
        detail: impl Into<String>,
    ) -> Cause {
        Cause {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {}: {}", value.into(), detail.into()),
            field: field.into(),
        }
    }

    /// `field.Duplicate`: `Duplicate value: "x"` (`value` rendered as Go's %#v).
    pub fn duplicate(field: impl Into<String>, value: impl Into<String>) -> Cause {
        Cause {
            reason: "FieldValueDuplicate",
            message: format!("Duplicate value: {}", value.into()),
            field: field.into(),
        }
    }

    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Cause {
        let detail = detail.into();
        Cause {
            reason: "FieldValueRequired",
            message: if detail.is_empty() {
                "Required value".to_string()
            } else {
                format!("Required value: {detail}")
            },
            field: field.into(),
        }
    }
}

fn details(
    name: Option<&str>,
    group: &str,
    kind: &str,
    causes: Option<Vec<Value>>,
    retry_after: Option<u64>,
) -> Value {
    let mut d = Map::new();
    if let Some(n) = name.filter(|n| !n.is_empty()) {
        d.insert("name".into(), json!(n));
    }
    if !group.is_empty() {
        d.insert("group".into(), json!(group));
    }
    if !kind.is_empty() {
        d.insert("kind".into(), json!(kind));
    }
    if let Some(c) = causes {
        d.insert("causes".into(), Value::Array(c));
    }
    if let Some(r) = retry_after {
        d.insert("retryAfterSeconds".into(), json!(r));
    }
    Value::Object(d)
}

pub fn status(
    code: u16,
    reason: &str,
    message: impl Into<String>,
    details: Option<Value>,
) -> Value {
    let mut s = Map::new();
    s.insert("kind".into(), json!("Status"));
    s.insert("apiVersion".into(), json!("v1"));
    s.insert("metadata".into(), json!({}));
    s.insert("status".into(), json!("Failure"));
    s.insert("message".into(), json!(message.into()));
    if !reason.is_empty() {
        s.insert("reason".into(), json!(reason));
    }
    if let Some(d) = details {
        s.insert("details".into(), d);
    }
    s.insert("code".into(), json!(code));
    Value::Object(s)
}

fn err(status: Value) -> ApiError {
    ApiError {
        status,
        retry_after: None,
    }
}

/// `pods "x" not found`
pub fn not_found(res: &ResourceInfo, name: &str) -> ApiError {
    err(status(
        404,
        "NotFound",
        format!("{} \"{}\" not found", res.key, name),
        Some(details(Some(name), &res.group, &res.plural, None, None)),
    ))
}

/// 404 for a path the double does not serve.
pub fn path_not_found() -> ApiError {
    err(status(
        404,
        "NotFound",
        "the server could not find the requested resource",
        Some(json!({})),
    ))
}

pub fn already_exists(res: &ResourceInfo, name: &str) -> ApiError {
    err(status(
        409,
        "AlreadyExists",
        format!("{} \"{}\" already exists", res.key, name),
        Some(details(Some(name), &res.group, &res.plural, None, None)),
    ))
}

pub fn conflict(res: &ResourceInfo, name: &str) -> ApiError {
    err(status(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
            res.key, name
        ),
        Some(details(Some(name), &res.group, &res.plural, None, None)),
    ))
}

/// `Pod "x" is invalid: a: b` (one cause) or `Pod "x" is invalid: [a: b, c: d]`.
pub fn invalid(res: &ResourceInfo, name: &str, causes: &[Cause]) -> ApiError {
    let rendered: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    let list = if rendered.len() == 1 {
        rendered[0].clone()
    } else {
        format!("[{}]", rendered.join(", "))
    };
    let kind_name = if res.group.is_empty() {
        res.kind.clone()
    } else {
        format!("{}.{}", res.kind, res.group)
    };
    let causes_json = causes
        .iter()
        .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
        .collect();
    err(status(
        422,
        "Invalid",
        format!("{kind_name} \"{name}\" is invalid: {list}"),
        Some(details(
            Some(name),
            &res.group,
            &res.kind,
            Some(causes_json),
            None,
        )),
    ))
}

/// What the real server answers when a JSON patch cannot be applied
/// (errors.NewGenericServerResponse(422, ...) drops the patch error's text).
pub fn patch_unprocessable() -> ApiError {
    err(status(
        422,
        "Invalid",
        "the server rejected our request due to an error in our request",
        Some(json!({})),
    ))
}

/// `errors.NewConflict(pods/binding, name, err)`, as `BindingREST.assignPod` wraps a
/// refused binding: `Operation cannot be fulfilled on pods/binding "p": <why>`.
pub fn binding_conflict(name: &str, why: &str) -> ApiError {
    err(status(
        409,
        "Conflict",
        format!("Operation cannot be fulfilled on pods/binding \"{name}\": {why}"),
        Some(details(Some(name), "", "pods/binding", None, None)),
    ))
}

pub fn bad_request(message: impl Into<String>) -> ApiError {
    err(status(400, "BadRequest", message, None))
}

pub fn unsupported_media_type(content_type: &str) -> ApiError {
    err(status(
        415,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type:?})"
        ),
        None,
    ))
}

pub fn method_not_allowed(method: &str) -> ApiError {
    err(status(
        405,
        "MethodNotAllowed",
        format!("the server does not allow this method on the requested resource ({method})"),
        Some(json!({})),
    ))
}

/// `pods "x" is forbidden: <message>` (name empty: `pods is forbidden: ...`).
pub fn forbidden(res: &ResourceInfo, name: &str, message: &str) -> ApiError {
    let subject = if name.is_empty() {
        res.key.clone()
    } else {
        format!("{} \"{}\"", res.key, name)
    };
    err(status(
        403,
        "Forbidden",
        format!("{subject} is forbidden: {message}"),
        Some(details(Some(name), &res.group, &res.plural, None, None)),
    ))
}

pub fn forbidden_path(user: &str, verb: &str, path: &str) -> ApiError {
    err(status(
        403,
        "Forbidden",
        format!("forbidden: User \"{user}\" cannot {verb} path \"{path}\""),
        Some(json!({})),
    ))
}

pub fn unauthorized() -> ApiError {
    err(status(401, "Unauthorized", "Unauthorized", None))
}

pub fn internal(message: &str) -> ApiError {
    err(status(
        500,
        "InternalError",
        format!("Internal error occurred: {message}"),
        Some(json!({"causes": [{"message": message}]})),
    ))
}

/// A legacy creator's POST still blocked when its `timeout` ran out: 1.13.12
/// `finishRequest` (`pkg/endpoints/handlers/rest.go`) answers
/// `errors.NewTimeoutError(fmt.Sprintf("request did not complete within requested timeout %s",
/// timeout), 0)`, the timeout being `?timeout=` or 30s (`parseTimeout`) printed as Go
/// prints a `time.Duration`.
pub fn post_timeout(timeout: std::time::Duration) -> ApiError {
    err(status(
        504,
        "Timeout",
        format!(
            "Timeout: request did not complete within requested timeout {}",
            go_duration(timeout)
        ),
        Some(json!({})),
    ))
}

/// A duration as Go's `time.Duration.String` prints it: `30s`, `1m0s`, `1.5s`, `500ms`, `0s`.
pub fn go_duration(d: std::time::Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    let trim = |whole: u128, frac: u128, digits: usize| {
        if frac == 0 {
            whole.to_string()
        } else {
            let f = format!("{frac:0digits$}");
            format!("{whole}.{}", f.trim_end_matches('0'))
        }
    };
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", trim(nanos / 1_000, nanos % 1_000, 3));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trim(nanos / 1_000_000, nanos % 1_000_000, 6));
    }
    let secs = nanos / 1_000_000_000;
    let frac = nanos % 1_000_000_000;
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    let sec = format!("{}s", trim(s, frac, 9));
    match (h, m) {
        (0, 0) => sec,
        (0, m) => format!("{m}m{sec}"),
        (h, m) => format!("{h}h{m}m{sec}"),
    }
}

/// Go's `time.ParseDuration` for the forms clients send as `?timeout=` (`30s`, `1m0s`,
/// `1.5s`, `500ms`, `2m`); `None` when it does not parse (the server then logs and uses 30s).
pub fn parse_go_duration(s: &str) -> Option<std::time::Duration> {
    let mut rest = s.trim();
    if rest == "0" {
        return Some(std::time::Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_end..];
    }
    Some(std::time::Duration::from_secs_f64(total))
}

/// `too old resource version: N (M)`, as sent in a watch ERROR event: the watch cache
/// builds it with `errors.NewGone` in 1.13.12 (reason `Gone`) and with
/// `errors.NewResourceExpired` in 1.33.4 (reason `Expired`); code 410, no details
/// (`pkg/storage/cacher/watch_cache.go`, `GetAllEventsSinceThreadUnsafe` /
/// `getAllEventsSinceLocked`; the cacher sends it as the ERROR event of `newErrWatcher`).
pub fn too_old_resource_version(generation: Generation, requested: u64, oldest: u64) -> Value {
    let reason = match generation {
        Generation::Legacy => "Gone",
        Generation::Modern => "Expired",
    };
    status(
        410,
        reason,
        format!("too old resource version: {requested} ({oldest})"),
        None,
    )
}

pub fn continue_expired() -> ApiError {
    err(status(
        410,
        "Expired",
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
        None,
    ))
}

pub fn service_unavailable(retry_after: u64) -> ApiError {
    ApiError {
        status: status(
            503,
            "ServiceUnavailable",
            "The server is currently unable to handle the request",
            Some(details(None, "", "", None, Some(retry_after))),
        ),
        retry_after: Some(retry_after),
    }
}

/// The Status an initializer wrote into `metadata.initializers.result`, as the
/// blocked creator receives it (code defaults to 500 like ErrorToAPIStatus).
pub fn from_result(result: &Value) -> ApiError {
    let mut s = match result {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    s.insert("kind".into(), json!("Status"));
    s.insert("apiVersion".into(), json!("v1"));
    s.entry("metadata").or_insert_with(|| json!({}));
    if s.get("status")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        s.insert("status".into(), json!("Failure"));
    }
    let code = s.get("code").and_then(Value::as_u64).unwrap_or(0);
    if code == 0 {
        s.insert("code".into(), json!(500));
    }
    err(Value::Object(s))
}

/// A write refused by validation or a validating admission (`Faults::reject_writes`).
/// 422 is apimachinery's `errors.NewInvalid(qualifiedKind, name, field.ErrorList{
/// field.Forbidden(field.NewPath("spec"), message)})`: `Pod "p" is invalid: spec:
/// Forbidden: <message>`, details {name, group, kind: the Kind, causes}
/// (`staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go`, 1.13.12 and 1.33.4).
/// 400 is `errors.NewBadRequest(message)`: reason `BadRequest`, no details.
pub fn rejected(res: &ResourceInfo, name: &str, code: u16, message: &str) -> ApiError {
    if code == 400 {
        bad_request(message)
    } else {
        invalid(res, name, &[Cause::forbidden("spec", message)])
    }
}

/// An injected 410 for a request from `requested` while the store is at `current`:
/// the watch cache's `too old resource version: N (M)` text. 1.13.12 builds it with
/// `errors.NewGone` (reason `Gone`), 1.33.4 with `errors.NewResourceExpired` (reason
/// `Expired`); neither has details (`pkg/storage/cacher/watch_cache.go`,
/// `GetAllEventsSinceThreadUnsafe` / `getAllEventsSinceLocked`).
pub fn injected_gone(generation: Generation, requested: u64, current: u64) -> ApiError {
    let reason = match generation {
        Generation::Legacy => "Gone",
        Generation::Modern => "Expired",
    };
    err(status(
        410,
        reason,
        format!("too old resource version: {requested} ({current})"),
        None,
    ))
}

/// An injected 504, as `errors.NewTimeoutError(message, 0)` words it (details `{}`).
/// Writes (`create`, `update`, `patch`, `delete`) time out in the handler's finisher:
/// 1.13.12 `finishRequest` says "request did not complete within requested timeout 30s"
/// (`pkg/endpoints/handlers/rest.go`, the default `?timeout=`), 1.33.4 `FinishRequest`
/// says "request did not complete within requested timeout - context deadline exceeded"
/// (`pkg/endpoints/handlers/finisher/finisher.go`). Other requests time out in the
/// `WithTimeoutForNonLongRunningRequests` filter (`pkg/server/filters/timeout.go`):
/// 1.13.12 "request did not complete within 1m0s" (the default `--request-timeout`),
/// 1.33.4 "request did not complete within the allotted timeout".
pub fn injected_timeout(generation: Generation, write: bool) -> ApiError {
    let message = match (generation, write) {
        (Generation::Legacy, true) => "request did not complete within requested timeout 30s",
        (Generation::Legacy, false) => "request did not complete within 1m0s",
        (Generation::Modern, true) => {
            "request did not complete within requested timeout - context deadline exceeded"
        }
        (Generation::Modern, false) => "request did not complete within the allotted timeout",
    };
    err(status(
        504,
        "Timeout",
        format!("Timeout: {message}"),
        Some(json!({})),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn go_durations() {
        for (d, s) in [
            (Duration::from_secs(30), "30s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(3661), "1h1m1s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(go_duration(d), s);
            assert_eq!(parse_go_duration(s), Some(d), "{s}");
        }
        assert_eq!(parse_go_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_go_duration("10"), None);
        assert_eq!(parse_go_duration("x"), None);
    }
}
