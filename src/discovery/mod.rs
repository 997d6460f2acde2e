//! What the server offers: start-up requests retried until it answers, its version and
//! so the mode, and the resources named on the command line, found in its discovery
//! documents as kubectl finds them.

mod resource;

pub use resource::{ResourceSpec, parse_resource};

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;
use kube::{Api, Client, api::ApiResource};
use tracing::warn;

use crate::{
    Error, Result,
    backoff::{self, Backoff},
    blocker::Mode,
    client::{is_tls_failure, is_transient},
    failure::{chain, describe},
    object::{Held, Kind},
};

/// How long a 401 or 403 is taken for a server still starting when its `/readyz` answers
/// the same (and so cannot say whether it is ready). kube-apiserver answers every user 403,
/// even on `/version` and `/readyz`, for about a second after it starts serving, before its
/// RBAC policy is in place: an exit there sent the static pod into CrashLoopBackOff.
pub const STARTING: Duration = Duration::from_secs(60);

/// Runs a start-up request, retrying transient failures on the watch's schedule
/// (`crate::backoff`: a refused connection about once a second, else 0.8 s doubling to 30 s),
/// and a 401 or 403 while the server is starting (`starting`); with a deadline, gives up after
/// it with an `Unreachable` error that gives the last failure, or says that nothing answered.
/// A deadline of zero tries once and does not wait (as `kubectl wait --timeout=0`): the one
/// attempt is bounded by `--request-timeout`.
pub async fn with_retries<T, F, Fut>(
    client: &Client,
    what: &str,
    url: &str,
    deadline: Option<Duration>,
    mut op: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, kube::Error>>,
{
    if deadline.is_some_and(|d| d.is_zero()) {
        return op().await.map_err(|e| {
            if is_transient(&e) {
                Error::Unreachable(format!(
                    "could not reach the API server at {url} ({what}, tried once as --timeout is 0s): {}",
                    describe(&e)
                ))
            } else {
                describe_failure(what, url, e)
            }
        });
    }
    let last = std::sync::Mutex::new(String::new());
    let attempt = retrying(client, what, url, &mut op, &last);
    let result = match deadline {
        Some(d) => match tokio::time::timeout(d, attempt).await {
            Ok(r) => r,
            Err(_) => {
                let d = crate::text::duration(d);
                let last = last.lock().map(|l| l.clone()).unwrap_or_default();
                let last = if last.is_empty() {
                    format!("no answer within {d}")
                } else {
                    last
                };
                return Err(Error::Unreachable(format!(
                    "could not reach the API server at {url} within {d} ({what}): {last}"
                )));
            }
        },
        None => attempt.await,
    };
    result.map_err(|e| describe_failure(what, url, e))
}

/// The attempts, until one succeeds or fails for good; `last` says the last failure. Our own
/// loop, not backon's: the wait depends on the failure (a refused connection does not grow
/// it) and a 401 or 403 needs a look at `/readyz` before it is judged.
async fn retrying<T, F, Fut>(
    client: &Client,
    what: &str,
    url: &str,
    op: &mut F,
    last: &std::sync::Mutex<String>,
) -> std::result::Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, kube::Error>>,
{
    let mut schedule = Backoff::default();
    let mut denied_since = None;
    loop {
        let e = match op().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let wait = if is_transient(&e) {
            let (kind, retry_after) = backoff::kind_of(&e);
            let wait = schedule.next(kind, retry_after);
            log_retry(what, url, &e, wait);
            wait
        } else if let Some(ready) = starting(client, &e, &mut denied_since).await {
            let wait = schedule.next(backoff::Kind::Refused, Duration::ZERO);
            warn!(%url, status.code = code(&e), readyz = %ready, retry_in = ?wait,
                  "{what}: the API server is starting (its /readyz is not 200 yet): a 401 or 403 now is its start-up, not missing RBAC; waiting");
            wait
        } else {
            return Err(e);
        };
        if let Ok(mut l) = last.lock() {
            *l = describe(&e);
        }
        tokio::time::sleep(wait).await;
    }
}

fn code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        _ => 0,
    }
}

