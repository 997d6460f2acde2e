//! The documentation's shell blocks marked `<!-- commands: node ID -->`, run on this node at
//! the story's step that names ID (`scripts/check-commands.py` fails on a block no step
//! runs, and on a step that names no block). Each block runs as one bash script
//! (`-e -o pipefail`) on the node, in its network and mount namespaces (its 127.0.0.1 and
//! its /etc/kubernetes and /usr/local are the node's), as the node's admin (`KUBECONFIG`),
//! with a home of its own (DIR/home), from the repository's root, with helm and
//! `cargo install`'s binaries on PATH (installed under the node's directory, offline: the
//! namespace reaches no registry, the crates are those the workspace fetched); then whatever it left in the background (a
//! port-forward) is stopped. It fails if the script fails, or if its output lacks a text a
//! trailing comment quotes (`# "ok"`; a trailing `...` is left out).
//!
//! The substitutions, and nothing else: the release's download address
//! (`https://github.com/metainit/metainit/releases/download/vVERSION`) is a server of the
//! files scripts/release.sh wrote for this node, on the node's 127.0.0.1; the release's chart
//! (`oci://ghcr.io/metainit/charts/metainit`) is the one it pushed to the node's registry,
//! which speaks plain HTTP (`--plain-http` added); `REGISTRY/metainit` the repository it
//! pushed the image to; `metainit-NODE` the node's mirror pod; `NAMESPACE` and `NAME`
//! the Deployment the step made for the block (`docs`, `labelled`); Gatekeeper's two webhook
//! configurations, `guard` (tests/node_webhook.rs's webhook, whose configurations are both
//! named so).

use crate::common::{
    doc_blocks::{assert_expected, blocks, run_script},
    helm_binary,
    node::{Node, without_cargo_env},
};

/// What scripts/release.sh pushed and wrote (tests/node_story/registry.rs): the image as
/// `REPOSITORY@DIGEST`, the directory of the release's files, the address they are served at
/// on the node, and the oci:// location the chart was pushed under.
pub struct Pushed {
    pub image: String,
    // Read by tests/node.rs's steps; tests/node_webhook.rs, which shares this file, does not.
    #[allow(dead_code)]
    pub out: std::path::PathBuf,
    pub release_url: String,
    pub charts: String,
}

/// The address the pages download the release's files from.
pub fn download_url() -> String {
    format!(
        "https://github.com/metainit/metainit/releases/download/v{}",
        env!("CARGO_PKG_VERSION")
    )
}

fn substituted(body: &str, node: &Node, pushed: Option<&Pushed>) -> String {
    let needs_release = body.contains(&download_url()) || body.contains(CHART);
    assert!(
        pushed.is_some() || !needs_release,
        "{body}: nothing released yet"
    );
    assert!(
        !body.contains("target/image"),
        "{body}: a run block installs from a release, not from build-image.sh's target/image"
    );
    let mut body = body.to_string();
    if let Some(pushed) = pushed {
        let repository = pushed.image.split_once('@').unwrap().0;
        body = body
            .replace(&download_url(), &pushed.release_url)
            .replace(CHART, &format!("{}/metainit --plain-http", pushed.charts))
            .replace("REGISTRY/metainit", repository);
    }
    body.replace(
        "metainit-NODE",
        &format!("metainit-{}", node.get("NODE_NAME")),
    )
    .replace("NAMESPACE", "docs")
    .replace("gatekeeper-validating-webhook-configuration", "guard")
    .replace("gatekeeper-mutating-webhook-configuration", "guard")
    .replace(" NAME ", " labelled ")
}

/// The release's chart, as the pages install it.
const CHART: &str = "oci://ghcr.io/metainit/charts/metainit";

/// Runs every block marked `node STEP`; prints each with its output.
pub fn run(node: &Node, step: &str, pushed: Option<&Pushed>) {
    for block in blocks("node", step) {
        let body = block["body"].as_str().unwrap();
        let script = substituted(body, node, pushed);
        let output = run_node_script(node, &script);
        println!(
            "{}:{} (node {step}):\n{script}\n--- its output:\n{output}",
            block["page"], block["line"]
        );
        assert_expected(&block, body, &output);
    }
}

/// The home the blocks run in: DIR/home (new with the node).
pub fn node_home(node: &Node) -> std::path::PathBuf {
    let home = node.path("METAINIT_NODE").join("home");
    std::fs::create_dir_all(&home).unwrap();
    home
}

/// One script on the node (its network and mount namespaces); its stdout and stderr. What it
/// leaves in the background (its process group) is killed once it ends.
fn run_node_script(node: &Node, script: &str) -> String {
    let dir = node.path("METAINIT_NODE");
    let helm = helm_binary();
    let cargo_root = dir.join("cargo-install");
    let path = format!(
        "{}:{}:{}",
        helm.parent().unwrap().display(),
        cargo_root.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let home = dir.join("helm");
    // A user's home of its own (the completions go there), cargo's and rustup's left where
    // they are: the crates and the toolchain.
    let user = node_home(node);
    let machine = std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    let cargo_home = std::env::var_os("CARGO_HOME").map_or(machine.join(".cargo"), Into::into);
    let rustup_home = std::env::var_os("RUSTUP_HOME").map_or(machine.join(".rustup"), Into::into);
    let mut command = node.in_netns("bash");
    without_cargo_env(&mut command);
    command
        .env("KUBECONFIG", node.get("NODE_ADMIN"))
        .env("HOME", &user)
        .env("CARGO_HOME", cargo_home)
        .env("RUSTUP_HOME", rustup_home)
        .env("PATH", path)
        .env("CARGO_INSTALL_ROOT", &cargo_root)
        // The node's namespace reaches no registry: cargo uses the crates already fetched.
        .env("CARGO_NET_OFFLINE", "true")
        // `cargo install`'s release build, with the optimisation lowered (no LTO, opt-level
        // 1): on a fresh machine nothing else builds this profile for the host, and LTO of
        // every crate costs minutes; what the block shows is that it installs and runs.
        .env("CARGO_PROFILE_RELEASE_LTO", "false")
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "1")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16")
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    run_script(command, script, &dir.join("docs-block.log"))
}
