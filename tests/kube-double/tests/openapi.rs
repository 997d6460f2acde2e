// Row 13 of issue 12: OpenAPI documents, as kubectl 1.32 reads them, and server-side field
// validation on modern. The old double answered 404 on /openapi/v2 and /openapi/v3, so
// kubectl needed --validate=false ("failed to download openapi").

mod common;

use common::{Client, PODS, pod};
use kube_double::{Config, Double};
use serde_json::{Value, json};

async fn start(cfg: Config) -> (Double, Client) {
    let d = Double::start(cfg).await.unwrap();
    let c = Client::new(&d.url());
    (d, c)
}

/// The PATCH operation of a GVK and whether it declares `fieldValidation`, as kubectl's
/// `QueryParamVerifierV3` (`supportsQueryParamV3`) looks for it.
fn patch_declares_field_validation(doc: &Value, kind: &str) -> Option<bool> {
    for item in doc["paths"].as_object()?.values() {
        let Some(op) = item.get("patch") else {
            continue;
        };
        if op["x-kubernetes-group-version-kind"]["kind"] != kind {
            continue;
        }
        return Some(
            op["parameters"]
                .as_array()?
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"),
        );
    }
    None
}

#[tokio::test]
async fn modern_serves_openapi_v3_with_field_validation() {
    let mut cfg = Config::modern();
    cfg.extra_resources = vec!["configmaps".into()];
    let (_d, c) = start(cfg).await;
    let root = c.get("/openapi/v3").await;
    assert_eq!(root.status, 200, "{}", root.text);
    let root = root.json();
    for gv in ["api/v1", "apis/apps/v1", "apis/events.k8s.io/v1"] {
        let url = root["paths"][gv]["serverRelativeURL"].as_str().unwrap();
        assert!(url.starts_with(&format!("/openapi/v3/{gv}?hash=")), "{url}");
    }
    let url = root["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap();
    let doc = c.get(url).await.json();
    assert_eq!(doc["openapi"], "3.0.0");
    assert_eq!(patch_declares_field_validation(&doc, "Pod"), Some(true));
    assert_eq!(
        patch_declares_field_validation(&doc, "ConfigMap"),
        Some(true)
    );
    let pod = &doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
    assert_eq!(
        pod["x-kubernetes-group-version-kind"],
        json!([{"group": "", "version": "v1", "kind": "Pod"}])
    );
    let spec = &doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"];
    assert_eq!(
        spec["properties"]["schedulingGates"]["items"]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.PodSchedulingGate"
    );
    let meta = &doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"];
    assert!(meta["properties"].get("initializers").is_none());
    assert_eq!(c.get("/openapi/v3/apis/nope/v1").await.status, 404);
}

#[tokio::test]
async fn legacy_serves_openapi_v2_only_without_field_validation() {
    let (_d, c) = start(Config::legacy()).await;
    assert_eq!(c.get("/openapi/v3").await.status, 404);
    let doc = c.get("/openapi/v2").await;
    assert_eq!(doc.status, 200, "{}", doc.text);
    let doc = doc.json();
    assert_eq!(doc["swagger"], "2.0");
    assert_eq!(doc["info"]["version"], "v1.13.12");
    assert_eq!(patch_declares_field_validation(&doc, "Pod"), Some(false));
    let defs = &doc["definitions"];
    assert_eq!(
        defs["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]["initializers"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Initializers"
    );
    assert!(
        defs["io.k8s.api.core.v1.PodSpec"]["properties"]
            .get("schedulingGates")
            .is_none()
    );
    // client-go's OpenAPISchema asks for the gnostic protobuf.
    let pb = c
        .get_accept(
            "/openapi/v2",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )
        .await;
    assert_eq!(pb.status, 200);
    assert_eq!(
        pb.headers["content-type"],
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    // Field 1 (swagger, a string): tag 0x0a, length 3, "2.0".
    assert!(pb.text.as_bytes().starts_with(b"\x0a\x032.0"));
}

#[tokio::test]
async fn modern_field_validation_strict_warn_ignore() {
    let (d, c) = start(Config::modern()).await;
    let mut typo = pod("typo");
    typo["spec"]["bogus"] = json!(1);
    typo["spec"]["containers"][0]["imag"] = json!("x");
    let r = c
        .post(&format!("{PODS}?fieldValidation=Strict"), typo.clone())
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["reason"], "BadRequest");
    assert_eq!(
        r.json()["message"],
        "strict decoding error: unknown field \"spec.bogus\", unknown field \"spec.containers[0].imag\""
    );
    assert!(d.get("pods", "default", "typo").is_none());
    let r = c
        .post(&format!("{PODS}?fieldValidation=Warn"), typo.clone())
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let warnings: Vec<&str> = r
        .headers
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        warnings,
        [
            "299 - \"unknown field \\\"spec.bogus\\\"\"",
            "299 - \"unknown field \\\"spec.containers[0].imag\\\"\""
        ]
    );
    // A patch is judged by what it adds.
    let r = c
        .patch(
            &format!("{PODS}/typo?fieldValidation=Strict"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = c
        .patch(
            &format!("{PODS}/typo?fieldValidation=Strict"),
            "application/merge-patch+json",
            json!({"spec": {"other": true}}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(
        r.json()["message"],
        "strict decoding error: unknown field \"spec.other\""
    );
    let mut t2 = typo.clone();
    t2["metadata"]["name"] = json!("t2");
    let r = c.post(&format!("{PODS}?fieldValidation=Ignore"), t2).await;
    assert_eq!(r.status, 201);
    assert!(r.headers.get("warning").is_none());
    // 1.13 has no such parameter.
    let (_l, lc) = start(Config::legacy()).await;
    let r = lc
        .post(&format!("{PODS}?fieldValidation=Strict"), typo)
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
}
