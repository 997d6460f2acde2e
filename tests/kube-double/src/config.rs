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

/// Faults injected into API requests (never into `/_double/*` control routes).
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Fraction (0..=1) of API requests answered with one of `error_codes`.
    pub error_fraction: f64,
    /// Codes to pick from; empty means `[500, 503, 429]`.
    pub error_codes: Vec<u16>,
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
}

/// Wire form of [`Faults`] for `PUT /_double/faults` (durations in milliseconds).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct FaultsWire {
    pub error_fraction: f64,
    pub error_codes: Vec<u16>,
    pub retry_after_secs: u64,
    pub latency_ms: u64,
    pub cut_watch_after: Option<u32>,
    pub cut_watch_probability: f64,
    pub malformed_watch_probability: f64,
}

impl From<FaultsWire> for Faults {
    fn from(w: FaultsWire) -> Self {
        Faults {
            error_fraction: w.error_fraction,
            error_codes: w.error_codes,
            retry_after_secs: w.retry_after_secs,
            latency: Duration::from_millis(w.latency_ms),
            cut_watch_after: w.cut_watch_after,
            cut_watch_probability: w.cut_watch_probability,
            malformed_watch_probability: w.malformed_watch_probability,
        }
    }
}

impl From<&Faults> for FaultsWire {
    fn from(f: &Faults) -> Self {
        FaultsWire {
            error_fraction: f.error_fraction,
            error_codes: f.error_codes.clone(),
            retry_after_secs: f.retry_after_secs,
            latency_ms: u64::try_from(f.latency.as_millis()).unwrap_or(u64::MAX),
            cut_watch_after: f.cut_watch_after,
            cut_watch_probability: f.cut_watch_probability,
            malformed_watch_probability: f.malformed_watch_probability,
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
            if !matches!(c, 500 | 503 | 429) {
                return Err(format!("error code {c} is not one of 500, 503, 429"));
            }
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
    for p in &perms {
        if p != "*" && p.split_whitespace().count() != 2 {
            return Err(format!(
                "token {token:?}: permission {p:?} must be \"*\" or \"VERB RESOURCE\""
            ));
        }
    }
    Ok((token.to_string(), perms))
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
        assert_eq!("modern".parse::<Generation>(), Ok(Generation::Modern));
    }
}
