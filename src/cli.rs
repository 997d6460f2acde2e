//! The command line: one clap derive tree. Doc comments are the help text; every flag
//! also reads a `METAINIT_*` environment variable. Values are checked as they are parsed,
//! so a bad one exits 2 with a message that names the flag, the value and the rule.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{ArgAction, Args, CommandFactory, Parser, Subcommand, ValueEnum};

use crate::{
    Error, Result,
    blocker::Mode,
    discovery::{ResourceSpec, gates_need_pods, gates_only, parse_resource, webhooks_too_old},
    kubeconfig,
    logging::LogFormat,
    release::{Rate, ReleaseRule, parse_rate, parse_release_rule},
    setup, validation, webhooks,
};

/// The label key of the original tool, opsani's k8s-metainit.
pub const DEFAULT_LABEL_KEY: &str = "k8s.opsani.io/initializer";

/// The default admin address: loopback only, on a port no control-plane component uses.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:10275";

#[derive(Parser, Debug)]
#[command(
    name = "metainit",
    version = crate::VERSION,
    about = "Clears pending initializers (Kubernetes 1.7-1.13) and scheduling gates (1.26+) on objects \
             that carry a label key, to break bootstrap deadlocks.",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub run: RunArgs,
}

impl Cli {
    /// Parses the process's arguments and environment. A bad value that came from a
    /// `METAINIT_*` variable is reported under the variable's name: the flag it stands
    /// for was never typed.
    pub fn parse_or_exit() -> Cli {
        let argv: Vec<String> = std::env::args().collect();
        Cli::try_parse_from(&argv)
            .map_err(|e| from_env(e, &argv, |k| std::env::var(k).ok()))
            .unwrap_or_else(|e| {
                if e.use_stderr() && wants_json(&argv, std::env::var("METAINIT_LOG_FORMAT").ok()) {
                    let text = e.render().to_string();
                    let first = text.lines().next().unwrap_or_default();
                    let message = first.strip_prefix("error: ").unwrap_or(first);
                    eprintln!("{}", crate::logging::json_line(message, e.exit_code()));
                    std::process::exit(e.exit_code());
                }
                e.exit()
            })
    }
}

/// Whether the command line or the environment asks for JSON logs: then even a bad
/// command line is reported as a JSON line.
fn wants_json(argv: &[String], env: Option<String>) -> bool {
    let flag = argv
        .windows(2)
        .rev()
        .find_map(|w| (w[0] == "--log-format").then(|| w[1].clone()));
    let joined = argv
        .iter()
        .rev()
        .find_map(|a| a.strip_prefix("--log-format=").map(String::from));
    flag.or(joined).or(env).is_some_and(|f| f == "json")
}

/// Rewrites a clap error about a value read from an environment variable so that it
/// names the variable. `env` reads a variable.
pub fn from_env(
    e: clap::Error,
    argv: &[String],
    env: impl Fn(&str) -> Option<String>,
) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return e;
    }
    let text = |k| match e.get(k) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => Some(v.join(", ")),
        _ => None,
    };
    let (Some(flag), Some(value)) = (
        text(ContextKind::InvalidArg),
        text(ContextKind::InvalidValue),
    ) else {
        return e;
    };
    let long = flag
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let mut cmd = Cli::command();
    let args: Vec<clap::Arg> = cmd
        .get_arguments()
        .chain(cmd.get_subcommands().flat_map(|c| c.get_arguments()))
        .cloned()
        .collect();
    let Some(arg) = args
        .iter()
        .find(|a| a.get_long().is_some_and(|l| format!("--{l}") == long))
    else {
        return e;
    };
    let Some(var) = arg.get_env().and_then(|v| v.to_str()).map(str::to_string) else {
        return e;
    };
    let typed = argv.iter().skip(1).any(|a| {
        a == &long
            || a.starts_with(&format!("{long}="))
            || arg
                .get_short()
                .is_some_and(|s| a.starts_with(&format!("-{s}")))
    });
    let from_env = env(&var).is_some_and(|v| v == value || v.split(',').any(|p| p == value));
    if typed || !from_env {
        return e;
    }
    let rule = match (std::error::Error::source(&e), text(ContextKind::ValidValue)) {
        (Some(source), _) => source.to_string(),
        (None, Some(valid)) => format!("possible values: {valid}"),
        (None, None) => "see --help".to_string(),
    };
    clap::Error::raw(
        e.kind(),
        format!(
            "invalid value '{value}' in the environment variable {var} (read as {long}): {rule}"
        ),
    )
    .format(&mut cmd)
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// List every object held back right now (labelled or not); changes nothing.
    Status(StatusArgs),
}

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

    /// Path to the kubeconfig file. Otherwise KUBECONFIG, then ~/.kube/config, then in-cluster.
    #[arg(long, env = "METAINIT_KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: its current-context).
    #[arg(long, env = "METAINIT_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,

    /// Only this namespace (default: all namespaces).
    #[arg(short = 'n', long, env = "METAINIT_NAMESPACE", value_name = "NS", value_parser = parse_namespace)]
    pub namespace: Option<String>,

    /// Log format; RUST_LOG filters (default `info`).
    #[arg(long, env = "METAINIT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// The budget of `--once` and `status`: how long they wait for an unreachable API
    /// server, and how long `--once` may retry objects it cannot clear yet.
    #[arg(long, env = "METAINIT_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// How long one API request (watches excepted) may wait for its answer; a request
    /// not answered in time is retried like any transient failure. `0`: no limit.
    #[arg(long, env = "METAINIT_REQUEST_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = parse_request_timeout)]
    pub request_timeout: Duration,
}

