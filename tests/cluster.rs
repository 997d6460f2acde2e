//! metainit against a real control plane: kube-apiserver, etcd and kube-scheduler built
//! from their Go modules and started on loopback by scripts/control-plane.sh (see
//! tests/common/control_plane.rs). Every assertion reads the server's state as its admin
//! sees it, or what kubectl prints. metainit runs as the user `metainit` (a client
//! certificate, as `kubeadm kubeconfig user --client-name=metainit` makes it) with exactly
//! manifests/rbac.yaml, or as the Deployment's ServiceAccount with a TokenRequest token.

mod common;

use std::time::SystemTime;

use common::{
    LABEL, admin_get,
    control_plane::{ControlPlane, WAIT, condition, gate_names, patched_by, scheduled, until},
    gated_pod, metrics_until, run_to_end,
};
use serde_json::{Value, json};

const GATE_A: &str = "example.com/a";
const GATE_B: &str = "example.com/b";

/// What `kubectl get events` prints for the namespace, one line per Event.
fn events(cp: &ControlPlane, ns: &str) -> String {
    cp.kubectl_ok(&[
        "get",
        "events",
        "-n",
        ns,
        "-o",
        "custom-columns=OBJECT:.involvedObject.name,REASON:.reason,SOURCE:.source.component,MESSAGE:.message",
        "--no-headers",
    ])
}

/// Waits until `kubectl get events` shows a line with every one of `words`.
async fn event_shown(cp: &ControlPlane, ns: &str, words: &[&str]) -> String {
    until(
        &format!("an Event with {words:?} in {ns}"),
        WAIT,
        || async {
            let text = events(cp, ns);
            text.lines()
                .find(|l| words.iter().all(|w| l.contains(w)))
                .map(str::to_string)
        },
    )
    .await
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_labelled_gated_pod_is_cleared_with_exactly_rbac_yaml_and_then_scheduled() {
    let cp = ControlPlane::shared().with_rbac();
    let ns = cp.namespace("cleared");
    cp.create(&ns, &gated_pod("labelled", true, &[GATE_A, GATE_B]));
    cp.create(&ns, &gated_pod("unlabelled", false, &[GATE_A]));
    let pods = cp.pods(&ns).await;
    let created = pods.get("labelled").await.expect("labelled pod");
    assert_eq!(
        condition(&created, "PodScheduled"),
        Some(("False".into(), Some("SchedulingGated".into()))),
        "the real server marks a gated pod at create"
    );

    let metainit = cp.metainit(&cp.metainit, &["--namespace", &ns]);
    let pod = scheduled(&pods, "labelled").await;
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    assert!(
        matches!(node.as_deref(), Some("node-a" | "node-b")),
        "kube-scheduler bound it to a node: {node:?}"
    );
    metainit
        .logged("the clearing logged", |l| {
            l.contains("cleared") && l.contains("labelled")
        })
        .await;
    let line = event_shown(cp, &ns, &["labelled", "SchedulingGatesCleared"]).await;
    assert!(
        line.contains("metainit") && line.contains(GATE_A) && line.contains(GATE_B),
        "the Event names metainit and both gates: {line}"
    );
    let table = cp.kubectl_ok(&["get", "pods", "-n", &ns, "-o", "wide"]);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("unlabelled ") && l.contains("SchedulingGated")),
        "kubectl shows the unlabelled pod still gated:\n{table}"
    );
    let unlabelled = pods.get("unlabelled").await.expect("unlabelled");
    assert_eq!(gate_names(&unlabelled), [GATE_A], "never touched");
    assert!(unlabelled.spec.and_then(|s| s.node_name).is_none());

    let status = metainit.stop().await;
    assert!(status.success(), "metainit exits 0 on SIGTERM: {status:?}");
    assert_eq!(
        patched_by(cp, "metainit", &ns),
        ["labelled"],
        "one PATCH, on the labelled pod only (the API server's audit log)"
    );
}

