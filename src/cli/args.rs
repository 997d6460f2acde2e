//! The flags, as clap derives them: the watcher's (the default command), `status`'s,
//! `probe`'s, `completions`', and the ones they share.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{ArgAction, Args, ValueEnum};

use super::parse::*;
use crate::{
    blocker::Mode,
    discovery::{ResourceSpec, parse_resource},
    logging::LogFormat,
    release::{Rate, ReleaseRule, parse_rate, parse_release_rule},
    status::Output,
};

/// The label key of the original tool, opsani's k8s-metainit.
pub const DEFAULT_LABEL_KEY: &str = "k8s.opsani.io/initializer";

/// The default admin address: loopback only, on a port no control-plane component uses.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:10275";

/// Flags shared by the watcher and `status`.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Label key that marks the objects to clear; its value is ignored.
    /// [default: k8s.opsani.io/initializer]
    #[arg(long, env = "METAINIT_LABEL_KEY", value_name = "KEY", value_parser = parse_label_key)]
    pub label_key: Option<String>,

    /// Which mechanism to clear: `auto` asks the server's version (initializers up to 1.13,
    /// scheduling gates from 1.26).
    #[arg(long, env = "METAINIT_MODE", value_enum, default_value_t = ModeArg::Auto)]
    pub mode: ModeArg,

    #[command(flatten)]
    pub kube: KubeconfigArgs,

    /// Only this namespace (default: all namespaces).
    #[arg(short = 'n', long, env = "METAINIT_NAMESPACE", value_name = "NS", value_parser = parse_namespace)]
    pub namespace: Option<String>,

    /// Log format; RUST_LOG filters (default `info`).
    #[arg(long, env = "METAINIT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// The budget of `--once` and `status`: how long they wait for an unreachable API
    /// server, and how long `--once` may retry objects it cannot clear yet. For `--once`
    /// it bounds the whole run, from its start; for `status`, each request.
    #[arg(long, env = "METAINIT_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// How long one API request (watches excepted) may wait for its answer; a request
    /// not answered in time is retried like any transient failure. `0`: no limit.
    #[arg(long, env = "METAINIT_REQUEST_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = parse_request_timeout)]
    pub request_timeout: Duration,
}

/// Which kubeconfig and context: kubectl's flags, shared by every command.
#[derive(Args, Debug, Clone)]
pub struct KubeconfigArgs {
    /// Path to the kubeconfig file. Otherwise KUBECONFIG, then ~/.kube/config, then in-cluster.
    #[arg(long, env = "METAINIT_KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: its current-context).
    #[arg(long, env = "METAINIT_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
}

