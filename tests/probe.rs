//! `metainit probe SERVICE`: against the double's Service and the pods it selects, with a
//! real HTTP listener on loopback as each pod's target port (a pod's IP may be loopback, as
//! a hostNetwork pod's is on a node whose address is; nothing here may dial outside
//! 127.0.0.0/8).

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU16, Ordering},
    },
    time::Duration,
};

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMIT: Duration = Duration::from_secs(30);
const NS: &str = "metainit-system";
const SVC: &str = "metainit-metrics";

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

/// A pod the Service selects, its container port `admin` being `port`.
fn pod(name: &str, port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "probed"}},
        "spec": {"containers": [{"name": "metainit", "image": "metainit",
                                 "ports": [{"name": "admin", "containerPort": port}]}]},
    })
}

/// What the kubelet reports of a pod on a node whose address is 127.0.0.1: not Ready.
fn on_loopback(mut pod: Value) -> Value {
    pod["status"] = json!({
        "phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
        "conditions": [{"type": "Ready", "status": "False"}],
    });
    pod
}

/// A pod of the Service at 127.0.0.1 on `port`, not Ready.
fn add_pod(bed: &Bed, name: &str, port: u16) {
    let made = bed.double.create("pods", NS, pod(name, port)).unwrap();
    bed.double
        .update_status("pods", NS, on_loopback(made))
        .unwrap();
}

async fn probe(bed: &Bed, args: &[&str]) -> (i32, String, String) {
    let kc = bed.kubeconfig.display().to_string();
    let mut all = vec!["probe", "--kubeconfig", &kc, "--timeout", "5s"];
    all.extend_from_slice(args);
    run_to_end(&all, LIMIT).await
}

#[tokio::test]
async fn every_endpoint_must_answer_200() {
    let bed = Bed::modern().await;
    let up = Endpoint::start(200).await;
    bed.double.create("services", NS, service(NS)).unwrap();
    add_pod(&bed, "metrics-a", up.port);
    let url = format!("http://127.0.0.1:{}/readyz", up.port);

    // 200, from a pod that is not Ready: probed all the same.
    let (code, out, err) = probe(&bed, &[SVC, "-n", NS]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        out,
        format!(
            "{url} (pod metrics-a, not ready): 200\nall 1 endpoints of service {NS}/{SVC} answered 200 on /readyz\n"
        )
    );

    // 503: exit 1, the code and the body's reason.
    up.code.store(503, Ordering::SeqCst);
    let (code, out, err) = probe(&bed, &[SVC, "-n", NS]).await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert_eq!(
        out,
        format!("{url} (pod metrics-a, not ready): 503: not ready: first list of pods not done\n")
    );
    assert!(
        err.contains(&format!(
            "1 of 1 endpoints of service {NS}/{SVC} did not answer 200 on /readyz"
        )),
        "{err}"
    );

    // One endpoint up, one on a closed port: exit 1, each line says which.
    up.code.store(200, Ordering::SeqCst);
    let dead = closed_port().await;
    add_pod(&bed, "metrics-b", dead);
    let (code, out, err) = probe(&bed, &[SVC, "-n", NS]).await;
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

    // Another path, and only the closed port left.
    bed.double.delete("pods", NS, "metrics-a").unwrap();
    let (code, out, err) = probe(&bed, &[SVC, "-n", NS, "--path", "/healthz"]).await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert_eq!(
        out,
        format!("http://127.0.0.1:{dead}/healthz (pod metrics-b, not ready): connection refused\n")
    );
}

#[tokio::test]
async fn no_endpoint_a_missing_service_and_a_missing_port() {
    let bed = Bed::modern().await;
    bed.double.create("services", NS, service(NS)).unwrap();

    // No pod: exit 1, "no endpoints".
    let (code, out, err) = probe(&bed, &[SVC, "-n", NS]).await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains(&format!("service {NS}/{SVC} has no endpoints")),
        "{err}"
    );
    // Pods, none of them selected: the same.
    let mut other = pod("other", 1);
    other["metadata"]["labels"] = json!({"app": "other"});
    bed.double.create("pods", NS, other).unwrap();
    let (code, _, err) = probe(&bed, &[SVC, "-n", NS]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("has no endpoints"), "{err}");

    // No such Service: exit 2, named with its namespace.
    let (code, out, err) = probe(&bed, &["nosuch", "-n", NS]).await;
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains(&format!(
            "service \"nosuch\" not found in namespace \"{NS}\": check the name, and give its namespace with -n"
        )),
        "{err}"
    );

    // No port of that name: exit 2, the ports it has.
    let (code, _, err) = probe(&bed, &[SVC, "-n", NS, "--port", "http"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "service {NS}/{SVC} has no port named 'http' (its ports: 'metrics'): pass --port NAME"
        )),
        "{err}"
    );

    // A bad flag value: exit 2, the rule.
    let (code, _, err) = probe(&bed, &[SVC, "--path", "readyz"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a path begins with '/'"), "{err}");
    let (code, _, err) = run_to_end(&["probe", SVC, "--timeout", "0s"], LIMIT).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("must be more than 0s"), "{err}");
}

