//! helm on the real control plane, for tests/cluster_helm*.rs: the one tests/helm/go.mod
//! pins (`helm_binary`), as the control plane's admin, with its cache and settings in a
//! directory of its own.

use std::{path::PathBuf, process::Command};

use super::control_plane::ControlPlane;

pub struct Helm {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

impl Helm {
    /// `bin`: `helm_binary()`, called before the control plane starts so that a missing
    /// helm fails first.
    pub fn new(bin: PathBuf, cp: &ControlPlane) -> Helm {
        Helm {
            bin,
            kubeconfig: cp.admin.clone(),
            home: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// Runs helm: whether it succeeded, and its standard output then its standard error.
    pub fn run(&self, args: &[&str]) -> (bool, String) {
        let home = self.home.path();
        let out = Command::new(&self.bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env_remove("KUBECONFIG")
            .output()
            .expect("helm runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// Runs helm, which must succeed; its output.
    pub fn ok(&self, args: &[&str]) -> String {
        let (ok, out) = self.run(args);
        assert!(ok, "helm {args:?} failed: {out}");
        out
    }
}

/// The chart in this checkout.
pub fn chart() -> String {
    format!("{}/charts/metainit", env!("CARGO_MANIFEST_DIR"))
}

/// What `kubectl auth can-i VERB RESOURCE -A` answers for `user`: "yes" or "no" (in
/// every namespace: the ClusterRoleBindings grant cluster-wide).
pub fn can_i(cp: &ControlPlane, user: &str, verb: &str, resource: &str) -> String {
    let (_, out) = cp.kubectl(&["auth", "can-i", verb, resource, "-A", "--as", user]);
    out.trim().to_string()
}

/// The kinds the chart makes here, as kubectl names them: all but the opt-ins ServiceMonitor
/// and PrometheusRule, whose CRDs (the Prometheus Operator's) this control plane lacks.
pub const NAMESPACED: &str = "serviceaccounts,deployments.apps,poddisruptionbudgets.policy,services,networkpolicies.networking.k8s.io,roles.rbac.authorization.k8s.io,rolebindings.rbac.authorization.k8s.io";
pub const CLUSTER: &str =
    "clusterroles.rbac.authorization.k8s.io,clusterrolebindings.rbac.authorization.k8s.io";

/// `kind/name` of every object of those kinds that `selector` (a label selector) picks.
pub fn labelled(cp: &ControlPlane, selector: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (kinds, scope) in [(NAMESPACED, "-n=kube-system"), (CLUSTER, "-A")] {
        let out = cp.kubectl_ok(&["get", kinds, scope, "-l", selector, "-o", "name"]);
        found.extend(out.lines().map(str::to_string));
    }
    found.sort();
    found
}

/// The release's Secrets (helm keeps one per revision): their names.
pub fn release_secrets(cp: &ControlPlane, release: &str) -> Vec<String> {
    let selector = format!("owner=helm,name={release}");
    let out = cp.kubectl_ok(&[
        "get",
        "secrets",
        "-n",
        "kube-system",
        "-l",
        &selector,
        "-o",
        "name",
    ]);
    out.lines().map(str::to_string).collect()
}
