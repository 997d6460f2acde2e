//! The checked settings the command line hands to the rest of the program: plain data, so
//! that nothing below the entry points needs the flags.

use std::{sync::Arc, time::Duration};

use super::{Common, DEFAULT_WEBHOOK_GRACE, KubeconfigArgs, ProbeArgs, RunArgs};
use crate::{
    Error, Result, blocker::Mode, discovery::ResourceSpec, kubeconfig, peers::Peers, probe,
    webhooks,
};

/// What choosing the mode and finding the resources need from the command line, checked.
#[derive(Clone, Debug)]
pub struct Settings {
    pub label_key: String,
    /// The resources to watch: `pods` when none was named.
    pub resources: Vec<ResourceSpec>,
    /// Whether `--resource` was given at all.
    pub resources_named: bool,
    /// `--mode`; `None`: the server's version decides.
    pub mode: Option<Mode>,
    pub webhooks: bool,
    /// The first flag that asks for gate work beyond the label, if any.
    pub gate_flag: Option<&'static str>,
    pub only: Vec<String>,
    pub dry_run: bool,
    /// This node's name, for Events.
    pub node: String,
    pub concurrency: usize,
    pub namespace: Option<String>,
}

impl Settings {
    /// The rules that need the mode the server's version chose (`rules::check_mode`).
    pub fn check_mode(&self, mode: Option<Mode>) -> Result<()> {
        super::rules::check_mode(self.gate_flag, &self.resources, mode)
    }
}

impl RunArgs {
    /// What choosing the mode and finding the resources need, checked.
    pub fn setup_settings(&self) -> Result<Settings> {
        Ok(Settings {
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

    /// This instance among those that share the work: `--identity`, else the hostname;
    /// alone (no Lease, every object at once) with `--peer-delay 0s`, `--once` or
    /// `--dry-run` (which writes nothing).
    pub fn peers(&self) -> Result<Arc<Peers>> {
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
}

impl Common {
    /// Which kubeconfig and context to read.
    pub fn kubeconfig(&self) -> kubeconfig::Settings {
        self.kube.settings()
    }
}

impl KubeconfigArgs {
    /// Which kubeconfig and context to read.
    pub fn settings(&self) -> kubeconfig::Settings {
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
