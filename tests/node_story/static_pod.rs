//! The node's static pod as the docs install it (docs/src/install/static-pod.md), from the
//! image `scripts/build-image.sh` pushed to the node's registry (`registry.rs`).

use crate::{
    common::node::{Node, WAIT, running_and_ready, until},
    docs,
    registry::{Pushed, Registry},
};

/// The node's static pod as the docs install it, every block run (`docs::run`): the static
/// pod page's kubeconfig of the user metainit made by kubeadm (from the kubeadm-config
/// ConfigMap scripts/node/kubeadm.sh uploads, as `kubeadm init` does), in place of the one
/// scripts/node/pki.sh made with openssl; the image page's `sed` of the image line into
/// /etc/kubernetes/metainit.yaml, then the static pod
/// page's and the README's copy of build-image.sh's `metainit.yaml` there and move into
/// /etc/kubernetes/manifests (the node's, in its mount namespace), in place of the node's
/// own. The kubelet pulls the image from the registry, the mirror pod runs it with kubeadm's
/// kubeconfig, Ready, clearing a labelled pod as the user metainit. The node's own manifest
/// back after.
pub fn the_static_pod_from_it(node: &Node, registry: &Registry, pushed: &Pushed) {
    let live = node.path("NODE_MANIFESTS").join("metainit.yaml");
    let own = node.path("METAINIT_NODE").join("metainit.own.yaml");
    std::fs::copy(&live, &own).unwrap();
    kubeadms_kubeconfig(node);
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
    docs::run(node, "readme-static-pod", Some(pushed));
    assert!(
        !written.exists(),
        "/etc/kubernetes/metainit.yaml left beside the manifests"
    );
    let placed = std::fs::read_to_string(&live).unwrap();
    let built = std::fs::read_to_string(pushed.out.join("metainit.yaml")).unwrap();
    assert_eq!(placed, built, "the node's manifest is not build-image.sh's");
    crate::forms::runs_image(node, "component=metainit", pushed);
    assert!(
        registry.pulled_by_containerd(pushed),
        "the registry's log shows no pull of {} by containerd",
        pushed.image
    );
    crate::forms::clears_by(node, "by-static-pod-from-registry", "metainit");
    std::fs::rename(&own, &live).unwrap();
    until("the node's own metainit back", WAIT, || {
        node.metainit().filter(|p| {
            p["spec"]["containers"][0]["image"] == "localhost/node/metainit:test"
                && running_and_ready(p)
        })
    });
}

/// The static pod page's step 2: kubeadm writes a new /etc/kubernetes/metainit.conf, owned
/// by 65532 and mode 0600, its server the ClusterConfiguration's controlPlaneEndpoint.
fn kubeadms_kubeconfig(node: &Node) {
    use std::os::unix::fs::MetadataExt;
    let conf = node
        .path("METAINIT_NODE")
        .join("etc/kubernetes/metainit.conf");
    let before = std::fs::read_to_string(&conf).unwrap();
    docs::run(node, "static-pod-kubeconfig", None);
    let after = std::fs::read_to_string(&conf).unwrap();
    assert_ne!(before, after, "kubeadm wrote no new kubeconfig");
    assert!(
        after.contains("client-certificate-data") && after.contains("name: metainit@kubernetes"),
        "not kubeadm's kubeconfig of the user metainit:\n{after}"
    );
    assert!(
        after.contains(&format!("server: {}", node.get("NODE_SERVER"))),
        "{after}"
    );
    let meta = std::fs::metadata(&conf).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (65532, 65532, 0o600)
    );
}