/// Flags of the watcher (the default command).
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The label key, as the original tool took it (same as --label-key).
    #[arg(value_name = "LABEL_KEY", value_parser = parse_positional_label_key)]
    pub positional_label_key: Option<String>,

    #[command(flatten)]
    pub common: Common,

    /// Resource to watch, as `plural[.group]` or `plural.version.group` (repeatable).
    /// [default: pods]
    #[arg(long = "resource", env = "METAINIT_RESOURCE", value_name = "R", value_delimiter = ',', value_parser = parse_resource)]
    pub resources: Vec<ResourceSpec>,

    /// Clear only these initializer or gate names (repeatable); default: every one.
    #[arg(long, env = "METAINIT_ONLY", value_name = "NAME", value_delimiter = ',', value_parser = parse_blocker_name)]
    pub only: Vec<String>,

    /// Log what would be cleared; change nothing. From the environment: 1/0, true/false,
    /// yes/no (any case).
    #[arg(long, env = "METAINIT_DRY_RUN", action = ArgAction::SetTrue, value_parser = parse_bool)]
    pub dry_run: bool,

    /// Clear what is pending now, print a summary and exit: 0 if everything labelled is
    /// clear, 1 if something could not be cleared.
    #[arg(long, env = "METAINIT_ONCE", action = ArgAction::SetTrue, value_parser = parse_bool)]
    pub once: bool,

    /// Address of the admin server (/healthz, /readyz, /metrics): IP:PORT, [IPv6]:PORT or
    /// localhost:PORT (127.0.0.1).
    #[arg(long, env = "METAINIT_ADMIN_ADDR", value_name = "ADDR", default_value = DEFAULT_ADMIN_ADDR, value_parser = parse_admin_addr)]
    pub admin_addr: SocketAddr,

    /// Name of this node, reported on Events; empty or absent: NODE_NAME, then the hostname.
    #[arg(long, env = "METAINIT_NODE_NAME", value_name = "NAME", value_parser = parse_node_name)]
    pub node_name: Option<String>,

    /// How many objects are patched at the same time.
    #[arg(long, env = "METAINIT_CONCURRENCY", value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub concurrency: u16,

    /// On SIGTERM, how long in-flight patches may take to finish.
    #[arg(long, env = "METAINIT_SHUTDOWN_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,

    /// How often every watch lists its objects again in full, whatever it says: the
    /// labelled objects (every unbound pod with --release-gate or --watch-gates) and, with
    /// --webhooks, the webhook configurations and their services' endpoints. Bounds any
    /// blindness (a watch silent after an etcd restore). At least 1s.
    #[arg(long, env = "METAINIT_RESYNC_PERIOD", value_name = "DURATION", default_value = "5m", value_parser = parse_resync_period)]
    pub resync_period: Duration,

    #[command(flatten)]
    pub rules: RuleArgs,

    /// At most this many gate releases (`--release-gate`) across the process, as `N/s`,
    /// `N/m` or `N/h`, spaced evenly, so that a controller uninstalled with thousands of
    /// gated pods does not hand them all to the scheduler at once. [default: 60/m]
    #[arg(long, env = "METAINIT_RELEASE_RATE", value_name = "N/UNIT", value_parser = parse_rate)]
    pub release_rate: Option<Rate>,

    /// Export `metainit_gated_pods` and `metainit_gated_oldest_seconds` for this gate
    /// (repeatable), releasing nothing: "a gate nobody clears" becomes one alert rule.
    /// Gates of `--release-gate` are watched anyway.
    #[arg(long, env = "METAINIT_WATCH_GATES", value_name = "NAME", value_delimiter = ',', value_parser = parse_gate_name)]
    pub watch_gates: Vec<String>,

    /// Also break the deadlock of an admission webhook that intercepts its own pods: on
    /// each Mutating/ValidatingWebhookConfiguration that carries the label key, a webhook
    /// that fails closed and whose service has had no ready endpoint for --webhook-grace
    /// gets its service's own namespace exempted, and restored once the service is back
    /// (docs/src/guides/webhooks.md). Needs Kubernetes 1.21 or later and
    /// manifests/rbac-webhooks.yaml. From the environment: 1/0, true/false, yes/no.
    #[arg(long, env = "METAINIT_WEBHOOKS", action = ArgAction::SetTrue, value_parser = parse_bool)]
    pub webhooks: bool,

    /// How long a webhook's service must have had no ready endpoint before its namespace
    /// is exempted, and ready endpoints again before the exemption is removed. At least 1s.
    #[arg(long, env = "METAINIT_WEBHOOK_GRACE", value_name = "DURATION", value_parser = parse_webhook_grace)]
    pub webhook_grace: Option<Duration>,

    /// This instance's name among the instances that share the work (its Lease is
    /// metainit-NAME); empty or absent: the hostname. The static pod passes its node's name.
    #[arg(long, env = "METAINIT_IDENTITY", value_name = "NAME", value_parser = parse_node_name)]
    pub identity: Option<String>,

    /// Where the instances keep their Leases to share the work (manifests/rbac.yaml
    /// grants them there).
    #[arg(long, env = "METAINIT_PEERS_NAMESPACE", value_name = "NS", default_value = "kube-system", value_parser = parse_namespace)]
    pub peers_namespace: String,

    /// How long each instance leaves an object to the instances ranked before it: its
    /// owner patches at once, the next after this, the next after twice this, each
    /// counting from when it last saw one of those at work if later (three times this
    /// more at most). 0s: no sharing, no Lease, every object at once.
    #[arg(long, env = "METAINIT_PEER_DELAY", value_name = "DURATION", default_value = "500ms", value_parser = parse_duration)]
    pub peer_delay: Duration,

    /// Check every flag and the kubeconfig file, print "configuration OK" and exit; contacts no server.
    #[arg(long)]
    pub check_config: bool,
}

/// The release rules, shared by the watcher and `status` (which shows when each applies).
#[derive(Args, Debug, Clone, Default)]
pub struct RuleArgs {
    /// On every unbound pod in scope, labelled or not, remove gate NAME once the pod is
    /// older than AGE (e.g. `example.com/quota=2h`): that gate only, never the others
    /// (repeatable; the environment variable takes a comma-separated list). For gates
    /// whose controller is gone. Scheduling-gates mode only.
    #[arg(long, env = "METAINIT_RELEASE_GATES", value_name = "NAME=AGE", value_delimiter = ',', value_parser = parse_release_rule)]
    pub release_gate: Vec<ReleaseRule>,

