//! `--webhooks` on the real control plane while the world changes under it: endpoints
//! that flap faster than the grace, a GitOps sync or a revert that takes the exemption
//! away, a Helm upgrade that moves the webhook's service, a webhook renamed while exempted.
//! Each ends with the configuration exactly as its owner last wrote it, and pods admitted
//! or refused as that says. Each test is a scene of its own on the shared control plane
//! (tests/common/webhooks.rs); these ran on the double's admission imitation before.

mod common;

use std::time::{Duration, SystemTime};

use common::{
    control_plane::{WAIT, until},
    msg,
    webhooks::{Kind, Rights, Scene, after, exemption, record, record_text},
};
use serde_json::{Value, json};

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn endpoints_flapping_faster_than_the_grace_period_cause_no_patch() {
    let s = Scene::new(&["gk", "team"], Rights::Files).await;
    s.gatekeeper(true).await;
    let metainit = s.metainit(&["--webhooks", "--webhook-grace", "3s"]);
    metainit
        .logged("listed", |l| {
            l.contains("listed; watching") && l.contains("validatingwebhookconfigurations")
        })
        .await;
    // The fault: down for 1 s, up for 0.5 s, six times: never down for the grace.
    for _ in 0..6 {
        s.set_ready("gk", "gk-svc", false).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        s.set_ready("gk", "gk-svc", true).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    metainit
        .logged("the flaps seen", |l| {
            l.contains("has a ready endpoint again")
        })
        .await;
    assert!(
        s.patches(Kind::Validating, "gk").is_empty(),
        "patched while flapping"
    );
    // Then down for good: exempted after the grace. (No pod is created before the
    // exemption: until then the server's resolver might still see the endpoint ready.)
    let down = SystemTime::now();
    s.set_ready("gk", "gk-svc", false).await;
    s.until_exempted("gk", "gk").await;
    s.until_admitted("gk", "exempted once down for good").await;
    let p = until("the PATCH audited", WAIT, || async {
        let p = s.patches(Kind::Validating, "gk");
        (!p.is_empty()).then_some(p)
    })
    .await;
    assert_eq!(p.len(), 1);
    assert!(after(p[0], down) >= Duration::from_secs(3));
    metainit.stop().await;
    s.check_network();
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_rewrite_while_exempted_is_re_evaluated_and_not_fought_more_than_once_per_grace() {
    let s = Scene::new(&["gk", "team"], Rights::Files).await;
    s.serve("gk", "gk-svc", false);
    let manifest = s.config(
        "gk",
        true,
        "validate.gk.example.com",
        "Fail",
        "gk",
        "gk-svc",
    );
    s.create(Kind::Validating, &manifest).await;
    let metainit = s.metainit(&["--webhooks", "--webhook-grace", "2s"]);
    s.until_admitted("gk", "exempted").await;
    // A GitOps sync puts the manifest back as it is in git: no exemption, no record.
    let mut synced = manifest.clone();
    synced["metadata"]["resourceVersion"] =
        s.get(Kind::Validating, "gk").await["metadata"]["resourceVersion"].clone();
    s.replace(Kind::Validating, &synced).await.expect("sync");
    s.until_refused("gk", "refused after the sync").await;
    // Exempted again, but not within the grace period of the first time.
    let p = until("exempted again", WAIT, || async {
        let p = s.patches(Kind::Validating, "gk");
        (p.len() >= 2).then_some(p)
    })
    .await;
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(after(p[1], p[0]) >= Duration::from_secs(2), "{p:?}");
    s.until_admitted("gk", "exempted again").await;
    metainit
        .logged("the revert warning", |l| {
            l.contains("WARN") && l.contains(msg::REVERTED) && l.contains("reverts=1")
        })
        .await;
    metainit.stop().await;
    s.check_network();
}

/// A Helm upgrade moves the webhook's service to another namespace while metainit has the
/// old one exempted, and keeps the configuration's annotations: the old namespace is
/// intercepted again at once (its exemption no longer breaks this webhook's deadlock, and
/// an unrecorded expression would stay for ever), the new one is exempted after the grace,
/// and once the new service is up the entry is exactly the upgraded one.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_service_moved_to_another_namespace_while_exempted_leaves_nothing_behind() {
    let s = Scene::new(&["gk", "gk2", "team"], Rights::Files).await;
    s.serve("gk", "gk-svc", false);
    s.serve("gk2", "gk-svc", false);
    // The webhook intercepts both namespaces, the service's old and its new one.
    let mut c = s.config(
        "gk",
        true,
        "validate.gk.example.com",
        "Fail",
        "gk",
        "gk-svc",
    );
    c["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"] =
        json!([s.ns("gk"), s.ns("gk2"), s.ns("team")]);
    s.create(Kind::Validating, &c).await;
    let metainit = s.metainit(&["--webhooks", "--webhook-grace", "1s"]);
    s.until_admitted("gk", "exempted").await;
    s.refused("gk2", "not-yet").await;
    // The upgrade: the served object as it is (exemption and record kept), the service moved.
    let mut upgraded = s.get(Kind::Validating, "gk").await;
    upgraded["webhooks"][0]["clientConfig"]["service"]["namespace"] = json!(s.ns("gk2"));
    let mut wanted = upgraded["webhooks"][0].clone();
    let exprs = &mut wanted["namespaceSelector"]["matchExpressions"];
    let kept: Vec<Value> = exprs
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| **e != exemption(s.ns("gk")))
        .cloned()
        .collect();
    *exprs = Value::Array(kept.clone());
    s.replace(Kind::Validating, &upgraded)
        .await
        .expect("upgrade");
    let mut moved = kept.clone();
    moved.push(exemption(s.ns("gk2")));
    let (gk, gk2) = (s.ns("gk").to_string(), s.ns("gk2").to_string());
    until("gk2 exempted instead of gk", WAIT, || async {
        let now = s.get(Kind::Validating, "gk").await;
        let record = record_text(&now);
        (now["webhooks"][0]["namespaceSelector"]["matchExpressions"] == json!(moved)
            && record.contains(&gk2)
            && !record.contains(&format!("[\"{gk}\"]")))
        .then_some(())
    })
    .await;
    s.until_admitted("gk2", "the new namespace exempted").await;
    let old = s
        .until_refused("gk", "the old namespace intercepted again")
        .await;
    assert!(old.contains("no endpoints available for service"), "{old}");
    let calls = format!("now calls {gk2}/gk-svc");
    metainit
        .logged("the reason", |l| {
            l.contains(msg::RESTORED) && l.contains(&calls)
        })
        .await;
    s.set_ready("gk2", "gk-svc", true).await;
    until("restored to the upgraded entry", WAIT, || async {
        let now = s.get(Kind::Validating, "gk").await;
        (now["webhooks"][0] == wanted && now["metadata"].get("annotations").is_none()).then_some(())
    })
    .await;
    let problems = metainit.problems();
    assert!(problems.is_empty(), "{problems:#?}");
    metainit.stop().await;
    s.check_network();
}

