//! The command line against the real control plane: a zero `--timeout` still tries once,
//! booleans read from the environment, `--node-name`'s fallback as the Events name it,
//! `status`'s positional label key, and `KUBECONFIG`'s list with a missing file. Each test
//! is a scene of its own (tests/common/scene.rs). These ran on the double's modern
//! generation before; tests/cli.rs keeps what is refused before any request.

mod common;

use common::{
    LABEL,
    control_plane::{WAIT, until},
    gated_pod, run_to_end, run_to_end_env,
    scene::{Rights, Scene},
};
use serde_json::Value;

const GATE: &str = "example.com/g";
const NS: &str = "cli";

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_zero_timeout_tries_once_against_a_healthy_server() {
    let s = Scene::new(&[NS], Rights::Files).await;
    for args in [
        vec!["status", "--timeout", "0s"],
        vec!["--once", "--timeout", "0s"],
    ] {
        // Several times: a zero deadline used to race the first answer.
        for _ in 0..5 {
            let (code, _, stderr) = s.run(&args).await;
            assert_eq!(code, 0, "{args:?}: {stderr}");
        }
    }
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn booleans_from_the_environment() {
    let s = Scene::new(&[NS], Rights::Files).await;
    s.add(NS, &s.gated_pod("p", GATE));
    let args = ["--admin-addr", "127.0.0.1:0"];
    for (once, dry) in [("1", "YES"), ("true", "1"), ("Yes", "True")] {
        let env = [("METAINIT_ONCE", once), ("METAINIT_DRY_RUN", dry)];
        let (code, out, err) = s.run_env(&args, &env).await;
        assert_eq!(code, 0, "{env:?}: {err}");
        assert!(out.contains("would clear 1,"), "{env:?}: {out}");
    }
    assert_eq!(s.gates(NS, "p").await, [GATE], "a dry run cleared it");
    let env = [("METAINIT_ONCE", "yes"), ("METAINIT_DRY_RUN", "no")];
    let (code, out, err) = s.run_env(&args, &env).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cleared 1,"), "{out}");
    assert!(s.gates(NS, "p").await.is_empty());
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn node_name_falls_back_as_the_events_say() {
    let s = Scene::new(&[NS], Rights::Files).await;
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_ascii_lowercase();
    for (i, (env, want)) in [(Some("cp-9"), "cp-9"), (None, hostname.as_str())]
        .into_iter()
        .enumerate()
    {
        let name = format!("p{i}");
        s.add(NS, &s.gated_pod(&name, GATE));
        let env: Vec<(&str, &str)> = env.map(|e| ("NODE_NAME", e)).into_iter().collect();
        let (code, _, err) = s.run_env(&["--once", "--node-name", ""], &env).await;
        assert_eq!(code, 0, "{err}");
        // metainit's Event, not the scheduler's (`default-scheduler-HOST`).
        let event = until(&format!("{name}'s Event"), WAIT, || async {
            let events = s.pod_events(NS, &name).await;
            events
                .into_iter()
                .find(|e| e["reason"] == "SchedulingGatesCleared")
        })
        .await;
        assert_eq!(event["reportingInstance"], want, "{env:?}: {event:#}");
    }
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn status_takes_the_positional_label_key() {
    let s = Scene::new(&[NS], Rights::Files).await;
    let mine = format!("t{}.example.com/mine", s.id);
    let mut p = gated_pod("p", false, &[GATE]);
    p["metadata"]["labels"][&mine] = "x".into();
    s.add(NS, &p);
    let kc = s.kubeconfig.display().to_string();
    let labelled = |out: &str| {
        let report: Value = serde_json::from_str(out).expect("json");
        let items = report["items"].as_array().expect("items");
        assert_eq!(items.len(), 1, "{report:#}");
        (report["labelKey"].clone(), items[0]["labelled"].clone())
    };
    let args = ["--kubeconfig", &kc, "-n", &s.home, "-o", "json"];
    let with_key: Vec<&str> = ["status", &mine].iter().chain(&args).copied().collect();
    let (code, out, err) = run_to_end(&with_key, WAIT).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(labelled(&out), (mine.as_str().into(), true.into()));
    let without: Vec<&str> = ["status"].iter().chain(&args).copied().collect();
    let (code, out, err) = run_to_end(&without, WAIT).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(labelled(&out), (LABEL.into(), false.into()));
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn kubeconfig_variable_skips_missing_files_as_kubectl_does() {
    let s = Scene::new(&[NS], Rights::Files).await;
    s.add(NS, &s.gated_pod("p", GATE));
    let list = format!("/nonexistent/config:{}", s.kubeconfig.display());
    let args = ["--once", "--label-key", &s.key, "--namespace", &s.home];
    let (code, out, err) = run_to_end_env(&args, &[("KUBECONFIG", list.as_str())], WAIT).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("cleared 1,"), "{out}");
    assert!(s.gates(NS, "p").await.is_empty());
}
