//! What the `status --risks` tests share: a reader with exactly manifests/rbac-status.yaml's
//! role, and the forecast as JSON.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{control_plane::ControlPlane, run_to_end};

const LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The ServiceAccount `ns`/check (`ns` must exist), bound to manifests/rbac-status.yaml's
/// ClusterRole and nothing else: its kubeconfig, written in `dir`.
pub fn status_reader(cp: &ControlPlane, dir: &Path, ns: &str) -> PathBuf {
    cp.apply_manifest("manifests/rbac-status.yaml");
    cp.kubectl_ok(&["create", "serviceaccount", "check", "-n", ns]);
    let account = format!("--serviceaccount={ns}:check");
    let role = "--clusterrole=metainit-status";
    cp.kubectl_ok(&["create", "clusterrolebinding", "check", role, &account]);
    cp.service_account_kubeconfig(dir, ns, "check")
}

/// `metainit status --risks -o json` with `extra`, as `kubeconfig`: the exit code, the
/// report, and stderr.
pub async fn risks(kubeconfig: &str, extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec![
        "status",
        "--risks",
        "--kubeconfig",
        kubeconfig,
        "-o",
        "json",
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = run_to_end(&args, LIMIT).await;
    let json = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (code, json, err)
}
