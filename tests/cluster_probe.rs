//! `metainit probe SERVICE` on the real control plane: the real server's Service and the
//! pods it selects, with a real HTTP listener on loopback as each pod's target port (a pod's
//! IP may be loopback, as a hostNetwork pod's is on a node whose address is; nothing here
//! may dial outside 127.0.0.0/8). No kubelet runs: each pod is bound to the shared control
//! plane's Node `node-a` by the test (POST pods/NAME/binding; its scheduler is one that does
//! not run, so kube-scheduler does not race it), and what a kubelet would report (podIP,
//! the Ready condition) is written by the test through the status subresource. Node-a and
//! node-b are scripts/control-plane.sh's (a Node of a test's own would take other tests'
//! pods). These ran on the API-server double before.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU16, Ordering},
    },
    time::Duration,
};

use common::{
    control_plane::{WAIT, until},
    run_to_end,
    scene::{Rights, Scene},
};
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMIT: Duration = Duration::from_secs(30);
const SVC: &str = "metainit-metrics";
const NODE: &str = "node-a";
const OTHER_NODE: &str = "node-b";

/// An HTTP server on loopback answering every request with the code it is set to, and
/// with what metainit's /readyz says before its first list when that is not 200.
struct Endpoint {
    port: u16,
    code: Arc<AtomicU16>,
    task: tokio::task::JoinHandle<()>,
}

impl Endpoint {
    async fn start(code: u16) -> Endpoint {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let code = Arc::new(AtomicU16::new(code));
        let answer = code.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let code = answer.load(Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    let body = if code == 200 {
                        "ok"
                    } else {
                        "not ready: first list of pods not done\n"
                    };
                    let text = format!(
                        "HTTP/1.1 {code} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(text.as_bytes()).await;
                });
            }
        });
        Endpoint { port, code, task }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A port on loopback nothing listens on.
async fn closed_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

fn service(ns: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": SVC, "namespace": ns},
        "spec": {"selector": {"app": "probed"},
                 "ports": [{"name": "metrics", "port": 10275, "targetPort": "admin"}]},
    })
}

/// A pod the Service selects, its container port `admin` being `port`, left to a scheduler
/// that does not run (the test binds it).
fn pod(name: &str, port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "probed"}},
        "spec": {"schedulerName": "bound-by-the-test",
                 "containers": [{"name": "metainit", "image": "metainit",
                                 "ports": [{"name": "admin", "containerPort": port}]}]},
    })
}

/// Creates `pod` in namespace `ns` (full name), binds it to `node` and writes the status a
/// kubelet on a node whose address is 127.0.0.1 would: Running at 127.0.0.1 (no IP for a
/// hostNetwork pod: its node reports no address), Ready or not.
async fn add(s: &Scene, ns: &str, pod: &Value, node: &str, ready: bool) {
    let name = pod["metadata"]["name"].as_str().expect("a name");
    s.cp.create(ns, pod);
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    let req = http::Request::post(format!("/api/v1/namespaces/{ns}/pods/{name}/binding"))
        .header("content-type", "application/json")
        .body(binding.to_string().into_bytes())
        .expect("request");
    s.send(req)
        .await
        .unwrap_or_else(|e| panic!("binding {name}: {e:?}"));
    let mut status = json!({
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
    });
    if pod["spec"]["hostNetwork"] != json!(true) {
        status["podIP"] = json!("127.0.0.1");
        status["podIPs"] = json!([{"ip": "127.0.0.1"}]);
    }
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(s.admin.clone(), ns);
    let patch = json!({"status": status});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("status of {name}: {e}"));
}

/// A pod of the Service in the scene's namespace at 127.0.0.1 on `port`, not Ready.
async fn add_pod(s: &Scene, name: &str, port: u16) {
    add(s, &s.home, &pod(name, port), NODE, false).await;
}

