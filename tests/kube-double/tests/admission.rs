// Modern (1.33) cluster-scoped resources, Namespaces, webhook configurations (defaults and
// validation) and admission webhooks as the API server calls them: what a client sees
// (code, reason, message, stored object) for each.

mod common;

use common::{Client, Line, PODS, labelled_pod, pod};
use kube_double::{Config, Double};
use serde_json::{Value, json};

const VWC: &str = "validatingwebhookconfigurations.admissionregistration.k8s.io";
const MWC: &str = "mutatingwebhookconfigurations.admissionregistration.k8s.io";
const EPS: &str = "endpointslices.discovery.k8s.io";
const VWC_PATH: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
const MWC_PATH: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";
const NS_PATH: &str = "/api/v1/namespaces";

async fn start() -> (Double, Client) {
    let d = Double::start(Config::modern()).await.unwrap();
    let c = Client::new(&d.url());
    (d, c)
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// One webhook on pod creation, calling service `gk/gk-svc` at `/validate`.
fn hook(name: &str) -> Value {
    json!({
        "name": name,
        "clientConfig": {"service": {"namespace": "gk", "name": "gk-svc", "path": "/validate"}},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    })
}

fn config(kind: &str, name: &str, hooks: Vec<Value>) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": hooks,
    })
}

fn vwc(name: &str, hooks: Vec<Value>) -> Value {
    config("ValidatingWebhookConfiguration", name, hooks)
}

fn service(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"ports": [{"port": 443, "targetPort": 8443}]},
    })
}

/// An EndpointSlice of `svc` with one endpoint whose `conditions` are `conditions`.
fn slice(ns: &str, svc: &str, conditions: Value) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{svc}-abc"), "namespace": ns,
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.7"], "conditions": conditions}],
        "ports": [{"port": 8443, "protocol": "TCP"}],
    })
}

const NO_ENDPOINTS: &str = "Internal error occurred: failed calling webhook \"validate.gk.example.com\": failed to call webhook: Post \"https://gk-svc.gk.svc:443/validate?timeout=10s\": no endpoints available for service \"gk-svc\"";

/// Asserts a refusal by a failing webhook: 500 InternalError with `message`, the cause
/// carrying the message without the prefix.
fn assert_webhook_failure(status: &Value, message: &str) {
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["code"], 500, "{status}");
    assert_eq!(status["reason"], "InternalError", "{status}");
    assert_eq!(status["message"], message, "{status}");
    assert_eq!(
        status["details"]["causes"],
        json!([{"message": message.trim_start_matches("Internal error occurred: ")}])
    );
}

/// `gk/gk-svc` without endpoints and a Fail webhook on pod creation in every namespace.
fn failing_setup(d: &Double) {
    d.create("services", "gk", service("gk", "gk-svc")).unwrap();
    d.create(VWC, "", vwc("gk", vec![hook("validate.gk.example.com")]))
        .unwrap();
}

// ------------------------------------------------------------ cluster-scoped resources

#[tokio::test]
async fn cluster_scoped_paths_discovery_and_wrong_scope() {
    let (d, c) = start().await;
    let core = c.get("/api/v1").await.json();
    let entry = |list: &Value, name: &str| {
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} not in {list}"))
    };
    assert_eq!(entry(&core, "namespaces")["namespaced"], false);
    assert_eq!(
        entry(&core, "namespaces")["verbs"]
            .as_array()
            .unwrap()
            .len(),
        7
    );
    assert_eq!(entry(&core, "services")["namespaced"], true);
    let adm = c.get("/apis/admissionregistration.k8s.io/v1").await.json();
    assert_eq!(
        entry(&adm, "validatingwebhookconfigurations")["namespaced"],
        false
    );
    assert_eq!(
        entry(&adm, "mutatingwebhookconfigurations")["kind"],
        "MutatingWebhookConfiguration"
    );
    let disc = c.get("/apis/discovery.k8s.io/v1").await.json();
    assert_eq!(entry(&disc, "endpointslices")["namespaced"], true);

    let r = c
        .post(VWC_PATH, vwc("a", vec![hook("a.example.com")]))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let created = r.json();
    assert!(created["metadata"].get("namespace").is_none(), "{created}");
    assert_eq!(c.get(&format!("{VWC_PATH}/a")).await.status, 200);
    // A namespaced URL for a cluster-scoped resource, and the reverse, are 404.
    for path in [
        "/apis/admissionregistration.k8s.io/v1/namespaces/default/validatingwebhookconfigurations",
        "/apis/admissionregistration.k8s.io/v1/namespaces/default/validatingwebhookconfigurations/a",
        "/api/v1/pods/p",
        "/api/v1/namespaces/default/namespaces/x",
    ] {
        let r = c.get(path).await;
        assert_eq!(r.status, 404, "{path}: {}", r.text);
        assert_eq!(
            r.json()["message"],
            "the server could not find the requested resource"
        );
    }
    let r = c
        .post(
            "/apis/admissionregistration.k8s.io/v1/namespaces/default/validatingwebhookconfigurations",
            vwc("b", vec![hook("b.example.com")]),
        )
        .await;
    assert_eq!(r.status, 404);
    // A namespace in the body of a cluster-scoped object is cleared, not refused.
    let mut body = vwc("c", vec![hook("c.example.com")]);
    body["metadata"]["namespace"] = json!("default");
    let r = c.post(VWC_PATH, body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(r.json()["metadata"].get("namespace").is_none());
    // The library: namespace "" for cluster-scoped objects, the wrong scope is a 404.
    assert!(d.get(VWC, "", "a").is_some());
    assert!(d.get(VWC, "default", "a").is_none());
    assert_eq!(d.create("pods", "", pod("p")).unwrap_err()["code"], 404);
    assert_eq!(
        d.create(VWC, "default", vwc("d", vec![hook("d.example.com")]))
            .unwrap_err()["code"],
        404
    );
    assert_eq!(d.list(VWC).len(), 2);
}

