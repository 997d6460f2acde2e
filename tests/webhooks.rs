//! `--webhooks` against the double's admission webhooks (1.33): a webhook that fails
//! closed on pod creation, whose service has no ready endpoint, cannot get its own pods
//! created. What is asserted is what the operator sees: which pods the server lets in,
//! the configuration on the server (byte for byte after a restore), the Events, the
//! metrics and the log; and that nothing else is written.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const VWC: &str = "validatingwebhookconfigurations.admissionregistration.k8s.io";
const MWC: &str = "mutatingwebhookconfigurations.admissionregistration.k8s.io";
const ANNOTATION: &str = "k8s.opsani.io/metainit-exempted";
const WAIT: Duration = Duration::from_secs(30);

/// A configuration with one webhook on pod creation, calling `ns/svc`.
fn config(name: &str, labelled: bool, hook: &str, policy: &str, ns: &str, svc: &str) -> Value {
    let mut labels = json!({"app": "policy"});
    if labelled {
        labels[LABEL] = json!("");
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": labels},
        "webhooks": [webhook(hook, policy, json!({"service": {"namespace": ns, "name": svc, "path": "/validate"}}))],
    })
}

fn webhook(name: &str, policy: &str, client_config: Value) -> Value {
    json!({
        "name": name,
        "clientConfig": client_config,
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "failurePolicy": policy,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    })
}

/// The test's usual deadlock: the labelled configuration `gk`, whose one webhook
/// `validate.gk.example.com` fails closed on pod creation and calls `gk/gk-svc`, served
/// with its one endpoint `ready` or not.
fn gatekeeper(bed: &Bed, ready: bool) {
    serve(&bed.double, "gk", "gk-svc", ready);
    bed.double
        .create(
            VWC,
            "",
            config(
                "gk",
                true,
                "validate.gk.example.com",
                "Fail",
                "gk",
                "gk-svc",
            ),
        )
        .expect("configuration");
}

/// Creates a pod through the API, as a controller would: `Err` with the server's code
/// and message when admission refuses it.
async fn create_pod(bed: &Bed, ns: &str, name: &str) -> Result<(), (u16, String)> {
    let api: Api<Pod> = Api::namespaced(client(bed), ns);
    let pod: Pod = serde_json::from_value(pod(name, false)).unwrap();
    match api.create(&PostParams::default(), &pod).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err((s.code, s.message)),
        Err(e) => panic!("create {ns}/{name}: {e}"),
    }
}