/// `kubectl apply` or a Helm upgrade puts the webhook back as it is in git but keeps the
/// annotations it does not manage, metainit's record among them. The record says when the
/// exemption was added, so a replica that did not add it (here, the one of two that did
/// not) does not add it back within the grace either.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_revert_that_keeps_the_record_is_not_fought_within_the_grace_by_any_replica() {
    let s = Scene::new(&["gk", "team"], Rights::Files).await;
    s.gatekeeper(false).await;
    let original = s.entry("gk").await;
    let replicas: Vec<_> = (0..2)
        .map(|i| {
            let node = format!("cp-{i}");
            s.metainit(&["--webhooks", "--webhook-grace", "3s", "--node-name", &node])
        })
        .collect();
    s.until_admitted("gk", "exempted").await;
    let mut reverted = s.get(Kind::Validating, "gk").await;
    // When the first add happened, as its record on the server says.
    let record = record(&reverted);
    let since: k8s_openapi::jiff::Timestamp = record["validate.gk.example.com"]["since"]
        .as_str()
        .expect("since")
        .parse()
        .expect("a timestamp");
    reverted["webhooks"][0] = original.clone();
    s.replace(Kind::Validating, &reverted)
        .await
        .expect("revert");
    let p = until("exempted again", WAIT, || async {
        let p = s.patches(Kind::Validating, "gk");
        (p.len() >= 2).then_some(p)
    })
    .await;
    let apart = after(p[1], SystemTime::from(since));
    assert!(
        apart >= Duration::from_secs(3),
        "added again {apart:?} after the first add, within --webhook-grace 3s"
    );
    s.until_admitted("gk", "exempted again").await;
    for r in replicas {
        r.stop().await;
    }
    s.check_network();
}

/// A webhook renamed while exempted (a chart's new name for it, the served entry kept with
/// its exemption): the record follows the webhook to its new name, so nothing metainit
/// added is left unrecorded, and the webhook under its new name is restored, byte for
/// byte, once its service is back.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_webhook_renamed_while_exempted_keeps_its_record_and_is_restored() {
    let s = Scene::new(&["gk", "team"], Rights::Files).await;
    s.gatekeeper(false).await;
    let mut wanted = s.entry("gk").await;
    wanted["name"] = json!("check.gk.example.com");
    let metainit = s.metainit(&["--webhooks", "--webhook-grace", "1s"]);
    s.until_admitted("gk", "exempted").await;
    let mut renamed = s.get(Kind::Validating, "gk").await;
    renamed["webhooks"][0]["name"] = json!("check.gk.example.com");
    s.replace(Kind::Validating, &renamed).await.expect("rename");
    until("the record under the new name", WAIT, || async {
        let now = s.get(Kind::Validating, "gk").await;
        let record = record_text(&now);
        (record.contains("check.gk.example.com") && !record.contains("validate.gk.example.com"))
            .then_some(())
    })
    .await;
    s.set_ready("gk", "gk-svc", true).await;
    until("restored under the new name", WAIT, || async {
        let now = s.get(Kind::Validating, "gk").await;
        (now["webhooks"][0] == wanted && now["metadata"].get("annotations").is_none()).then_some(())
    })
    .await;
    metainit.stop().await;
    s.check_network();
}
