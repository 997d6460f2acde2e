//! metainit over https, as every real cluster serves it: the real kube-apiserver, whose
//! serving certificate its own CA signed (`$CONTROL_PLANE_CA`), and a scene's kubeconfig that
//! names that CA and a ServiceAccount's bearer token (TokenRequest). The per-object requests
//! (PATCH, Event POST) take metainit's own stack there, not kube's `Client`: this is where
//! that stack meets TLS and authentication. These ran on the double behind a TLS front of a
//! test CA before.

mod common;

use std::path::{Path, PathBuf};

use common::{
    control_plane::{WAIT, until},
    run_to_end,
    scene::{Rights, Scene},
};

const GATE: &str = "example.com/a";
const NS: &str = "tls";

/// Waits until the scene's pod `name` has no gate left on the server.
async fn cleared(s: &Scene, name: &str, what: &str) {
    until(what, WAIT, || async {
        s.gates(NS, name).await.is_empty().then_some(())
    })
    .await;
}

/// The scene's kubeconfig without its `certificate-authority`: the system's CAs, none of
/// which signed the control plane's.
fn without_ca(kubeconfig: &Path) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig read");
    assert!(text.contains("certificate-authority: "), "{text}");
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("certificate-authority"))
        .collect();
    let path = kubeconfig.with_file_name("no-ca.kubeconfig");
    std::fs::write(&path, kept.join("\n") + "\n").expect("kubeconfig written");
    path
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn clears_and_writes_events_over_https_with_a_token() {
    // The token is required: kube-apiserver answers a request without it 401 or 403.
    let s = Scene::new(&[NS], Rights::Files).await;
    s.add(NS, &s.gated_pod("web", GATE));
    let m = s.metainit(&["--node-name", "cp-1"]);
    cleared(&s, "web", "the gate cleared over https").await;
    // A second pod after the first: the connections are reused, not only opened.
    s.add(NS, &s.gated_pod("api", GATE));
    cleared(&s, "api", "the second gate cleared").await;
    assert!(m.problems().is_empty(), "{:#?}", m.log());
    assert!(m.stop().await.success());
    for name in ["api", "web"] {
        let events = until(&format!("{name}'s Event"), WAIT, || async {
            let events = s.pod_events(NS, name).await;
            (!events.is_empty()).then_some(events)
        })
        .await;
        let cleared = events
            .iter()
            .filter(|e| e["reason"] == "SchedulingGatesCleared")
            .count();
        assert_eq!(cleared, 1, "{name}: {events:#?}");
    }

    // `--once`, the same way.
    s.add(NS, &s.gated_pod("job", GATE));
    let (code, _, stderr) = s.run(&["--once"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(s.gates(NS, "job").await.is_empty(), "job kept its gate");
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_server_certificate_no_known_ca_signed_is_refused_and_said() {
    let s = Scene::new(&[NS], Rights::Files).await;
    let kc = without_ca(&s.kubeconfig);
    let kc = kc.display().to_string();
    s.add(NS, &s.gated_pod("web", GATE));
    let args = [
        "--kubeconfig",
        &kc,
        "--label-key",
        &s.key,
        "--namespace",
        &s.home,
        "--once",
    ];
    let (code, _, stderr) = run_to_end(&args, WAIT).await;
    assert_eq!(code, 2, "{stderr}");
    // The error docs/src/troubleshooting.md quotes, with the verifier's reason.
    assert!(
        stderr.contains("invalid peer certificate: UnknownIssuer")
            && stderr.contains(
                "check the server URL's scheme and the kubeconfig's certificate-authority"
            ),
        "{stderr}"
    );
    assert_eq!(s.gates(NS, "web").await, [GATE], "left as it was");
}