async fn probe(s: &Scene, args: &[&str]) -> (i32, String, String) {
    let kc = s.kubeconfig.display().to_string();
    let mut all = vec!["probe", "--kubeconfig", &kc, "--timeout", "5s"];
    all.extend_from_slice(args);
    run_to_end(&all, LIMIT).await
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn every_endpoint_must_answer_200() {
    let s = Scene::new(&["probe"], Rights::Rules(reads(true))).await;
    let ns = s.home.clone();
    let up = Endpoint::start(200).await;
    s.add("probe", &service(&ns));
    add_pod(&s, "metrics-a", up.port).await;
    let url = format!("http://127.0.0.1:{}/readyz", up.port);

    // 200, from a pod that is not Ready: probed all the same.
    let (code, out, err) = probe(&s, &[SVC, "-n", &ns]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        out,
        format!(
            "{url} (pod metrics-a, not ready): 200\nall 1 endpoints of service {ns}/{SVC} answered 200 on /readyz\n"
        )
    );

    // 503: exit 1, the code and the body's reason.
    up.code.store(503, Ordering::SeqCst);
    let (code, out, err) = probe(&s, &[SVC, "-n", &ns]).await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert_eq!(
        out,
        format!("{url} (pod metrics-a, not ready): 503: not ready: first list of pods not done\n")
    );
    assert!(
        err.contains(&format!(
            "1 of 1 endpoints of service {ns}/{SVC} did not answer 200 on /readyz"
        )),
        "{err}"
    );

    // One endpoint up, one on a closed port: exit 1, each line says which.
    up.code.store(200, Ordering::SeqCst);
    let dead = closed_port().await;
    add_pod(&s, "metrics-b", dead).await;
    let (code, out, err) = probe(&s, &[SVC, "-n", &ns]).await;
    assert_eq!(code, 1, "{out}\n{err}");
    let dead_url = format!("http://127.0.0.1:{dead}/readyz");
    assert!(
        out.contains(&format!("{url} (pod metrics-a, not ready): 200\n")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "{dead_url} (pod metrics-b, not ready): connection refused\n"
        )),
        "{out}"
    );
    assert!(err.contains("1 of 2 endpoints"), "{err}");

    // Another path, and only the closed port left (deleted at once: no kubelet confirms a
    // bound pod's graceful deletion here).
    s.pods("probe")
        .delete("metrics-a", &DeleteParams::default().grace_period(0))
        .await
        .expect("metrics-a deleted");
    until("metrics-a gone", WAIT, || async {
        s.pods("probe")
            .get_opt("metrics-a")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let (code, out, err) = probe(&s, &[SVC, "-n", &ns, "--path", "/healthz"]).await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert_eq!(
        out,
        format!("http://127.0.0.1:{dead}/healthz (pod metrics-b, not ready): connection refused\n")
    );
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn no_endpoint_a_missing_service_and_a_missing_port() {
    let s = Scene::new(&["probe"], Rights::Rules(reads(true))).await;
    let ns = s.home.clone();
    s.add("probe", &service(&ns));

    // No pod: exit 1, "no endpoints".
    let (code, out, err) = probe(&s, &[SVC, "-n", &ns]).await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains(&format!("service {ns}/{SVC} has no endpoints")),
        "{err}"
    );
    // Pods, none of them selected: the same.
    let mut other = pod("other", 1);
    other["metadata"]["labels"] = json!({"app": "other"});
    s.add("probe", &other);
    let (code, _, err) = probe(&s, &[SVC, "-n", &ns]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("has no endpoints"), "{err}");

    // No such Service: exit 2, named with its namespace.
    let (code, out, err) = probe(&s, &["nosuch", "-n", &ns]).await;
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains(&format!(
            "service \"nosuch\" not found in namespace \"{ns}\": check the name, and give its namespace with -n"
        )),
        "{err}"
    );

    // No port of that name: exit 2, the ports it has.
    let (code, _, err) = probe(&s, &[SVC, "-n", &ns, "--port", "http"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "service {ns}/{SVC} has no port named 'http' (its ports: 'metrics'): pass --port NAME"
        )),
        "{err}"
    );

    // A bad flag value: exit 2, the rule.
    let (code, _, err) = probe(&s, &[SVC, "--path", "readyz"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a path begins with '/'"), "{err}");
    let (code, _, err) = run_to_end(&["probe", SVC, "--timeout", "0s"], LIMIT).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("must be more than 0s"), "{err}");
}

/// The rules of the chart's test pod (get services, list pods), or the first alone.
fn reads(list_pods: bool) -> Value {
    let mut rules = vec![json!({"apiGroups": [""], "resources": ["services"], "verbs": ["get"]})];
    if list_pods {
        rules.push(json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}));
    }
    json!(rules)
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn the_namespace_is_the_contexts_and_two_reads_are_all_it_needs() {
    // The rights the chart's test pod has: get services, list pods.
    let s = Scene::new(&["probe"], Rights::Rules(reads(true))).await;
    let ns = s.home.clone();
    let up = Endpoint::start(200).await;
    s.add("probe", &service(&ns));
    add_pod(&s, "metrics-a", up.port).await;

    // The kubeconfig's context names no namespace: `default`, and not found there.
    let (code, _, err) = probe(&s, &[SVC]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not found in namespace \"default\""), "{err}");

    // The context's namespace set to the scene's: found without -n.
    let text = std::fs::read_to_string(&s.kubeconfig).unwrap();
    let context = "context: {cluster: c, user: u}";
    assert!(text.contains(context), "{text}");
    let with_ns = format!("context: {{cluster: c, user: u, namespace: {ns}}}");
    std::fs::write(&s.kubeconfig, text.replace(context, &with_ns)).unwrap();
    let (code, out, err) = probe(&s, &[SVC]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains(" (pod metrics-a, not ready): 200\n"), "{out}");

    // Without the list right: exit 2, saying what to grant (once the server's authorizer
    // has the narrower role).
    s.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": format!("metainit-{}", s.id)}, "rules": reads(false),
    }));
    let err = until("the list right gone", WAIT, || async {
        let (code, _, err) = probe(&s, &[SVC]).await;
        (code != 0).then_some((code, err))
    })
    .await;
    assert_eq!(err.0, 2, "{}", err.1);
    assert!(
        err.1.contains("forbidden") && err.1.contains("grant get on services and list on pods"),
        "{}",
        err.1
    );
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_host_network_pod_without_an_ip_on_this_node_is_asked_at_loopback() {
    // A node whose address is loopback reports none: its hostNetwork pods get no IP.
    let s = Scene::new(&["probe"], Rights::Rules(reads(true))).await;
    let ns = s.home.clone();
    let up = Endpoint::start(200).await;
    s.add("probe", &service(&ns));
    let mut host = pod("on-node", up.port);
    host["spec"]["hostNetwork"] = json!(true);
    add(&s, &ns, &host, NODE, false).await;

    // From another node, or not told which: no IP, exit 1.
    for elsewhere in [&["--node-name", OTHER_NODE][..], &[]] {
        let mut args = vec![SVC, "-n", &ns];
        args.extend_from_slice(elsewhere);
        let (code, out, err) = probe(&s, &args).await;
        assert_eq!(code, 1, "{out}\n{err}");
        assert_eq!(out, "pod on-node (not ready): no IP yet\n");
    }
    // From its own node: at 127.0.0.1, the pod's target port.
    let (code, out, err) = probe(&s, &[SVC, "-n", &ns, "--node-name", NODE]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.starts_with(&format!(
            "http://127.0.0.1:{}/readyz (pod on-node, not ready, on this node, no IP: at loopback): 200\n",
            up.port
        )),
        "{out}"
    );
}

