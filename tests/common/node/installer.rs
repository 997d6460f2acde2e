//! The installer of the deadlock story: a webhook that gates every new pod in the namespaces
//! `installer` and `workloads` (but its own), and a controller, labelled with metainit's key,
//! that lifts the gates of the pods it has processed (tests/node/installer/main.go). Their
//! manifests are tests/node/installer/*.yaml, which `bash scripts/demo.sh --node` applies too.

use super::{Node, WAIT, running_and_ready, until};

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A manifest of tests/node/installer with its `${NAME}`s replaced.
pub fn manifest(file: &str, values: &[(&str, &str)]) -> String {
    super::manifest("tests/node/installer", file, values)
}

/// The installer's webhook: a Deployment (not labelled) and its configuration, which gates
/// every new pod in the namespaces `installer` and `workloads` but the webhook's own.
pub fn install_webhook(node: &Node) {
    let pki = node.path("NODE_PKI");
    let port = free_port().to_string();
    let port = [("WEBHOOK_PORT", port.as_str())];
    node.apply(&manifest("webhook.yaml", &port));
    node.tls_secret("installer", "webhook-tls", "installer-webhook");
    until("the webhook's pod Running and ready", WAIT, || {
        node.pods("installer", "app=installer-webhook")
            .into_iter()
            .find(running_and_ready)
    });
    let ca = base64(&std::fs::read(pki.join("ca.crt")).unwrap());
    node.apply(&manifest(
        "webhook-configuration.yaml",
        &[port[0], ("CA_BUNDLE", ca.as_str())],
    ));
}

/// The installer's controller: labelled with metainit's key, gated by the webhook.
pub fn install_controller(node: &Node) {
    let api_port = node.api_port();
    let ready_port = free_port().to_string();
    node.apply(&manifest(
        "controller.yaml",
        &[
            ("READY_PORT", ready_port.as_str()),
            ("API_PORT", api_port.as_str()),
        ],
    ));
}

pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
