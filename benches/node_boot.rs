//! The boot lag on the real node (`scripts/node.sh`: containerd, runc, a kubelet whose
//! manifests directory holds the whole control plane and metainit as static pods): from the
//! API server's first `/readyz` 200 to metainit's first clearing PATCH of a pod that was
//! already waiting, over boots with the API server down for 10 s and for 90 s. Then the
//! API server alone restarted (its manifest out of the kubelet's directory for 15 s and for
//! 90 s) under a metainit that keeps running: from its first `/readyz` 200 to the clearing
//! PATCH of a labelled gated pod created at that moment.
//!
//!     cargo bench --bench node_boot                          # 10 of each
//!     METAINIT_BENCH_QUICK=1 cargo bench --bench node_boot   # 3 of each
//!     METAINIT_BENCH_BOOTS=5 cargo bench --bench node_boot   # 5 of each
//!
//! Each boot: the kubelet stopped, metainit's process killed, a labelled gated pod created
//! (no node can take it: only its gate matters); the node stopped (every container,
//! containerd); kube-apiserver's manifest moved out of the kubelet's directory; the node
//! started (metainit, etcd and the rest come up); the outage held for its length from
//! metainit's start; the manifest moved back. The PATCH's time is the API server's own
//! (its audit log); `/readyz` is polled every 20 ms. Also counted: metainit's restarts
//! other than the one each node restart makes (the kubelet counts that one for every
//! static pod), which must stay 0.
//!
//! Prints a Markdown table and writes it to `target/tmp/bench-node-boot.md`; BENCHMARKS.md
//! keeps the last run.
#![forbid(unsafe_code)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::{
    fmt::Write as _,
    path::Path,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use common::node::{Node, WAIT, gates, held_pod, pod_writes, restarts, until};

fn epoch() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

struct Boot {
    outage: Duration,
    lag: f64,
    extra_restarts: i64,
}

/// metainit down (kubelet stopped, process killed), then a labelled gated pod that waits.
fn pod_while_down(node: &Node, name: &str) {
    node.stop_metainit();
    node.apply(&held_pod("default", name, false));
}

fn boot(node: &Node, i: usize, outage: Duration) -> Boot {
    let name = format!("boot-{i}");
    // Its status posted (right after `up` the mirror pod may have none yet).
    let before = until(
        "metainit's mirror pod with its container's status",
        WAIT,
        || node.metainit().filter(|p| restarts(p) >= 0),
    );
    pod_while_down(node, &name);
    assert!(node.script(&["stop", "node"]), "node.sh stop node");
    let manifests = node.path("NODE_MANIFESTS");
    let parked = node
        .path("METAINIT_NODE")
        .join("kube-apiserver.parked.yaml");
    std::fs::rename(manifests.join("kube-apiserver.yaml"), &parked).unwrap();
    assert!(node.script(&["start", "node"]), "node.sh start node");
    until("metainit's process started", WAIT, || node.metainit_pid());
    let up = Instant::now();
    std::thread::sleep(outage);
    std::fs::rename(&parked, manifests.join("kube-apiserver.yaml")).unwrap();
    let ready = until("the API server's first /readyz 200", WAIT, || {
        node.readyz().then(epoch)
    });
    until("the waiting pod cleared", WAIT, || {
        node.pod("default", &name).filter(|p| gates(p).is_empty())
    });
    let patched = pod_writes(node, "default", &name)
        .into_iter()
        .find(|(user, code, _)| user == "metainit" && *code == 200)
        .map(|(_, _, at)| at)
        .expect("metainit's PATCH in the audit log");
    let after = until("metainit's mirror pod Running again", WAIT, || {
        node.metainit()
            .filter(|p| restarts(p) > restarts(&before) && p["status"]["phase"] == "Running")
    });
    // The container before this one ended by the node's stop (SIGKILL), not on its own.
    let last = &after["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"];
    assert_eq!(last, 137, "metainit's previous container: {after}");
    Boot {
        outage: up.elapsed().min(outage),
        lag: patched - ready,
        extra_restarts: restarts(&after) - restarts(&before) - 1,
    }
}

