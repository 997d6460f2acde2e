//! `metainit completions SHELL`: the shell's completion script, generated from the one
//! clap tree, so that a flag and its completion cannot drift apart.

use clap::CommandFactory;

use super::{Cli, Shell};
use crate::Result;

/// The name the scripts complete: the binary's, as installed.
pub const BIN: &str = "metainit";

/// The completion script for `shell`.
pub fn script(shell: Shell) -> Vec<u8> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    match shell {
        Shell::Bash => clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, BIN, &mut out),
        Shell::Zsh => clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, BIN, &mut out),
        Shell::Fish => clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, BIN, &mut out),
    }
    out
}

/// Writes the completion script for `shell` on stdout.
pub fn print(shell: Shell) -> Result<()> {
    crate::output::print(&String::from_utf8_lossy(&script(shell)))
}
