//! The static pod as docs/src/install/static-pod.md installs, upgrades and removes it, every
//! block run on the node (`docs::run`), in the page's order:
//!
//! - once: the rights and kubeadm's kubeconfig of the user metainit (from the kubeadm-config
//!   ConfigMap scripts/node/kubeadm.sh uploads, as `kubeadm init` does), its server the
//!   ClusterConfiguration's controlPlaneEndpoint;
//! - on the node: that kubeconfig installed `65532:65532 0600`, its server set to the one in
//!   the node's scheduler.conf (the node's advertise address, as kubeadm writes it:
//!   scripts/node/pki.sh), in place of the one pki.sh made with openssl; the image page's
//!   `sed`, then the release's static-pod.yaml and the README's copy of build-image.sh's
//!   `metainit.yaml` written beside /etc/kubernetes/manifests (the node's, in its mount
//!   namespace) and moved in. The kubelet pulls the image from the registry, the mirror pod
//!   runs it with kubeadm's kubeconfig, Ready, clearing a labelled pod as the user metainit;
//! - the upgrade: from the node's own build to the release's file, a new mirror pod (a new
//!   UID) of the new image, clearing;
//! - the removal: the mirror pod gone, the files gone; once, the Leases (also one an instance
//!   that never stopped cleanly left) and the rights.
//!
//! The node's own manifest, kubeconfig and rights back after.

use std::{os::unix::fs::MetadataExt, path::Path, process::Command};

use serde_json::Value;

use crate::{
    common::node::{Node, WAIT, running_and_ready, until},
    docs,
    registry::{Pushed, Registry},
};

/// The image of the node's own metainit (scripts/node/build.sh).
const OWN_IMAGE: &str = "localhost/node/metainit:test";
/// The selector of the instances' Leases (src/peers/mod.rs).
const LEASES: &str = "app.kubernetes.io/name=metainit,app.kubernetes.io/component=peer";

pub fn the_static_pod_from_it(node: &Node, registry: &Registry, pushed: &Pushed) {
    let dir = node.path("METAINIT_NODE");
    let live = node.path("NODE_MANIFESTS").join("metainit.yaml");
    let own = dir.join("metainit.own.yaml");
    std::fs::copy(&live, &own).unwrap();
    let conf = dir.join("etc/kubernetes/metainit.conf");
    let own_conf = dir.join("metainit.own.conf");
    std::fs::copy(&conf, &own_conf).unwrap();
    kubeadms_kubeconfig(node, pushed);
    placed(node, pushed);
    crate::forms::runs_image(node, "component=metainit", pushed);
    assert!(
        registry.pulled_by_containerd(pushed),
        "the registry's log shows no pull of {} by containerd",
        pushed.image
    );
    crate::forms::clears_by(node, "by-static-pod-from-registry", "metainit");
    an_upgrade(node, &own, pushed);
    a_removal(node, pushed);
    // The node's own: its rights, its kubeconfig (pki.sh's), its manifest.
    let rbac = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/rbac.yaml");
    node.kubectl(&["apply", "-f", &rbac.display().to_string()], None)
        .unwrap_or_else(|e| panic!("kubectl apply manifests/rbac.yaml: {e}"));
    installed(&own_conf, &conf);
    put_in_place(node, &own);
    until("the node's own metainit back", WAIT, || {
        node.metainit()
            .filter(|p| image(p) == OWN_IMAGE && running_and_ready(p))
    });
}