/// Whether the API server's audit log shows a 403 to the user metainit's list of the pods
/// of `ns`.
fn list_forbidden(cp: &ControlPlane, ns: &str) -> bool {
    cp.audit("metainit").iter().any(|e| {
        e["stage"] == "ResponseComplete"
            && e["verb"] == "list"
            && e["objectRef"]["resource"] == "pods"
            && e["objectRef"]["namespace"] == ns
            && e["responseStatus"]["code"] == 403
    })
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn without_the_binding_metainit_says_what_to_grant_and_clears_once_it_is_applied() {
    // A control plane of its own: this test is the only one that runs before
    // manifests/rbac.yaml is applied.
    let cp = ControlPlane::own();
    let ns = cp.namespace("unbound");
    cp.create(&ns, &gated_pod("held", true, &[GATE_A]));
    let pods = cp.pods(&ns).await;

    let metainit = cp.metainit(&cp.metainit, &["--namespace", &ns]);
    // The server's side: it answered metainit's list of the pods with 403 (its audit log).
    until(
        "a 403 to metainit's list of pods in the audit log",
        WAIT,
        || async { list_forbidden(&cp, &ns).then_some(()) },
    )
    .await;
    let forbidden = format!(
        "pods is forbidden: User \\\"metainit\\\" cannot list resource \\\"pods\\\" in API group \\\"\\\" in the namespace \\\"{ns}\\\""
    );
    metainit
        .logged("the real 403 and what to grant", |l| {
            (l.contains(&forbidden) || l.contains(&forbidden.replace('\\', "")))
                && l.contains("manifests/rbac.yaml")
        })
        .await;
    let addr = metainit.admin_addr().await;
    let (code, body) = admin_get(&addr, "/readyz").await;
    assert_eq!(code, 503, "not ready while forbidden: {body}");
    assert!(
        body.contains("forbidden") && body.contains("manifests/rbac.yaml"),
        "/readyz says why: {body}"
    );
    let held = pods.get("held").await.expect("pod");
    assert_eq!(
        gate_names(&held),
        [GATE_A],
        "nothing cleared without rights"
    );

    cp.apply_manifest("manifests/rbac.yaml");
    scheduled(&pods, "held").await;
    until("/readyz ready", WAIT, || async {
        (admin_get(&addr, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    assert!(metainit.stop().await.success());
}

/// Runs metainit to its end as the user metainit: exit code, stdout, stderr.
async fn run(cp: &ControlPlane, args: &[&str]) -> (i32, String, String) {
    let kubeconfig = cp.metainit.display().to_string();
    let mut all = vec!["--kubeconfig", &kubeconfig];
    all.extend(args);
    run_to_end(&all, WAIT).await
}

async fn run_status(cp: &ControlPlane, args: &[&str]) -> (i32, String, String) {
    let kubeconfig = cp.metainit.display().to_string();
    let mut all = vec!["status", "--kubeconfig", &kubeconfig];
    all.extend(args);
    run_to_end(&all, WAIT).await
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn once_status_dry_run_and_only_on_the_real_server() {
    let cp = ControlPlane::shared().with_rbac();
    let ns = cp.namespace("once");
    cp.create(&ns, &gated_pod("both", true, &[GATE_A, GATE_B]));
    cp.create(&ns, &gated_pod("one", true, &[GATE_A]));
    cp.create(&ns, &gated_pod("other", false, &[GATE_A]));
    let pods = cp.pods(&ns).await;

    // status reads every held pod in the namespace, labelled or not.
    let (code, out, err) = run_status(cp, &["--namespace", &ns, "-o", "json"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let report: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report["mode"], "scheduling-gates", "{out}");
    let mut names: Vec<&str> = report["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["name"].as_str())
        .collect();
    names.sort();
    assert_eq!(names, ["both", "one", "other"], "{out}");
    assert_eq!(report["byName"], json!({GATE_A: 3, GATE_B: 1}), "{out}");
    let (code, table, err) = run_status(cp, &["--namespace", &ns]).await;
    assert_eq!(code, 0, "{err}");
    assert!(table.starts_with("KIND   NAME"), "{table}");
    assert!(
        table.contains(&format!(
            "3 held back (2 labelled {LABEL}): 3 by {GATE_A}, 1 by {GATE_B}; oldest Pod"
        )),
        "{table}"
    );

    // --dry-run changes nothing.
    let (code, _, err) = run(cp, &["--once", "--dry-run", "--namespace", &ns]).await;
    assert_eq!(code, 0, "{err}");
    for (name, gates) in [
        ("both", vec![GATE_A, GATE_B]),
        ("one", vec![GATE_A]),
        ("other", vec![GATE_A]),
    ] {
        assert_eq!(gate_names(&pods.get(name).await.unwrap()), gates, "{name}");
    }
    assert!(patched_by(cp, "metainit", &ns).is_empty(), "{err}");

    // --only clears the named gate and keeps the others.
    let (code, _, err) = run(cp, &["--once", "--only", GATE_A, "--namespace", &ns]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(gate_names(&pods.get("both").await.unwrap()), [GATE_B]);
    scheduled(&pods, "one").await;
    assert_eq!(gate_names(&pods.get("other").await.unwrap()), [GATE_A]);

    let (code, _, err) = run(cp, &["--once", "--namespace", &ns]).await;
    assert_eq!(code, 0, "{err}");
    scheduled(&pods, "both").await;
    assert_eq!(gate_names(&pods.get("other").await.unwrap()), [GATE_A]);
    let line = event_shown(cp, &ns, &["one", "SchedulingGatesCleared"]).await;
    assert!(line.contains(GATE_A) && !line.contains(GATE_B), "{line}");
    event_shown(cp, &ns, &["both", "SchedulingGatesCleared", GATE_B]).await;

    let (code, out, err) = run_status(cp, &["--namespace", &ns]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("1 held back (0 labelled {LABEL}): 1 by {GATE_A}")),
        "{out}"
    );
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn orphaned_gates_are_released_by_age_from_the_servers_creation_time() {
    let cp = ControlPlane::shared().with_rbac();
    let ns = cp.namespace("orphans");
    let orphan = "example.com/orphan";
    let watched = "example.com/watched";
    cp.create(&ns, &gated_pod("orphaned", false, &[orphan, GATE_B]));
    cp.create(&ns, &gated_pod("watched", false, &[watched]));
    let pods = cp.pods(&ns).await;
    let created = pods
        .get("orphaned")
        .await
        .unwrap()
        .metadata
        .creation_timestamp
        .expect("the server sets creationTimestamp");

    let rule = format!("{orphan}=3s");
    let metainit = cp.metainit(
        &cp.metainit,
        &[
            "--namespace",
            &ns,
            "--release-gate",
            &rule,
            "--watch-gates",
            watched,
        ],
    );
    let addr = metainit.admin_addr().await;
    metrics_until(&addr, "the watched gate counted", WAIT, |m| {
        m.contains(&format!("metainit_gated_pods{{gate=\"{watched}\"}} 1"))
    })
    .await;
    let released = until("the orphaned gate released", WAIT, || async {
        let pod = pods.get("orphaned").await.ok()?;
        (gate_names(&pod) == [GATE_B]).then(SystemTime::now)
    })
    .await;
    let age = released
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - created.0.as_second() as f64;
    // creationTimestamp has whole seconds: the pod may be up to 1 s older than it reads.
    assert!(
        age >= 3.0 - 1.0,
        "released {age:.1}s after creation, not before 3s"
    );
    event_shown(cp, &ns, &["orphaned", "SchedulingGateReleased", orphan]).await;
    assert_eq!(
        gate_names(&pods.get("watched").await.unwrap()),
        [watched],
        "--watch-gates releases nothing"
    );
    assert!(metainit.stop().await.success());
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn the_deployment_form_is_accepted_and_its_service_account_clears_pods_in_kube_system() {
    let cp = ControlPlane::shared();
    let base = format!("{}/manifests/deployment", env!("CARGO_MANIFEST_DIR"));
    let out = cp.kubectl_ok(&["apply", "-k", &base]);
    for made in [
        "serviceaccount/metainit",
        "clusterrole.rbac.authorization.k8s.io/metainit-deployment",
        "clusterrolebinding.rbac.authorization.k8s.io/metainit-deployment",
        "deployment.apps/metainit",
        "poddisruptionbudget.policy/metainit",
        "service/metainit",
    ] {
        assert!(out.contains(made), "{made} applied: {out}");
    }
    let priority = cp.kubectl_ok(&[
        "get",
        "deployment",
        "metainit",
        "-n",
        "kube-system",
        "-o",
        "jsonpath={.spec.template.spec.priorityClassName}",
    ]);
    assert_eq!(priority, "system-cluster-critical");
    cp.kubectl_ok(&["get", "priorityclass", "system-cluster-critical"]);

    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = cp.service_account_kubeconfig(dir.path(), "kube-system", "metainit");
    let name = format!("gated-{}", std::process::id());
    cp.create("kube-system", &gated_pod(&name, true, &[GATE_A]));
    let metainit = cp.metainit(&kubeconfig, &["--namespace", "kube-system"]);
    let pods = cp.pods("kube-system").await;
    scheduled(&pods, &name).await;
    event_shown(cp, "kube-system", &[&name, "SchedulingGatesCleared"]).await;
    assert!(metainit.stop().await.success());
    assert_eq!(
        patched_by(
            cp,
            "system:serviceaccount:kube-system:metainit",
            "kube-system"
        ),
        [name.as_str()]
    );
    pods.delete(&name, &Default::default())
        .await
        .expect("deleted");
}