/// Waits until a pod can be created in `ns` (each try a new name).
async fn until_admitted(bed: &Bed, ns: &str, what: &str) {
    let start = std::time::Instant::now();
    let mut n = 0;
    loop {
        n += 1;
        match create_pod(bed, ns, &format!("try-{n}")).await {
            Ok(()) => return,
            Err(e) => assert!(start.elapsed() < WAIT, "{what}: still refused: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn refused(bed: &Bed, ns: &str, name: &str) -> String {
    match create_pod(bed, ns, name).await {
        Ok(()) => panic!("{ns}/{name} was admitted; the webhook should refuse it"),
        Err((code, message)) => {
            assert_eq!(code, 500, "{message}");
            message
        }
    }
}

fn patches_to(bed: &Bed, plural: &str, name: &str) -> Vec<(SystemTime, Value)> {
    bed.double
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "PATCH"
                && r.status < 300
                && r.path_and_query
                    .split('?')
                    .next()
                    .is_some_and(|p| p.ends_with(&format!("/{plural}/{name}")))
        })
        .map(|r| (r.at, serde_json::from_str(&r.body).unwrap_or(Value::Null)))
        .collect()
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

/// The duration an Event's message gives between `before` and `after` (`2.013s`, `850ms`,
/// `1m`), in seconds.
fn seconds_between(event: &Value, before: &str, after: &str) -> f64 {
    let message = event["message"].as_str().unwrap_or_default();
    let text = message
        .split_once(before)
        .and_then(|(_, rest)| rest.split_once(after))
        .map(|(d, _)| d)
        .unwrap_or_else(|| panic!("no {before:?}…{after:?} in {message:?}"));
    let (number, unit) = text.split_at(
        text.find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(text.len()),
    );
    let n: f64 = number
        .parse()
        .unwrap_or_else(|_| panic!("{text:?} in {message:?}"));
    n * match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => panic!("{text:?} in {message:?}"),
    }
}

/// The reasons of the Events on the configuration `name`, oldest first.
fn event_reasons(bed: &Bed, name: &str) -> Vec<String> {
    bed.double
        .events()
        .iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect()
}

/// `n` replicas with `--webhooks`, one per control-plane node `cp-0`, `cp-1`, ...
fn replicas(bed: &Bed, n: usize, grace: &str) -> Vec<Metainit> {
    (0..n)
        .map(|i| {
            let node = format!("cp-{i}");
            bed.metainit(&["--webhooks", "--webhook-grace", grace, "--node-name", &node])
        })
        .collect()
}

fn entry(bed: &Bed, name: &str) -> Value {
    bed.double.get(VWC, "", name).expect("configuration")["webhooks"][0].clone()
}

#[tokio::test]
async fn exempts_only_the_webhooks_own_namespace_then_restores_it_exactly() {
    let bed = Bed::modern().await;
    gatekeeper(&bed, false);
    let original = entry(&bed, "gk");
    // The deadlock: the webhook's own pod cannot be created, nor can anyone else's.
    let message = refused(&bed, "gk", "gk-controller").await;
    assert!(
        message.contains("failed calling webhook \"validate.gk.example.com\""),
        "{message}"
    );
    refused(&bed, "team-a", "web").await;

    let started = SystemTime::now();
    let metainit = bed.metainit(&["--webhooks", "--webhook-grace", "2s"]);
    until_admitted(&bed, "gk", "the webhook's own namespace").await;
    // Not before the grace period: the service was seen down no earlier than start.
    let exempt = patches_to(&bed, "validatingwebhookconfigurations", "gk");
    assert_eq!(exempt.len(), 1, "{exempt:?}");
    assert!(
        exempt[0].0.duration_since(started).unwrap() >= Duration::from_secs(2),
        "exempted before --webhook-grace"
    );
    assert_eq!(
        tested_paths(&exempt[0].1),
        ["/metadata/uid", "/metadata/resourceVersion", "/webhooks/0"]
    );
    // Every other namespace still fails closed.
    let message = refused(&bed, "team-a", "web-2").await;
    assert!(message.contains("failed calling webhook"), "{message}");
    let exempted = bed.double.get(VWC, "", "gk").unwrap();
    assert_eq!(
        exempted["webhooks"][0]["namespaceSelector"],
        json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["gk"]}]})
    );
    let record: Value = serde_json::from_str(
        exempted["metadata"]["annotations"][ANNOTATION]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        record["validate.gk.example.com"]["expression"]["values"],
        json!(["gk"])
    );
    metainit
        .logged("the exemption line", |l| {
            l.contains(msg::EXEMPTED)
                && l.contains("webhook=validate.gk.example.com")
                && l.contains("namespace=gk")
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

    // The service comes back: after the grace, exactly the original entry again.
    let back = SystemTime::now();
    set_ready(&bed.double, "gk", "gk-svc", true);
    eventually("restored", WAIT, || {
        let now = bed.double.get(VWC, "", "gk").unwrap();
        now["webhooks"][0] == original && now["metadata"].get("annotations").is_none()
    })
    .await;
    metainit
        .logged("the restore line", |l| l.contains(msg::RESTORED))
        .await;
    // The Events trail the PATCHes and the log lines.
    eventually("both Events written", WAIT, || {
        event_reasons(&bed, "gk").len() >= 2
    })
    .await;
    let events: Vec<Value> = bed
        .double
        .events()
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == "gk")
        .collect();
    let reasons: Vec<&str> = events
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        reasons,
        ["WebhookSelfExempted", "WebhookRestored"],
        "{events:#?}"
    );
    assert!(
        events[0]["message"]
            .as_str()
            .unwrap()
            .contains("namespace gk from webhook validate.gk.example.com"),
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
    assert!(
        events[1]["message"]
            .as_str()
            .unwrap()
            .starts_with("metainit restored webhook validate.gk.example.com for namespace gk: "),
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
    let patches = patches_to(&bed, "validatingwebhookconfigurations", "gk");
    assert_eq!(patches.len(), 2, "one PATCH to exempt, one to restore");
    assert!(
        patches[1].0.duration_since(back).unwrap() >= Duration::from_secs(2),
        "restored before the endpoints had been ready for --webhook-grace"
    );
    // Both namespaces are intercepted again: with metainit gone and the service down,
    // both fail closed.
    assert!(metainit.problems().is_empty(), "{:#?}", metainit.problems());
    metainit.stop().await;
    set_ready(&bed.double, "gk", "gk-svc", false);
    refused(&bed, "gk", "again").await;
    refused(&bed, "team-a", "again").await;
}

#[tokio::test]
async fn leaves_alone_what_is_not_its_to_touch() {
    let bed = Bed::modern().await;
    serve(&bed.double, "gk", "gk-svc", false);
    // Not labelled; Ignore; a url; a mutating one without a service; and one to wait for.
    bed.double
        .create(
            VWC,
            "",
            config("unlabelled", false, "u.example.com", "Fail", "gk", "gk-svc"),
        )
        .unwrap();
    bed.double
        .create(
            VWC,
            "",
            config("ignore", true, "i.example.com", "Ignore", "gk", "gk-svc"),
        )
        .unwrap();
    let mut url = config("url", true, "url.example.com", "Fail", "gk", "gk-svc");
    url["webhooks"][0]["clientConfig"] = json!({"url": "https://policy.example.com/validate"});
    bed.double.create(VWC, "", url).unwrap();
    let mut mutating = config("m", false, "m.example.com", "Fail", "gk", "gk-svc");
    mutating["kind"] = json!("MutatingWebhookConfiguration");
    bed.double.create(MWC, "", mutating).unwrap();
    serve(&bed.double, "kyverno", "kyverno-svc", false);
    bed.double
        .create(
            VWC,
            "",
            config(
                "ky",
                true,
                "k.example.com",
                "Fail",
                "kyverno",
                "kyverno-svc",
            ),
        )
        .unwrap();
    let before: Vec<Value> = ["unlabelled", "ignore", "url"]
        .iter()
        .map(|n| bed.double.get(VWC, "", n).unwrap())
        .collect();
    let metainit = bed.metainit(&["--webhooks", "--webhook-grace", "1s"]);
    eventually("ky exempted", WAIT, || {
        patches_to(&bed, "validatingwebhookconfigurations", "ky").len() == 1
    })
    .await;
    metainit
        .logged("the url line", |l| {
            l.contains(msg::CALLED_BY_URL) && l.contains("webhook=url.example.com")
        })
        .await;
    let after: Vec<Value> = ["unlabelled", "ignore", "url"]
        .iter()
        .map(|n| bed.double.get(VWC, "", n).unwrap())
        .collect();
    assert_eq!(after, before);
    assert!(bed.double.get(MWC, "", "m").is_some());
    let writes: Vec<String> = bed
        .double
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET" && !r.path_and_query.contains("/events"))
        .map(|r| format!("{} {}", r.method, r.path_and_query))
        .collect();
    assert_eq!(writes.len(), 1, "one PATCH, to ky: {writes:#?}");
    // Selection on the server: configurations by label, slices by service name.
    for r in bed.double.requests().iter().filter(|r| r.method == "GET") {
        let p = &r.path_and_query;
        if p.contains("webhookconfigurations") {
            assert!(
                p.contains("labelSelector=k8s.opsani.io%2Finitializer"),
                "{p}"
            );
        }
        if p.contains("endpointslices") {
            assert!(
                p.contains("labelSelector=kubernetes.io%2Fservice-name%3D"),
                "{p}"
            );
        }
    }
}

/// The server's revision goes backwards (etcd restored from a snapshot): the watches of
/// the webhook configurations and of the endpoints resume from a version the server has
/// not reached and hear nothing. The resync lists them again, so a deadlock that starts
/// after the restore is still broken.
#[tokio::test]
async fn a_deadlock_after_an_etcd_restore_is_still_broken() {
    let bed = Bed::modern().await;
    let snapshot = bed.double.snapshot();
    let metainit = bed.metainit(&[
        "--webhooks",
        "--webhook-grace",
        "1s",
        "--resync-period",
        "1s",
    ]);
    // A first deadlock, exempted and restored: the watches have seen every change so far.
    serve(&bed.double, "first", "first-svc", false);
    bed.double
        .create(
            VWC,
            "",
            config(
                "first",
                true,
                "validate.first.example.com",
                "Fail",
                "first",
                "first-svc",
            ),
        )
        .expect("configuration");
    until_admitted(&bed, "first", "the first webhook's namespace").await;
    set_ready(&bed.double, "first", "first-svc", true);
    eventually("the first exemption removed", WAIT, || {
        patches_to(&bed, "validatingwebhookconfigurations", "first").len() == 2
    })
    .await;
    let seen = bed.double.resource_version();
    bed.double.restore(&snapshot);
    gatekeeper(&bed, false);
    assert!(
        bed.double.resource_version() < seen,
        "the new configuration's revision is below what metainit saw"
    );
    until_admitted(&bed, "gk", "the webhook's own namespace, after the restore").await;
    assert!(metainit.stop().await.success());
}

#[tokio::test]
async fn endpoints_flapping_faster_than_the_grace_period_cause_no_patch() {
    let bed = Bed::modern().await;
    gatekeeper(&bed, true);
    let metainit = bed.metainit(&["--webhooks", "--webhook-grace", "3s"]);
    metainit
        .logged("listed", |l| {
            l.contains("listed; watching") && l.contains("validatingwebhookconfigurations")
        })
        .await;
    // Down for 1 s, up for 0.5 s, six times: never down for the grace.
    for _ in 0..6 {
        set_ready(&bed.double, "gk", "gk-svc", false);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        set_ready(&bed.double, "gk", "gk-svc", true);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    metainit
        .logged("the flaps seen", |l| {
            l.contains("has a ready endpoint again")
        })
        .await;
    assert!(
        patches_to(&bed, "validatingwebhookconfigurations", "gk").is_empty(),
        "patched while flapping"
    );
    // Then down for good: exempted after the grace.
    let down = SystemTime::now();
    set_ready(&bed.double, "gk", "gk-svc", false);
    until_admitted(&bed, "gk", "exempted once down for good").await;
    let p = patches_to(&bed, "validatingwebhookconfigurations", "gk");
    assert_eq!(p.len(), 1);
    assert!(p[0].0.duration_since(down).unwrap() >= Duration::from_secs(3));
}

#[tokio::test]
async fn a_rewrite_while_exempted_is_re_evaluated_and_not_fought_more_than_once_per_grace() {
    let bed = Bed::modern().await;
    serve(&bed.double, "gk", "gk-svc", false);
    let manifest = config(
        "gk",
        true,
        "validate.gk.example.com",
        "Fail",
        "gk",
        "gk-svc",
    );
    bed.double.create(VWC, "", manifest.clone()).unwrap();
    let metainit = bed.metainit(&["--webhooks", "--webhook-grace", "2s"]);
    until_admitted(&bed, "gk", "exempted").await;
    // A GitOps sync puts the manifest back as it is in git: no exemption, no record.
    let mut synced = manifest.clone();
    synced["metadata"]["resourceVersion"] =
        bed.double.get(VWC, "", "gk").unwrap()["metadata"]["resourceVersion"].clone();
    bed.double.update(VWC, "", synced).expect("sync");
    refused(&bed, "gk", "after-sync").await;
    // Exempted again, but not within the grace period of the first time.
    eventually("exempted again", WAIT, || {
        patches_to(&bed, "validatingwebhookconfigurations", "gk").len() == 2
    })
    .await;
    let p = patches_to(&bed, "validatingwebhookconfigurations", "gk");
    assert!(
        p[1].0.duration_since(p[0].0).unwrap() >= Duration::from_secs(2),
        "{:?}",
        (p[0].0, p[1].0)
    );
    until_admitted(&bed, "gk", "exempted again").await;
    metainit
        .logged("the revert warning", |l| {
            l.contains("WARN") && l.contains(msg::REVERTED) && l.contains("reverts=1")
        })
        .await;
}

/// A Helm upgrade moves the webhook's service to another namespace while metainit has the
/// old one exempted, and keeps the configuration's annotations: the old namespace is
/// intercepted again at once (its exemption no longer breaks this webhook's deadlock, and
/// an unrecorded expression would stay for ever), the new one is exempted after the grace,
/// and once the new service is up the entry is exactly the upgraded one.
#[tokio::test]
async fn a_service_moved_to_another_namespace_while_exempted_leaves_nothing_behind() {
    let bed = Bed::modern().await;
    gatekeeper(&bed, false);
    serve(&bed.double, "gk2", "gk-svc", false);
    let metainit = bed.metainit(&["--webhooks", "--webhook-grace", "1s"]);
    until_admitted(&bed, "gk", "exempted").await;
    // The upgrade: the served object as it is (exemption and record kept), the service moved.
    let mut upgraded = bed.double.get(VWC, "", "gk").unwrap();
    upgraded["webhooks"][0]["clientConfig"]["service"]["namespace"] = json!("gk2");
    let mut wanted = upgraded["webhooks"][0].clone();
    wanted.as_object_mut().unwrap().remove("namespaceSelector");
    bed.double.update(VWC, "", upgraded).expect("upgrade");
    eventually("gk2 exempted instead of gk", WAIT, || {
        let now = bed.double.get(VWC, "", "gk").unwrap();
        now["webhooks"][0]["namespaceSelector"]["matchExpressions"]
            == json!([{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["gk2"]}])
            && now["metadata"]["annotations"][ANNOTATION]
                .as_str()
                .is_some_and(|a| a.contains("gk2") && !a.contains("[\"gk\"]"))
    })
    .await;
    until_admitted(&bed, "gk2", "the new namespace exempted").await;
    assert!(
        refused(&bed, "gk", "old-namespace")
            .await
            .contains("no endpoints available for service"),
        "the old namespace is intercepted again"
    );
    metainit
        .logged("the reason", |l| {
            l.contains(msg::RESTORED) && l.contains("now calls gk2/gk-svc")
        })
        .await;
    set_ready(&bed.double, "gk2", "gk-svc", true);
    eventually("restored to the upgraded entry", WAIT, || {
        let now = bed.double.get(VWC, "", "gk").unwrap();
        let selector_gone = now["webhooks"][0]
            .get("namespaceSelector")
            .is_none_or(|s| s.get("matchExpressions").is_none());
        let mut entry = now["webhooks"][0].clone();
        entry.as_object_mut().unwrap().remove("namespaceSelector");
        selector_gone && entry == wanted && now["metadata"].get("annotations").is_none()
    })
    .await;
    let problems = metainit.problems();
    assert!(problems.is_empty(), "{problems:#?}");
    metainit.stop().await;
}

/// `kubectl apply` or a Helm upgrade puts the webhook back as it is in git but keeps the
/// annotations it does not manage, metainit's record among them. The record says when the
/// exemption was added, so a replica that did not add it (here, the one of two that did
/// not) does not add it back within the grace either.
#[tokio::test]
async fn a_revert_that_keeps_the_record_is_not_fought_within_the_grace_by_any_replica() {
    let bed = Bed::modern().await;
    gatekeeper(&bed, false);
    let original = entry(&bed, "gk");
    let replicas = replicas(&bed, 2, "3s");
    until_admitted(&bed, "gk", "exempted").await;
    let mut reverted = bed.double.get(VWC, "", "gk").unwrap();
    assert!(reverted["metadata"]["annotations"][ANNOTATION].is_string());
    reverted["webhooks"][0] = original.clone();
    bed.double.update(VWC, "", reverted).expect("revert");
    eventually("exempted again", WAIT, || {
        patches_to(&bed, "validatingwebhookconfigurations", "gk").len() >= 2
    })
    .await;
    let p = patches_to(&bed, "validatingwebhookconfigurations", "gk");
    // When the first add happened, as its record says (written just before the PATCH).
    let since = p[0]
        .1
        .as_array()
        .and_then(|ops| {
            ops.iter().find(|o| {
                o["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("/metadata/annotations"))
            })
        })
        .and_then(|o| {
            let text = o["value"]
                .as_str()
                .map(str::to_string)
                .or_else(|| o["value"][ANNOTATION].as_str().map(str::to_string))?;
            let recs: Value = serde_json::from_str(&text).ok()?;
            recs["validate.gk.example.com"]["since"]
                .as_str()
                .map(str::to_string)
        })
        .expect("the first PATCH writes the record");
    let since: k8s_openapi::jiff::Timestamp = since.parse().unwrap();
    let since = SystemTime::from(since);
    let apart = p[1].0.duration_since(since).unwrap();
    assert!(
        apart >= Duration::from_secs(3),
        "added again {apart:?} after the first add, within --webhook-grace 3s"
    );
    until_admitted(&bed, "gk", "exempted again").await;
    for r in replicas {
        r.stop().await;
    }
}

/// The daemon with `--dry-run`: says once what it would do when the grace has passed, and
/// writes nothing, neither the configuration nor an Event.
#[tokio::test]
async fn the_daemon_with_dry_run_says_and_writes_nothing() {
    let bed = Bed::modern().await;
    gatekeeper(&bed, false);
    let original = bed.double.get(VWC, "", "gk").unwrap();
    let metainit = bed.metainit(&["--webhooks", "--webhook-grace", "1s", "--dry-run"]);
    metainit
        .logged("the dry-run line", |l| {
            l.contains(msg::WOULD_EXEMPT) && l.contains("webhook=validate.gk.example.com")
        })
        .await;
    refused(&bed, "gk", "still-deadlocked").await;
    assert_eq!(bed.double.get(VWC, "", "gk").unwrap(), original);
    assert!(
        !bed.double.requests().iter().any(|r| {
            matches!(r.method.as_str(), "PATCH" | "PUT" | "DELETE")
                || (r.method == "POST" && r.path_and_query.contains("events"))
        }),
        "a dry run wrote something"
    );
    metainit.stop().await;
}

/// A dry run says what it would do once per outage, not once for ever: a second outage
/// of the same webhook is said again.
#[tokio::test]
async fn the_daemon_with_dry_run_says_each_outage_once() {
    let bed = Bed::modern().await;
    gatekeeper(&bed, false);
    let metainit = bed.metainit(&["--webhooks", "--webhook-grace", "1s", "--dry-run"]);
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
    set_ready(&bed.double, "gk", "gk-svc", true);
    metainit
        .logged("the service back", |l| {
            l.contains("has a ready endpoint again")
        })
        .await;
    set_ready(&bed.double, "gk", "gk-svc", false);
    eventually("the second outage said", WAIT, || said() == 2).await;
    metainit.stop().await;
}

#[tokio::test]
async fn three_replicas_exempt_once_and_restore_once() {
    let bed = Bed::modern().await;
    gatekeeper(&bed, false);
    let original = entry(&bed, "gk");
    let replicas = replicas(&bed, 3, "1s");
    until_admitted(&bed, "gk", "exempted").await;
    for r in &replicas {
        r.logged("listed", |l| l.contains("listed; watching")).await;
    }
    let exempted = entry(&bed, "gk");
    assert_eq!(
        exempted["namespaceSelector"]["matchExpressions"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "one expression, not one per replica: {exempted}"
    );
    set_ready(&bed.double, "gk", "gk-svc", true);
    eventually("restored", WAIT, || {
        let now = bed.double.get(VWC, "", "gk").unwrap();
        now["webhooks"][0] == original && now["metadata"].get("annotations").is_none()
    })
    .await;
    assert_eq!(
        patches_to(&bed, "validatingwebhookconfigurations", "gk").len(),
        2,
        "one accepted PATCH to exempt and one to restore, across three replicas"
    );
    // Stopped, each replica has written the Events it had (they trail the PATCHes).
    for r in replicas {
        let problems = r.problems();
        assert!(problems.is_empty(), "{problems:#?}");
        r.stop().await;
    }
    assert_eq!(
        event_reasons(&bed, "gk"),
        ["WebhookSelfExempted", "WebhookRestored"],
        "one Event each, from the replica whose PATCH won"
    );
}

#[tokio::test]
async fn bad_webhook_flags_exit_2_saying_what_to_fix() {
    let legacy = Bed::legacy(&["a.example.com"]).await;
    let kubeconfig = legacy.kubeconfig.display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--webhook-grace", "10s"], msg::GRACE_WITHOUT_WEBHOOKS),
        (
            vec!["--webhooks", "--webhook-grace", "0s"],
            msg::GRACE_AT_LEAST,
        ),
        (
            vec!["--webhooks", "--once", "--webhook-grace", "1m"],
            msg::GRACE_WITH_ONCE,
        ),
        (
            vec!["--webhooks", "--mode", "initializers"],
            msg::WEBHOOKS_TOO_OLD,
        ),
        // Against a 1.13 server, `auto` finds initializers.
        (vec!["--webhooks"], "is v1.13.12: drop --webhooks"),
        (vec!["--webhooks", "--once"], "is v1.13.12: drop --webhooks"),
    ];
    for (args, want) in cases {
        let mut all = vec![
            "--kubeconfig",
            kubeconfig.as_str(),
            "--admin-addr",
            "127.0.0.1:0",
        ];
        all.extend(args.iter().copied());
        let (code, _, err) = run_to_end(&all, WAIT).await;
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want {want:?} in {err}");
    }
}

/// A server reporting `version`, with the modern generation's APIs (admission webhooks,
/// EndpointSlice v1), as a 1.14 to 1.25 cluster is to metainit.
async fn bed_reporting(version: (u32, u32)) -> Bed {
    let mut config = kube_double::Config::modern();
    config.report_version = Some(version);
    Bed::start(config).await
}

/// 1.21 to 1.25: webhooks and EndpointSlice v1, but neither initializers nor gates. The
/// webhook deadlock is there all the same: `--webhooks` runs with nothing else to do, as
/// a daemon, `--once` and `status`; without `--webhooks` there is nothing to run for.
#[tokio::test]
async fn kubernetes_1_21_to_1_25_runs_the_webhooks_only() {
    let bed = bed_reporting((1, 23)).await;
    gatekeeper(&bed, false);
    let kubeconfig = bed.kubeconfig.display().to_string();
    let kc = kubeconfig.as_str();

    let (code, _, err) = run_to_end(&["--kubeconfig", kc, "--once"], WAIT).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("Kubernetes 1.23 has neither initializers"),
        "{err}"
    );
    let (code, _, err) = run_to_end(
        &["--kubeconfig", kc, "--webhooks", "--release-gate", "g=1h"],
        WAIT,
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("means neither (Kubernetes 1.14 to 1.25)"),
        "{err}"
    );

    let (code, out, err) = run_to_end(
        &["status", "--kubeconfig", kc, "--webhooks", "-o", "json"],
        WAIT,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(report["mode"], "webhooks only", "{report}");
    assert_eq!(
        report["webhooks"][0]["webhook"], "validate.gk.example.com",
        "{report}"
    );

    // The daemon: exempts after the grace, restores when the service is back.
    let original = entry(&bed, "gk");
    let metainit = bed.metainit(&["--webhooks", "--webhook-grace", "1s"]);
    metainit
        .logged("webhooks only", |l| {
            l.contains("watching the labelled webhooks only")
        })
        .await;
    until_admitted(&bed, "gk", "exempted on 1.23").await;
    refused(&bed, "team-a", "web").await;
    set_ready(&bed.double, "gk", "gk-svc", true);
    eventually("restored", WAIT, || entry(&bed, "gk") == original).await;
    let problems = metainit.problems();
    assert!(problems.is_empty(), "{problems:#?}");
    metainit.stop().await;

    // `--once`: only the webhooks' tallies, no line about objects to clear.
    set_ready(&bed.double, "gk", "gk-svc", false);
    let (code, out, err) = run_to_end(&["--kubeconfig", kc, "--once", "--webhooks"], WAIT).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["webhooks: exempted 1, restored 0, would exempt 0, would restore 0, failed 0"],
        "{out}"
    );
}

/// 1.14 to 1.20: no `kubernetes.io/metadata.name` on namespaces (the exemption would
/// exempt nothing) and no EndpointSlice v1: `--webhooks` exits 2 naming the version.
#[tokio::test]
async fn kubernetes_1_20_refuses_webhooks_naming_the_version() {
    let bed = bed_reporting((1, 20)).await;
    let kubeconfig = bed.kubeconfig.display().to_string();
    for extra in [&[][..], &["--once"][..]] {
        let mut args = vec!["--kubeconfig", kubeconfig.as_str(), "--webhooks"];
        args.extend_from_slice(extra);
        let (code, _, err) = run_to_end(&args, WAIT).await;
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains(msg::WEBHOOKS_TOO_OLD) && err.contains("is v1.20.0: drop --webhooks"),
            "{args:?}: {err}"
        );
    }
    let (code, _, err) = run_to_end(
        &["status", "--kubeconfig", kubeconfig.as_str(), "--webhooks"],
        WAIT,
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is v1.20.0: drop --webhooks"), "{err}");
    assert!(
        bed.double.requests().iter().all(|r| r.method == "GET"),
        "nothing written"
    );
}

/// Without `--webhooks` (the default), a labelled configuration whose service is down is
/// never read, let alone written: metainit clears the labelled pod and asks the server
/// nothing about webhooks or endpoints.
#[tokio::test]
async fn without_the_flag_webhooks_are_never_looked_at() {
    let bed = Bed::modern().await;
    // Created before the webhook, which would refuse it.
    bed.double
        .create(
            "pods",
            "default",
            gated_pod("p", true, &["example.com/quota"]),
        )
        .unwrap();
    gatekeeper(&bed, false);
    let original = bed.double.get(VWC, "", "gk").unwrap();
    let metainit = bed.metainit(&[]);
    eventually("the labelled pod cleared", WAIT, || {
        bed.double
            .get("pods", "default", "p")
            .is_some_and(|p| p["spec"].get("schedulingGates").is_none())
    })
    .await;
    metainit.stop().await;
    assert_eq!(bed.double.get(VWC, "", "gk").unwrap(), original);
    let asked: Vec<String> = bed
        .double
        .requests()
        .into_iter()
        .map(|r| r.path_and_query)
        .filter(|p| p.contains("webhookconfigurations") || p.contains("endpointslices"))
        .collect();
    assert!(asked.is_empty(), "{asked:#?}");
}

/// `--once --webhooks`: an operator's one-shot repair. It decides on the endpoints as
/// they are now (no grace to wait for): exempts while the service is down, restores
/// byte-for-byte once it is back, prints a line of tallies, and exits 0.
#[tokio::test]
async fn once_exempts_now_and_a_later_once_restores_exactly() {
    let bed = Bed::modern().await;
    serve(&bed.double, "gk", "gk-svc", false);
    serve(&bed.double, "up", "up-svc", true);
    serve(&bed.double, "other", "other-svc", false);
    for (name, labelled, ns, svc) in [
        ("gk", true, "gk", "gk-svc"),
        ("up", true, "up", "up-svc"),
        // Down too, not labelled: it keeps refusing pods in team-a.
        ("unlabelled", false, "other", "other-svc"),
    ] {
        let mut c = config(
            name,
            labelled,
            &format!("{name}.example.com"),
            "Fail",
            ns,
            svc,
        );
        if !labelled {
            c["webhooks"][0]["namespaceSelector"] = json!({"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}
            ]});
        }
        bed.double.create(VWC, "", c).unwrap();
    }
    let original = entry(&bed, "gk");
    refused(&bed, "gk", "gk-controller").await;
    let kubeconfig = bed.kubeconfig.display().to_string();
    let once = |extra: &'static [&'static str]| {
        let mut args = vec!["--kubeconfig", kubeconfig.as_str(), "--once", "--webhooks"];
        args.extend_from_slice(extra);
        async move { run_to_end(&args, WAIT).await }
    };

    // Dry run: says what it would do, writes nothing.
    let (code, stdout, stderr) = once(&["--dry-run"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(
            "webhooks: exempted 0, restored 0, would exempt 1, would restore 0, failed 0"
        ),
        "{stdout}"
    );
    assert!(stderr.contains(msg::WOULD_EXEMPT), "{stderr}");
    assert!(patches_to(&bed, "validatingwebhookconfigurations", "gk").is_empty());

    let (code, stdout, stderr) = once(&[]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(msg::WEBHOOKS_TALLY), "{stdout}");
    assert!(
        stderr.contains(msg::EXEMPTED) && stderr.contains("down_for=unknown"),
        "{stderr}"
    );
    create_pod(&bed, "gk", "gk-controller")
        .await
        .expect("the webhook's own pod is let in");
    refused(&bed, "team-a", "web").await;
    for other in ["up", "unlabelled"] {
        assert!(
            patches_to(&bed, "validatingwebhookconfigurations", other).is_empty(),
            "{other} was written"
        );
    }
    let event = bed
        .double
        .events()
        .into_iter()
        .find(|e| e["involvedObject"]["name"] == "gk")
        .expect("an Event on the configuration");
    assert_eq!(event["reason"], "WebhookSelfExempted");
    assert!(
        event["message"]
            .as_str()
            .unwrap()
            .contains("had no ready endpoint when `metainit --once` looked"),
        "{event}"
    );

    // Run again while it is still down: nothing to do, nothing written.
    let (code, stdout, _) = once(&[]).await;
    assert_eq!(code, 0);
    assert!(
        stdout.contains("webhooks: exempted 0, restored 0"),
        "{stdout}"
    );
    assert_eq!(
        patches_to(&bed, "validatingwebhookconfigurations", "gk").len(),
        1
    );

    // The service is back: the next run restores exactly what was there.
    set_ready(&bed.double, "gk", "gk-svc", true);
    let (code, stdout, stderr) = once(&[]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("webhooks: exempted 0, restored 1"),
        "{stdout}"
    );
    let now = bed.double.get(VWC, "", "gk").unwrap();
    assert_eq!(now["webhooks"][0], original);
    assert!(now["metadata"].get("annotations").is_none(), "{now}");
    set_ready(&bed.double, "gk", "gk-svc", false);
    refused(&bed, "gk", "again").await;
}

/// A PATCH the server keeps refusing: `--once` tries until `--timeout`, then exits 1
/// naming the configuration, the error and the manifest that grants the right.
#[tokio::test]
async fn once_without_the_right_to_patch_exits_1_with_the_fix() {
    let bed = Bed::as_user(
        kube_double::Config::modern(),
        &["get *", "list *", "watch *", "create *"],
    )
    .await;
    serve(&bed.double, "gk", "gk-svc", false);
    bed.double
        .create(
            VWC,
            "",
            config("gk", true, "gk.example.com", "Fail", "gk", "gk-svc"),
        )
        .unwrap();
    let kubeconfig = bed.kubeconfig.display().to_string();
    let (code, stdout, stderr) = run_to_end(
        &[
            "--kubeconfig",
            &kubeconfig,
            "--once",
            "--webhooks",
            "--timeout",
            "2s",
        ],
        WAIT,
    )
    .await;
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
    assert!(
        line.contains("config=validatingwebhookconfigurations/gk")
            && line.contains("status.code=403")
            && line.contains(msg::WEBHOOKS_RBAC),
        "{line}"
    );
    assert!(
        bed.double.get(VWC, "", "gk").unwrap()["webhooks"][0]
            .get("namespaceSelector")
            .is_none_or(|s| s.get("matchExpressions").is_none())
    );
}

/// Without the right to list webhook configurations, `--once --webhooks` stops before
/// writing anything and names the manifest that grants it.
#[tokio::test]
async fn once_without_the_right_to_list_exits_2_naming_the_manifest() {
    let bed = Bed::as_user(
        kube_double::Config::modern(),
        &["get pods", "list pods", "patch pods", "create events"],
    )
    .await;
    bed.double
        .create(
            "pods",
            "default",
            gated_pod("held", true, &["example.com/g"]),
        )
        .unwrap();
    let kubeconfig = bed.kubeconfig.display().to_string();
    let (code, stdout, stderr) =
        run_to_end(&["--kubeconfig", &kubeconfig, "--once", "--webhooks"], WAIT).await;
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    let held = bed.double.get("pods", "default", "held").unwrap();
    assert_eq!(
        held["spec"]["schedulingGates"],
        json!([{"name": "example.com/g"}]),
        "nothing is written before the run stops"
    );
    assert!(
        stderr.contains("LIST mutatingwebhookconfigurations: forbidden")
            && stderr.contains(msg::WEBHOOKS_RBAC),
        "{stderr}"
    );
}

/// RBAC that has not caught up yet: the watches of the webhook configurations are
/// refused; `/readyz` and the log say which manifest grants them, and once it is applied
/// the exemption follows without a restart.
#[tokio::test]
async fn forbidden_until_rbac_webhooks_lands_then_exempted() {
    let pods_only = [
        "get pods",
        "list pods",
        "watch pods",
        "patch pods",
        "create events",
    ];
    let bed = Bed::as_user(kube_double::Config::modern(), &pods_only).await;
    serve(&bed.double, "gk", "gk-svc", false);
    bed.double
        .create(
            VWC,
            "",
            config("gk", true, "gk.example.com", "Fail", "gk", "gk-svc"),
        )
        .unwrap();
    let metainit = bed.metainit(&["--webhooks", "--webhook-grace", "1s"]);
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

    bed.double
        .set_tokens(Some([("user".to_string(), vec!["* *".to_string()])].into()));
    eventually("exempted once granted", WAIT, || {
        bed.double.get(VWC, "", "gk").unwrap()["webhooks"][0]["namespaceSelector"]
            == json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["gk"]}]})
    })
    .await;
    until_readyz(&addr, WAIT).await;
}