/// The page's steps 1 to 3: kubeadm's kubeconfig of the user metainit in root's home, its
/// server the controlPlaneEndpoint; then installed as /etc/kubernetes/metainit.conf, owned by
/// 65532 and mode 0600, its server the node's own API server as scheduler.conf names it
/// (another address than the endpoint: the block changed it).
fn kubeadms_kubeconfig(node: &Node, pushed: &Pushed) {
    let conf = node
        .path("METAINIT_NODE")
        .join("etc/kubernetes/metainit.conf");
    let before = std::fs::read_to_string(&conf).unwrap();
    docs::run(node, "static-pod-once", Some(pushed));
    let made = docs::node_home(node).join("metainit.conf");
    let text = std::fs::read_to_string(&made).expect("the block wrote ~/metainit.conf");
    assert!(
        text.contains(&format!("server: {}", node.get("NODE_SERVER"))),
        "kubeadm's server is not the controlPlaneEndpoint:\n{text}"
    );
    let mode = std::fs::metadata(&made).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o600, "~/metainit.conf's mode");
    docs::run(node, "static-pod-kubeconfig", None);
    let after = std::fs::read_to_string(&conf).unwrap();
    assert_ne!(before, after, "no new kubeconfig installed");
    assert!(
        after.contains("client-certificate-data") && after.contains("name: metainit@kubernetes"),
        "not kubeadm's kubeconfig of the user metainit:\n{after}"
    );
    let own = server_of(node, "scheduler.conf");
    assert_ne!(own, node.get("NODE_SERVER"), "scheduler.conf's server");
    assert_eq!(server_of(node, "metainit.conf"), own, "{after}");
    let meta = std::fs::metadata(&conf).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (65532, 65532, 0o600)
    );
}

