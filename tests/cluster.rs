//! End-to-end against a real cluster (Kubernetes 1.26 or later), using the current
//! kubeconfig context. Ignored by default; see README "Testing against a real cluster":
//!
//!     kind create cluster   # or: k3d cluster create
//!     cargo test --test cluster -- --ignored

use std::{process::Command, time::Duration};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::{
    Api, Client,
    api::{DeleteParams, PostParams},
};
use serde_json::json;

const LABEL: &str = "k8s.opsani.io/initializer";
const GATE: &str = "metainit.test/hold";

fn gated(name: &str, labelled: bool) -> Pod {
    let labels = if labelled {
        json!({LABEL: "true"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "schedulingGates": [{"name": GATE}],
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]
        }
    }))
    .expect("pod")
}

fn gates(pod: &Pod) -> usize {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .map_or(0, Vec::len)
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn clears_the_labelled_gated_pod_only() {
    let client = Client::try_default()
        .await
        .expect("a kubeconfig with a reachable cluster");
    let ns_name = format!("metainit-e2e-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": ns_name}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");

    let (c, n) = (client.clone(), ns_name.clone());
    let result = async move {
        let (client, ns_name) = (c, n);
        let pods: Api<Pod> = Api::namespaced(client, &ns_name);
        pods.create(&PostParams::default(), &gated("labelled", true))
            .await
            .expect("labelled pod");
        pods.create(&PostParams::default(), &gated("unlabelled", false))
            .await
            .expect("unlabelled pod");
        let out = Command::new(env!("CARGO_BIN_EXE_metainit"))
            .args(["--once", "--namespace", &ns_name])
            .output()
            .expect("metainit runs");
        assert!(
            out.status.success(),
            "metainit --once failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        let labelled = pods.get("labelled").await.expect("labelled");
        let unlabelled = pods.get("unlabelled").await.expect("unlabelled");
        assert_eq!(gates(&labelled), 0, "the labelled pod is clear");
        assert_eq!(gates(&unlabelled), 1, "the unlabelled pod is still gated");
    };
    // Clean up whatever happened.
    let outcome = tokio::spawn(result).await;
    let _ = namespaces.delete(&ns_name, &DeleteParams::default()).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}
