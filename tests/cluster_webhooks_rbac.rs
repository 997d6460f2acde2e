//! `--webhooks` and the rights it is given, on the real control plane's RBAC: exactly
//! manifests/rbac.yaml and manifests/rbac-webhooks.yaml are enough for the daemon,
//! `--once` and `status`; without the second file, or without the right to patch or to
//! list, metainit stops or waits, writes nothing, and names the manifest that grants what
//! is missing. metainit runs as a ServiceAccount of each test's own, bound to the files'
//! ClusterRoles or to rules of the test's (tests/common/webhooks.rs); these ran on the
//! double's token table and admission imitation before.

mod common;

use common::{
    admin_get,
    control_plane::{WAIT, gate_names, until},
    msg, until_readyz,
    webhooks::{Kind, Rights, Scene},
};
use serde_json::{Value, json};

/// A PATCH the server keeps refusing: `--once` tries until `--timeout`, then exits 1
/// naming the configuration, the error and the manifest that grants the right.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn once_without_the_right_to_patch_exits_1_with_the_fix() {
    let rules = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch", "create"]}]);
    let s = Scene::new(&["gk", "team"], Rights::Rules(rules)).await;
    s.serve("gk", "gk-svc", false);
    let c = s.config("gk", true, "gk.example.com", "Fail", "gk", "gk-svc");
    s.create(Kind::Validating, &c).await;
    let original = s.get(Kind::Validating, "gk").await;
    let (code, stdout, stderr) = s.run(&["--once", "--webhooks", "--timeout", "2s"]).await;
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(
        stdout.contains(
            "webhooks: exempted 0, restored 0, would exempt 0, would restore 0, failed 1"
        ),
        "{stdout}"
    );
    let line = stderr
        .lines()
        .find(|l| l.contains(msg::PATCH_GIVING_UP))
        .unwrap_or_else(|| panic!("no final line: {stderr}"));
    let config = format!("config=validatingwebhookconfigurations/{}", s.name("gk"));
    assert!(
        line.contains(&config)
            && line.contains("status.code=403")
            && line.contains(msg::WEBHOOKS_RBAC),
        "{line}"
    );
    assert_eq!(s.get(Kind::Validating, "gk").await, original);
    let refused: Vec<String> = s
        .requests()
        .iter()
        .filter(|e| e["verb"] == "patch")
        .map(|e| e["responseStatus"]["code"].to_string())
        .collect();
    assert!(
        !refused.is_empty() && refused.iter().all(|c| c == "403"),
        "the real server refused each PATCH: {refused:?}"
    );
}

/// Without the right to list webhook configurations, `--once --webhooks` stops before
/// writing anything and names the manifest that grants it.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn once_without_the_right_to_list_exits_2_naming_the_manifest() {
    let rules = json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]);
    let s = Scene::new(&["gk"], Rights::Rules(rules)).await;
    s.cp.create(s.ns("gk"), &s.gated_pod("held", "example.com/g"));
    let (code, stdout, stderr) = s.run(&["--once", "--webhooks"]).await;
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    let held = s.cp.pods(s.ns("gk")).await.get("held").await.expect("held");
    assert_eq!(
        gate_names(&held),
        ["example.com/g"],
        "nothing is written before the run stops"
    );
    assert!(
        stderr.contains("LIST mutatingwebhookconfigurations: forbidden")
            && stderr.contains(msg::WEBHOOKS_RBAC),
        "{stderr}"
    );
    assert!(s.writes().is_empty(), "{:#?}", s.writes());
}

/// RBAC that has not caught up yet: the watches of the webhook configurations are
/// refused; `/readyz` and the log say which manifest grants them, and once it is applied
/// the exemption follows without a restart.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn forbidden_until_rbac_webhooks_lands_then_exempted() {
    let pods_only = json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]);
    let s = Scene::new(&["gk", "team"], Rights::Rules(pods_only)).await;
    s.gatekeeper(false).await;
    let metainit = s.metainit(&["--webhooks", "--webhook-grace", "1s"]);
    metainit
        .logged("the watch's WARN with the fix", |l| {
            l.contains("WARN")
                && l.contains("watch failed")
                && l.contains("403")
                && l.contains(msg::WEBHOOKS_RBAC)
        })
        .await;
    let addr = metainit.admin_addr().await;
    let (code, body) = admin_get(&addr, "/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains(msg::WEBHOOKS_RBAC), "{body}");
    assert!(
        !body.contains("manifests/rbac.yaml"),
        "the hint names the webhooks' manifest: {body}"
    );

    // The webhooks' ClusterRole of manifests/rbac-webhooks.yaml, granted now.
    s.bind("metainit-webhooks");
    s.until_exempted("gk", "gk").await;
    s.until_admitted("gk", "exempted once granted").await;
    until_readyz(&addr, WAIT).await;
    metainit.stop().await;
    s.check_network();
}

/// What a user installs, and nothing more: the ClusterRoles of manifests/rbac.yaml and
/// manifests/rbac-webhooks.yaml, read from the files. With them the daemon exempts and
/// restores, `--once` exempts, `status --webhooks` lists; without the second file the
/// same run is refused (so the first part is not passing on rights it was given some
/// other way).
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn the_shipped_rbac_files_grant_exactly_enough() {
    let s = Scene::new(&["gk", "team"], Rights::Files).await;
    s.gatekeeper(false).await;
    let original = s.entry("gk").await;

    let (code, out, err) = s.run(&["status", "--webhooks", "-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(report["webhooks"][0]["state"], "failingClosed", "{report}");

    let (code, out, err) = s.run(&["--once", "--webhooks"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("webhooks: exempted 1,"), "{out}");
    s.until_admitted("gk", "exempted by --once").await;

    // The daemon restores it when the service is back, and exempts it again when it goes
    // (no pod is created before that exemption: the endpoint was ready a moment ago).
    let metainit = s.metainit(&["--webhooks", "--webhook-grace", "1s"]);
    s.set_ready("gk", "gk-svc", true).await;
    until("restored by the daemon", WAIT, || async {
        (s.entry("gk").await == original).then_some(())
    })
    .await;
    s.set_ready("gk", "gk-svc", false).await;
    s.until_exempted("gk", "gk").await;
    s.until_admitted("gk", "exempted by the daemon").await;
    let problems = metainit.problems();
    assert!(problems.is_empty(), "{problems:#?}");
    // Stopped, it has written the Events it had (they trail the PATCHes).
    metainit.stop().await;
    let reasons = until("the three Events listed", WAIT, || async {
        let r = s.event_reasons("gk").await;
        (r.len() >= 3).then_some(r)
    })
    .await;
    assert_eq!(
        reasons,
        [
            "WebhookSelfExempted",
            "WebhookRestored",
            "WebhookSelfExempted"
        ],
        "the Events are written with these rights too"
    );

    // rbac.yaml alone: the webhooks' list is refused, naming the file that is missing.
    let s2 = Scene::new(&["gk", "team"], Rights::RbacOnly).await;
    s2.gatekeeper(false).await;
    let (code, _, err) = s2.run(&["--once", "--webhooks"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("forbidden") && err.contains(msg::WEBHOOKS_RBAC),
        "{err}"
    );
    assert!(s2.writes().is_empty(), "{:#?}", s2.writes());
    s.check_network();
}
