//! `--once --webhooks` and `status --webhooks` on the real control plane, and a server
//! that reports Kubernetes 1.23 (the real one behind the fault proxy of
//! tests/common/fuzz.rs, which rewrites only `/version`): the operator's one-shot repair,
//! what `status` lists, and the webhooks-only mode of 1.21 to 1.25, asserted by the pods the
//! real server admits or refuses. Each test is a scene of its own on the shared control
//! plane (tests/common/webhooks.rs); these ran on the double's admission imitation before.

mod common;

use common::{
    control_plane::{WAIT, until},
    msg,
    webhooks::{Kind, Rights, Scene},
};
use serde_json::{Value, json};

/// `--once --webhooks`: an operator's one-shot repair. It decides on the endpoints as
/// they are now (no grace to wait for): exempts while the service is down, restores
/// byte-for-byte once it is back, prints a line of tallies, and exits 0.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn once_exempts_now_and_a_later_once_restores_exactly() {
    let s = Scene::new(&["gk", "up", "other", "team"], Rights::Files).await;
    s.serve("gk", "gk-svc", false);
    s.serve("up", "up-svc", true);
    s.serve("other", "other-svc", false);
    let gk = s.config("gk", true, "gk.example.com", "Fail", "gk", "gk-svc");
    s.create(Kind::Validating, &gk).await;
    // Up: it intercepts only its own namespace, where no pod is created (the server would
    // call its endpoint).
    let mut up = s.config("up", true, "up.example.com", "Fail", "up", "up-svc");
    up["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"] = json!([s.ns("up")]);
    s.create(Kind::Validating, &up).await;
    // Down too, not labelled: it keeps refusing pods in team.
    let mut other = s.config(
        "unlabelled",
        false,
        "unlabelled.example.com",
        "Fail",
        "other",
        "other-svc",
    );
    other["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"] =
        json!([s.ns("team")]);
    s.create(Kind::Validating, &other).await;
    let original = s.get(Kind::Validating, "gk").await;
    s.refused("gk", "gk-controller").await;

    // Dry run: says what it would do, writes nothing.
    let (code, stdout, stderr) = s.run(&["--once", "--webhooks", "--dry-run"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(
            "webhooks: exempted 0, restored 0, would exempt 1, would restore 0, failed 0"
        ),
        "{stdout}"
    );
    assert!(stderr.contains(msg::WOULD_EXEMPT), "{stderr}");
    assert!(s.writes().is_empty(), "{:#?}", s.writes());

    let (code, stdout, stderr) = s.run(&["--once", "--webhooks"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(msg::WEBHOOKS_TALLY), "{stdout}");
    assert!(
        stderr.contains(msg::EXEMPTED) && stderr.contains("down_for=unknown"),
        "{stderr}"
    );
    s.until_admitted("gk", "the webhook's own pod let in").await;
    s.refused("team", "web").await;
    let writes = until("the PATCH audited", WAIT, || async {
        let w = s.writes();
        (!w.is_empty()).then_some(w)
    })
    .await;
    assert_eq!(writes.len(), 1, "only gk written: {writes:#?}");
    assert!(writes[0].contains(&s.name("gk")), "{writes:#?}");
    let events = until("an Event on the configuration", WAIT, || async {
        let e = s.events("gk").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(events[0]["reason"], "WebhookSelfExempted");
    assert!(
        events[0]["message"]
            .as_str()
            .unwrap()
            .contains("had no ready endpoint when `metainit --once` looked"),
        "{}",
        events[0]
    );

    // Run again while it is still down: nothing to do, nothing written.
    let (code, stdout, _) = s.run(&["--once", "--webhooks"]).await;
    assert_eq!(code, 0);
    assert!(
        stdout.contains("webhooks: exempted 0, restored 0"),
        "{stdout}"
    );
    assert_eq!(s.patches(Kind::Validating, "gk").len(), 1);

    // The service is back: the next run restores exactly what was there. (No pod is
    // created after this: the server would call the ready endpoint.)
    s.set_ready("gk", "gk-svc", true).await;
    let (code, stdout, stderr) = s.run(&["--once", "--webhooks"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("webhooks: exempted 0, restored 1"),
        "{stdout}"
    );
    let now = s.get(Kind::Validating, "gk").await;
    assert_eq!(now["webhooks"], original["webhooks"]);
    assert!(now["metadata"].get("annotations").is_none(), "{now}");
    s.check_network();
}

/// `metainit status --webhooks`: the webhooks that are down or exempted, and their state;
/// up ones, `Ignore` ones and unlabelled configurations are not listed.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn status_lists_the_webhooks_that_are_down_and_their_state() {
    let s = Scene::new(&["gk", "up"], Rights::Files).await;
    s.serve("gk", "gk-svc", false);
    s.serve("up", "up-svc", true);
    for (name, labelled, policy, ns, svc) in [
        ("gk", true, "Fail", "gk", "gk-svc"),
        ("up", true, "Fail", "up", "up-svc"),
        ("ignore", true, "Ignore", "gk", "gk-svc"),
        ("unlabelled", false, "Fail", "gk", "gk-svc"),
    ] {
        let hook = format!("{name}.example.com");
        let c = s.config(name, labelled, &hook, policy, ns, svc);
        s.create(Kind::Validating, &c).await;
    }
    let status = |extra: &'static [&'static str]| {
        let mut args = vec!["status", "--webhooks"];
        args.extend_from_slice(extra);
        let s = &s;
        async move {
            let (code, stdout, stderr) = s.run(&args).await;
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
    let (gk, ns) = (s.name("gk"), s.ns("gk").to_string());

    let out = status(&[]).await;
    assert_eq!(
        rows(&out),
        [format!(
            "validating/{gk} gk.example.com {ns}/gk-svc 0 {}{ns}",
            msg::FAILING_CLOSED
        )],
        "{out}"
    );

    // Exempted by metainit: the state says since when.
    let (code, _, stderr) = s.run(&["--once", "--webhooks"]).await;
    assert_eq!(code, 0, "{stderr}");
    let out = status(&[]).await;
    let got = rows(&out);
    assert_eq!(got.len(), 1, "{out}");
    assert!(
        got[0].starts_with(&format!(
            "validating/{gk} gk.example.com {ns}/gk-svc 0 {ns} exempted "
        )) && got[0].ends_with(" ago"),
        "{out}"
    );

    // The service is back: restoring after the grace; and the same as JSON.
    s.set_ready("gk", "gk-svc", true).await;
    let out = status(&[]).await;
    assert!(
        rows(&out)[0].ends_with("endpoints back: restoring after the grace"),
        "{out}"
    );
    let json: Value = serde_json::from_str(&status(&["-o", "json"]).await).unwrap();
    assert_eq!(json["webhooks"].as_array().map(Vec::len), Some(1), "{json}");
    let row = &json["webhooks"][0];
    assert_eq!(row["configuration"], gk.as_str());
    assert_eq!(row["kind"], "validating");
    assert_eq!(row["state"], "restoring");
    assert_eq!(row["readyEndpoints"], 1);
    assert_eq!(row["namespace"], ns.as_str());

    // Restored: nothing to list.
    let (code, _, stderr) = s.run(&["--once", "--webhooks"]).await;
    assert_eq!(code, 0, "{stderr}");
    let out = status(&[]).await;
    assert!(out.contains(msg::NO_WEBHOOK_DOWN), "{out}");
    // Without the flag, no webhook part at all.
    let (_, plain, _) = s.run(&["status", "-o", "json"]).await;
    let plain: Value = serde_json::from_str(&plain).unwrap();
    assert!(plain.get("webhooks").is_none(), "{plain}");

    let (code, _, stderr) = s
        .run(&["status", "--webhooks", "--mode", "initializers"])
        .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(msg::WEBHOOKS_TOO_OLD), "{stderr}");
    s.check_network();
}

/// 1.21 to 1.25: webhooks and EndpointSlice v1, but neither initializers nor gates. The
/// webhook deadlock is there all the same: `--webhooks` runs with nothing else to do, as
/// a daemon, `--once` and `status`; without `--webhooks` there is nothing to run for. The
/// real server, its `/version` answered by the proxy as 1.23's.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn kubernetes_1_21_to_1_25_runs_the_webhooks_only() {
    let mut s = Scene::new(&["gk", "team"], Rights::Files).await;
    s.gatekeeper(false).await;
    let proxy = s.behind_version("v1.23.17").await;

    let (code, _, err) = s.run(&["--once"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("Kubernetes 1.23 has neither initializers"),
        "{err}"
    );
    let (code, _, err) = s.run(&["--webhooks", "--release-gate", "g=1h"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("means neither (Kubernetes 1.14 to 1.25)"),
        "{err}"
    );
    let (code, out, err) = s.run(&["status", "--webhooks", "-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(report["mode"], "webhooks only", "{report}");
    assert_eq!(
        report["webhooks"][0]["webhook"], "validate.gk.example.com",
        "{report}"
    );

    // The daemon: exempts after the grace, restores when the service is back.
    let original = s.entry("gk").await;
    let metainit = s.metainit(&["--webhooks", "--webhook-grace", "1s"]);
    metainit
        .logged("webhooks only", |l| {
            l.contains("watching the labelled webhooks only")
        })
        .await;
    s.until_admitted("gk", "exempted on 1.23").await;
    s.refused("team", "web").await;
    s.set_ready("gk", "gk-svc", true).await;
    until("restored", WAIT, || async {
        (s.entry("gk").await == original).then_some(())
    })
    .await;
    let problems = metainit.problems();
    assert!(problems.is_empty(), "{problems:#?}");
    metainit.stop().await;

    // `--once`: only the webhooks' tallies, no line about objects to clear.
    s.set_ready("gk", "gk-svc", false).await;
    let (code, out, err) = s.run(&["--once", "--webhooks"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["webhooks: exempted 1, restored 0, would exempt 0, would restore 0, failed 0"],
        "{out}"
    );
    // What metainit saw was the proxy's 1.23: every /version it asked was answered so.
    assert!(
        proxy.seen().iter().any(|r| r.what.ends_with(" /version")),
        "metainit never asked /version through the proxy"
    );
    s.check_network();
}
