//! The developers' sessions the book shows, run here as a developer types them: each block
//! marked `<!-- commands: machine ID -->` (scripts/check-commands.py fails on one no
//! `session` here names) runs as one bash script (`-e -o pipefail`) from the repository's
//! root, with the machine's home (its caches: the built control plane and node); whatever it
//! left in the background is stopped once it ends. It fails if the script fails, or if its
//! output lacks a text a trailing comment quotes (`# "Ready"`).
//!
//! A test a session, one at a time (two cores run one at a time best), each starting a server
//! of its own: the double on port 18080 (the fast tier), a control plane (the real tier,
//! `#[ignore]`d but for scripts/test.sh's). The node's session is tests/developer_node.rs's.

mod common;

use std::sync::{Mutex, MutexGuard};

use common::doc_blocks::session;

/// One session at a time, whichever tests run: two cores run one at a time best.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn the_double_session_runs_as_shown() {
    let _one = one_at_a_time();
    session("double-session");
}

#[test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
fn the_control_plane_session_runs_as_shown() {
    let _one = one_at_a_time();
    session("control-plane-session");
}
