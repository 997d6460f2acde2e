//! The developers' session on the real node that the book shows (docs/src/developers/node.md),
//! run as tests/developer_docs.rs runs the others (`common::doc_blocks::session`): the node
//! tier's (root, containerd, the Go-built kubelet), `#[ignore]`d but for scripts/test.sh's.

mod common;

use common::doc_blocks::session;

#[test]
#[ignore = "the node tier: root, containerd and a Go-built kubelet (bash scripts/test.sh runs it)"]
fn the_node_session_runs_as_shown() {
    session("node-session");
}
