//! The guides' blocks on the node, as a user at a workstation types them, with the binary the
//! README's `cargo install` put on PATH (`readme-once`, before this): the kubectl plugin
//! (docs/src/guides/plugin.md), `~/.kube/prod` a kubeconfig whose context is `prod` (the
//! node's admin's, renamed); the completions and man pages where that page puts them (the
//! home is DIR/home, /usr/local the node's own overlay: the machine's is not written); an
//! orphaned gate removed by hand (docs/src/guides/orphaned-gates.md), and `kubectl apply` in
//! place of the page's `replace` leaving it, as the page says.

use std::{path::Path, process::Command};

use crate::{
    common::node::{Node, gates},
    docs,
};

/// The plugin, the completions, the removal by hand.
pub fn the_guides(node: &Node) {
    the_plugin(node);
    completions(node);
    by_hand(node);
}

fn the_plugin(node: &Node) {
    let kube = docs::node_home(node).join(".kube");
    std::fs::create_dir_all(&kube).unwrap();
    let prod = kube.join("prod");
    std::fs::copy(node.get("NODE_ADMIN"), &prod).unwrap();
    let config = |args: &[&str]| {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&prod)
            .arg("config")
            .args(args)
            .output()
            .expect("kubectl runs");
        assert!(out.status.success(), "kubectl config {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let current = config(&["current-context"]);
    config(&["rename-context", &current, "prod"]);
    docs::run(node, "plugin", None);
}

/// The block writes each shell's script where the page says, the same as the checked-in one.
fn completions(node: &Node) {
    docs::run(node, "completions", None);
    let home = docs::node_home(node);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("completions");
    for (written, shipped) in [
        (
            ".local/share/bash-completion/completions/metainit",
            "metainit.bash",
        ),
        (".zfunc/_metainit", "metainit.zsh"),
        (".config/fish/completions/metainit.fish", "metainit.fish"),
    ] {
        let written = std::fs::read_to_string(home.join(written)).unwrap();
        let shipped = std::fs::read_to_string(root.join(shipped)).unwrap();
        assert_eq!(written, shipped, "{shipped}: not what the block wrote");
    }
}

/// A pod as a controller creates one (`kubectl create`: no last-applied configuration), with
/// the orphaned gate and another; `apply` of it without its gates leaves them, the page's
/// `replace` removes both.
fn by_hand(node: &Node) {
    let pod = r#"{"apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "orphaned", "namespace": "default"},
  "spec": {"schedulingGates": [{"name": "example.com/quota"}, {"name": "example.com/other"}],
           "containers": [{"name": "c", "image": "localhost/node/pause:test",
                           "imagePullPolicy": "Never"}]}}"#;
    node.kubectl(&["create", "-f", "-"], Some(pod))
        .expect("the orphaned pod created");
    let current = node.pod("default", "orphaned").expect("the orphaned pod");
    let mut without = current.clone();
    without["spec"]
        .as_object_mut()
        .unwrap()
        .remove("schedulingGates");
    node.kubectl(&["apply", "-f", "-"], Some(&without.to_string()))
        .expect("kubectl apply");
    let after = node.pod("default", "orphaned").unwrap();
    assert_eq!(
        gates(&after),
        ["example.com/quota", "example.com/other"],
        "kubectl apply removed gates: {after}"
    );
    docs::run(node, "orphaned-by-hand", None);
    let after = node.pod("default", "orphaned").unwrap();
    assert!(gates(&after).is_empty(), "{after}");
    node.kubectl(&["-n", "default", "delete", "pod", "orphaned"], None)
        .expect("the orphaned pod deleted");
}