/// Flags of the watcher (the default command).
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The label key, as the original tool took it (same as --label-key).
    #[arg(value_name = "LABEL_KEY", value_parser = parse_label_key)]
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

    /// How often the labelled objects are listed again in full, whatever the watch says:
    /// bounds any blindness (a watch silent after an etcd restore). At least 1s.
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
    /// (README, "Webhooks"). Needs Kubernetes 1.21 or later and manifests/rbac-webhooks.yaml.
    /// From the environment: 1/0, true/false, yes/no.
    #[arg(long, env = "METAINIT_WEBHOOKS", action = ArgAction::SetTrue, value_parser = parse_bool)]
    pub webhooks: bool,

    /// How long a webhook's service must have had no ready endpoint before its namespace
    /// is exempted, and ready endpoints again before the exemption is removed. At least 1s.
    #[arg(long, env = "METAINIT_WEBHOOK_GRACE", value_name = "DURATION", value_parser = parse_webhook_grace)]
    pub webhook_grace: Option<Duration>,

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

/// A scheduling gate name is a qualified name (`example.com/quota`).
fn parse_gate_name(s: &str) -> Result<String, String> {
    validation::gate_name(s).map(|()| s.to_string())
}

/// Flags of `metainit status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The label key, as the main command takes it (same as --label-key).
    #[arg(value_name = "LABEL_KEY", value_parser = parse_label_key)]
    pub positional_label_key: Option<String>,

    #[command(flatten)]
    pub common: Common,

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

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

fn parse_label_key(s: &str) -> Result<String, String> {
    validation::label_key(s).map(|()| s.to_string())
}

fn parse_namespace(s: &str) -> Result<String, String> {
    validation::namespace(s).map(|()| s.to_string())
}

fn parse_blocker_name(s: &str) -> Result<String, String> {
    validation::blocker_name(s).map(|()| s.to_string())
}

/// Booleans as people write them in environment variables.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err("a boolean is 1, 0, true, false, yes or no (any case)".into()),
    }
}

/// `IP:PORT`, `[IPv6]:PORT`, or `localhost:PORT` (the IPv4 loopback, as the default is).
pub fn parse_admin_addr(s: &str) -> Result<SocketAddr, String> {
    const RULE: &str = "an address is IP:PORT, [IPv6]:PORT or localhost:PORT \
                        (e.g. '127.0.0.1:10275', 'localhost:10275', '0.0.0.0:10275' to listen on every interface)";
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    match s.rsplit_once(':') {
        Some((host, port)) if host.eq_ignore_ascii_case("localhost") => port
            .parse::<u16>()
            .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
            .map_err(|_| RULE.into()),
        _ => Err(RULE.into()),
    }
}

/// A node name is a DNS subdomain; an empty value means "not given" (a manifest's
/// `--node-name=$(NODE_NAME)` with the variable unset).
fn parse_node_name(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Ok(String::new());
    }
    validation::node_name(s).map(|()| s.to_string())
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    validation::duration(s)
}

fn parse_request_timeout(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    validation::duration(s)
}

/// `--webhook-grace` when not given.
pub const DEFAULT_WEBHOOK_GRACE: Duration = Duration::from_secs(30);

fn parse_webhook_grace(s: &str) -> Result<Duration, String> {
    let d = validation::duration(s)?;
    if d < Duration::from_secs(1) {
        return Err(
            "the grace period must be at least 1s: without one, endpoints that flap during a rollout would rewrite the configuration each time"
                .into(),
        );
    }
    Ok(d)
}

fn parse_resync_period(s: &str) -> Result<Duration, String> {
    let d = validation::duration(s)?;
    if d < Duration::from_secs(1) {
        return Err("the resync period must be at least 1s".into());
    }
    Ok(d)
}