/// `metainit status --webhooks`: the webhooks that are down or exempted, and their state;
/// up ones, `Ignore` ones and unlabelled configurations are not listed.
/// What a user installs, and nothing more: the rights of manifests/rbac.yaml and
/// manifests/rbac-webhooks.yaml, read from the files. With them the daemon exempts and
/// restores, `--once` exempts, `status --webhooks` lists; without the second file the
/// same daemon is refused (so the first test is not passing on rights it was given
/// some other way).
#[tokio::test]
async fn the_shipped_rbac_files_grant_exactly_enough() {
    let both = manifest_perms(&["rbac.yaml", "rbac-webhooks.yaml"]);
    assert!(
        both.iter()
            .any(|p| p == "patch validatingwebhookconfigurations.admissionregistration.k8s.io"),
        "{both:?}"
    );
    let perms: Vec<&str> = both.iter().map(String::as_str).collect();
    let bed = Bed::as_user(kube_double::Config::modern(), &perms).await;
    gatekeeper(&bed, false);
    let original = entry(&bed, "gk");
    let kubeconfig = bed.kubeconfig.display().to_string();

    let (code, out, err) = run_to_end(
        &[
            "status",
            "--kubeconfig",
            &kubeconfig,
            "--webhooks",
            "-o",
            "json",
        ],
        WAIT,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(report["webhooks"][0]["state"], "failingClosed", "{report}");

    let (code, out, err) =
        run_to_end(&["--kubeconfig", &kubeconfig, "--once", "--webhooks"], WAIT).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("webhooks: exempted 1,"), "{out}");
    until_admitted(&bed, "gk", "exempted by --once").await;

    // The daemon restores it when the service is back, and exempts it again when it goes.
    let metainit = bed.metainit(&["--webhooks", "--webhook-grace", "1s"]);
    set_ready(&bed.double, "gk", "gk-svc", true);
    eventually("restored by the daemon", WAIT, || {
        entry(&bed, "gk") == original
    })
    .await;
    set_ready(&bed.double, "gk", "gk-svc", false);
    until_admitted(&bed, "gk", "exempted by the daemon").await;
    let problems = metainit.problems();
    assert!(problems.is_empty(), "{problems:#?}");
    // Stopped, it has written the Events it had (they trail the PATCHes).
    metainit.stop().await;
    assert_eq!(
        event_reasons(&bed, "gk"),
        [
            "WebhookSelfExempted",
            "WebhookRestored",
            "WebhookSelfExempted"
        ],
        "the Events are written with these rights too"
    );

    // rbac.yaml alone: the webhooks' watch is refused, naming the file that is missing.
    let rbac = manifest_perms(&["rbac.yaml"]);
    let perms: Vec<&str> = rbac.iter().map(String::as_str).collect();
    let bed = Bed::as_user(kube_double::Config::modern(), &perms).await;
    gatekeeper(&bed, false);
    let (code, _, err) = run_to_end(
        &[
            "--kubeconfig",
            &bed.kubeconfig.display().to_string(),
            "--once",
            "--webhooks",
        ],
        WAIT,
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("forbidden") && err.contains(msg::WEBHOOKS_RBAC),
        "{err}"
    );
}

