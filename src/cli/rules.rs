//! The rules between flags that need no server, in one place (`check`, before anything is
//! contacted; `Cli::settings` runs them). The ones that need the mode the server's version
//! chose are `discovery::check_mode`'s, fed the checked settings. Each error says what to
//! drop or change.

use crate::{
    Error, Result,
    discovery::{ResourceSpec, gates_need_pods, gates_only, webhooks_too_old},
};

use super::{Common, DEFAULT_LABEL_KEY, ModeArg, RuleArgs, RunArgs, StatusArgs};

/// Why `--mode initializers` rules out a gates-only flag.
const INITIALIZERS_MODE: &str = "--mode initializers means initializers";

/// Why `--mode initializers` rules out `--webhooks`.
const INITIALIZERS_SERVER: &str = "--mode initializers means a 1.7 to 1.13 server";

impl StatusArgs {
    /// The label key from `--label-key`, the positional argument, or the default.
    pub fn label_key(&self) -> Result<String> {
        self.common
            .label_key_with(self.positional_label_key.as_ref())
    }

    /// The flag that asks for gate work beyond the label, if any.
    pub fn gate_flag(&self) -> Option<&'static str> {
        (!self.rules.release_gate.is_empty()).then_some("--release-gate")
    }

    /// Checks every rule that needs no server.
    pub fn check(&self) -> Result<()> {
        self.label_key()?;
        self.rules.check()?;
        if let Some(flag) = self.gate_flag()
            && self.common.mode == ModeArg::Initializers
        {
            return Err(gates_only(flag, INITIALIZERS_MODE));
        }
        if self.webhooks && self.common.mode == ModeArg::Initializers {
            return Err(webhooks_too_old(INITIALIZERS_SERVER));
        }
        Ok(())
    }
}

impl RunArgs {
    /// The label key from `--label-key`, the positional argument, or the default.
    pub fn label_key(&self) -> Result<String> {
        self.common
            .label_key_with(self.positional_label_key.as_ref())
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
                return Err(gates_only(flag, INITIALIZERS_MODE));
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
        self.check_webhooks()?;
        crate::events::node_name(self.node_name.as_deref())?;
        Ok(())
    }

    fn check_webhooks(&self) -> Result<()> {
        if !self.webhooks {
            return match self.webhook_grace {
                Some(_) => Err(Error::Config(
                    "--webhook-grace has no effect without --webhooks: give --webhooks or drop it"
                        .into(),
                )),
                None => Ok(()),
            };
        }
        if self.common.mode == ModeArg::Initializers {
            return Err(webhooks_too_old(INITIALIZERS_SERVER));
        }
        if self.once && self.webhook_grace.is_some() {
            return Err(Error::Config(
                "--webhook-grace has no effect with --once, which acts on the endpoints as they are now \
                 (none ready: exempt; ready again: restore): drop --webhook-grace, or drop --once to wait for the grace"
                    .into(),
            ));
        }
        Ok(())
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

impl Common {
    /// The label key from `--label-key`, `positional` (the original tool's way), or the
    /// default; both, if they differ, is a mistake to report.
    fn label_key_with(&self, positional: Option<&String>) -> Result<String> {
        match (positional, self.label_key.as_ref()) {
            (Some(p), Some(f)) if p != f => Err(Error::Config(format!(
                "the label key is given twice, as LABEL_KEY '{p}' and as --label-key/METAINIT_LABEL_KEY '{f}': give it once"
            ))),
            (Some(k), _) | (None, Some(k)) => Ok(k.clone()),
            (None, None) => Ok(DEFAULT_LABEL_KEY.to_string()),
        }
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
