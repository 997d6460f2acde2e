//! What the server offers: start-up requests retried until it answers, its version and
//! so the mode, and the resources named on the command line, found in its discovery
//! documents as kubectl finds them.

mod resource;
mod startup;

pub use resource::{ResourceSpec, parse_resource};
pub(crate) use startup::starting;
pub use startup::{STARTING, with_retries};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;
use kube::{Api, Client, api::ApiResource};
use tracing::warn;

use crate::{
    Error, Result,
    blocker::Mode,
    budget::Budget,
    object::{Held, Kind},
};

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

/// The rules between flags that need the server's answer: a gates-only flag (`gate_flag`)
/// needs a server with scheduling gates, and there the resource must be pods. `mode`: what
/// the server's version chose (`None`: Kubernetes 1.14 to 1.25, which has neither).
pub fn check_mode(
    gate_flag: Option<&str>,
    resources: &[ResourceSpec],
    mode: Option<Mode>,
) -> Result<()> {
    if let Some(flag) = gate_flag
        && mode != Some(Mode::SchedulingGates)
    {
        let why = match mode {
            Some(_) => "the server's version (--mode auto) means initializers",
            None => "the server's version (--mode auto) means neither (Kubernetes 1.14 to 1.25)",
        };
        return Err(gates_only(flag, why));
    }
    if mode == Some(Mode::SchedulingGates) {
        gates_need_pods(resources)?;
    }
    Ok(())
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
    budget: Option<Budget>,
    webhooks: bool,
) -> Result<Option<Mode>> {
    let info = with_retries(client, "GET /version", url, budget, || {
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
    budget: Option<Budget>,
) -> Result<Target> {
    let group_version = group_version(client, url, spec, budget).await?;
    let list = if spec.group.is_empty() {
        with_retries(client, "discovery", url, budget, || {
            client.list_core_api_resources(&group_version)
        })
        .await
    } else {
        with_retries(client, "discovery", url, budget, || {
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
    budget: Option<Budget>,
) -> Result<String> {
    if spec.group.is_empty() {
        return Ok(spec.version.clone().unwrap_or_else(|| "v1".into()));
    }
    if let Some(v) = &spec.version {
        return Ok(format!("{}/{v}", spec.group));
    }
    let groups = with_retries(client, "discovery", url, budget, || {
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