#[tokio::test]
async fn the_namespace_is_the_contexts_and_two_reads_are_all_it_needs() {
    // The rights the chart's test pod has: get services, list pods.
    let bed = Bed::as_user(
        kube_double::Config::modern(),
        &["get services", "list pods"],
    )
    .await;
    let up = Endpoint::start(200).await;
    bed.double.create("services", NS, service(NS)).unwrap();
    add_pod(&bed, "metrics-a", up.port);

    // The kubeconfig's context says `default`: not found there.
    let (code, _, err) = probe(&bed, &[SVC]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not found in namespace \"default\""), "{err}");

    // The context's namespace set to NS: found without -n.
    let text = std::fs::read_to_string(&bed.kubeconfig).unwrap();
    assert!(text.contains("namespace: default"), "{text}");
    std::fs::write(
        &bed.kubeconfig,
        text.replace("namespace: default", &format!("namespace: {NS}")),
    )
    .unwrap();
    let (code, out, err) = probe(&bed, &[SVC]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains(" (pod metrics-a, not ready): 200\n"), "{out}");

    // Without the list right: exit 2, saying what to grant.
    bed.double.set_tokens(Some(
        [("user".to_string(), vec!["get services".to_string()])].into(),
    ));
    let (code, _, err) = probe(&bed, &[SVC]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("forbidden") && err.contains("grant get on services and list on pods"),
        "{err}"
    );
}

#[tokio::test]
async fn a_host_network_pod_without_an_ip_on_this_node_is_asked_at_loopback() {
    // A node whose address is loopback reports none: its hostNetwork pods get no IP.
    let bed = Bed::modern().await;
    let up = Endpoint::start(200).await;
    bed.double.create("services", NS, service(NS)).unwrap();
    let mut host = pod("on-node", up.port);
    host["spec"]["hostNetwork"] = json!(true);
    host["spec"]["nodeName"] = json!("node-1");
    bed.double.create("pods", NS, host).unwrap();

    // From another node, or not told which: no IP, exit 1.
    for elsewhere in [&["--node-name", "node-2"][..], &[]] {
        let mut args = vec![SVC, "-n", NS];
        args.extend_from_slice(elsewhere);
        let (code, out, err) = probe(&bed, &args).await;
        assert_eq!(code, 1, "{out}\n{err}");
        assert_eq!(out, "pod on-node (not ready): no IP yet\n");
    }
    // From its own node: at 127.0.0.1, the pod's target port.
    let (code, out, err) = probe(&bed, &[SVC, "-n", NS, "--node-name", "node-1"]).await;
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
/// whose first list is not done, behind the chart's metrics Service in kube-system. Only
/// the pods' addresses differ (loopback ports here, pod IPs on the page); every other
/// character is the code's.
#[tokio::test]
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
    let bed = Bed::modern().await;
    bed.double.create("services", ns, service(ns)).unwrap();
    for (name, port, is_ready) in [
        ("metainit-5c7b9f6d48-2xk9p", ready, "True"),
        ("metainit-5c7b9f6d48-q7wzn", starting, "False"),
    ] {
        let mut p = pod(name, port);
        p["metadata"]["namespace"] = json!(ns);
        let made = bed.double.create("pods", ns, p).unwrap();
        let mut made = on_loopback(made);
        made["status"]["conditions"][0]["status"] = json!(is_ready);
        bed.double.update_status("pods", ns, made).unwrap();
    }
    let args = [SVC, "-n", ns];
    let (code, out, err) = probe(&bed, &args).await;
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