/// The label key from `--label-key`, the positional argument, or the default.
fn label_key(positional: Option<&String>, flag: Option<&String>) -> Result<String> {
    match (positional, flag) {
        (Some(p), Some(f)) if p != f => Err(Error::Config(format!(
            "the label key is given twice, as LABEL_KEY '{p}' and as --label-key/METAINIT_LABEL_KEY '{f}': give it once"
        ))),
        (Some(k), _) | (None, Some(k)) => Ok(k.clone()),
        (None, None) => Ok(DEFAULT_LABEL_KEY.to_string()),
    }
}

impl StatusArgs {
    /// The label key from `--label-key`, the positional argument, or the default.
    pub fn label_key(&self) -> Result<String> {
        label_key(
            self.positional_label_key.as_ref(),
            self.common.label_key.as_ref(),
        )
    }
}

impl RunArgs {
    /// The label key from `--label-key`, the positional argument, or the default.
    pub fn label_key(&self) -> Result<String> {
        label_key(
            self.positional_label_key.as_ref(),
            self.common.label_key.as_ref(),
        )
    }

    /// Checks every rule that needs no server.
    pub fn check(&self) -> Result<()> {
        self.label_key()?;
        let resources = self.resources()?;
        if self.common.mode == ModeArg::SchedulingGates {
            gates_need_pods(&resources)?;
        }
        self.rules.check()?;
        if let Some(flag) = self.gate_flag() {
            if self.common.mode == ModeArg::Initializers {
                return Err(gates_only(flag, "--mode initializers means initializers"));
            }
            gates_need_pods(&resources)?;
            if self.once {
                return Err(Error::Config(format!(
                    "{flag} needs the watcher: releases wait for each pod's age and --release-rate; \
                     drop --once (or run `metainit status --release-gate ...` to see when each pod would go)"
                )));
            }
        }
        if self.release_rate.is_some() && self.rules.release_gate.is_empty() {
            return Err(Error::Config(
                "--release-rate has no effect without --release-gate: give a rule or drop it"
                    .into(),
            ));
        }
        if self.webhooks {
            if self.common.mode == ModeArg::Initializers {
                return Err(webhooks_too_old(
                    "--mode initializers means a 1.7 to 1.13 server",
                ));
            }
            if self.once && self.webhook_grace.is_some() {
                return Err(Error::Config(
                    "--webhook-grace has no effect with --once, which acts on the endpoints as they are now \
                     (none ready: exempt; ready again: restore): drop --webhook-grace, or drop --once to wait for the grace"
                        .into(),
                ));
            }
        } else if self.webhook_grace.is_some() {
            return Err(Error::Config(
                "--webhook-grace has no effect without --webhooks: give --webhooks or drop it"
                    .into(),
            ));
        }
        crate::events::node_name(self.node_name.as_deref())?;
        Ok(())
    }

    /// What choosing the mode and finding the resources need, checked.
    pub fn setup_settings(&self) -> Result<setup::Settings> {
        Ok(setup::Settings {
            label_key: self.label_key()?,
            resources: self.resources()?,
            resources_named: !self.resources.is_empty(),
            mode: self.common.mode.mode(),
            webhooks: self.webhooks,
            gate_flag: self.gate_flag(),
            only: self.only.clone(),
            dry_run: self.dry_run,
            node: crate::events::node_name(self.node_name.as_deref())?,
            concurrency: usize::from(self.concurrency),
            namespace: self.common.namespace.clone(),
        })
    }

    /// What `--webhooks` needs; `--once` waits for no grace.
    pub fn webhook_settings(&self) -> Result<webhooks::Settings> {
        Ok(webhooks::Settings {
            label_key: self.label_key()?,
            grace: if self.once {
                Duration::ZERO
            } else {
                self.webhook_grace.unwrap_or(DEFAULT_WEBHOOK_GRACE)
            },
            dry_run: self.dry_run,
            node: crate::events::node_name(self.node_name.as_deref())?,
            concurrency: 2,
            resync: self.resync_period,
        })
    }

    /// The first flag that asks for gate work beyond the label, if any.
    pub fn gate_flag(&self) -> Option<&'static str> {
        if !self.rules.release_gate.is_empty() {
            Some("--release-gate")
        } else if !self.watch_gates.is_empty() {
            Some("--watch-gates")
        } else {
            None
        }
    }

    /// The resources to watch, `pods` when none is named; duplicates are an error.
    pub fn resources(&self) -> Result<Vec<ResourceSpec>> {
        if self.resources.is_empty() {
            return Ok(vec![ResourceSpec::pods()]);
        }
        for (i, r) in self.resources.iter().enumerate() {
            if self.resources[..i].contains(r) {
                return Err(Error::Config(format!("--resource '{r}' is given twice")));
            }
        }
        Ok(self.resources.clone())
    }
}