#[tokio::test]
async fn status_lists_the_webhooks_that_are_down_and_their_state() {
    let bed = Bed::modern().await;
    serve(&bed.double, "gk", "gk-svc", false);
    serve(&bed.double, "up", "up-svc", true);
    for (name, labelled, policy, ns, svc) in [
        ("gk", true, "Fail", "gk", "gk-svc"),
        ("up", true, "Fail", "up", "up-svc"),
        ("ignore", true, "Ignore", "gk", "gk-svc"),
        ("unlabelled", false, "Fail", "gk", "gk-svc"),
    ] {
        let hook = format!("{name}.example.com");
        let c = config(name, labelled, &hook, policy, ns, svc);
        bed.double.create(VWC, "", c).unwrap();
    }
    let kubeconfig = bed.kubeconfig.display().to_string();
    let status = |extra: &'static [&'static str]| {
        let mut args = vec!["status", "--kubeconfig", kubeconfig.as_str(), "--webhooks"];
        args.extend_from_slice(extra);
        async move {
            let (code, stdout, stderr) = run_to_end(&args, WAIT).await;
            assert_eq!(code, 0, "{stdout}\n{stderr}");
            stdout
        }
    };
    let rows = |out: &str| -> Vec<String> {
        out.lines()
            .skip_while(|l| !l.starts_with("CONFIGURATION"))
            .skip(1)
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    };

    let out = status(&[]).await;
    assert_eq!(
        rows(&out),
        [format!(
            "validating/gk gk.example.com gk/gk-svc 0 {}gk",
            msg::FAILING_CLOSED
        )],
        "{out}"
    );

    // Exempted by metainit: the state says since when.
    let kc = kubeconfig.clone();
    let (code, _, stderr) = run_to_end(&["--kubeconfig", &kc, "--once", "--webhooks"], WAIT).await;
    assert_eq!(code, 0, "{stderr}");
    let out = status(&[]).await;
    let got = rows(&out);
    assert_eq!(got.len(), 1, "{out}");
    assert!(
        got[0].starts_with("validating/gk gk.example.com gk/gk-svc 0 gk exempted ")
            && got[0].ends_with(" ago"),
        "{out}"
    );

    // The service is back: restoring after the grace; and the same as JSON.
    set_ready(&bed.double, "gk", "gk-svc", true);
    let out = status(&[]).await;
    assert!(
        rows(&out)[0].ends_with("endpoints back: restoring after the grace"),
        "{out}"
    );
    let json: Value = serde_json::from_str(&status(&["-o", "json"]).await).unwrap();
    assert_eq!(json["webhooks"].as_array().map(Vec::len), Some(1), "{json}");
    let row = &json["webhooks"][0];
    assert_eq!(row["configuration"], "gk");
    assert_eq!(row["kind"], "validating");
    assert_eq!(row["state"], "restoring");
    assert_eq!(row["readyEndpoints"], 1);
    assert_eq!(row["namespace"], "gk");

    // Restored: nothing to list.
    let (code, _, stderr) = run_to_end(&["--kubeconfig", &kc, "--once", "--webhooks"], WAIT).await;
    assert_eq!(code, 0, "{stderr}");
    let out = status(&[]).await;
    assert!(out.contains(msg::NO_WEBHOOK_DOWN), "{out}");
    // Without the flag, no webhook part at all.
    let (_, plain, _) = run_to_end(&["status", "--kubeconfig", &kc, "-o", "json"], WAIT).await;
    let plain: Value = serde_json::from_str(&plain).unwrap();
    assert!(plain.get("webhooks").is_none(), "{plain}");

    let (code, _, stderr) = run_to_end(
        &[
            "status",
            "--kubeconfig",
            &kc,
            "--webhooks",
            "--mode",
            "initializers",
        ],
        WAIT,
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(msg::WEBHOOKS_TOO_OLD), "{stderr}");
}

