//! The limits as shipped: a burst of 1,000 labelled gated pods, metainit's container under
//! its memory limit (its cgroup, read from cgroupfs: the peak, the limit's hits, OOM kills).

use std::path::PathBuf;

use serde_json::Value;

use crate::common::{
    LABEL,
    node::{HELD, Node, gates, restarts, until},
};

const PODS: usize = 1_000;

/// The memory cgroup (v1) of a process, from /proc/PID/cgroup.
fn memory_cgroup(pid: u32) -> PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("its cgroups");
    let path = text
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| path.to_string())
        })
        .unwrap_or_else(|| panic!("no memory cgroup (v1) in /proc/{pid}/cgroup:\n{text}"));
    PathBuf::from(format!("/sys/fs/cgroup/memory{path}"))
}

fn read_number(cgroup: &std::path::Path, file: &str) -> u64 {
    let text = std::fs::read_to_string(cgroup.join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", cgroup.join(file).display()));
    text.trim().parse().unwrap()
}

/// `oom_kill N` in memory.oom_control: how many processes the kernel killed in it.
fn oom_kills(cgroup: &std::path::Path) -> u64 {
    let text = std::fs::read_to_string(cgroup.join("memory.oom_control")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// The burst: pods no node can take (a node selector no node matches), so that the
/// scheduler, not the kubelet, is left with them once cleared.
fn burst() -> String {
    let mut out = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for i in 0..PODS {
        out.push_str(&format!(
            "- apiVersion: v1\n  kind: Pod\n  metadata: {{name: burst-{i}, namespace: burst, labels: {{\"{LABEL}\": \"true\"}}}}\n  spec:\n    schedulingGates: [{{name: {HELD}}}]\n    nodeSelector: {{example.com/no-such-node: \"true\"}}\n    containers: [{{name: c, image: localhost/node/pause:test, imagePullPolicy: Never}}]\n"
        ));
    }
    out
}

fn cleared(node: &Node) -> usize {
    node.json(&["-n", "burst", "get", "pods"])
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|p| gates(p).is_empty())
        .count()
}

pub fn as_shipped(node: &Node) {
    let before: Value = node.metainit().expect("metainit's mirror pod");
    let pid = node.metainit_pid().expect("metainit's process");
    let cgroup = memory_cgroup(pid);
    let limit = read_number(&cgroup, "memory.limit_in_bytes");
    assert_eq!(
        limit,
        64 << 20,
        "the manifest's 64Mi limit, in {}",
        cgroup.display()
    );
    let idle = read_number(&cgroup, "memory.usage_in_bytes");
    node.apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: burst}\n");
    let start = std::time::Instant::now();
    node.kubectl(&["create", "-f", "-"], Some(&burst()))
        .unwrap_or_else(|e| panic!("the burst's create failed: {e}"));
    let created = start.elapsed();
    until(
        "the 1,000 pods of the burst cleared",
        std::time::Duration::from_secs(300),
        || (cleared(node) == PODS).then_some(()),
    );
    let peak = read_number(&cgroup, "memory.max_usage_in_bytes");
    let hits = read_number(&cgroup, "memory.failcnt");
    let kills = oom_kills(&cgroup);
    let after = node.metainit().expect("metainit's mirror pod");
    println!(
        "limits: {PODS} pods created in {created:?}, all cleared {:?} after the first; memory \
         {:.1} MiB idle, peak {:.1} MiB, limit {} MiB, {hits} hits of the limit, {kills} OOM kills",
        start.elapsed(),
        idle as f64 / 1048576.0,
        peak as f64 / 1048576.0,
        limit >> 20
    );
    assert!(peak < limit, "peak {peak} B, limit {limit} B");
    assert_eq!((hits, kills), (0, 0), "the limit hit, or an OOM kill");
    assert_eq!(node.metainit_pid(), Some(pid), "the same process");
    assert_eq!(restarts(&after), restarts(&before), "{after}");
    assert!(
        after["status"]["containerStatuses"][0]["lastState"]["terminated"].is_null(),
        "{after}"
    );
    // Unbound pods go at once: no kubelet holds them.
    node.kubectl(
        &["-n", "burst", "delete", "pods", "--all", "--wait=false"],
        None,
    )
    .expect("the burst deleted");
}