/// The API server alone down for `outage` (its manifest out of the kubelet's directory),
/// metainit running; then a labelled gated pod created at its first `/readyz` 200: seconds
/// from that 200 to the clearing PATCH.
fn apiserver_restart(node: &Node, i: usize, outage: Duration) -> f64 {
    let name = format!("restart-{i}");
    let manifests = node.path("NODE_MANIFESTS");
    let parked = node
        .path("METAINIT_NODE")
        .join("kube-apiserver.parked.yaml");
    std::fs::rename(manifests.join("kube-apiserver.yaml"), &parked).unwrap();
    until("the API server stopped", WAIT, || {
        (!node.readyz()).then_some(())
    });
    std::thread::sleep(outage);
    std::fs::rename(&parked, manifests.join("kube-apiserver.yaml")).unwrap();
    let ready = until("the API server's first /readyz 200", WAIT, || {
        node.readyz().then(epoch)
    });
    node.apply(&held_pod("default", &name, false));
    until("the new pod cleared", WAIT, || {
        node.pod("default", &name).filter(|p| gates(p).is_empty())
    });
    pod_writes(node, "default", &name)
        .into_iter()
        .find(|(user, code, _)| user == "metainit" && *code == 200)
        .map(|(_, _, at)| at - ready)
        .expect("metainit's PATCH in the audit log")
}

fn row(report: &mut String, what: &str, mut lags: Vec<f64>, extra: &str) {
    lags.sort_by(f64::total_cmp);
    let _ = writeln!(
        report,
        "| {what} | {} | {:.2} s | {:.2} s | {:.2} s | {extra} |",
        lags.len(),
        percentile(&lags, 0.5),
        percentile(&lags, 0.99),
        lags[lags.len() - 1],
    );
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn main() {
    let quick = std::env::var("METAINIT_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
        || !std::env::args().any(|a| a == "--bench");
    let per_outage = std::env::var("METAINIT_BENCH_BOOTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if quick { 3 } else { 10 });
    let node = Node::up();
    let mut report = String::new();
    let _ = writeln!(
        report,
        "## The boot lag on the real node: first /readyz 200 to the first clearing PATCH ({per_outage} of each)\n"
    );
    let _ = writeln!(
        report,
        "| what | times | lag p50 | p99 | max | metainit's restarts other than the node's |"
    );
    let _ = writeln!(report, "|---|---|---|---|---|---|");
    let mut i = 0;
    for outage in [Duration::from_secs(10), Duration::from_secs(90)] {
        let mut lags = Vec::new();
        let mut extra = 0;
        for _ in 0..per_outage {
            i += 1;
            let b = boot(&node, i, outage);
            eprintln!(
                "boot {i}: down {:?}, lag {:.3} s, extra restarts {}",
                b.outage, b.lag, b.extra_restarts
            );
            lags.push(b.lag);
            extra += b.extra_restarts;
        }
        let what = format!(
            "node boot, API server down {} s, pod waiting",
            outage.as_secs()
        );
        row(&mut report, &what, lags, &extra.to_string());
    }
    for outage in [Duration::from_secs(15), Duration::from_secs(90)] {
        let mut lags = Vec::new();
        for _ in 0..per_outage {
            i += 1;
            let lag = apiserver_restart(&node, i, outage);
            eprintln!("API server restart {i}: down {outage:?}, lag {lag:.3} s");
            lags.push(lag);
        }
        let what = format!(
            "API server alone down {} s, pod created at its first 200",
            outage.as_secs()
        );
        row(&mut report, &what, lags, "(not restarted)");
    }
    println!("{report}");
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tmp");
    let _ = std::fs::create_dir_all(&out);
    let _ = std::fs::write(out.join("bench-node-boot.md"), &report);
}