/// The example of docs/src/guides/probe.md is what `metainit probe` prints: against two
/// real admin servers of metainit (its own `/readyz`), one whose watch has listed and one
/// whose first list is not done, behind the chart's metrics Service in kube-system (the
/// page's names; no other test makes a `metainit-metrics` there, and the objects are
/// deleted first and last). Only the pods' addresses differ (loopback ports here, pod IPs
/// on the page); every other character is the code's.
#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn the_guides_example_is_what_probe_prints() {
    use metainit::{admin, metrics::Metrics};
    const PAGE: &str = "docs/src/guides/probe.md";
    let ns = "kube-system";
    let started = |listed: bool| async move {
        let health = Arc::new(admin::Health::new());
        let watch = health.add_watch("pods", "/api/v1/pods");
        if listed {
            health.synced(watch);
        }
        let listener = admin::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(admin::serve(listener, health, Arc::new(Metrics::default())));
        (port, task)
    };
    let (ready, ready_task) = started(true).await;
    let (starting, starting_task) = started(false).await;
    let s = Scene::new(&["probe"], Rights::Rules(reads(true))).await;
    let names = ["metainit-5c7b9f6d48-2xk9p", "metainit-5c7b9f6d48-q7wzn"];
    let clean = || {
        let mut args = vec!["delete", "-n", ns, "--ignore-not-found", "--grace-period=0"];
        args.extend(["--force", "service", SVC]);
        s.cp.kubectl_ok(&args);
        let mut args = vec!["delete", "-n", ns, "--ignore-not-found", "--grace-period=0"];
        args.extend(["--force", "pod", names[0], names[1]]);
        s.cp.kubectl_ok(&args);
    };
    clean();
    s.cp.create(ns, &service(ns));
    for (name, port, is_ready) in [(names[0], ready, true), (names[1], starting, false)] {
        add(&s, ns, &pod(name, port), NODE, is_ready).await;
    }
    let args = [SVC, "-n", ns];
    let (code, out, err) = probe(&s, &args).await;
    clean();
    assert_eq!(code, 1, "{out}\n{err}");
    let printed = format!("$ metainit probe {}\n{out}{err}", args.join(" "))
        .replace(&format!("127.0.0.1:{ready}/"), "10.244.0.12:10275/")
        .replace(&format!("127.0.0.1:{starting}/"), "10.244.1.7:10275/");
    let page = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE))
        .unwrap();
    let shown = page
        .split("```text\n")
        .skip(1)
        .filter_map(|b| b.split_once("```").map(|(b, _)| b))
        .find(|b| b.starts_with("$ metainit probe "))
        .unwrap_or_else(|| panic!("{PAGE} has no ```text block of `$ metainit probe`"));
    assert_eq!(
        shown, printed,
        "{PAGE}'s example is not what metainit probe prints: put the second text in the page"
    );
    ready_task.abort();
    starting_task.abort();
}