/// A 401 or 403 from a server that is still starting: its `/readyz` in words when so. While
/// `/readyz` answers anything but 200 the server is starting; when it answers 401 or 403 too,
/// for at most `STARTING` from the first such answer (`denied_since`).
async fn starting(
    client: &Client,
    e: &kube::Error,
    denied_since: &mut Option<std::time::Instant>,
) -> Option<String> {
    if !matches!(code(e), 401 | 403) {
        return None;
    }
    let request = http::Request::get("/readyz").body(Vec::new()).ok()?;
    match client.request_text(request).await {
        Ok(_) => None,
        Err(kube::Error::Api(s)) if matches!(s.code, 401 | 403) => {
            let since = *denied_since.get_or_insert_with(std::time::Instant::now);
            (since.elapsed() < STARTING).then(|| format!("{} {}", s.code, s.reason))
        }
        // Its checks as text: the first one failing says what it waits for.
        Err(kube::Error::Api(s)) => Some(match s.message.lines().find(|l| l.starts_with("[-]")) {
            Some(check) => format!("{} {check}", s.code),
            None => s.code.to_string(),
        }),
        Err(other) => Some(chain(&other)),
    }
}

/// One WARN line per failed start-up attempt; an API error's code, reason and message
/// as fields of their own.
fn log_retry(what: &str, url: &str, e: &kube::Error, wait: Duration) {
    let message = format!("{what}: API server not reachable yet, retrying");
    match e {
        kube::Error::Api(s) => {
            warn!(%url, status.code = s.code, status.reason = %s.reason, status.message = %s.message, retry_in = ?wait, "{message}")
        }
        other => warn!(%url, error = %chain(other), retry_in = ?wait, "{message}"),
    }
}

/// `--webhooks` against a server (or a `--mode`) older than 1.21; `why` says which.
pub fn webhooks_too_old(why: &str) -> Error {
    Error::Config(format!(
        "--webhooks needs Kubernetes 1.21 or later (EndpointSlices in discovery.k8s.io/v1, and the \
         kubernetes.io/metadata.name label on every namespace), but {why}: drop --webhooks"
    ))
}

/// The error for a gates-only flag on a server (or a `--mode`) without scheduling gates;
/// `why` says which.
pub fn gates_only(flag: &str, why: &str) -> Error {
    Error::Config(format!(
        "{flag} works on scheduling gates (Kubernetes 1.26 and later), but {why}: \
         drop {flag}, or run against a server with scheduling gates (--mode scheduling-gates)"
    ))
}

/// In scheduling-gates mode the only resource is pods.
pub fn gates_need_pods(resources: &[ResourceSpec]) -> Result<()> {
    match resources.iter().find(|r| !r.is_pods()) {
        Some(r) => Err(Error::Config(format!(
            "--resource {r}: scheduling gates exist only on pods; in scheduling-gates mode the resource must be pods"
        ))),
        None => Ok(()),
    }
}

/// The manifest that grants what `what` (a verb and a resource) needs.
fn rbac_file(what: &str) -> &'static str {
    if what.contains("webhookconfigurations") || what.contains("endpointslices") {
        "manifests/rbac-webhooks.yaml"
    } else {
        "manifests/rbac.yaml"
    }
}

/// Turns a non-transient start-up failure into an error that says what to fix.
fn describe_failure(what: &str, url: &str, e: kube::Error) -> Error {
    match &e {
        kube::Error::Api(s) if s.code == 401 => Error::Config(format!(
            "{what}: the API server at {url} refused the kubeconfig's credentials (401 Unauthorized): check its user"
        )),
        kube::Error::Api(s) if s.code == 403 => Error::Config(format!(
            "{what}: forbidden ({}); grant the permissions in {} to the kubeconfig's user",
            s.message,
            rbac_file(what)
        )),
        kube::Error::Api(s) if s.reason == crate::failure::NOT_A_STATUS => Error::Server(format!(
            "{what}: {url} does not look like a Kubernetes API server: it answered {} with {}",
            s.code,
            crate::failure::body_text(&s.message)
        )),
        kube::Error::SerdeError(_) => Error::Server(format!(
            "{what}: {url} does not look like a Kubernetes API server: its answer is not the JSON expected ({e})"
        )),
        _ if is_tls_failure(&e) => Error::Config(format!(
            "{what}: TLS with {url} failed ({}): check the server URL's scheme and the kubeconfig's certificate-authority",
            chain(&e)
        )),
        _ => Error::Kube(e),
    }
}

/// The server's major and minor version, from `/version`'s major and minor (managed
/// clusters report minors such as `13+`) or, failing those, its gitVersion.
pub fn parse_version(major: &str, minor: &str, git_version: &str) -> Option<(u32, u32)> {
    let digits = |s: &str| s.trim().trim_end_matches('+').parse::<u32>().ok();
    if let (Some(a), Some(b)) = (digits(major), digits(minor)) {
        return Some((a, b));
    }
    let mut it = git_version.trim_start_matches('v').split('.');
    let major = it.next().and_then(digits)?;
    let minor = it.next().and_then(|m| {
        digits(
            &m.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>(),
        )
    })?;
    Some((major, minor))
}