    /// Never release gates (`--release-gate`) in this namespace (repeatable). Labelled
    /// pods there are still cleared: the label is an explicit request.
    #[arg(long, env = "METAINIT_EXCLUDE_NAMESPACES", value_name = "NS", value_delimiter = ',', value_parser = parse_namespace)]
    pub exclude_namespace: Vec<String>,
}

/// Flags of `metainit status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The label key, as the main command takes it (same as --label-key).
    #[arg(value_name = "LABEL_KEY", value_parser = parse_label_key)]
    pub positional_label_key: Option<String>,

    #[command(flatten)]
    pub common: Common,

    /// Every namespace, as kubectl's -A: what status lists without -n anyway.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,

    /// Output format.
    #[arg(short = 'o', long, env = "METAINIT_OUTPUT", value_enum, default_value_t = Output::Table)]
    pub output: Output,

    /// Exit 1 if any object has been held back longer than this (e.g. `10m`).
    #[arg(long, env = "METAINIT_MAX_AGE", value_name = "DURATION", value_parser = parse_duration)]
    pub max_age: Option<Duration>,

    /// The watcher's release rules, to show which rule releases each pod and when.
    #[command(flatten)]
    pub rules: RuleArgs,

    /// Also list the webhooks of the labelled webhook configurations that are down (no
    /// ready endpoint) or exempted, and their state, as `--webhooks` sees them. Needs list
    /// on the two configuration kinds and on endpointslices (manifests/rbac-webhooks.yaml).
    /// From the environment: 1/0, true/false, yes/no.
    #[arg(long, env = "METAINIT_WEBHOOKS", action = ArgAction::SetTrue, value_parser = parse_bool)]
    pub webhooks: bool,

    /// Instead of what is held back now, what would stall a cold start: fail-closed
    /// webhooks that admit their own pods, cycles of webhooks, webhooks on pods/binding,
    /// system pods behind a webhook that a pod-network outage stops, gated templates nobody
    /// lifts; and, now, fail-closed webhooks that are down and what they block; each with the
    /// fix and whether metainit as configured (label key, --webhooks, --release-gate) clears
    /// it. Exit 3 when there is one. Needs manifests/rbac-status.yaml.
    #[arg(long, env = "METAINIT_RISKS", action = ArgAction::SetTrue, value_parser = parse_bool, conflicts_with = "max_age")]
    pub risks: bool,
}

/// Flags of `metainit probe`.
#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// The Service whose pods to GET: every pod its selector matches, ready or not.
    #[arg(value_name = "SERVICE", value_parser = parse_service_name)]
    pub service: String,

    /// The name of the Service port to GET; each pod is asked at that port's target.
    #[arg(long, env = "METAINIT_PROBE_PORT", value_name = "NAME", default_value = "metrics", value_parser = parse_port_name)]
    pub port: String,

    /// The path to GET on each endpoint.
    #[arg(long, env = "METAINIT_PROBE_PATH", value_name = "PATH", default_value = "/readyz", value_parser = parse_path)]
    pub path: String,

    /// The Service's namespace (default: the kubeconfig context's, or in a pod its own).
    #[arg(short = 'n', long, env = "METAINIT_NAMESPACE", value_name = "NS", value_parser = parse_namespace)]
    pub namespace: Option<String>,

    #[command(flatten)]
    pub kube: KubeconfigArgs,

    /// How long each API request (retried meanwhile) and each endpoint's GET may wait.
    #[arg(long, env = "METAINIT_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = parse_probe_timeout)]
    pub timeout: Duration,

    /// The node this probe runs on, in its network namespace (a hostNetwork pod): a
    /// hostNetwork pod of the Service on the same node that has no IP (its node reports no
    /// address, as a node whose address is loopback does) is asked at 127.0.0.1.
    #[arg(long, env = "METAINIT_NODE_NAME", value_name = "NAME", value_parser = parse_node_name)]
    pub node_name: Option<String>,

    /// Log format; RUST_LOG filters (default `info`).
    #[arg(long, env = "METAINIT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Flags of `metainit completions`.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to write the completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// The shells `completions` writes for.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeArg {
    Auto,
    Initializers,
    SchedulingGates,
}

impl ModeArg {
    /// The mode asked for; `None` for `auto`: the server's version decides.
    pub fn mode(self) -> Option<Mode> {
        match self {
            ModeArg::Auto => None,
            ModeArg::Initializers => Some(Mode::Initializers),
            ModeArg::SchedulingGates => Some(Mode::SchedulingGates),
        }
    }
}

/// `--webhook-grace` when not given.
pub const DEFAULT_WEBHOOK_GRACE: Duration = Duration::from_secs(30);