/// A webhook renamed while exempted (a chart's new name for it, the served entry kept with
/// its exemption): the record follows the webhook to its new name, so nothing metainit
/// added is left unrecorded, and the webhook under its new name is restored, byte for
/// byte, once its service is back.
#[tokio::test]
async fn a_webhook_renamed_while_exempted_keeps_its_record_and_is_restored() {
    let bed = Bed::modern().await;
    gatekeeper(&bed, false);
    let mut wanted = entry(&bed, "gk");
    wanted["name"] = json!("check.gk.example.com");
    let metainit = bed.metainit(&["--webhooks", "--webhook-grace", "1s"]);
    until_admitted(&bed, "gk", "exempted").await;
    let mut renamed = bed.double.get(VWC, "", "gk").unwrap();
    renamed["webhooks"][0]["name"] = json!("check.gk.example.com");
    bed.double.update(VWC, "", renamed).expect("rename");
    eventually("the record under the new name", WAIT, || {
        bed.double.get(VWC, "", "gk").unwrap()["metadata"]["annotations"][ANNOTATION]
            .as_str()
            .is_some_and(|a| {
                a.contains("check.gk.example.com") && !a.contains("validate.gk.example.com")
            })
    })
    .await;
    set_ready(&bed.double, "gk", "gk-svc", true);
    eventually("restored under the new name", WAIT, || {
        let now = bed.double.get(VWC, "", "gk").unwrap();
        now["webhooks"][0] == wanted && now["metadata"].get("annotations").is_none()
    })
    .await;
    metainit.stop().await;
}