const WORKS: &str = "metainit works with Kubernetes 1.7 to 1.13 (initializers) and 1.26 or later (scheduling gates)";

/// The mode a Kubernetes version has, or why it has none.
pub fn mode_of(major: u32, minor: u32) -> std::result::Result<Mode, String> {
    match (major, minor) {
        (1, 7..=13) => Ok(Mode::Initializers),
        (1, 26..) | (2.., _) => Ok(Mode::SchedulingGates),
        (1, 14..=25) => Err(format!(
            "Kubernetes 1.{minor} has neither initializers (removed in 1.14) nor scheduling gates (added in 1.26): nothing to clear. {WORKS}"
        )),
        _ => Err(format!(
            "Kubernetes {major}.{minor} has neither initializers nor scheduling gates. {WORKS}"
        )),
    }
}

/// The mode for a server version.
pub fn mode_for_version(
    major: &str,
    minor: &str,
    git_version: &str,
) -> std::result::Result<Mode, String> {
    let (major, minor) = parse_version(major, minor, git_version).ok_or_else(|| {
        format!("cannot read the server's version (major {major:?}, minor {minor:?}, gitVersion {git_version:?})")
    })?;
    mode_of(major, minor)
}

/// Whether `--webhooks` works with Kubernetes `major.minor`: from 1.21, every namespace
/// carries `kubernetes.io/metadata.name` and EndpointSlices are `discovery.k8s.io/v1`.
pub fn has_webhook_support(major: u32, minor: u32) -> bool {
    (major, minor) >= (1, 21)
}

/// The mode to run in: the one the server's version implies, or the one asked for.
/// A forced mode is for servers whose version string cannot be read; one that the
/// server's version cannot have is refused, never a false all-clear. `None` only with
/// `webhooks`, on a 1.21 to 1.25 server: nothing to clear there, the webhooks to watch.
pub async fn choose_mode(
    client: &Client,
    url: &str,
    asked: Option<Mode>,
    deadline: Option<Duration>,
    webhooks: bool,
) -> Result<Option<Mode>> {
    let info = with_retries(client, "GET /version", url, deadline, || {
        client.apiserver_version()
    })
    .await;
    let Some(forced) = asked else {
        let info = info?;
        let version = parse_version(&info.major, &info.minor, &info.git_version);
        if webhooks && let Some((major, minor)) = version {
            if !has_webhook_support(major, minor) {
                return Err(webhooks_too_old(&format!(
                    "the API server at {url} is {}",
                    info.git_version
                )));
            }
            if mode_of(major, minor).is_err() {
                return Ok(None);
            }
        }
        return mode_for_version(&info.major, &info.minor, &info.git_version)
            .map(Some)
            .map_err(|m| {
                Error::Server(format!(
                    "the API server at {url} is {}: {m}",
                    info.git_version
                ))
            });
    };
    let info = match info {
        Ok(info) => info,
        Err(e @ (Error::Unreachable(_) | Error::Config(_))) => return Err(e),
        Err(e) => {
            warn!(%url, error = %crate::logging::message(&e), mode = %forced, "cannot read the server's version; using the --mode asked for");
            return Ok(Some(forced));
        }
    };
    let Some((major, minor)) = parse_version(&info.major, &info.minor, &info.git_version) else {
        warn!(%url, version = %info.git_version, mode = %forced, "cannot read the server's version; using the --mode asked for");
        return Ok(Some(forced));
    };
    match mode_of(major, minor) {
        Ok(m) if m == forced => Ok(Some(forced)),
        _ => {
            let why = match forced {
                Mode::Initializers => "has no initializers (they exist in 1.7 to 1.13)",
                Mode::SchedulingGates => "has no scheduling gates (they exist from 1.26)",
            };
            Err(Error::Config(format!(
                "--mode {forced}: the API server at {url} is {} and Kubernetes {major}.{minor} {why}; \
                 use --mode auto. --mode is only for servers whose version cannot be read",
                info.git_version
            )))
        }
    }
}

/// A resource found on the server.
#[derive(Clone, Debug)]
pub struct Target {
    pub resource: Kind,
    pub namespaced: bool,
    /// How the user named it, for logs and metrics.
    pub name: String,
}