#[tokio::test]
async fn cluster_scoped_list_selectors_pagination_and_every_write() {
    let (d, c) = start().await;
    for (n, team) in [("a", "x"), ("b", "y"), ("c", "x")] {
        let mut v = vwc(n, vec![hook(&format!("{n}.example.com"))]);
        v["metadata"]["labels"] = json!({"team": team});
        assert_eq!(c.post(VWC_PATH, v).await.status, 201);
    }
    let page = c.get(&format!("{VWC_PATH}?limit=2")).await.json();
    assert_eq!(names(&page), ["a", "b"]);
    assert_eq!(page["metadata"]["remainingItemCount"], 1);
    let token = page["metadata"]["continue"].as_str().unwrap();
    let rest = c
        .get(&format!("{VWC_PATH}?limit=2&continue={token}"))
        .await
        .json();
    assert_eq!(names(&rest), ["c"]);
    let by_label = c
        .get(&format!("{VWC_PATH}?labelSelector=team%3Dx"))
        .await
        .json();
    assert_eq!(names(&by_label), ["a", "c"]);
    let by_field = c
        .get(&format!("{VWC_PATH}?fieldSelector=metadata.name%3Db"))
        .await
        .json();
    assert_eq!(names(&by_field), ["b"]);

    // PUT, every PATCH type, DELETE.
    let mut a = c.get(&format!("{VWC_PATH}/a")).await.json();
    a["metadata"]["labels"]["team"] = json!("z");
    let r = c.put(&format!("{VWC_PATH}/a"), a).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["metadata"]["labels"]["team"], "z");
    let r = c
        .patch(
            &format!("{VWC_PATH}/a"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"merged": "yes"}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Strategic merge keys webhooks by name: the entry is merged, not replaced.
    let r = c
        .patch(
            &format!("{VWC_PATH}/a"),
            "application/strategic-merge-patch+json",
            json!({"webhooks": [{"name": "a.example.com", "timeoutSeconds": 5}]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let a = r.json();
    assert_eq!(a["webhooks"][0]["timeoutSeconds"], 5);
    assert_eq!(a["webhooks"][0]["sideEffects"], "None");
    let r = c
        .json_patch(
            &format!("{VWC_PATH}/a"),
            json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        d.get(VWC, "", "a").unwrap()["webhooks"][0]["failurePolicy"],
        "Ignore"
    );
    let r = c.delete(&format!("{VWC_PATH}/b")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = c.get(&format!("{VWC_PATH}/b")).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json()["message"],
        "validatingwebhookconfigurations.admissionregistration.k8s.io \"b\" not found"
    );
    // The library's writes address the object with namespace "".
    let patched = d
        .patch(
            VWC,
            "",
            "c",
            "application/merge-patch+json",
            &json!({"metadata": {"annotations": {"n": "1"}}}),
        )
        .unwrap();
    assert_eq!(patched["metadata"]["annotations"]["n"], "1");
    // Removing the last annotation leaves no `annotations` at all (`omitempty`).
    let r = c
        .json_patch(
            &format!("{VWC_PATH}/c"),
            json!([{"op": "remove", "path": "/metadata/annotations/n"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.json()["metadata"].get("annotations").is_none(),
        "{}",
        r.text
    );
    d.delete(VWC, "", "c").unwrap();
    assert_eq!(names(&c.get(VWC_PATH).await.json()), ["a"]);
}

#[tokio::test]
async fn watch_of_cluster_scoped_resources() {
    let (d, c) = start().await;
    c.post(VWC_PATH, vwc("a", vec![hook("a.example.com")]))
        .await;
    let mut w = c
        .watch(&format!(
            "{VWC_PATH}?watch=true&resourceVersion=0&allowWatchBookmarks=true"
        ))
        .await;
    assert_eq!(w.status, 200);
    let e = w.event().await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("a"))
    );
    let rv = d.resource_version();
    c.json_patch(
        &format!("{VWC_PATH}/a"),
        json!([{"op": "add", "path": "/metadata/labels", "value": {"x": "1"}}]),
    )
    .await;
    let e = w.event().await;
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(e["object"]["metadata"]["labels"]["x"], "1");
    c.delete(&format!("{VWC_PATH}/a")).await;
    let e = w.event().await;
    assert_eq!(e["type"], "DELETED");
    // A bookmark arrives at the latest revision.
    let bookmark = loop {
        match w.next().await {
            Line::Event(v) if v["type"] == "BOOKMARK" => break v,
            Line::Event(_) => continue,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(bookmark["object"]["kind"], "ValidatingWebhookConfiguration");
    // Resuming from a revision sends only what came after it, filtered by the selector.
    let mut w = c
        .watch(&format!(
            "{VWC_PATH}?watch=true&resourceVersion={rv}&labelSelector=x%3D1"
        ))
        .await;
    let e = w.event().await;
    assert_eq!(e["type"], "ADDED", "the patch made it match: {e}");
    assert_eq!(w.event().await["type"], "DELETED");
    // Namespaces: created ones and the implicit `default` and `kube-system`.
    c.post(NS_PATH, json!({"metadata": {"name": "team-a"}}))
        .await;
    let mut w = c.watch(&format!("{NS_PATH}?watch=1")).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let e = w.event().await;
        assert_eq!(e["type"], "ADDED");
        seen.push(
            e["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(seen, ["default", "kube-system", "team-a"]);
}

// ------------------------------------------------------------------------ namespaces

#[tokio::test]
async fn namespaces_carry_their_name_label_which_cannot_change() {
    let (d, c) = start().await;
    let r = c
        .post(
            NS_PATH,
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "other", "env": "prod"}}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let ns = r.json();
    assert_eq!(
        ns["metadata"]["labels"],
        json!({"kubernetes.io/metadata.name": "team-a", "env": "prod"})
    );
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(ns["status"]["phase"], "Active");
    assert!(ns["metadata"]["uid"].is_string());
    // Removing or changing the label: the write succeeds, the label stays the name.
    let r = c
        .json_patch(
            &format!("{NS_PATH}/team-a"),
            json!([{"op": "remove", "path": "/metadata/labels/kubernetes.io~1metadata.name"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json()["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team-a"
    );
    let mut put = d.get("namespaces", "", "team-a").unwrap();
    put["metadata"]["labels"] = json!({"kubernetes.io/metadata.name": "x"});
    put["status"]["phase"] = json!("Terminating");
    let r = c.put(&format!("{NS_PATH}/team-a"), put).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ns = r.json();
    assert_eq!(
        ns["metadata"]["labels"],
        json!({"kubernetes.io/metadata.name": "team-a"})
    );
    assert_eq!(
        ns["status"]["phase"], "Active",
        "status is the /status subresource's"
    );
    // Names are RFC 1123 labels.
    let r = c.post(NS_PATH, json!({"metadata": {"name": "a.b"}})).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "Namespace \"a.b\" is invalid: metadata.name: Invalid value: \"a.b\": must not contain dots"
    );
    // Implicit namespaces: default, kube-system and any holding objects, label included.
    c.post("/api/v1/namespaces/zeta/pods", pod("z")).await;
    let list = c
        .get(&format!(
            "{NS_PATH}?labelSelector=kubernetes.io%2Fmetadata.name%20in%20(zeta,team-a)"
        ))
        .await
        .json();
    assert_eq!(names(&list), ["team-a", "zeta"]);
    assert_eq!(
        names(&c.get(NS_PATH).await.json()),
        ["default", "kube-system", "team-a", "zeta"]
    );
    let zeta = c.get(&format!("{NS_PATH}/zeta")).await.json();
    assert_eq!(
        zeta["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "zeta"
    );
    assert_eq!(c.get(&format!("{NS_PATH}/nowhere")).await.status, 404);
    // Labelling an implicit namespace stores it.
    let r = c
        .patch(
            &format!("{NS_PATH}/default"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"env": "dev"}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let stored = d.get("namespaces", "", "default").unwrap();
    assert_eq!(stored["metadata"]["labels"]["env"], "dev");
    assert!(stored["metadata"]["uid"].is_string());
    // NamespaceLifecycle: default, kube-system and kube-public may not be deleted.
    for n in ["default", "kube-system"] {
        let r = c.delete(&format!("{NS_PATH}/{n}")).await;
        assert_eq!(r.status, 403, "{}", r.text);
        assert_eq!(
            r.json()["message"],
            format!("namespaces \"{n}\" is forbidden: this namespace may not be deleted")
        );
    }
    let r = c.delete(&format!("{NS_PATH}/team-a")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(c.get(&format!("{NS_PATH}/team-a")).await.status, 404);
}

// ------------------------------------------------------ webhook configuration objects

#[tokio::test]
async fn webhook_configurations_are_returned_defaulted() {
    let (d, c) = start().await;
    let r = c
        .post(VWC_PATH, vwc("v", vec![hook("v.example.com")]))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let got = c.get(&format!("{VWC_PATH}/v")).await.json();
    assert_eq!(
        got["webhooks"][0],
        json!({
            "name": "v.example.com",
            "clientConfig": {"service": {"namespace": "gk", "name": "gk-svc", "path": "/validate", "port": 443}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}],
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "namespaceSelector": {},
            "objectSelector": {},
            "sideEffects": "None",
            "timeoutSeconds": 10,
            "admissionReviewVersions": ["v1"],
        })
    );
    let mut m = config(
        "MutatingWebhookConfiguration",
        "m",
        vec![hook("m.example.com")],
    );
    m["webhooks"][0]["namespaceSelector"] = json!({"matchExpressions": []});
    m["webhooks"][0]["timeoutSeconds"] = json!(3);
    let r = c.post(MWC_PATH, m).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let got = d.get(MWC, "", "m").unwrap();
    assert_eq!(got["webhooks"][0]["reinvocationPolicy"], "Never");
    assert_eq!(got["webhooks"][0]["timeoutSeconds"], 3);
    // An empty list is dropped on the server's round trip (`omitempty`).
    assert_eq!(got["webhooks"][0]["namespaceSelector"], json!({}));
    let table = c
        .get_accept(VWC_PATH, "application/json;as=Table;v=v1;g=meta.k8s.io")
        .await
        .json();
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, ["Name", "Webhooks", "Age"]);
    assert_eq!(table["rows"][0]["cells"][1], 1);
}

fn invalid(status: &Value, name: &str, kind: &str, causes: &[(&str, &str, &str)]) {
    assert_eq!(status["code"], 422, "{status}");
    assert_eq!(status["reason"], "Invalid", "{status}");
    let rendered: Vec<String> = causes
        .iter()
        .map(|(_, field, msg)| format!("{field}: {msg}"))
        .collect();
    let list = if rendered.len() == 1 {
        rendered[0].clone()
    } else {
        format!("[{}]", rendered.join(", "))
    };
    assert_eq!(
        status["message"],
        format!("{kind}.admissionregistration.k8s.io \"{name}\" is invalid: {list}")
    );
    let want: Vec<Value> = causes
        .iter()
        .map(|(reason, field, msg)| json!({"reason": reason, "field": field, "message": msg}))
        .collect();
    assert_eq!(status["details"]["causes"], json!(want), "{status}");
    assert_eq!(status["details"]["kind"], kind);
    assert_eq!(status["details"]["group"], "admissionregistration.k8s.io");
}

#[tokio::test]
async fn bad_selectors_and_fields_are_the_real_422() {
    let (d, c) = start().await;
    let mut h = hook("v.example.com");
    h["namespaceSelector"] = json!({"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn"},
        {"key": "team", "operator": "Exists", "values": ["a"]},
        {"key": "bad key", "operator": "In", "values": ["x"]},
    ]});
    h["objectSelector"] =
        json!({"matchExpressions": [{"key": "app", "operator": "Like", "values": ["x"]}]});
    let r = c.post(VWC_PATH, vwc("v", vec![h])).await;
    invalid(
        &r.json(),
        "v",
        "ValidatingWebhookConfiguration",
        &[
            (
                "FieldValueRequired",
                "webhooks[0].namespaceSelector.matchExpressions[0].values",
                "Required value: must be specified when `operator` is 'In' or 'NotIn'",
            ),
            (
                "FieldValueForbidden",
                "webhooks[0].namespaceSelector.matchExpressions[1].values",
                "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            ),
            (
                "FieldValueInvalid",
                "webhooks[0].namespaceSelector.matchExpressions[2].key",
                "Invalid value: \"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ),
            (
                "FieldValueInvalid",
                "webhooks[0].objectSelector.matchExpressions[0].operator",
                "Invalid value: \"Like\": not a valid selector operator",
            ),
        ],
    );
    // sideEffects and admissionReviewVersions are required in v1; one of url or service;
    // webhook names are qualified and unique.
    let mut a = hook("a.example.com");
    a.as_object_mut().unwrap().remove("sideEffects");
    a.as_object_mut().unwrap().remove("admissionReviewVersions");
    a["clientConfig"]["url"] = json!("https://policy.example.com/validate");
    let b = hook("short");
    let dup = hook("a.example.com");
    let r = c.post(VWC_PATH, vwc("v", vec![a, b, dup])).await;
    invalid(
        &r.json(),
        "v",
        "ValidatingWebhookConfiguration",
        &[
            (
                "FieldValueRequired",
                "webhooks[0].sideEffects",
                "Required value: must specify one of None, NoneOnDryRun",
            ),
            (
                "FieldValueRequired",
                "webhooks[0].clientConfig",
                "Required value: exactly one of url or service is required",
            ),
            (
                "FieldValueRequired",
                "webhooks[0].admissionReviewVersions",
                "Required value: must specify one of v1, v1beta1",
            ),
            (
                "FieldValueInvalid",
                "webhooks[1].name",
                "Invalid value: \"short\": should be a domain with at least three segments separated by dots",
            ),
            (
                "FieldValueDuplicate",
                "webhooks[2].name",
                "Duplicate value: \"a.example.com\"",
            ),
        ],
    );
    let mut m = hook("m.example.com");
    m["reinvocationPolicy"] = json!("Always");
    m["sideEffects"] = json!("Some");
    let r = c
        .post(
            MWC_PATH,
            config("MutatingWebhookConfiguration", "m", vec![m]),
        )
        .await;
    invalid(
        &r.json(),
        "m",
        "MutatingWebhookConfiguration",
        &[
            (
                "FieldValueNotSupported",
                "webhooks[0].sideEffects",
                "Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"",
            ),
            (
                "FieldValueNotSupported",
                "webhooks[0].reinvocationPolicy",
                "Unsupported value: \"Always\": supported values: \"IfNeeded\", \"Never\"",
            ),
        ],
    );
    assert!(
        d.list(VWC).is_empty() && d.list(MWC).is_empty(),
        "nothing stored"
    );
}

#[tokio::test]
async fn json_patch_of_the_namespace_selector_as_the_real_server() {
    let (d, c) = start().await;
    c.post(VWC_PATH, vwc("gk", vec![hook("validate.gk.example.com")]))
        .await;
    let path = format!("{VWC_PATH}/gk");
    let entry = c.get(&path).await.json()["webhooks"][0].clone();
    let expr = json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["gk"]});
    // `{}` has no matchExpressions yet: appending with `/-` has no parent to append to.
    let r = c
        .json_patch(
            &path,
            json!([
                {"op": "test", "path": "/webhooks/0", "value": entry},
                {"op": "add", "path": "/webhooks/0/namespaceSelector/matchExpressions/-", "value": expr},
            ]),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(
        r.json()["message"],
        "the server rejected our request due to an error in our request"
    );
    // Adding the whole array works.
    let r = c
        .json_patch(
            &path,
            json!([
                {"op": "test", "path": "/webhooks/0", "value": entry},
                {"op": "add", "path": "/webhooks/0/namespaceSelector/matchExpressions", "value": [expr]},
            ]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        d.get(VWC, "", "gk").unwrap()["webhooks"][0]["namespaceSelector"],
        json!({"matchExpressions": [expr]})
    );
    // The entry changed: a test against the old one fails, and nothing is written.
    let rv = d.resource_version();
    let r = c
        .json_patch(
            &path,
            json!([
                {"op": "test", "path": "/webhooks/0", "value": entry},
                {"op": "add", "path": "/webhooks/0/namespaceSelector/matchExpressions/-", "value": expr},
            ]),
        )
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["details"], json!({}));
    assert_eq!(d.resource_version(), rv);
    // Now the array exists and `/-` appends; an invalid expression is the Invalid 422.
    let current = c.get(&path).await.json()["webhooks"][0].clone();
    let r = c
        .json_patch(
            &path,
            json!([
                {"op": "test", "path": "/webhooks/0", "value": current},
                {"op": "add", "path": "/webhooks/0/namespaceSelector/matchExpressions/-",
                 "value": {"key": "team", "operator": "In", "values": []}},
            ]),
        )
        .await;
    invalid(
        &r.json(),
        "gk",
        "ValidatingWebhookConfiguration",
        &[(
            "FieldValueRequired",
            "webhooks[0].namespaceSelector.matchExpressions[1].values",
            "Required value: must be specified when `operator` is 'In' or 'NotIn'",
        )],
    );
    let r = c
        .json_patch(
            &path,
            json!([
                {"op": "test", "path": "/webhooks/0", "value": current},
                {"op": "add", "path": "/webhooks/0/namespaceSelector/matchExpressions/-",
                 "value": {"key": "team", "operator": "Exists"}},
            ]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Removing the last expression leaves `{}` (empty lists are not stored).
    let r = c
        .json_patch(
            &path,
            json!([{"op": "replace", "path": "/webhooks/0/namespaceSelector/matchExpressions", "value": []}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["webhooks"][0], entry);
}

// ------------------------------------------------------------------- admission calls

#[tokio::test]
async fn a_failing_webhook_fails_the_create_with_the_real_text() {
    let (d, c) = start().await;
    failing_setup(&d);
    let r = c.post("/api/v1/namespaces/team-a/pods", pod("web")).await;
    assert_webhook_failure(&r.json(), NO_ENDPOINTS);
    assert!(d.get("pods", "team-a", "web").is_none(), "nothing stored");
    // The library's create is a client's create too.
    let e = d.create("pods", "team-a", pod("web")).unwrap_err();
    assert_webhook_failure(&e, NO_ENDPOINTS);
    // An endpoint that is not ready does not help; a nil `ready` reads as true.
    d.create(EPS, "gk", slice("gk", "gk-svc", json!({"ready": false})))
        .unwrap();
    let r = c.post("/api/v1/namespaces/team-a/pods", pod("web")).await;
    assert_webhook_failure(&r.json(), NO_ENDPOINTS);
    let mut s = d.get(EPS, "gk", "gk-svc-abc").unwrap();
    s["endpoints"][0]["conditions"] = json!({});
    d.update(EPS, "gk", s).unwrap();
    let r = c.post("/api/v1/namespaces/team-a/pods", pod("web")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    // A slice of another service does not count.
    d.delete(EPS, "gk", "gk-svc-abc").unwrap();
    d.create(EPS, "gk", slice("gk", "other", json!({"ready": true})))
        .unwrap();
    let e = d.create("pods", "team-a", pod("web-2")).unwrap_err();
    assert_webhook_failure(&e, NO_ENDPOINTS);
}

#[tokio::test]
async fn the_resolver_errors_in_its_order() {
    let (d, c) = start().await;
    let mut h = hook("validate.gk.example.com");
    h["clientConfig"]["service"] =
        json!({"namespace": "gk", "name": "gk-svc", "port": 8443, "path": "/v/"});
    h["timeoutSeconds"] = json!(30);
    d.create(VWC, "", vwc("gk", vec![h])).unwrap();
    let prefix = "Internal error occurred: failed calling webhook \"validate.gk.example.com\": failed to call webhook: Post \"https://gk-svc.gk.svc:8443/v?timeout=30s\": ";
    let r = c.post(PODS, pod("a")).await;
    assert_webhook_failure(&r.json(), &format!("{prefix}service \"gk-svc\" not found"));
    d.create("services", "gk", service("gk", "gk-svc")).unwrap();
    let r = c.post(PODS, pod("a")).await;
    assert_webhook_failure(
        &r.json(),
        &format!("{prefix}no service port 8443 found for service \"gk-svc\""),
    );
    let mut svc = d.get("services", "gk", "gk-svc").unwrap();
    svc["spec"]["ports"] = json!([{"port": 8443}]);
    d.update("services", "gk", svc).unwrap();
    let r = c.post(PODS, pod("a")).await;
    assert_webhook_failure(
        &r.json(),
        &format!("{prefix}no endpoints available for service \"gk-svc\""),
    );
    d.create(EPS, "gk", slice("gk", "gk-svc", json!({"ready": true})))
        .unwrap();
    assert_eq!(c.post(PODS, pod("a")).await.status, 201);
}

#[tokio::test]
async fn ignore_lets_the_request_through_and_a_url_is_reachable() {
    let (d, c) = start().await;
    let mut ignore = hook("ignore.gk.example.com");
    ignore["failurePolicy"] = json!("Ignore");
    let mut url = hook("url.gk.example.com");
    url["clientConfig"] = json!({"url": "https://policy.example.com/validate"});
    d.create(VWC, "", vwc("a", vec![ignore, url])).unwrap();
    let r = c.post(PODS, pod("p")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    // The same webhook failing closed refuses it.
    d.patch(
        VWC,
        "",
        "a",
        "application/json-patch+json",
        &json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Fail"}]),
    )
    .unwrap();
    let r = c.post(PODS, pod("q")).await;
    assert_eq!(r.status, 500);
    assert!(
        r.json()["message"].as_str().unwrap().starts_with(
            "Internal error occurred: failed calling webhook \"ignore.gk.example.com\""
        ),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn namespace_selector_not_in_exempts_one_namespace() {
    let (d, c) = start().await;
    d.create("services", "gk", service("gk", "gk-svc")).unwrap();
    let mut h = hook("validate.gk.example.com");
    h["namespaceSelector"] = json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["gk"]}]});
    d.create(VWC, "", vwc("gk", vec![h])).unwrap();
    // Never created: its name label still counts.
    assert_eq!(
        c.post("/api/v1/namespaces/gk/pods", pod("ctl"))
            .await
            .status,
        201
    );
    let r = c.post("/api/v1/namespaces/team-a/pods", pod("web")).await;
    assert_webhook_failure(&r.json(), NO_ENDPOINTS);
    // A created namespace is matched on its labels.
    let mut sel = hook("validate.gk.example.com");
    sel["namespaceSelector"] = json!({"matchLabels": {"policy": "enforced"}});
    let mut cfg = d.get(VWC, "", "gk").unwrap();
    cfg["webhooks"] = json!([sel]);
    d.update(VWC, "", cfg).unwrap();
    assert_eq!(
        c.post("/api/v1/namespaces/team-a/pods", pod("web"))
            .await
            .status,
        201
    );
    c.post(
        NS_PATH,
        json!({"metadata": {"name": "team-b", "labels": {"policy": "enforced"}}}),
    )
    .await;
    let r = c.post("/api/v1/namespaces/team-b/pods", pod("web")).await;
    assert_eq!(r.status, 500, "{}", r.text);
    // A Namespace object is matched on its own labels; other cluster-scoped objects never
    // are excluded by a namespaceSelector (and webhook configurations are never sent).
    let mut ns_hook = hook("validate.gk.example.com");
    ns_hook["rules"][0]["resources"] = json!(["namespaces"]);
    ns_hook["namespaceSelector"] = json!({"matchLabels": {"policy": "enforced"}});
    let mut cfg = d.get(VWC, "", "gk").unwrap();
    cfg["webhooks"] = json!([ns_hook]);
    d.update(VWC, "", cfg).unwrap();
    let r = c
        .post(
            NS_PATH,
            json!({"metadata": {"name": "team-c", "labels": {"policy": "enforced"}}}),
        )
        .await;
    assert_eq!(r.status, 500, "{}", r.text);
    let r = c
        .post(NS_PATH, json!({"metadata": {"name": "team-d"}}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
}

#[tokio::test]
async fn object_selector_matches_the_new_or_the_old_object() {
    let (d, c) = start().await;
    d.create("services", "gk", service("gk", "gk-svc")).unwrap();
    let mut h = hook("validate.gk.example.com");
    h["objectSelector"] = json!({"matchLabels": {"app": "web"}});
    h["rules"][0]["operations"] = json!(["CREATE", "UPDATE"]);
    d.create(VWC, "", vwc("gk", vec![h])).unwrap();
    assert_eq!(
        c.post(PODS, labelled_pod("db", json!({"app": "db"})))
            .await
            .status,
        201
    );
    let r = c
        .post(PODS, labelled_pod("web", json!({"app": "web"})))
        .await;
    assert_webhook_failure(&r.json(), NO_ENDPOINTS);
    // Relabelling db to web matches the new object; web back to db the old one.
    let r = c
        .patch(
            &format!("{PODS}/db"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"app": "web"}}}),
        )
        .await;
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(
        d.get("pods", "default", "db").unwrap()["metadata"]["labels"]["app"],
        "db"
    );
    d.patch(
        VWC,
        "",
        "gk",
        "application/json-patch+json",
        &json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]),
    )
    .unwrap();
    c.post(PODS, labelled_pod("web", json!({"app": "web"})))
        .await;
    d.patch(
        VWC,
        "",
        "gk",
        "application/json-patch+json",
        &json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Fail"}]),
    )
    .unwrap();
    let r = c
        .patch(
            &format!("{PODS}/web"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"app": "db"}}}),
        )
        .await;
    assert_eq!(r.status, 500, "{}", r.text);
}

#[tokio::test]
async fn rules_match_operations_resources_and_scope() {
    let (d, c) = start().await;
    d.create("services", "gk", service("gk", "gk-svc")).unwrap();
    c.post(PODS, pod("p")).await;
    let set_rule = |rule: Value| {
        let mut h = hook("validate.gk.example.com");
        h["rules"] = json!([rule]);
        let body = vwc("gk", vec![h]);
        match d.get(VWC, "", "gk") {
            Some(mut cur) => {
                cur["webhooks"] = body["webhooks"].clone();
                d.update(VWC, "", cur).unwrap();
            }
            None => {
                d.create(VWC, "", body).unwrap();
            }
        }
    };
    let rule = |ops: Value, res: Value, scope: &str| json!({"operations": ops, "apiGroups": ["*"], "apiVersions": ["*"], "resources": res, "scope": scope});
    let label = |c: &Client| {
        let c = c.clone();
        async move {
            c.patch(
                &format!("{PODS}/p"),
                "application/merge-patch+json",
                json!({"metadata": {"labels": {"n": uuid()}}}),
            )
            .await
            .status
        }
    };
    // CREATE only: an update goes through.
    set_rule(rule(json!(["CREATE"]), json!(["pods"]), "*"));
    assert_eq!(label(&c).await, 200);
    set_rule(rule(json!(["UPDATE"]), json!(["pods"]), "*"));
    assert_eq!(label(&c).await, 500);
    // `*` operations on every resource, Cluster scope: namespaced pods are not matched.
    set_rule(rule(json!(["*"]), json!(["*"]), "Cluster"));
    assert_eq!(label(&c).await, 200);
    assert_eq!(
        c.post(NS_PATH, json!({"metadata": {"name": "n1"}}))
            .await
            .status,
        500
    );
    set_rule(rule(json!(["*"]), json!(["*"]), "Namespaced"));
    assert_eq!(label(&c).await, 500);
    assert_eq!(
        c.post(NS_PATH, json!({"metadata": {"name": "n1"}}))
            .await
            .status,
        201
    );
    // Subresources: `pods` does not match `pods/status`; `*/status` and `pods/*` do.
    set_rule(rule(json!(["UPDATE"]), json!(["pods"]), "*"));
    let mut st = d.get("pods", "default", "p").unwrap();
    st["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    st["status"]["phase"] = json!("Running");
    d.update_status("pods", "default", st.clone()).unwrap();
    set_rule(rule(json!(["UPDATE"]), json!(["*/status"]), "*"));
    st["status"]["phase"] = json!("Succeeded");
    let e = d.update_status("pods", "default", st.clone()).unwrap_err();
    assert_webhook_failure(&e, NO_ENDPOINTS);
    assert_eq!(label(&c).await, 200, "the main resource is not */status");
    set_rule(rule(json!(["UPDATE"]), json!(["pods/*"]), "*"));
    let r = c.put(&format!("{PODS}/p/status"), st).await;
    assert_eq!(r.status, 500, "{}", r.text);
    // DELETE.
    set_rule(rule(json!(["DELETE"]), json!(["pods"]), "*"));
    let r = c.delete(&format!("{PODS}/p")).await;
    assert_webhook_failure(&r.json(), NO_ENDPOINTS);
    assert!(d.get("pods", "default", "p").is_some());
    // apiGroups and apiVersions: a rule for apps does not match core pods.
    let mut h = hook("validate.gk.example.com");
    h["rules"] = json!([{"operations": ["*"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["*"]}]);
    let mut cur = d.get(VWC, "", "gk").unwrap();
    cur["webhooks"] = json!([h]);
    d.update(VWC, "", cur).unwrap();
    assert_eq!(c.delete(&format!("{PODS}/p")).await.status, 200);
    let r = c
        .post(
            "/apis/apps/v1/namespaces/default/deployments",
            json!({"metadata": {"name": "d"}, "spec": {}}),
        )
        .await;
    assert_eq!(r.status, 500, "{}", r.text);
}

fn uuid() -> String {
    format!(
        "{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

#[tokio::test]
async fn configurations_are_never_sent_to_webhooks() {
    let (d, c) = start().await;
    d.create("services", "gk", service("gk", "gk-svc")).unwrap();
    let mut everything = hook("validate.gk.example.com");
    everything["rules"] = json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}]);
    let mut m = everything.clone();
    m["name"] = json!("mutate.gk.example.com");
    d.create(VWC, "", vwc("gk", vec![everything.clone()]))
        .unwrap();
    d.create(
        MWC,
        "",
        config("MutatingWebhookConfiguration", "gk", vec![m]),
    )
    .unwrap();
    // Everything else is refused, by the mutating webhook first.
    let r = c.post(PODS, pod("p")).await;
    assert_webhook_failure(
        &r.json(),
        &NO_ENDPOINTS.replace("validate.gk.example.com", "mutate.gk.example.com"),
    );
    // The configurations themselves: patch, create, update, delete all go through.
    let entry = c.get(&format!("{VWC_PATH}/gk")).await.json()["webhooks"][0].clone();
    let r = c
        .json_patch(
            &format!("{VWC_PATH}/gk"),
            json!([
                {"op": "test", "path": "/webhooks/0", "value": entry},
                {"op": "add", "path": "/webhooks/0/namespaceSelector/matchExpressions",
                 "value": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["gk"]}]},
            ]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        c.post(VWC_PATH, vwc("other", vec![everything]))
            .await
            .status,
        201
    );
    assert_eq!(c.delete(&format!("{VWC_PATH}/other")).await.status, 200);
    assert_eq!(c.delete(&format!("{MWC_PATH}/gk")).await.status, 200);
    // With the mutating one gone, the validating one exempts gk only.
    assert_eq!(
        c.post("/api/v1/namespaces/gk/pods", pod("p")).await.status,
        201
    );
    let r = c.post(PODS, pod("p")).await;
    assert_webhook_failure(&r.json(), NO_ENDPOINTS);
}

#[tokio::test]
async fn mutating_webhooks_run_before_validation_and_validating_ones_after() {
    let (d, c) = start().await;
    d.create("services", "gk", service("gk", "gk-svc")).unwrap();
    let mut h = hook("mutate.gk.example.com");
    h["rules"][0]["operations"] = json!(["CREATE"]);
    d.create(
        MWC,
        "",
        config("MutatingWebhookConfiguration", "m", vec![h]),
    )
    .unwrap();
    // An invalid pod: the mutating webhook is called first and fails the request.
    let r = c.post(PODS, pod("Bad_Name")).await;
    assert_eq!(r.status, 500, "{}", r.text);
    d.delete(MWC, "", "m").unwrap();
    d.create(VWC, "", vwc("v", vec![hook("validate.gk.example.com")]))
        .unwrap();
    // A validating webhook runs after validation: the invalid pod is the 422.
    let r = c.post(PODS, pod("Bad_Name")).await;
    assert_eq!(r.status, 422, "{}", r.text);
    // ... and before the storage finds the name taken.
    d.patch(
        VWC,
        "",
        "v",
        "application/json-patch+json",
        &json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]),
    )
    .unwrap();
    c.post(PODS, pod("taken")).await;
    d.patch(
        VWC,
        "",
        "v",
        "application/json-patch+json",
        &json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Fail"}]),
    )
    .unwrap();
    let r = c.post(PODS, pod("taken")).await;
    assert_webhook_failure(&r.json(), NO_ENDPOINTS);
}

#[tokio::test]
async fn binding_is_a_create_of_pods_binding() {
    let (d, c) = start().await;
    d.create("services", "gk", service("gk", "gk-svc")).unwrap();
    c.post(PODS, pod("p")).await;
    c.post(PODS, pod("q")).await;
    let mut h = hook("validate.gk.example.com");
    h["rules"][0]["resources"] = json!(["pods"]);
    d.create(VWC, "", vwc("v", vec![h])).unwrap();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"name": "node-1"}});
    let r = c.post(&format!("{PODS}/p/binding"), binding.clone()).await;
    assert_eq!(
        r.status, 201,
        "a rule on pods does not match pods/binding: {}",
        r.text
    );
    let mut h = hook("validate.gk.example.com");
    h["rules"][0]["resources"] = json!(["pods/binding"]);
    let mut cur = d.get(VWC, "", "v").unwrap();
    cur["webhooks"] = json!([h]);
    d.update(VWC, "", cur).unwrap();
    let mut b = binding;
    b["metadata"]["name"] = json!("q");
    let r = c.post(&format!("{PODS}/q/binding"), b).await;
    assert_webhook_failure(&r.json(), NO_ENDPOINTS);
}

#[tokio::test]
async fn services_and_slices_tables_for_kubectl() {
    let (d, c) = start().await;
    d.create("services", "gk", service("gk", "gk-svc")).unwrap();
    d.create(EPS, "gk", slice("gk", "gk-svc", json!({"ready": true})))
        .unwrap();
    let svc = d.get("services", "gk", "gk-svc").unwrap();
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    let ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let t = c
        .get_accept("/api/v1/namespaces/gk/services", accept)
        .await
        .json();
    let cells = &t["rows"][0]["cells"];
    assert_eq!(cells[0], "gk-svc");
    assert_eq!(cells[1], "ClusterIP");
    assert_eq!(cells[2], json!(ip));
    assert_eq!(cells[3], "<none>");
    assert_eq!(cells[4], "443/TCP");
    let t = c
        .get_accept(
            "/apis/discovery.k8s.io/v1/namespaces/gk/endpointslices",
            accept,
        )
        .await
        .json();
    let cells = &t["rows"][0]["cells"];
    assert_eq!(
        (cells[1].as_str(), cells[2].as_str(), cells[3].as_str()),
        (Some("IPv4"), Some("8443"), Some("10.0.0.7"))
    );
    let t = c.get_accept(NS_PATH, accept).await.json();
    assert_eq!(t["rows"][0]["cells"][1], "Active");
}
