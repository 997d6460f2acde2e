//! Reaching the API server: the kubeconfig (kubectl's order), the client and its two
//! layers (`includeUninitialized` for the legacy API, reachability for `/readyz`), the
//! choice of mode from `/version`, and the resources named on the command line.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use backon::{ExponentialBuilder, Retryable};
use http::{Method, Request, Response};
use kube::{
    Client, Config,
    api::ApiResource,
    client::{Body, ClientBuilder},
    config::{KubeConfigOptions, Kubeconfig},
};
use tower::util::{MapRequestLayer, MapResultLayer};
use tracing::warn;

use crate::{
    Error, Result,
    blocker::Mode,
    cli::{Common, ModeArg, ResourceSpec},
};

/// The retry schedule for start-up requests: kube-runtime's watcher default
/// (0.8 s doubling to 30 s, jittered), so start-up waits exactly as the watch loop does.
pub fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(800))
        .with_max_delay(Duration::from_secs(30))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
}

/// Loads the kubeconfig: `--kubeconfig`, then `KUBECONFIG`, then `~/.kube/config`,
/// then the in-cluster service account.
pub async fn load_config(common: &Common) -> Result<Config> {
    let path = common
        .kubeconfig
        .clone()
        .map(|p| (p, "--kubeconfig"))
        .or_else(|| {
            std::env::var_os("KUBECONFIG")
                .filter(|v| !v.is_empty())
                .and_then(|v| std::env::split_paths(&v).next())
                .map(|p| (p, "KUBECONFIG"))
        });
    let path = path.or_else(|| {
        let home = PathBuf::from(std::env::var_os("HOME")?)
            .join(".kube")
            .join("config");
        home.exists().then_some((home, "~/.kube/config"))
    });
    let Some((path, source)) = path else {
        if common.context.is_some() {
            return Err(Error::Config(
                "--context was given but there is no kubeconfig: pass --kubeconfig or set KUBECONFIG".into(),
            ));
        }
        return Config::incluster().map_err(|e| {
            Error::Config(format!(
                "no kubeconfig found and not running in a cluster ({e}): pass --kubeconfig PATH, \
                 set KUBECONFIG, or create ~/.kube/config"
            ))
        });
    };
    from_kubeconfig_file(&path, source, common.context.as_deref()).await
}

async fn from_kubeconfig_file(path: &Path, source: &str, context: Option<&str>) -> Result<Config> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::Config(format!(
            "cannot read the kubeconfig {shown} (from {source}): {e}"
        ))
    })?;
    if text.trim().is_empty() {
        return Err(Error::Config(format!(
            "the kubeconfig {shown} (from {source}) is empty"
        )));
    }
    let kc = Kubeconfig::from_yaml(&text).map_err(|e| {
        Error::Config(format!(
            "the kubeconfig {shown} (from {source}) is not valid: {e}"
        ))
    })?;
    let wanted = match context
        .or(kc.current_context.as_deref())
        .filter(|c| !c.is_empty())
    {
        Some(c) => c.to_string(),
        None => {
            return Err(Error::Config(format!(
                "the kubeconfig {shown} has no current-context: pass --context NAME"
            )));
        }
    };
    if !kc.contexts.iter().any(|c| c.name == wanted) {
        let known: Vec<&str> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
        return Err(Error::Config(format!(
            "context \"{wanted}\" is not in the kubeconfig {shown}; it has: {}",
            if known.is_empty() {
                "no contexts".to_string()
            } else {
                known.join(", ")
            }
        )));
    }
    let opts = KubeConfigOptions {
        context: Some(wanted),
        cluster: None,
        user: None,
    };
    Config::from_custom_kubeconfig(kc, &opts)
        .await
        .map_err(|e| Error::Config(format!("the kubeconfig {shown} cannot be used: {e}")))
}

/// What the client layers report to the rest of the process.
pub trait Reachability: Send + Sync + 'static {
    /// Called after every request: `true` when the server answered (any status but 5xx/429).
    fn observed(&self, reachable: bool);
}

