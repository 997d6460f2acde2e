//! The real control plane with three kube-apiservers on its one etcd (`scripts/control-plane.sh
//! up --apiservers 3`, `ControlPlane::own_ha`), as a kubeadm HA control plane has them: what
//! is written through one is read through the others, each writes its own audit log, each
//! has the user metainit's kubeconfig of its own, and one killed (SIGKILL) and started again
//! leaves the others answering throughout and answers again itself. What tests of metainit
//! against several API servers stand on.

mod common;

use std::{collections::HashSet, path::Path, process::Command};

use common::control_plane::{ControlPlane, WAIT, until};
use serde_json::Value;

/// kubectl as the admin through `server`: success and the combined output.
fn via(cp: &ControlPlane, server: &str, args: &[&str]) -> (bool, String) {
    let mut all = vec!["--server", server, "--request-timeout=5s"];
    all.extend_from_slice(args);
    cp.kubectl(&all)
}

/// kubectl with `kubeconfig` (no admin), which must succeed; its standard output.
fn kubectl_as(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl --kubeconfig {} {args:?}: {}",
        kubeconfig.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until `server` answers `/readyz` with `ok` (`up`), or until it does not answer.
async fn answering(cp: &ControlPlane, server: &str, up: bool) {
    let what = format!("{server} {}", if up { "ready" } else { "not answering" });
    until(&what, WAIT, || async {
        let (ok, out) = via(cp, server, &["get", "--raw", "/readyz"]);
        ((ok && out.trim() == "ok") == up).then_some(())
    })
    .await
}

/// Waits until `server` reads the ConfigMap `shared` of `ns` with `k: value`.
async fn reads(cp: &ControlPlane, server: &str, ns: &str, value: &str) {
    let what = format!("{server} reading the ConfigMap {ns}/shared with k={value}");
    let args = [
        "get",
        "configmap",
        "shared",
        "-n",
        ns,
        "-o",
        "jsonpath={.data.k}",
    ];
    until(&what, WAIT, || async {
        let (ok, out) = via(cp, server, &args);
        (ok && out == value).then_some(())
    })
    .await
}

/// Whether the audit entry `e` is the completed PATCH of the ConfigMap `ns/shared`.
fn the_patch(e: &Value, ns: &str) -> bool {
    e["verb"] == "patch"
        && e["stage"] == "ResponseComplete"
        && e["objectRef"]["resource"] == "configmaps"
        && e["objectRef"]["namespace"] == ns
        && e["objectRef"]["name"] == "shared"
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn three_api_servers_on_one_etcd() {
    let cp = ControlPlane::own_ha(3, &[]);
    assert_eq!(cp.servers.len(), 3, "{:?}", cp.servers);
    assert_eq!(cp.servers[0], cp.server);
    let distinct: HashSet<&String> = cp.servers.iter().collect();
    assert_eq!(distinct.len(), 3, "a port each: {:?}", cp.servers);
    assert_eq!(cp.metainits.len(), 3, "{:?}", cp.metainits);
    assert_eq!(cp.metainits[0], cp.metainit);
    // Each of the user metainit's kubeconfigs reaches its own server, as metainit.
    for (server, kubeconfig) in cp.servers.iter().zip(&cp.metainits) {
        let view = [
            "config",
            "view",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ];
        assert_eq!(&kubectl_as(kubeconfig, &view), server);
        let whoami = [
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ];
        assert_eq!(kubectl_as(kubeconfig, &whoami), "metainit");
    }
    let [one, two, three] = &cp.servers[..] else {
        unreachable!("three servers")
    };

    // Written through the first, read through the others: one etcd.
    let ns = cp.namespace("ha");
    let (ok, out) = via(
        &cp,
        one,
        &[
            "create",
            "configmap",
            "shared",
            "-n",
            &ns,
            "--from-literal=k=v",
        ],
    );
    assert!(ok, "create through {one}: {out}");
    reads(&cp, two, &ns, "v").await;
    reads(&cp, three, &ns, "v").await;

    // A write through the second is in its audit log (audit-2.log), not in the first's.
    let patch = r#"{"data":{"k":"w"}}"#;
    let args = [
        "patch",
        "configmap",
        "shared",
        "-n",
        &ns,
        "--type",
        "merge",
        "-p",
        patch,
    ];
    let (ok, out) = via(&cp, two, &args);
    assert!(ok, "patch through {two}: {out}");
    until("the PATCH in audit-2.log", WAIT, || async {
        let entries = cp.audit_of(2, "kubernetes-admin");
        entries.iter().any(|e| the_patch(e, &ns)).then_some(())
    })
    .await;
    let first = cp.audit_of(1, "kubernetes-admin");
    assert!(
        !first.iter().any(|e| the_patch(e, &ns)),
        "the first server logged a request it never had"
    );
    reads(&cp, one, &ns, "w").await;
    reads(&cp, three, &ns, "w").await;

    // The second killed: the others answer and serve; it does not.
    cp.stop("kube-apiserver-2");
    answering(&cp, two, false).await;
    answering(&cp, one, true).await;
    answering(&cp, three, true).await;
    reads(&cp, one, &ns, "w").await;
    reads(&cp, three, &ns, "w").await;

    // Started again on its port (`start` returns once its /readyz is 200): it answers.
    cp.start("kube-apiserver-2");
    answering(&cp, two, true).await;
    reads(&cp, two, &ns, "w").await;
}
