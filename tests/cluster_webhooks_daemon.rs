//! `--webhooks` as a daemon on the real control plane: a webhook that fails closed on pod
//! creation, whose service has no ready endpoint, cannot get its own pods created. What is
//! asserted is what the operator sees: which pods the real server lets in, the
//! configuration on the server (byte for byte after a restore), the Events, the metrics
//! and the log; and, from the audit log, that nothing else is written. Each test is a scene
//! of its own on the shared control plane (tests/common/webhooks.rs). These ran on the
//! double's admission imitation until the real server took them over
//! (docs/src/developers/double.md, "What moved to the real server").

mod common;

use std::time::{Duration, SystemTime};

use common::{
    control_plane::{WAIT, until},
    eventually, metrics_until, msg,
    webhooks::{Kind, Rights, Scene, after, exempted, metric, record, seconds_between, written},
};
use serde_json::{Value, json};

/// The pods `status --webhooks` says were created in gk while it was exempted, from the
/// JSON of its row for the scene's webhook (and its STATE in the table says how many).
async fn slipped_pods(s: &Scene) -> Vec<String> {
    let (code, out, err) = s.run(&["status", "--webhooks", "-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect("json");
    let row = report["webhooks"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["namespace"] == s.ns("gk")))
        .unwrap_or_else(|| panic!("gk's row: {out}"))
        .clone();
    let pods: Vec<String> = row["createdWhileExempted"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.as_str().map(str::to_string))
        .collect();
    let (_, table, _) = s.run(&["status", "--webhooks"]).await;
    let said = match pods.len() {
        1 => "1 pod created since, unseen by the webhook".to_string(),
        n => format!("{n} pods created since, unseen by the webhook"),
    };
    assert!(table.contains(&said), "{table}");
    pods
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn exempts_only_the_webhooks_own_namespace_then_restores_it_exactly() {
    let s = Scene::new(&["gk", "team"], Rights::Files).await;
    s.gatekeeper(false).await;
    let original = s.get(Kind::Validating, "gk").await;
    // The deadlock: the webhook's own pod cannot be created, nor can anyone else's.
    let message = s.refused("gk", "gk-controller").await;
    let refusal = s.refusal("validate.gk.example.com", "gk", "gk-svc");
    assert!(message.contains(&refusal), "{message}");
    s.refused("team", "web").await;

    let started = SystemTime::now();
    let metainit = s.metainit(&["--webhooks", "--webhook-grace", "2s"]);
    s.until_admitted("gk", "the webhook's own namespace").await;
    // Not before the grace period: the service was seen down no earlier than start. (What
    // the PATCH `test`s is src/webhooks/patch.rs's unit test: the audit log has no bodies.)
    let exempt = until("the exemption's PATCH audited", WAIT, || async {
        let p = s.patches(Kind::Validating, "gk");
        (!p.is_empty()).then_some(p)
    })
    .await;
    assert_eq!(exempt.len(), 1, "{exempt:?}");
    assert!(
        after(exempt[0], started) >= Duration::from_secs(2),
        "exempted before --webhook-grace"
    );
    // Every other namespace still fails closed.
    assert!(s.refused("team", "web-2").await.contains(&refusal));
    let now = s.get(Kind::Validating, "gk").await;
    assert_eq!(
        now["webhooks"][0],
        exempted(&original["webhooks"][0], s.ns("gk")),
        "one expression added, nothing else changed"
    );
    let record = record(&now);
    assert_eq!(
        record["validate.gk.example.com"]["expression"]["values"],
        json!([s.ns("gk")])
    );
    let namespace = format!("namespace={}", s.ns("gk"));
    metainit
        .logged("the exemption line", |l| {
            l.contains(msg::EXEMPTED)
                && l.contains("webhook=validate.gk.example.com")
                && l.contains(&namespace)
        })
        .await;
    let addr = metainit.admin_addr().await;
    let text = metrics_until(&addr, "one webhook exempted", WAIT, |t| {
        metric(t, "metainit_webhooks_exempted") == Some(1.0)
    })
    .await;
    assert_eq!(
        metric(&text, "metainit_webhook_exemptions_total"),
        Some(1.0)
    );
    // What slipped through: the pod until_admitted made, admitted while exempted.
    let slipped = slipped_pods(&s).await;
    assert!(
        !slipped.is_empty() && slipped.iter().all(|p| p.starts_with("try-")),
        "{slipped:?}"
    );

    // The service comes back: after the grace, exactly the original configuration again.
    let back = SystemTime::now();
    s.set_ready("gk", "gk-svc", true).await;
    until("restored", WAIT, || async {
        (written(&s.get(Kind::Validating, "gk").await) == written(&original)).then_some(())
    })
    .await;
    let line = metainit
        .logged("the restore line", |l| l.contains(msg::RESTORED))
        .await;
    let named = format!(
        "created_while_exempted={} ({}): an Event on each",
        slipped.len(),
        slipped.join(", ")
    );
    assert!(line.contains(&named), "{line}");
    // An Event on each pod the webhook never saw, naming it.
    let path = format!(
        "/api/v1/namespaces/{}/events?fieldSelector=reason%3DAdmittedWithoutWebhook",
        s.ns("gk")
    );
    let unseen = until(
        "an Event on each pod created while exempted",
        WAIT,
        || async {
            let list = s
                .send(http::Request::get(&path).body(Vec::new()).unwrap())
                .await
                .ok()?;
            let items = list["items"].as_array().cloned().unwrap_or_default();
            (items.len() >= slipped.len()).then_some(items)
        },
    )
    .await;
    let mut on: Vec<String> = unseen
        .iter()
        .map(|e| {
            e["involvedObject"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    on.sort();
    let mut want = slipped.clone();
    want.sort();
    assert_eq!(on, want, "{unseen:#?}");
    assert!(
        unseen.iter().all(|e| e["type"] == "Warning"
            && e["message"]
                .as_str()
                .unwrap_or_default()
                .contains("from webhook validate.gk.example.com")),
        "{unseen:#?}"
    );
    // The Events trail the PATCHes and the log lines.
    let events = until("both Events written", WAIT, || async {
        let e = s.events("gk").await;
        (e.len() >= 2).then_some(e)
    })
    .await;
    let reasons: Vec<&str> = events
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        reasons,
        ["WebhookSelfExempted", "WebhookRestored"],
        "{events:#?}"
    );
    let about = format!(
        "namespace {} from webhook validate.gk.example.com",
        s.ns("gk")
    );
    assert!(
        events[0]["message"].as_str().unwrap().contains(&about),
        "{:?}",
        events[0]["message"]
    );
    assert_eq!(events[0]["type"], "Warning");
    assert_eq!(
        events[0]["involvedObject"]["kind"],
        "ValidatingWebhookConfiguration"
    );
    // How long the endpoints were gone, as the Events say: at least the grace before the
    // exemption, and no longer than metainit has been running.
    let ran = started.elapsed().unwrap().as_secs_f64();
    let down = seconds_between(
        &events[0],
        "has had no ready endpoint for ",
        " (--webhook-grace 2s)",
    );
    assert!((2.0..=ran).contains(&down), "down for {down}s, ran {ran}s");
    let up = seconds_between(&events[1], "has had ready endpoints for ", " after ");
    let gone = seconds_between(&events[1], " after ", " without");
    assert!(up >= 2.0, "restored after {up}s up, before --webhook-grace");
    assert!(
        gone >= down && gone + up <= ran,
        "gone {gone}s, down at the exemption {down}s, up {up}s, ran {ran}s"
    );
    let restored = format!(
        "metainit restored webhook validate.gk.example.com for namespace {}: ",
        s.ns("gk")
    );
    assert!(
        events[1]["message"]
            .as_str()
            .unwrap()
            .starts_with(&restored),
        "{:?}",
        events[1]["message"]
    );
    let text = metrics_until(&addr, "no webhook exempted", WAIT, |t| {
        metric(t, "metainit_webhooks_exempted") == Some(0.0)
    })
    .await;
    assert_eq!(
        metric(&text, "metainit_webhook_restorations_total"),
        Some(1.0)
    );
    let patches = until("the restore's PATCH audited", WAIT, || async {
        let p = s.patches(Kind::Validating, "gk");
        (p.len() >= 2).then_some(p)
    })
    .await;
    assert_eq!(patches.len(), 2, "one PATCH to exempt, one to restore");
    assert!(
        after(patches[1], back) >= Duration::from_secs(2),
        "restored before the endpoints had been ready for --webhook-grace"
    );
    // The service down again, metainit gone: both namespaces fail closed once more. (A
    // pod is created only after metainit's watch, fed as the server's resolver is, saw it
    // down: the server never dials the endpoint.)
    s.set_ready("gk", "gk-svc", false).await;
    s.seen_down(&metainit, "gk", "gk-svc", 2).await;
    assert!(metainit.problems().is_empty(), "{:#?}", metainit.problems());
    assert!(metainit.stop().await.success());
    assert_eq!(s.patches(Kind::Validating, "gk").len(), 2);
    s.refused("gk", "again").await;
    s.refused("team", "again").await;
    s.check_network();
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn leaves_alone_what_is_not_its_to_touch() {
    let s = Scene::new(&["gk", "kyverno", "nobody"], Rights::Files).await;
    s.serve("gk", "gk-svc", false);
    // Not labelled; Ignore; a url; a mutating one not labelled; and one to wait for. No pod
    // is created here: the url one is limited to a namespace nobody uses.
    let unlabelled = s.config("unlabelled", false, "u.example.com", "Fail", "gk", "gk-svc");
    s.create(Kind::Validating, &unlabelled).await;
    let ignore = s.config("ignore", true, "i.example.com", "Ignore", "gk", "gk-svc");
    s.create(Kind::Validating, &ignore).await;
    let mut url = s.config("url", true, "url.example.com", "Fail", "nobody", "none");
    url["webhooks"][0]["clientConfig"] = json!({"url": "https://policy.example.com/validate"});
    s.create(Kind::Validating, &url).await;
    let mutating = s.config("m", false, "m.example.com", "Fail", "gk", "gk-svc");
    s.create(Kind::Mutating, &mutating).await;
    s.serve("kyverno", "kyverno-svc", false);
    let ky = s.config(
        "ky",
        true,
        "k.example.com",
        "Fail",
        "kyverno",
        "kyverno-svc",
    );
    s.create(Kind::Validating, &ky).await;
    let mut before = Vec::new();
    for n in ["unlabelled", "ignore", "url"] {
        before.push(s.get(Kind::Validating, n).await);
    }
    let m_before = s.get(Kind::Mutating, "m").await;
    let metainit = s.metainit(&["--webhooks", "--webhook-grace", "1s"]);
    until("ky exempted", WAIT, || async {
        (s.patches(Kind::Validating, "ky").len() == 1).then_some(())
    })
    .await;
    metainit
        .logged("the url line", |l| {
            l.contains(msg::CALLED_BY_URL) && l.contains("webhook=url.example.com")
        })
        .await;
    let mut after = Vec::new();
    for n in ["unlabelled", "ignore", "url"] {
        after.push(s.get(Kind::Validating, n).await);
    }
    assert_eq!(after, before);
    assert_eq!(s.get(Kind::Mutating, "m").await, m_before);
    let writes = s.writes();
    assert_eq!(writes.len(), 1, "one PATCH, to ky: {writes:#?}");
    assert!(writes[0].contains(&s.name("ky")), "{writes:#?}");
    // Selection on the server: configurations by label, slices by service name.
    let key = s.key.replace('/', "%2F");
    for e in s.requests().iter().filter(|e| e["verb"] != "patch") {
        let uri = e["requestURI"].as_str().unwrap_or("");
        if uri.contains("webhookconfigurations") {
            assert!(uri.contains(&format!("labelSelector={key}")), "{uri}");
        }
        if uri.contains("endpointslices") {
            assert!(
                uri.contains("labelSelector=kubernetes.io%2Fservice-name%3D"),
                "{uri}"
            );
        }
    }
    metainit.stop().await;
    s.check_network();
}

/// Without `--webhooks` (the default), a labelled configuration whose service is down is
/// never read, let alone written: metainit clears the labelled pod and asks the server
/// nothing about webhooks or endpoints.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn without_the_flag_webhooks_are_never_looked_at() {
    let s = Scene::new(&["gk", "team"], Rights::Files).await;
    // Created before the webhook, which would refuse it.
    s.cp.create(s.ns("gk"), &s.gated_pod("p", "example.com/quota"));
    s.gatekeeper(false).await;
    let original = s.get(Kind::Validating, "gk").await;
    let metainit = s.metainit(&[]);
    let pods = s.cp.pods(s.ns("gk")).await;
    until("the labelled pod cleared", WAIT, || async {
        let p = pods.get("p").await.ok()?;
        common::control_plane::gate_names(&p)
            .is_empty()
            .then_some(())
    })
    .await;
    metainit.stop().await;
    assert_eq!(s.get(Kind::Validating, "gk").await, original);
    let asked: Vec<String> = s
        .requests()
        .iter()
        .filter_map(|e| e["requestURI"].as_str().map(str::to_string))
        .filter(|p| p.contains("webhookconfigurations") || p.contains("endpointslices"))
        .collect();
    assert!(asked.is_empty(), "{asked:#?}");
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn three_replicas_exempt_once_and_restore_once() {
    let s = Scene::new(&["gk", "team"], Rights::Files).await;
    s.gatekeeper(false).await;
    let original = s.get(Kind::Validating, "gk").await;
    let replicas: Vec<_> = (0..3)
        .map(|i| {
            let node = format!("cp-{i}");
            s.metainit(&["--webhooks", "--webhook-grace", "1s", "--node-name", &node])
        })
        .collect();
    s.until_admitted("gk", "exempted").await;
    for r in &replicas {
        r.logged("listed", |l| l.contains("listed; watching")).await;
    }
    let entry = s.entry("gk").await;
    assert_eq!(
        entry,
        exempted(&original["webhooks"][0], s.ns("gk")),
        "one expression, not one per replica"
    );
    s.set_ready("gk", "gk-svc", true).await;
    until("restored", WAIT, || async {
        (written(&s.get(Kind::Validating, "gk").await) == written(&original)).then_some(())
    })
    .await;
    let patches = until("both PATCHes audited", WAIT, || async {
        let p = s.patches(Kind::Validating, "gk");
        (p.len() >= 2).then_some(p)
    })
    .await;
    assert_eq!(
        patches.len(),
        2,
        "one accepted PATCH to exempt and one to restore, across three replicas"
    );
    // Stopped, each replica has written the Events it had (they trail the PATCHes).
    for r in replicas {
        let problems = r.problems();
        assert!(problems.is_empty(), "{problems:#?}");
        r.stop().await;
    }
    let reasons = until("the Events listed", WAIT, || async {
        let r = s.event_reasons("gk").await;
        (r.len() >= 2).then_some(r)
    })
    .await;
    assert_eq!(
        reasons,
        ["WebhookSelfExempted", "WebhookRestored"],
        "one Event each, from the replica whose PATCH won"
    );
    s.check_network();
}

/// The daemon with `--dry-run`: says once what it would do when the grace has passed, and
/// writes nothing, neither the configuration nor an Event.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn the_daemon_with_dry_run_says_and_writes_nothing() {
    let s = Scene::new(&["gk", "team"], Rights::Files).await;
    s.gatekeeper(false).await;
    let original = s.get(Kind::Validating, "gk").await;
    let metainit = s.metainit(&["--webhooks", "--webhook-grace", "1s", "--dry-run"]);
    metainit
        .logged("the dry-run line", |l| {
            l.contains(msg::WOULD_EXEMPT) && l.contains("webhook=validate.gk.example.com")
        })
        .await;
    s.refused("gk", "still-deadlocked").await;
    assert_eq!(s.get(Kind::Validating, "gk").await, original);
    metainit.stop().await;
    let written: Vec<String> = s
        .requests()
        .iter()
        .filter(|e| !matches!(e["verb"].as_str(), Some("get" | "list" | "watch")))
        .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
        .collect();
    assert!(written.is_empty(), "a dry run wrote: {written:#?}");
    assert!(s.events("gk").await.is_empty());
}

/// A dry run says what it would do once per outage, not once for ever: a second outage
/// of the same webhook is said again.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn the_daemon_with_dry_run_says_each_outage_once() {
    let s = Scene::new(&["gk", "team"], Rights::Files).await;
    s.gatekeeper(false).await;
    let metainit = s.metainit(&["--webhooks", "--webhook-grace", "1s", "--dry-run"]);
    let said = || {
        metainit
            .log()
            .iter()
            .filter(|l| {
                l.contains(msg::WOULD_EXEMPT) && l.contains("webhook=validate.gk.example.com")
            })
            .count()
    };
    eventually("the first outage said", WAIT, || said() == 1).await;
    s.set_ready("gk", "gk-svc", true).await;
    metainit
        .logged("the service back", |l| {
            l.contains("has a ready endpoint again")
        })
        .await;
    s.set_ready("gk", "gk-svc", false).await;
    eventually("the second outage said", WAIT, || said() == 2).await;
    metainit.stop().await;
    assert!(s.writes().is_empty(), "{:#?}", s.writes());
    s.check_network();
}
