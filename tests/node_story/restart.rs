//! A node restart, as after a power cut: metainit stopped first (the kubelet stopped, its
//! process killed) and a labelled gated pod created while it is down; then every container
//! and containerd stopped, and all of it started again on the same directories. metainit is
//! back before the API server answers, and clears the pod within a second of that answer.

use std::time::Duration;

use serde_json::Value;

use crate::common::node::{
    HELD, Node, WAIT, gates, held_pod, now, pod_writes, restarts, started, started_at, until,
};

fn pod_restarts(node: &Node, name: &str) -> i64 {
    let pod = node
        .pod("kube-system", &format!("{name}-{}", node.get("NODE_NAME")))
        .unwrap_or_else(|| panic!("no {name} mirror pod"));
    restarts(&pod)
}

fn create_while_down(node: &Node) {
    node.apply(&held_pod("default", "while-down", true));
    // Down indeed: the pod keeps its gate (three seconds, checked each half second).
    for _ in 0..6 {
        let pod = node.pod("default", "while-down").expect("the pod");
        assert_eq!(
            gates(&pod),
            vec![HELD],
            "cleared while metainit was down: {pod}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

pub fn a_node_restart(node: &Node) {
    let before: Value = node.metainit().expect("metainit's mirror pod");
    let apiserver_before = pod_restarts(node, "kube-apiserver");
    node.stop_metainit();
    create_while_down(node);
    assert!(node.script(&["stop", "node"]), "node.sh stop node");
    assert!(
        !node.readyz(),
        "the API server still answers with its node stopped"
    );
    let down = now();
    assert!(node.script(&["start", "node"]), "node.sh start node");
    let ready = until("the API server ready again", WAIT, || {
        node.readyz().then(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
        })
    });
    until(
        "the pod created while metainit was down, cleared",
        WAIT,
        || {
            node.pod("default", "while-down")
                .filter(|p| gates(p).is_empty())
        },
    );
    let mirror = until("metainit's mirror pod, started again", WAIT, || {
        node.metainit()
            .filter(|p| started(p).is_some_and(|s| s >= down))
    });
    assert!(
        started_at(&mirror) <= ready as i64,
        "metainit started at {}, after the API server's first /readyz 200 at {ready:.1}",
        started_at(&mirror)
    );
    let cleared = pod_writes(node, "default", "while-down")
        .into_iter()
        .filter(|(user, code, _)| user == "metainit" && *code == 200)
        .map(|(_, _, at)| at)
        .next()
        .expect("metainit's PATCH of the pod, in the audit log");
    println!(
        "a node restart: metainit started {} s before the API server's first /readyz 200; \
         its PATCH {:.2} s after it",
        ready as i64 - started_at(&mirror),
        cleared - ready
    );
    // The kubelet counts the node's restart once for each static pod (the API server's too):
    // the kill, and no exit of metainit's own.
    assert_eq!(restarts(&mirror), restarts(&before) + 1, "{mirror}");
    assert!(
        pod_restarts(node, "kube-apiserver") > apiserver_before,
        "the API server's container was not restarted with its node"
    );
    assert_eq!(
        mirror["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"], 137,
        "{mirror}"
    );
}
