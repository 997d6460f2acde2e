//! The checked settings the command line hands to the rest of the program, built once by
//! `Cli::settings`: plain data, each entry point's own (`daemon::Settings`,
//! `once::Settings`, `status::Settings`, `probe::Settings`, with what the daemon and
//! `--once` share in `setup`), so that nothing below the entry points needs the flags.

use std::{sync::Arc, time::Duration};

use super::{
    Cli, Command, Common, DEFAULT_WEBHOOK_GRACE, KubeconfigArgs, ProbeArgs, RuleArgs, RunArgs,
    Shell, StatusArgs,
};
use crate::{
    Error, Result, daemon, kubeconfig,
    logging::LogFormat,
    once,
    peers::Peers,
    probe,
    release::Rules,
    setup::{self, ClientSettings},
    status, webhooks,
};

/// What the command line asks for, checked.
pub struct Settings {
    pub log_format: LogFormat,
    pub task: Task,
}

/// The command to run, with its settings.
pub enum Task {
    /// The watcher, until a signal.
    Daemon(Box<daemon::Settings>),
    /// `--once`.
    Once(Box<once::Settings>),
    /// `--check-config`: the kubeconfig read and a client built; no server contacted.
    CheckConfig(ClientSettings),
    Status(Box<status::Settings>),
    Probe(probe::Settings),
    Completions(Shell),
}

impl Cli {
    /// The log format asked for, by whichever command.
    pub fn log_format(&self) -> LogFormat {
        match &self.command {
            Some(Command::Status(args)) => args.common.log_format,
            Some(Command::Probe(args)) => args.log_format,
            Some(Command::Completions(_)) | None => self.run.common.log_format,
        }
    }

    /// The settings of the command asked for: every rule between flags that needs no
    /// server is checked here (`rules`); a broken one is a `Config` error (exit 2).
    pub fn settings(&self) -> Result<Settings> {
        let task = match &self.command {
            Some(Command::Status(args)) => Task::Status(Box::new(args.settings()?)),
            Some(Command::Probe(args)) => Task::Probe(args.settings()),
            Some(Command::Completions(args)) => Task::Completions(args.shell),
            None => self.run.task()?,
        };
        Ok(Settings {
            log_format: self.log_format(),
            task,
        })
    }
}

impl RunArgs {
    /// The watcher's task: `--check-config`, `--once` or the daemon.
    fn task(&self) -> Result<Task> {
        self.check()?;
        if self.check_config {
            return Ok(Task::CheckConfig(self.common.client()));
        }
        let run = self.run_settings()?;
        if self.once {
            let timeout = self.common.timeout;
            return Ok(Task::Once(Box::new(once::Settings { run, timeout })));
        }
        Ok(Task::Daemon(Box::new(daemon::Settings {
            run,
            admin: self.admin_addr,
            peers: self.peers()?,
            peers_namespace: self.peers_namespace.clone(),
            gates: daemon::Gates {
                rules: self.rules.rules(),
                rate: self.release_rate.unwrap_or_default(),
                watch: self.watch_gates.clone(),
            },
            resync: self.resync_period,
        })))
    }

    /// What the daemon and `--once` share.
    pub(super) fn run_settings(&self) -> Result<setup::Run> {
        let label_key = self.label_key()?;
        let node = crate::events::node_name(self.node_name.as_deref())?;
        Ok(setup::Run {
            client: self.common.client(),
            selection: setup::Selection {
                label_key: label_key.clone(),
                mode: self.common.mode.mode(),
                resources: self.resources()?,
                resources_named: !self.resources.is_empty(),
                namespace: self.common.namespace.clone(),
                only: self.only.clone(),
                gate_flag: self.gate_flag(),
            },
            clearing: setup::Clearing {
                dry_run: self.dry_run,
                node: node.clone(),
                concurrency: usize::from(self.concurrency),
            },
            webhooks: self
                .webhooks
                .then(|| self.webhook_settings(label_key, node)),
            shutdown_timeout: self.shutdown_timeout,
        })
    }

    /// This instance among those that share the work: `--identity`, else the hostname;
    /// alone (no Lease, every object at once) with `--peer-delay 0s`, `--once` or
    /// `--dry-run` (which writes nothing).
    fn peers(&self) -> Result<Arc<Peers>> {
        if self.peer_delay.is_zero() || self.once || self.dry_run {
            return Ok(Peers::alone());
        }
        let me = match self.identity.as_deref().filter(|i| !i.is_empty()) {
            Some(i) => i.to_string(),
            None => crate::events::hostname()
                .filter(|h| crate::validation::node_name(h).is_ok())
                .ok_or_else(|| {
                    Error::Config(format!(
                        "cannot name this instance among its peers: the hostname is not a valid name ({}); pass --identity",
                        crate::validation::NODE_NAME_RULE
                    ))
                })?,
        };
        if me.len() > 244 {
            return Err(Error::Config(format!(
                "--identity: at most 244 characters (its Lease is metainit-NAME, at most 253), not {}",
                me.len()
            )));
        }
        Ok(Peers::new(me, self.peer_delay))
    }

    /// What `--webhooks` needs; `--once` waits for no grace.
    fn webhook_settings(&self, label_key: String, node: String) -> webhooks::Settings {
        webhooks::Settings {
            label_key,
            grace: if self.once {
                Duration::ZERO
            } else {
                self.webhook_grace.unwrap_or(DEFAULT_WEBHOOK_GRACE)
            },
            dry_run: self.dry_run,
            node,
            concurrency: 2,
            resync: self.resync_period,
        }
    }
}

impl StatusArgs {
    /// What `status` needs, checked.
    fn settings(&self) -> Result<status::Settings> {
        self.check()?;
        Ok(status::Settings {
            client: self.common.client(),
            label_key: self.label_key()?,
            mode: self.common.mode.mode(),
            namespace: self.common.namespace.clone(),
            timeout: self.common.timeout,
            rules: self.rules.rules(),
            gate_flag: self.gate_flag(),
            webhooks: self.webhooks,
            output: self.output,
            max_age: self.max_age,
            risks: self.risks,
        })
    }
}

impl RuleArgs {
    /// The release rules, as the daemon applies them and `status` shows them.
    fn rules(&self) -> Rules {
        Rules {
            rules: self.release_gate.clone(),
            exclude: self.exclude_namespace.clone(),
        }
    }
}

impl Common {
    /// Which server, and how long a request may wait.
    fn client(&self) -> ClientSettings {
        ClientSettings {
            kubeconfig: self.kube.settings(),
            request_timeout: self.request_timeout,
        }
    }
}

impl KubeconfigArgs {
    /// Which kubeconfig and context to read.
    fn settings(&self) -> kubeconfig::Settings {
        kubeconfig::Settings {
            path: self.kubeconfig.clone(),
            context: self.context.clone(),
        }
    }
}

impl ProbeArgs {
    /// What `probe` needs.
    pub fn settings(&self) -> probe::Settings {
        probe::Settings {
            service: self.service.clone(),
            port: self.port.clone(),
            path: self.path.clone(),
            namespace: self.namespace.clone(),
            kubeconfig: self.kube.settings(),
            timeout: self.timeout,
            node: self.node_name.clone(),
        }
    }
}