/// `/readyz` is about the process's own watches having listed once: a second labelled
/// configuration naming a new service starts that service's EndpointSlices watch, whose
/// first list (slow here) does not make the process unready.
#[tokio::test]
async fn readyz_stays_ready_while_a_new_services_watch_makes_its_first_list() {
    let bed = Bed::modern().await;
    gatekeeper(&bed, true);
    let metainit = bed.metainit(&["--webhooks", "--webhook-grace", "1s"]);
    let addr = metainit.admin_addr().await;
    until_readyz(&addr, WAIT).await;
    // Every answer from now on comes late: the new service's first list takes a while.
    bed.double.set_faults(kube_double::Faults {
        latency: Duration::from_millis(1500),
        ..kube_double::Faults::default()
    });
    serve(&bed.double, "gk2", "svc2", true);
    bed.double
        .create(
            VWC,
            "",
            config(
                "gk2",
                true,
                "validate.gk2.example.com",
                "Fail",
                "gk2",
                "svc2",
            ),
        )
        .expect("second configuration");
    let listed = || {
        bed.double.requests().iter().any(|r| {
            r.method == "GET"
                && r.status == 200
                && r.path_and_query
                    .starts_with("/apis/discovery.k8s.io/v1/namespaces/gk2/endpointslices")
                && !r.path_and_query.contains("watch=")
        })
    };
    let start = std::time::Instant::now();
    while !listed() {
        let (code, body) = admin_get(&addr, "/readyz").await;
        assert_eq!(code, 200, "while the new service's first list runs: {body}");
        assert!(
            start.elapsed() < WAIT,
            "the new service's EndpointSlices never listed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    metainit.stop().await;
}
