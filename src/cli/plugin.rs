//! `kubectl metainit`: the same binary run under the name `kubectl-metainit` (a symlink or
//! a copy on PATH, where kubectl finds its plugins). Then its help, usage and errors name
//! it as typed, only the subcommands are offered, and no subcommand prints the help, as
//! kubectl does with no arguments: the daemon runs in the cluster, not through kubectl.

use std::path::Path;

/// The file name kubectl looks for on PATH to run `kubectl metainit`.
pub const FILE_NAME: &str = "kubectl-metainit";

/// The command as a user types it through kubectl.
pub const TYPED: &str = "kubectl metainit";

/// What the plugin's help says of the daemon, which it does not run.
const DAEMON: &str = "The daemon (the watcher that clears labelled objects) does not run through kubectl: \
it runs in the cluster (manifests/ or the Helm chart charts/metainit) or on a node as \
`metainit [LABEL_KEY] [OPTIONS]`; `metainit --help` lists its options.";

/// Whether `argv0` (the program's path as run) names the plugin: its file name is
/// `kubectl-metainit`, or `kubectl-metainit.exe` on Windows.
pub fn invoked_as_plugin(argv0: &str) -> bool {
    let Some(name) = Path::new(argv0).file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let stem = match name.len().checked_sub(4) {
        Some(i) if name.is_char_boundary(i) && name[i..].eq_ignore_ascii_case(".exe") => &name[..i],
        _ => name,
    };
    stem == FILE_NAME
}

/// The command tree as the plugin shows it: named `kubectl metainit`, the daemon's
/// options hidden (they still parse, to refuse them with a message), the daemon's way in
/// the help.
pub fn command(cmd: clap::Command) -> clap::Command {
    cmd.bin_name(TYPED)
        .display_name(TYPED)
        .mut_args(|a| a.hide(true))
        .override_usage(format!("{TYPED} <COMMAND>"))
        .after_help(DAEMON)
}

/// The plugin run without a subcommand: with no arguments at all, the help on stdout and
/// exit 0 (as `kubectl` alone); with only the daemon's options, an error that says where
/// the daemon runs, exit 2.
pub fn without_subcommand(mut cmd: clap::Command, argc: usize) -> ! {
    if argc <= 1 {
        let help = cmd.render_help().to_string();
        // A reader that has gone (`kubectl metainit | head -1`) is no error.
        let _ = crate::output::print(&help);
        std::process::exit(0);
    }
    cmd.error(
        clap::error::ErrorKind::MissingSubcommand,
        format!("{TYPED} needs a subcommand (status, probe, completions). {DAEMON}"),
    )
    .exit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_is_known_by_its_file_name() {
        for yes in [
            "kubectl-metainit",
            "/usr/local/bin/kubectl-metainit",
            "./kubectl-metainit",
            "kubectl-metainit.exe",
            "C:/bin/kubectl-metainit.EXE",
        ] {
            assert!(invoked_as_plugin(yes), "{yes}");
        }
        for no in [
            "metainit",
            "/usr/bin/metainit",
            "kubectl-metainit-x",
            "kubectl",
            "kubectl-metainit/metainit",
            "",
        ] {
            assert!(!invoked_as_plugin(no), "{no}");
        }
    }
}