impl Target {
    /// The API of this resource: in one namespace or all.
    pub fn api(&self, client: &Client, namespace: Option<&str>) -> Api<Held> {
        match namespace {
            Some(ns) if self.namespaced => Api::namespaced_with(client.clone(), ns, &self.resource),
            _ => Api::all_with(client.clone(), &self.resource),
        }
    }
}

/// Finds a resource named on the command line in the server's discovery documents,
/// by plural, singular or short name, as kubectl does.
pub async fn resolve(
    client: &Client,
    url: &str,
    spec: &ResourceSpec,
    deadline: Option<Duration>,
) -> Result<Target> {
    let group_version = group_version(client, url, spec, deadline).await?;
    let list = if spec.group.is_empty() {
        with_retries(client, "discovery", url, deadline, || {
            client.list_core_api_resources(&group_version)
        })
        .await
    } else {
        with_retries(client, "discovery", url, deadline, || {
            client.list_api_group_resources(&group_version)
        })
        .await
    };
    let list = list.map_err(|e| match e {
        Error::Kube(kube::Error::Api(s)) if s.code == 404 => Error::Config(format!(
            "the server doesn't have a resource type \"{spec}\" (no API version {group_version})"
        )),
        other => other,
    })?;
    let r = find(list.resources, spec)?;
    let (group, version) = match group_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), group_version.clone()),
    };
    Ok(Target {
        resource: Kind::from(ApiResource {
            group,
            version,
            api_version: group_version.clone(),
            kind: r.kind,
            plural: r.name,
        }),
        namespaced: r.namespaced,
        name: spec.to_string(),
    })
}

/// The API version the resource is looked up in: the one named, else `v1` for the core
/// group, else the group's preferred version.
async fn group_version(
    client: &Client,
    url: &str,
    spec: &ResourceSpec,
    deadline: Option<Duration>,
) -> Result<String> {
    if spec.group.is_empty() {
        return Ok(spec.version.clone().unwrap_or_else(|| "v1".into()));
    }
    if let Some(v) = &spec.version {
        return Ok(format!("{}/{v}", spec.group));
    }
    let groups = with_retries(client, "discovery", url, deadline, || {
        client.list_api_groups()
    })
    .await?;
    let group = groups
        .groups
        .into_iter()
        .find(|g| g.name == spec.group)
        .ok_or_else(|| {
            Error::Config(format!(
                "the server doesn't have a resource type \"{spec}\" (no API group \"{}\")",
                spec.group
            ))
        })?;
    group
        .preferred_version
        .or_else(|| group.versions.into_iter().next())
        .map(|v| v.group_version)
        .ok_or_else(|| Error::Server(format!("API group \"{}\" lists no version", spec.group)))
}

/// The resource `spec` names among those of one API version (its plural, singular or a
/// short name; never a subresource), if it can be listed, watched and patched.
fn find(resources: Vec<APIResource>, spec: &ResourceSpec) -> Result<APIResource> {
    let found = resources.into_iter().find(|r| {
        !r.name.contains('/')
            && (r.name == spec.plural
                || r.singular_name == spec.plural
                || r.short_names
                    .as_ref()
                    .is_some_and(|s| s.contains(&spec.plural)))
    });
    let Some(r) = found else {
        return Err(Error::Config(format!(
            "the server doesn't have a resource type \"{spec}\""
        )));
    };
    for verb in ["list", "watch", "patch"] {
        if !r.verbs.iter().any(|v| v == verb) {
            return Err(Error::Config(format!(
                "resource \"{spec}\" does not support {verb}, which metainit needs"
            )));
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        let cases = [
            ("1", "7", "", Ok(Mode::Initializers)),
            ("1", "13", "v1.13.12", Ok(Mode::Initializers)),
            ("1", "13+", "v1.13.12-gke.1", Ok(Mode::Initializers)),
            ("1", "26", "", Ok(Mode::SchedulingGates)),
            ("1", "30+", "v1.30.2-eks-1", Ok(Mode::SchedulingGates)),
            ("", "", "v1.33.4", Ok(Mode::SchedulingGates)),
            ("", "", "v1.12.0", Ok(Mode::Initializers)),
        ];
        for (major, minor, git, want) in cases {
            assert_eq!(
                mode_for_version(major, minor, git),
                want,
                "{major}.{minor} {git}"
            );
        }
        let err = mode_for_version("1", "20", "v1.20.0").unwrap_err();
        assert!(
            err.contains("1.20") && err.contains("1.7 to 1.13") && err.contains("1.26 or later"),
            "{err}"
        );
        assert!(mode_for_version("1", "6", "").is_err());
        assert!(mode_for_version("x", "y", "nonsense").is_err());
    }
}
