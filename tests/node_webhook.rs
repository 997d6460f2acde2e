//! The webhook deadlock for real, on the real node with its network (`scripts/node.sh`): a
//! webhook server of ours (tests/common/node/guard.rs) as a Deployment of two replicas on
//! the pod network, whose fail-closed Validating and Mutating configurations intercept every
//! pod created in its own namespace, its own pods included. One story, in order, each step
//! asserting what the API server, the ReplicaSet controller and the guard report:
//!
//! 1. the API server calls the guard at its pods' addresses (a pod created in its namespace
//!    carries the mutating webhook's annotation; the validating webhook logs it);
//! 2. without `--webhooks` (the static pod as shipped): the guard's pods gone and wanted back
//!    (scaled to zero, then to two, as a recreating upgrade does), every create of its
//!    ReplicaSet refused `failed calling webhook` for the whole wait (the controller's
//!    Events), no replica;
//! 3. with the static pod given `--webhooks --webhook-grace=10s`: the namespace exempted, both
//!    replicas created and Ready, the configurations restored byte for byte, the API server
//!    calling the guard again;
//! 4. once more from the start, as a user meets it (metainit already running): the outage
//!    again, the figures printed (benches/node_webhook.rs runs it 10 times);
//! 5. a node restart: the guard back Ready, the configurations as before;
//! 6. nothing dialled outside loopback and the node's network namespace.

mod common;
#[path = "node_story/docs.rs"]
mod docs;

use std::time::{Duration, Instant};

use common::node::{
    Node, WAIT,
    guard::{self, NS},
    until,
};
use serde_json::Value;

/// The static pod as shipped, without `--webhooks`: the ReplicaSet's creates refused, again
/// and again, for the whole wait.
fn the_deadlock(node: &Node) {
    let (before, _) = guard::refusals(node);
    guard::outage(node);
    let held = Duration::from_secs(45);
    let start = Instant::now();
    while start.elapsed() < held {
        assert!(
            guard::ready(node).is_empty()
                && node
                    .pods(NS, "app=guard")
                    .iter()
                    .all(|p| { !p["metadata"]["deletionTimestamp"].is_null() }),
            "a guard pod was created without --webhooks"
        );
        assert!(!guard::exempted(node), "exempted without --webhooks");
        std::thread::sleep(Duration::from_secs(1));
    }
    let (refused, message) = guard::refusals(node);
    assert!(
        refused - before >= 5,
        "{} refused creates in {held:?}, want 5 or more: {message}",
        refused - before
    );
    println!(
        "the deadlock: {} creates of the guard's ReplicaSet refused in {held:?}: {message}",
        refused - before
    );
}

/// `--webhooks` on: the namespace exempted, the replicas created and Ready, the
/// configurations restored byte for byte, the guard called again.
fn broken(node: &Node, before: &Value) {
    let on = Instant::now();
    guard::with_webhooks(node, "10s");
    until("the guard's namespace exempted", WAIT, || {
        guard::exempted(node).then_some(())
    });
    let exempted = on.elapsed();
    until(
        "both guard replicas created, Running and ready",
        WAIT,
        || (guard::ready(node).len() == 2).then_some(()),
    );
    let ready = on.elapsed();
    until("both configurations restored as they were", WAIT, || {
        (guard::configs(node) == *before).then_some(())
    });
    println!(
        "the deadlock broken: --webhooks on, exempted {exempted:?}, both replicas Ready {ready:?}, restored {:?} after",
        on.elapsed()
    );
    let by = guard::called_by_the_api_server(node, "after-restore");
    println!("after the restore, the API server called {by}");
}

fn a_node_restart(node: &Node, before: &Value) {
    assert!(node.script(&["stop", "node"]), "node.sh stop node");
    let down = Instant::now();
    let down_at = common::node::now();
    assert!(node.script(&["start", "node"]), "node.sh start node");
    until("the API server ready again", WAIT, || {
        node.readyz().then_some(())
    });
    // Their containers started again (the API server kept the Ready of before the stop: no
    // node lifecycle controller runs), and their Service's endpoints the new addresses.
    until(
        "both guard replicas started again, Ready, their endpoints",
        WAIT,
        || guard::serving_since(node, down_at).then_some(()),
    );
    let ready = down.elapsed();
    until("both configurations as before the restart", WAIT, || {
        (guard::configs(node) == *before).then_some(())
    });
    let by = guard::called_by_the_api_server(node, "after-restart");
    println!(
        "a node restart: the guard Ready {ready:?} after the node went down, configurations as before {:?} after, the API server calling {by}",
        down.elapsed()
    );
}

#[test]
#[ignore = "the node tier: root, containerd and a Go-built kubelet (bash scripts/test.sh runs it)"]
fn a_webhook_that_intercepts_its_own_pods_is_let_through_and_restored() {
    let node = Node::up();
    guard::install(&node, false);
    let by = guard::called_by_the_api_server(&node, "before");
    println!("the API server called the guard's replica {by}");
    // As the webhooks page says: both configurations labelled, the rights applied.
    docs::run(&node, "webhooks-label", None);
    for kind in [
        "validatingwebhookconfiguration",
        "mutatingwebhookconfiguration",
    ] {
        let c = node.json(&["get", kind, guard::NS]).unwrap();
        assert!(
            c["metadata"]["labels"].get(common::LABEL).is_some(),
            "the page's block did not label the {kind}: {c}"
        );
    }
    let before = guard::configs(&node);
    the_deadlock(&node);
    broken(&node, &before);
    let (to_ready, to_restored) = guard::cycle(&node, &before);
    println!(
        "once more, --webhooks running: pods deleted to both replicas Ready {to_ready:?}, Ready to restored {to_restored:?} (grace 10s each way)"
    );
    a_node_restart(&node, &before);
    assert!(
        node.script(&["check-network"]),
        "something on the node dialled outside loopback and the node's network"
    );
}