/// The server of the node's /etc/kubernetes/FILE.
fn server_of(node: &Node, file: &str) -> String {
    let path = node.path("METAINIT_NODE").join("etc/kubernetes").join(file);
    let out = Command::new("kubectl")
        .args([
            "config",
            "view",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ])
        .arg("--kubeconfig")
        .arg(&path)
        .output()
        .expect("kubectl runs");
    assert!(out.status.success(), "kubectl config view {file}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The image page's `sed`, the static pod page's step 4 (the release's file) and the
/// README's copy of build-image.sh's: each written beside the directory and moved in, the
/// last in place, the image line the only change to manifests/metainit.yaml.
fn placed(node: &Node, pushed: &Pushed) {
    let live = node.path("NODE_MANIFESTS").join("metainit.yaml");
    docs::run(node, "image-sed", Some(pushed));
    let written = node
        .path("METAINIT_NODE")
        .join("etc/kubernetes/metainit.yaml");
    let sed = std::fs::read_to_string(&written)
        .expect("the sed block wrote /etc/kubernetes/metainit.yaml");
    assert!(
        sed.contains("    image: registry.example.com/metainit@sha256:DIGEST\n"),
        "the sed block's file has no image line set:\n{sed}"
    );
    docs::run(node, "static-pod-place", Some(pushed));
    assert!(
        !written.exists(),
        "the release's file left beside the manifests"
    );
    only_the_image_changed(&std::fs::read_to_string(&live).unwrap(), pushed);
    docs::run(node, "readme-static-pod", Some(pushed));
    assert!(
        !written.exists(),
        "/etc/kubernetes/metainit.yaml left beside the manifests"
    );
    let placed = std::fs::read_to_string(&live).unwrap();
    let built = std::fs::read_to_string(pushed.out.join("static-pod.yaml")).unwrap();
    assert_eq!(
        placed, built,
        "the node's manifest is not the release's static-pod.yaml"
    );
}

/// `written` is manifests/metainit.yaml with its image line set to the pushed image.
fn only_the_image_changed(written: &str, pushed: &Pushed) {
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/metainit.yaml"),
    )
    .unwrap();
    let changed: Vec<(&str, &str)> = shipped
        .lines()
        .zip(written.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert_eq!(
        shipped.lines().count(),
        written.lines().count(),
        "{written}"
    );
    assert!(
        changed.len() == 1 && changed[0].1.trim() == format!("image: {}", pushed.image),
        "lines changed: {changed:?}"
    );
}

fn image(pod: &Value) -> &str {
    pod["spec"]["containers"][0]["image"].as_str().unwrap_or("")
}

/// The file written beside the manifests directory and moved in, as the page says.
fn put_in_place(node: &Node, manifest: &Path) {
    let beside = node
        .path("METAINIT_NODE")
        .join("etc/kubernetes/metainit.yaml");
    std::fs::copy(manifest, &beside).unwrap();
    std::fs::rename(&beside, node.path("NODE_MANIFESTS").join("metainit.yaml")).unwrap();
}

/// `install -o 65532 -g 65532 -m 0600 SRC DEST`, as the page installs a kubeconfig.
fn installed(src: &Path, dest: &Path) {
    let status = Command::new("install")
        .args(["-o", "65532", "-g", "65532", "-m", "0600"])
        .arg(src)
        .arg(dest)
        .status()
        .expect("install runs");
    assert!(status.success(), "install {}", dest.display());
}

/// The page's upgrade, from the node's own build to the release's file: the kubelet replaces
/// the pod (a new UID for the mirror pod and a new hash of the file), which runs the new
/// image, ready, and clears a labelled pod.
fn an_upgrade(node: &Node, own: &Path, pushed: &Pushed) {
    put_in_place(node, own);
    let before = until("the node's own metainit running", WAIT, || {
        node.metainit()
            .filter(|p| image(p) == OWN_IMAGE && running_and_ready(p))
    });
    docs::run(node, "static-pod-upgrade", Some(pushed));
    let after = until("the upgraded metainit running and ready", WAIT, || {
        node.metainit()
            .filter(|p| image(p) == pushed.image && running_and_ready(p))
    });
    let field = |p: &Value, key: &str| p["metadata"][key].to_string();
    assert_ne!(
        field(&before, "uid"),
        field(&after, "uid"),
        "the mirror pod's UID"
    );
    let hash = |p: &Value| p["metadata"]["annotations"]["kubernetes.io/config.hash"].to_string();
    assert_ne!(hash(&before), hash(&after), "the static pod's hash");
    crate::forms::clears_by(node, "after-the-upgrade", "metainit");
}

/// The page's removal. On the node: the mirror pod gone, no file left. Once: the instances'
/// Leases gone (one a stopped instance deleted, and one an instance that never stopped
/// cleanly left, renewed a minute ago: none of theirs would delete it within the hour), and
/// the rights of rbac.yaml.
fn a_removal(node: &Node, pushed: &Pushed) {
    let own = format!("metainit-{}", node.get("NODE_NAME"));
    until("the instance's Lease", WAIT, || {
        lease_names(node).contains(&own).then_some(())
    });
    node.apply(&left_lease());
    docs::run(node, "static-pod-remove", None);
    assert!(node.metainit().is_none(), "the mirror pod is still there");
    let etc = node.path("METAINIT_NODE").join("etc/kubernetes");
    for file in ["manifests/metainit.yaml", "metainit.yaml", "metainit.conf"] {
        assert!(!etc.join(file).exists(), "/etc/kubernetes/{file} left");
    }
    docs::run(node, "static-pod-remove-once", Some(pushed));
    assert_eq!(lease_names(node), Vec::<String>::new(), "Leases left");
    for object in [
        &["get", "clusterrole", "metainit"][..],
        &["get", "clusterrolebinding", "metainit"],
        &["-n", "kube-system", "get", "role", "metainit-peers"],
        &["-n", "kube-system", "get", "rolebinding", "metainit-peers"],
    ] {
        assert!(node.kubectl(object, None).is_err(), "{object:?} left");
    }
}

/// The names of the instances' Leases in kube-system.
fn lease_names(node: &Node) -> Vec<String> {
    let leases = node
        .json(&["-n", "kube-system", "get", "leases", "-l", LEASES])
        .expect("the Leases");
    leases["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

/// The Lease of an instance on a node gone since a minute.
fn left_lease() -> String {
    let out = Command::new("date")
        .args(["-u", "-d", "-60 seconds", "+%Y-%m-%dT%H:%M:%S.000000Z"])
        .output()
        .expect("date runs");
    let renewed = String::from_utf8_lossy(&out.stdout).trim().to_string();
    format!(
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: metainit-node-gone\n  namespace: kube-system\n  labels: {{app.kubernetes.io/name: metainit, app.kubernetes.io/component: peer}}\nspec: {{holderIdentity: node-gone, leaseDurationSeconds: 10, renewTime: \"{renewed}\"}}\n"
    )
}