/// Builds the client. In initializers mode every GET carries `includeUninitialized=true`,
/// so LIST, WATCH and GET see objects that are still pending.
pub fn client(
    config: Config,
    mode: Option<Mode>,
    reach: Option<Arc<dyn Reachability>>,
) -> Result<Client> {
    // kube's own retry of 429/503/504 (up to 15 times, delays up to 1000 s) would hide
    // failures from the metrics and hold a worker for minutes: every retry is ours,
    // per object, capped at 30 s, and honours the server's Retry-After.
    let mut config = config;
    config.default_retry = false;
    let url = config.cluster_url.to_string();
    let builder = ClientBuilder::try_from(config).map_err(|e| tls_error(&url, e))?;
    let legacy = mode == Some(Mode::Initializers);
    let builder = builder.with_layer(&MapRequestLayer::new(move |req: Request<Body>| {
        if legacy {
            include_uninitialized(req)
        } else {
            req
        }
    }));
    let builder = builder.with_layer(&MapResultLayer::new(
        move |res: std::result::Result<Response<_>, tower::BoxError>| {
            if let Some(reach) = &reach {
                let ok = res.as_ref().is_ok_and(|r: &Response<_>| {
                    !r.status().is_server_error() && r.status() != 429
                });
                reach.observed(ok);
            }
            res
        },
    ));
    Ok(builder.build())
}

fn tls_error(url: &str, e: kube::Error) -> Error {
    Error::Config(format!(
        "cannot set up a client for {url}: {e}. If the kubeconfig gives no certificate-authority, \
         add certificate-authority-data to it, or point SSL_CERT_FILE at a CA bundle"
    ))
}

/// Adds `includeUninitialized=true` to a GET on the API paths (NOTES §1).
pub fn include_uninitialized<B>(mut req: Request<B>) -> Request<B> {
    if req.method() != Method::GET {
        return req;
    }
    let Some(pq) = req.uri().path_and_query() else {
        return req;
    };
    let path = pq.path();
    if !(path.starts_with("/api/") || path.starts_with("/apis/")) {
        return req;
    }
    let query = pq.query().unwrap_or("");
    if query
        .split('&')
        .any(|kv| kv.starts_with("includeUninitialized="))
    {
        return req;
    }
    let amended = if query.is_empty() {
        format!("{path}?includeUninitialized=true")
    } else {
        format!("{path}?{query}&includeUninitialized=true")
    };
    let mut parts = req.uri().clone().into_parts();
    if let Ok(pq) = amended.parse() {
        parts.path_and_query = Some(pq);
        if let Ok(uri) = http::Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
    }
    req
}

/// Whether an error may go away by itself (server starting, restarting, overloaded).
pub fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 429 | 500 | 502 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            !is_tls_failure(e)
        }
        _ => false,
    }
}

