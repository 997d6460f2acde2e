//! The developers' sessions the book shows, run here as a developer types them: each block
//! marked `<!-- commands: machine ID -->` (scripts/check-commands.py fails on one no
//! `session` here names) runs as one bash script (`-e -o pipefail`) from the repository's
//! root, with the machine's home (its caches: the built control plane and node); whatever it
//! left in the background is stopped once it ends. It fails if the script fails, or if its
//! output lacks a text a trailing comment quotes (`# "Ready"`).
//!
//! One test, the sessions in turn: each starts a server of its own (the double on port
//! 18080, a control plane, a node), and two cores run one at a time best.

mod common;

use std::process::Command;

use common::{
    doc_blocks::{assert_expected, blocks, run_script},
    node::without_cargo_env,
};

/// Runs every block marked `machine STEP`; prints each with its output.
fn session(step: &str) {
    let dir = tempfile::tempdir().unwrap();
    for block in blocks("machine", step) {
        let body = block["body"].as_str().unwrap();
        let mut bash = Command::new("bash");
        without_cargo_env(&mut bash);
        let output = run_script(bash, body, &dir.path().join("block.log"));
        println!(
            "{}:{} (machine {step}):\n{body}\n--- its output:\n{output}",
            block["page"], block["line"]
        );
        assert_expected(&block, body, &output);
    }
}

#[test]
fn the_developers_sessions_run_as_shown() {
    session("double-session");
    session("control-plane-session");
    session("node-session");
}