impl RuleArgs {
    /// A gate named twice, or `--exclude-namespace` without a rule, is a mistake to report.
    pub fn check(&self) -> Result<()> {
        for (i, r) in self.release_gate.iter().enumerate() {
            if let Some(first) = self.release_gate[..i].iter().find(|o| o.gate == r.gate) {
                return Err(Error::Config(format!(
                    "--release-gate names gate '{}' twice ('{first}' and '{r}'): give one age per gate",
                    r.gate
                )));
            }
        }
        if !self.exclude_namespace.is_empty() && self.release_gate.is_empty() {
            return Err(Error::Config(
                "--exclude-namespace only limits --release-gate, and no rule is given: give a rule or drop it".into(),
            ));
        }
        Ok(())
    }
}

impl Common {
    /// Which kubeconfig and context to read.
    pub fn kubeconfig(&self) -> kubeconfig::Settings {
        kubeconfig::Settings {
            path: self.kubeconfig.clone(),
            context: self.context.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("metainit").chain(args.iter().copied()))
    }

    #[test]
    fn defaults() {
        let cli = parse(&[]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.run.label_key().unwrap(), DEFAULT_LABEL_KEY);
        assert_eq!(cli.run.resources().unwrap(), vec![ResourceSpec::pods()]);
        assert_eq!(cli.run.common.mode, ModeArg::Auto);
        assert_eq!(cli.run.admin_addr.to_string(), DEFAULT_ADMIN_ADDR);
        assert_eq!(cli.run.common.request_timeout, Duration::from_secs(30));
        assert_eq!(cli.run.resync_period, Duration::from_secs(300));
        let cli = parse(&["--request-timeout", "0", "--resync-period", "2s"]).unwrap();
        assert_eq!(cli.run.common.request_timeout, Duration::ZERO);
        assert_eq!(cli.run.resync_period, Duration::from_secs(2));
        assert!(parse(&["--resync-period", "500ms"]).is_err());
    }

    #[test]
    fn the_webhooks_grace_defaults_to_30s_and_once_waits_for_none() {
        let grace = |args: &[&str]| {
            let cli = parse(args).unwrap();
            cli.run.webhook_settings().unwrap().grace
        };
        assert_eq!(grace(&["--webhooks"]), Duration::from_secs(30));
        assert_eq!(DEFAULT_WEBHOOK_GRACE, Duration::from_secs(30));
        assert_eq!(
            grace(&["--webhooks", "--webhook-grace", "2m"]),
            Duration::from_secs(120)
        );
        assert_eq!(grace(&["--webhooks", "--once"]), Duration::ZERO);
    }

    #[test]
    fn positional_label_key_like_the_original() {
        let cli = parse(&["example.com/init"]).unwrap();
        assert_eq!(cli.run.label_key().unwrap(), "example.com/init");
        let cli = parse(&["--label-key", "a", "b"]).unwrap();
        assert!(cli.run.label_key().is_err());
        let cli = parse(&["--label-key", "a", "a"]).unwrap();
        assert_eq!(cli.run.label_key().unwrap(), "a");
    }

    #[test]
    fn bad_values_name_flag_value_and_rule() {
        let err = parse(&["--label-key", "bad key"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        let msg = err.to_string();
        assert!(
            msg.contains("--label-key") && msg.contains("bad key") && msg.contains("63 characters"),
            "{msg}"
        );
        let err = parse(&["--resource", "Pods"]).unwrap_err().to_string();
        assert!(
            err.contains("--resource") && err.contains("Pods") && err.contains("plural"),
            "{err}"
        );
    }

    #[test]
    fn resources() {
        assert_eq!(
            parse_resource("deployments.apps").unwrap(),
            ResourceSpec {
                plural: "deployments".into(),
                version: None,
                group: "apps".into()
            }
        );
        assert_eq!(
            parse_resource("deployments.v1beta2.apps").unwrap(),
            ResourceSpec {
                plural: "deployments".into(),
                version: Some("v1beta2".into()),
                group: "apps".into()
            }
        );
        assert_eq!(
            parse_resource("pods.v1").unwrap().version.as_deref(),
            Some("v1")
        );
        assert_eq!(
            parse_resource("deployments.apps").unwrap().to_string(),
            "deployments.apps"
        );
        for bad in ["", "Pods", "pods.", "pods..apps", "po ds", "pods.Apps"] {
            assert!(parse_resource(bad).is_err(), "{bad:?}");
        }
        let cli = parse(&["--resource", "pods", "--resource", "pods"]).unwrap();
        assert!(cli.run.resources().is_err());
        let cli = parse(&["--resource", "pods,deployments.apps"]).unwrap();
        assert_eq!(cli.run.resources().unwrap().len(), 2);
    }

    #[test]
    fn status_subcommand() {
        let cli = parse(&["status", "-o", "json", "--max-age", "10m"]).unwrap();
        let Some(Command::Status(s)) = cli.command else {
            panic!("not status")
        };
        assert_eq!(s.output, Output::Json);
        assert_eq!(s.max_age, Some(Duration::from_secs(600)));
    }
}
