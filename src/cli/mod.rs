//! The command line: one clap derive tree (`args`), its values' parsers (`parse`), the
//! rules between flags (`rules`) and the one checked value it builds for the rest of the
//! program (`settings`: `Cli::settings`), which the entry points read instead of the flags. Doc comments are the help text; every flag also reads a
//! `METAINIT_*` environment variable. Values are checked as they are parsed, so a bad one
//! exits 2 with a message that names the flag, the value and the rule. Run as
//! `kubectl-metainit`, the same tree answers as a kubectl plugin (`plugin`);
//! `completions` writes the shells' scripts from it.

mod args;
pub mod completions;
mod parse;
pub mod plugin;
mod rules;
mod settings;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub use args::{
    Common, CompletionsArgs, DEFAULT_ADMIN_ADDR, DEFAULT_LABEL_KEY, DEFAULT_WEBHOOK_GRACE,
    KubeconfigArgs, ModeArg, ProbeArgs, RuleArgs, RunArgs, Shell, StatusArgs,
};
pub use parse::{parse_admin_addr, parse_bool};
pub use settings::{Settings, Task};

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
    /// for was never typed. Run as `kubectl-metainit`, as the plugin (`plugin`).
    pub fn parse_or_exit() -> Cli {
        let argv: Vec<String> = std::env::args().collect();
        let as_plugin = argv.first().is_some_and(|a| plugin::invoked_as_plugin(a));
        let mut cmd = command(as_plugin);
        let cli = cmd
            .try_get_matches_from_mut(&argv)
            .and_then(|m| Cli::from_arg_matches(&m))
            .map_err(|e| from_env(e, &mut cmd, &argv, |k| std::env::var(k).ok()))
            .unwrap_or_else(|e| {
                if e.use_stderr() && wants_json(&argv, std::env::var("METAINIT_LOG_FORMAT").ok()) {
                    let text = e.render().to_string();
                    let first = text.lines().next().unwrap_or_default();
                    let message = first.strip_prefix("error: ").unwrap_or(first);
                    eprintln!("{}", crate::logging::json_line(message, e.exit_code()));
                    std::process::exit(e.exit_code());
                }
                e.exit()
            });
        if as_plugin && cli.command.is_none() {
            plugin::without_subcommand(cmd, argv.len());
        }
        cli
    }
}

/// The command tree: metainit's, or as the kubectl plugin shows it.
pub fn command(as_plugin: bool) -> clap::Command {
    match as_plugin {
        true => plugin::command(Cli::command()),
        false => Cli::command(),
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
    cmd: &mut clap::Command,
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
    let Some(arg) = flag_named(cmd, &long) else {
        return e;
    };
    let Some(var) = arg.get_env().and_then(|v| v.to_str()).map(str::to_string) else {
        return e;
    };
    let from_env = env(&var).is_some_and(|v| v == value || v.split(',').any(|p| p == value));
    if typed(&arg, &long, argv) || !from_env {
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
    .format(cmd)
}

/// The flag `long` (`--name`) of the command or of its subcommands.
fn flag_named(cmd: &clap::Command, long: &str) -> Option<clap::Arg> {
    cmd.get_arguments()
        .chain(cmd.get_subcommands().flat_map(|c| c.get_arguments()))
        .find(|a| a.get_long().is_some_and(|l| format!("--{l}") == long))
        .cloned()
}

/// Whether `arg` is on the command line, as `--name`, `--name=VALUE` or its short form.
fn typed(arg: &clap::Arg, long: &str, argv: &[String]) -> bool {
    argv.iter().skip(1).any(|a| {
        a == long
            || a.starts_with(&format!("{long}="))
            || arg
                .get_short()
                .is_some_and(|s| a.starts_with(&format!("-{s}")))
    })
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// List every object held back right now (labelled or not); changes nothing.
    Status(StatusArgs),
    /// GET a path (default /readyz) on every endpoint of a Service, ready or not: exit 0
    /// if there is one and every one answers 200, 1 if not, 2 if it cannot tell.
    Probe(ProbeArgs),
    /// Write the completion script of a shell (bash, zsh, fish) on stdout.
    Completions(CompletionsArgs),
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{
        discovery::{ResourceSpec, parse_resource},
        status::Output,
    };

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
            cli.run.run_settings().unwrap().webhooks.unwrap().grace
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
    fn all_namespaces_is_kubectls_and_excludes_one_namespace() {
        let Some(Command::Status(s)) = parse(&["status", "-A"]).unwrap().command else {
            panic!("not status")
        };
        assert!(s.all_namespaces && s.common.namespace.is_none());
        let err = parse(&["status", "-A", "-n", "a"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
        // Through the plugin: the same tree, its usage under kubectl's name.
        let err = command(true)
            .try_get_matches_from(["kubectl-metainit", "status", "-A", "-n", "a"])
            .unwrap_err()
            .render()
            .to_string();
        assert!(err.contains("Usage: kubectl metainit status"), "{err}");
        let probe = parse(&["probe", "svc"]).unwrap();
        let Some(Command::Probe(p)) = probe.command else {
            panic!("not probe")
        };
        let s = p.settings();
        assert_eq!((s.port.as_str(), s.path.as_str()), ("metrics", "/readyz"));
        assert_eq!(s.timeout, Duration::from_secs(30));
        assert!(s.namespace.is_none());
    }

    #[test]
    fn one_settings_value_per_command() {
        let task = |args: &[&str]| parse(args).unwrap().settings().map(|s| s.task);
        assert!(matches!(
            task(&["--check-config"]),
            Ok(Task::CheckConfig(_))
        ));
        let Ok(Task::Once(once)) = task(&["--once", "--timeout", "5s", "-n", "a"]) else {
            panic!("not --once")
        };
        assert_eq!(once.timeout, Duration::from_secs(5));
        assert_eq!(once.run.selection.namespace.as_deref(), Some("a"));
        assert!(once.run.webhooks.is_none());
        let Ok(Task::Daemon(d)) = task(&["--peer-delay", "0s", "--watch-gates", "example.com/g"])
        else {
            panic!("not the daemon")
        };
        assert!(!d.peers.shares());
        assert_eq!(d.run.selection.gate_flag, Some("--watch-gates"));
        assert_eq!(d.gates.watch, ["example.com/g"]);
        let Ok(Task::Status(s)) = task(&["status", "example.com/k", "-o", "yaml"]) else {
            panic!("not status")
        };
        assert_eq!(
            (s.label_key.as_str(), s.output),
            ("example.com/k", Output::Yaml)
        );
        // A broken rule is bad input, whichever command.
        let err = task(&["--release-rate", "1/s"]).err().unwrap();
        assert_eq!(err.exit_code(), 2);
        let err = task(&[
            "status",
            "--release-gate",
            "a/b=1h",
            "--release-gate",
            "a/b=2h",
        ]);
        assert_eq!(err.err().unwrap().exit_code(), 2);
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
