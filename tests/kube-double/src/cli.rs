// The command line of the kube-double binary: one flag per Config field.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::config::{
    Answer, Config, ERROR_CODES, Faults, Generation, HANG_METHODS, InitializerRule, REQUEST_KINDS,
    Rejection, parse_duration, parse_rejection, parse_token,
};

/// An in-memory kube-apiserver double (Kubernetes 1.13 initializers or 1.33 scheduling gates).
#[derive(Debug, Parser)]
#[command(name = "kube-double", version)]
pub struct Cli {
    /// API generation to imitate: legacy (v1.13.12) or modern (v1.33.4).
    #[arg(long, env = "KUBE_DOUBLE_GENERATION", default_value = "modern")]
    pub generation: Generation,
    /// Address to listen on.
    #[arg(long, env = "KUBE_DOUBLE_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Write a kubeconfig for the double here.
    #[arg(long, env = "KUBE_DOUBLE_KUBECONFIG_OUT")]
    pub kubeconfig_out: Option<PathBuf>,
    /// Token to put in the written kubeconfig.
    #[arg(long, env = "KUBE_DOUBLE_KUBECONFIG_TOKEN")]
    pub kubeconfig_token: Option<String>,
    /// Initializer rule NAME=RESOURCE[,RESOURCE] (legacy; repeatable).
    #[arg(long = "initializer", value_parser = parse_rule)]
    pub initializers: Vec<InitializerRule>,
    /// Extra namespaced resource: `configmaps` or `statefulsets.apps` (repeatable).
    #[arg(long = "resource")]
    pub resources: Vec<String>,
    /// How long a POST blocked on pending initializers waits.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub post_timeout: Duration,
    /// How many changes are retained for watch resumption and continue tokens.
    #[arg(long, default_value_t = 100_000)]
    pub history_window: usize,
    /// Interval between watch bookmarks.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub bookmark_interval: Duration,
    /// TOKEN=PERMS, PERMS `*` or `get pods;patch pods` (repeatable; enables auth).
    #[arg(long = "token", value_parser = parse_token)]
    pub tokens: Vec<(String, Vec<String>)>,
    /// Seed of the fault generator.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Refuse connections for this long after start.
    #[arg(long, value_parser = parse_duration)]
    pub down_at_start: Option<Duration>,
    /// Fraction of API requests answered with an error.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    pub error_fraction: f64,
    /// Error codes to pick from (500, 503, 429, 410, 504).
    #[arg(long, value_delimiter = ',', value_parser = parse_code)]
    pub error_codes: Vec<u16>,
    /// Inject errors only into these request kinds: watch, list, get, create, update,
    /// patch, delete (default: every API request).
    #[arg(long, value_delimiter = ',', value_parser = parse_kind)]
    pub error_only: Vec<String>,
    /// PREFIX:CODE:MESSAGE: refuse every PUT/PATCH of objects named PREFIX* with 422
    /// (Invalid) or 400 (BadRequest).
    #[arg(long, value_parser = parse_rejection)]
    pub reject_writes: Option<Rejection>,
    /// HTTP method of requests that are read and never answered (with --hang-count).
    #[arg(long, value_parser = parse_method, requires = "hang_count")]
    pub hang_method: Option<String>,
    /// How many requests of --hang-method hang.
    #[arg(long, requires = "hang_method")]
    pub hang_count: Option<u32>,
    /// Only requests of --hang-method whose path starts with this hang.
    #[arg(long, requires = "hang_method")]
    pub hang_path: Option<String>,
    /// How many requests that would hang are answered first.
    #[arg(long, default_value_t = 0, requires = "hang_method")]
    pub hang_after: u32,
    /// A rule of `Faults::answers`, as the JSON of `PUT /_double/faults`'s `answers`
    /// entries, e.g. `{"kind":"watch","pathPrefix":"/api/v1/pods","reply":"status","code":504}`;
    /// repeatable, the first that matches applies.
    #[arg(long = "answer", value_parser = parse_answer)]
    pub answers: Vec<Answer>,
    /// Retry-After seconds on 429 and 503.
    #[arg(long, default_value_t = 1)]
    pub retry_after: u64,
    /// Latency added to every API response.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub latency: Duration,
    /// Cut every watch stream after N events.
    #[arg(long)]
    pub cut_watch_after: Option<u32>,
    /// Probability of cutting a watch stream before each event.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    pub cut_watch_probability: f64,
    /// Probability of a malformed line before each watch event.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    pub malformed_watch_probability: f64,
}

fn parse_rule(s: &str) -> Result<InitializerRule, String> {
    s.parse()
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number between 0 and 1"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s} is not between 0 and 1"))
    }
}

fn parse_code(s: &str) -> Result<u16, String> {
    match s.trim().parse::<u16>() {
        Ok(c) if ERROR_CODES.contains(&c) => Ok(c),
        _ => Err(format!("{s:?} is not one of 500, 503, 429, 410, 504")),
    }
}

fn parse_kind(s: &str) -> Result<String, String> {
    let k = s.trim();
    if REQUEST_KINDS.contains(&k) {
        Ok(k.to_string())
    } else {
        Err(format!("{s:?} is not one of {}", REQUEST_KINDS.join(", ")))
    }
}

fn parse_method(s: &str) -> Result<String, String> {
    let m = s.trim().to_ascii_uppercase();
    if HANG_METHODS.contains(&m.as_str()) {
        Ok(m)
    } else {
        Err(format!("{s:?} is not one of {}", HANG_METHODS.join(", ")))
    }
}

impl Cli {
    pub fn config(&self) -> Config {
        let tokens = if self.tokens.is_empty() {
            None
        } else {
            Some(self.tokens.iter().cloned().collect::<HashMap<_, _>>())
        };
        Config {
            generation: self.generation,
            listen: self.listen,
            initializers: self.initializers.clone(),
            extra_resources: self.resources.clone(),
            post_timeout: self.post_timeout,
            history_window: self.history_window,
            bookmark_interval: self.bookmark_interval,
            tokens,
            faults: Faults {
                error_fraction: self.error_fraction,
                error_codes: self.error_codes.clone(),
                error_only: self.error_only.clone(),
                retry_after_secs: self.retry_after,
                latency: self.latency,
                cut_watch_after: self.cut_watch_after,
                cut_watch_probability: self.cut_watch_probability,
                malformed_watch_probability: self.malformed_watch_probability,
                reject_writes: self.reject_writes.clone(),
                hang_method: self.hang_method.clone(),
                hang_count: self.hang_count.unwrap_or(0),
                hang_path: self.hang_path.clone(),
                hang_after: self.hang_after,
                starting: false,
                answers: self.answers.clone(),
            },
            seed: self.seed,
            down_at_start: self.down_at_start,
        }
    }
}

fn parse_answer(s: &str) -> Result<Answer, String> {
    let a: Answer = serde_json::from_str(s).map_err(|e| format!("answer {s:?}: {e}"))?;
    Faults {
        answers: vec![a.clone()],
        ..Faults::default()
    }
    .validate()
    .map_err(|e| format!("answer {s:?}: {e}"))?;
    Ok(a)
}