fn is_tls_failure(e: &(dyn std::error::Error + 'static)) -> bool {
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

/// Runs a start-up request, retrying transient failures with the watcher's backoff;
/// with a deadline, gives up after it with an `Unreachable` error.
pub async fn with_retries<T, F, Fut>(
    what: &str,
    url: &str,
    deadline: Option<Duration>,
    op: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, kube::Error>>,
{
    let last = std::sync::Mutex::new(String::new());
    let attempt = op.retry(backoff()).when(is_transient).notify(|e, wait| {
        let error = chain(e);
        warn!(%url, %error, retry_in = ?wait, "{what}: API server not reachable yet, retrying");
        if let Ok(mut l) = last.lock() {
            *l = error;
        }
    });
    let result = match deadline {
        Some(d) => match tokio::time::timeout(d, attempt).await {
            Ok(r) => r,
            Err(_) => {
                let last = last.lock().map(|l| l.clone()).unwrap_or_default();
                return Err(Error::Unreachable(format!(
                    "could not reach the API server at {url} within {}s ({what}): {last}",
                    d.as_secs()
                )));
            }
        },
        None => attempt.await,
    };
    result.map_err(|e| describe_failure(what, url, e))
}

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

/// Turns a non-transient start-up failure into an error that says what to fix.
fn describe_failure(what: &str, url: &str, e: kube::Error) -> Error {
    match &e {
        kube::Error::Api(s) if s.code == 401 => Error::Config(format!(
            "{what}: the API server at {url} refused the kubeconfig's credentials (401 Unauthorized): check its user"
        )),
        kube::Error::Api(s) if s.code == 403 => Error::Config(format!(
            "{what}: forbidden ({}); grant the permissions in manifests/rbac.yaml to the kubeconfig's user",
            s.message
        )),
        kube::Error::Api(s) if s.reason == "Failed to parse error data" => Error::Server(format!(
            "{what}: {url} does not look like a Kubernetes API server: it answered {} with a body that is not a Status: {}",
            s.code,
            truncate(&s.message, 120)
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

fn truncate(s: &str, n: usize) -> String {
    let one_line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= n {
        one_line
    } else {
        format!("{}...", one_line.chars().take(n).collect::<String>())
    }
}

/// The mode for a server version, from `/version`'s major and minor (managed clusters
/// report minors such as `13+`) or, failing those, its gitVersion.
pub fn mode_for_version(
    major: &str,
    minor: &str,
    git_version: &str,
) -> std::result::Result<Mode, String> {
    let digits = |s: &str| s.trim().trim_end_matches('+').parse::<u32>().ok();
    let from_git = || {
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
    };
    let (major, minor) = match (digits(major), digits(minor)) {
        (Some(a), Some(b)) => (a, b),
        _ => from_git().ok_or_else(|| format!("cannot read the server's version (major {major:?}, minor {minor:?}, gitVersion {git_version:?})"))?,
    };
    const WORKS: &str = "metainit works with Kubernetes 1.7 to 1.13 (initializers) and 1.26 or later (scheduling gates)";
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

/// The mode to run in: the one asked for, or the one the server's version implies.
pub async fn choose_mode(
    client: &Client,
    url: &str,
    asked: ModeArg,
    deadline: Option<Duration>,
) -> Result<Mode> {
    match asked {
        ModeArg::Initializers => Ok(Mode::Initializers),
        ModeArg::SchedulingGates => Ok(Mode::SchedulingGates),
        ModeArg::Auto => {
            let info =
                with_retries("GET /version", url, deadline, || client.apiserver_version()).await?;
            mode_for_version(&info.major, &info.minor, &info.git_version).map_err(|m| {
                Error::Server(format!(
                    "the API server at {url} is {}: {m}",
                    info.git_version
                ))
            })
        }
    }
}

/// A resource found on the server.
#[derive(Clone, Debug)]
pub struct Target {
    pub resource: ApiResource,
    pub namespaced: bool,
    /// How the user named it, for logs and metrics.
    pub name: String,
}

/// Finds a resource named on the command line in the server's discovery documents,
/// by plural, singular or short name, as kubectl does.
pub async fn resolve(
    client: &Client,
    url: &str,
    spec: &ResourceSpec,
    deadline: Option<Duration>,
) -> Result<Target> {
    let group_version = if spec.group.is_empty() {
        spec.version.clone().unwrap_or_else(|| "v1".into())
    } else if let Some(v) = &spec.version {
        format!("{}/{v}", spec.group)
    } else {
        let groups = with_retries("discovery", url, deadline, || client.list_api_groups()).await?;
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
            .ok_or_else(|| {
                Error::Server(format!("API group \"{}\" lists no version", spec.group))
            })?
    };
    let list = if spec.group.is_empty() {
        with_retries("discovery", url, deadline, || {
            client.list_core_api_resources(&group_version)
        })
        .await
    } else {
        with_retries("discovery", url, deadline, || {
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
    let found = list.resources.into_iter().find(|r| {
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
    let (group, version) = match group_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), group_version.clone()),
    };
    Ok(Target {
        resource: ApiResource {
            group,
            version,
            api_version: group_version.clone(),
            kind: r.kind,
            plural: r.name,
        },
        namespaced: r.namespaced,
        name: spec.to_string(),
    })
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

    #[test]
    fn include_uninitialized_on_gets_only() {
        let get = |uri: &str| Request::get(uri).body(()).unwrap();
        assert_eq!(
            include_uninitialized(get("/api/v1/pods?labelSelector=a")).uri(),
            "/api/v1/pods?labelSelector=a&includeUninitialized=true"
        );
        assert_eq!(
            include_uninitialized(get("/apis/apps/v1/deployments")).uri(),
            "/apis/apps/v1/deployments?includeUninitialized=true"
        );
        assert_eq!(include_uninitialized(get("/version")).uri(), "/version");
        assert_eq!(
            include_uninitialized(get("/api/v1/pods?includeUninitialized=false")).uri(),
            "/api/v1/pods?includeUninitialized=false"
        );
        let patch = Request::patch("/api/v1/namespaces/a/pods/b")
            .body(())
            .unwrap();
        assert_eq!(
            include_uninitialized(patch).uri(),
            "/api/v1/namespaces/a/pods/b"
        );
    }
}
