// CRUD, lists, selectors, pagination, patches, preconditions, events, tables, discovery, logs.

mod common;

use common::{Client, PODS, labelled_pod, pod};
use kube_double::{Config, Double};
use serde_json::{Value, json};

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
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn create_get_delete_and_errors() {
    let (d, c) = start().await;
    let r = c.post(PODS, pod("a")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let a = r.json();
    assert_eq!(a["status"]["phase"], "Pending");
    assert!(!a["metadata"]["uid"].as_str().unwrap().is_empty());
    assert!(a["metadata"]["creationTimestamp"].is_string());
    assert_eq!(a["metadata"]["resourceVersion"], "1");

    let r = c.post(PODS, pod("a")).await;
    assert_eq!(r.status, 409);
    let s = r.json();
    assert_eq!(s["kind"], "Status");
    assert_eq!(s["apiVersion"], "v1");
    assert_eq!(s["status"], "Failure");
    assert_eq!(s["reason"], "AlreadyExists");
    assert_eq!(s["message"], "pods \"a\" already exists");
    assert_eq!(s["details"], json!({"name": "a", "kind": "pods"}));
    assert_eq!(s["code"], 409);

    let mut g = pod("");
    g["metadata"] = json!({"generateName": "web-"});
    let r = c.post(PODS, g).await;
    assert_eq!(r.status, 201);
    let name = r.json()["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("web-") && name.len() == 9, "{name}");

    let r = c.get(&format!("{PODS}/a")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["metadata"]["name"], "a");

    let r = c.get(&format!("{PODS}/nope")).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["message"], "pods \"nope\" not found");
    assert_eq!(r.json()["reason"], "NotFound");

    let r = c.delete(&format!("{PODS}/a")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["metadata"]["name"], "a");
    assert_eq!(c.get(&format!("{PODS}/a")).await.status, 404);
    assert_eq!(c.delete(&format!("{PODS}/a")).await.status, 404);

    let mut dep = json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}});
    let r = c
        .post("/apis/apps/v1/namespaces/default/deployments", dep.clone())
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["metadata"]["generation"], 1);
    assert_eq!(r.json()["kind"], "Deployment");
    dep["spec"]["replicas"] = json!(2);
    let r = c
        .put("/apis/apps/v1/namespaces/default/deployments/d", dep)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["metadata"]["generation"], 2);

    let h = d.history("pods", "default", "a");
    let kinds: Vec<&str> = h.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(kinds, vec!["ADDED", "DELETED"]);
    assert!(h[0].resource_version < h[1].resource_version);
    assert_eq!(d.resource_version(), 5);
}

#[tokio::test]
async fn namespace_mismatch_and_bad_name() {
    let (_d, c) = start().await;
    let mut p = pod("a");
    p["metadata"]["namespace"] = json!("other");
    let r = c.post(PODS, p).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["message"],
        "the namespace of the provided object does not match the namespace sent on the request"
    );
    let r = c.post(PODS, pod("Bad_Name")).await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["reason"], "Invalid");
    let r = c.post(PODS, json!({"metadata": {}})).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "Pod \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
}

#[tokio::test]
async fn list_pagination_and_expired_continue() {
    let (d, c) = start().await;
    for i in 0..5 {
        assert_eq!(c.post(PODS, pod(&format!("p{i}"))).await.status, 201);
    }
    c.post("/api/v1/namespaces/other/pods", pod("q")).await;
    let all = c.get("/api/v1/pods").await.json();
    assert_eq!(all["kind"], "PodList");
    assert_eq!(all["apiVersion"], "v1");
    assert_eq!(all["metadata"]["resourceVersion"], "6");
    assert_eq!(names(&all), vec!["p0", "p1", "p2", "p3", "p4", "q"]);

    let page1 = c.get(&format!("{PODS}?limit=2")).await.json();
    assert_eq!(names(&page1), vec!["p0", "p1"]);
    assert_eq!(page1["metadata"]["remainingItemCount"], 3);
    let token = page1["metadata"]["continue"].as_str().unwrap().to_string();
    // A change between pages does not change the list's resourceVersion.
    c.post(PODS, pod("p9")).await;
    let page2 = c
        .get(&format!("{PODS}?limit=2&continue={token}"))
        .await
        .json();
    assert_eq!(names(&page2), vec!["p2", "p3"]);
    assert_eq!(page2["metadata"]["resourceVersion"], "6");
    let token2 = page2["metadata"]["continue"].as_str().unwrap().to_string();
    let page3 = c
        .get(&format!("{PODS}?limit=2&continue={token2}"))
        .await
        .json();
    assert_eq!(names(&page3), vec!["p4", "p9"]);
    assert!(page3["metadata"].get("continue").is_none());

    d.expire_versions();
    let r = c.get(&format!("{PODS}?limit=2&continue={token}")).await;
    assert_eq!(r.status, 410);
    let s = r.json();
    assert_eq!(s["reason"], "Expired");
    assert_eq!(s["code"], 410);
    assert!(s["message"].as_str().unwrap().starts_with(
        "The provided continue parameter is too old to display a consistent list result."
    ));

    let r = c.get(&format!("{PODS}?continue=garbage!")).await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn label_and_field_selectors() {
    let (_d, c) = start().await;
    c.post(
        PODS,
        labelled_pod("a", json!({"app": "web", "tier": "front"})),
    )
    .await;
    c.post(PODS, labelled_pod("b", json!({"app": "db"}))).await;
    c.post(PODS, pod("c")).await;
    let cases = [
        ("app=web", vec!["a"]),
        ("app==web", vec!["a"]),
        ("app!=web", vec!["b", "c"]),
        ("app", vec!["a", "b"]),
        ("!app", vec!["c"]),
        ("app in (web,db)", vec!["a", "b"]),
        ("app notin (web)", vec!["b", "c"]),
        ("app=web,tier=front", vec!["a"]),
        ("app,tier!=front", vec!["b"]),
    ];
    for (sel, want) in cases {
        let q = form_urlencoded::byte_serialize(sel.as_bytes()).collect::<String>();
        let r = c.get(&format!("{PODS}?labelSelector={q}")).await;
        assert_eq!(r.status, 200, "{sel}: {}", r.text);
        assert_eq!(names(&r.json()), want, "{sel}");
    }
    for bad in ["app in (web", "a=b=c", "!", "a b"] {
        let q = form_urlencoded::byte_serialize(bad.as_bytes()).collect::<String>();
        let r = c.get(&format!("{PODS}?labelSelector={q}")).await;
        assert_eq!(r.status, 400, "{bad}");
        assert_eq!(r.json()["reason"], "BadRequest");
        assert!(!r.json()["message"].as_str().unwrap().is_empty());
    }
    // As the real 1.37 server words it (and 1.33.4's apimachinery); 1.13 listed '=', '!=',
    // '==', 'in', notin' (`discovery_and_version`).
    let r = c.get(&format!("{PODS}?labelSelector=a%20b")).await;
    assert_eq!(
        r.json()["message"],
        "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
    );
    let r = c.get(&format!("{PODS}?limit=1&continue=garbage!")).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["message"],
        "invalid continue token: continue key is not valid: illegal base64 data at input byte 7"
    );
    let r = c.get(&format!("{PODS}?labelSelector=a%3Db%3Dc")).await;
    assert_eq!(
        r.json()["message"],
        "found '=', expected: ',' or 'end of string'"
    );
    let r = c
        .get(&format!("{PODS}?fieldSelector=metadata.name%3Db"))
        .await;
    assert_eq!(names(&r.json()), vec!["b"]);
    let r = c
        .get(&format!("{PODS}?fieldSelector=metadata.name%3D%3Db"))
        .await;
    assert_eq!(names(&r.json()), vec!["b"]);
    let r = c
        .get(&format!("{PODS}?fieldSelector=metadata.name!%3Db"))
        .await;
    assert_eq!(names(&r.json()), vec!["a", "c"]);
    let r = c
        .get("/api/v1/pods?fieldSelector=metadata.namespace%3Dother")
        .await;
    assert!(names(&r.json()).is_empty());
    let r = c.get(&format!("{PODS}?fieldSelector=spec.bogus%3Dx")).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["message"], "field label not supported: spec.bogus");
}

#[tokio::test]
async fn patches_and_preconditions() {
    let (_d, c) = start().await;
    let created = c
        .post(PODS, labelled_pod("a", json!({"x": "1"})))
        .await
        .json();
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    let r = c
        .patch(
            &format!("{PODS}/a"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"x": null, "y": "2"}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["metadata"]["labels"], json!({"y": "2"}));

    let r = c.json_patch(&format!("{PODS}/a"), json!([{"op": "test", "path": "/metadata/labels/y", "value": "2"}, {"op": "add", "path": "/metadata/labels/z", "value": "3"}])).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = c
        .json_patch(
            &format!("{PODS}/a"),
            json!([{"op": "test", "path": "/metadata/labels/y", "value": "nope"}]),
        )
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["reason"], "Invalid");
    assert_eq!(
        r.json()["message"],
        "the server rejected our request due to an error in our request"
    );
    let r = c
        .json_patch(
            &format!("{PODS}/a"),
            json!([{"op": "remove", "path": "/metadata/annotations"}]),
        )
        .await;
    assert_eq!(r.status, 422);
    let r = c
        .request(
            "PATCH",
            &format!("{PODS}/a"),
            Some("application/json-patch+json"),
            Some("not json".into()),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = c.patch(&format!("{PODS}/a"), "text/plain", json!({})).await;
    assert_eq!(r.status, 415);

    let r = c.patch(&format!("{PODS}/a"), "application/strategic-merge-patch+json", json!({"spec": {"containers": [{"name": "c", "image": "other"}, {"name": "d", "image": "x"}]}})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Merged by name: c's image replaced and its other fields kept, d added (and
    // defaulted, as every decoded pod is).
    let containers = r.json()["spec"]["containers"].clone();
    let pairs: Vec<(&str, &str)> = containers
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["image"].as_str().unwrap()))
        .collect();
    assert_eq!(pairs, [("c", "other"), ("d", "x")]);
    assert_eq!(
        containers[0]["volumeMounts"][0]["mountPath"],
        "/var/run/secrets/kubernetes.io/serviceaccount"
    );
    assert_eq!(containers[1]["imagePullPolicy"], "Always", "no tag");
    assert_eq!(
        containers[1]["terminationMessagePath"],
        "/dev/termination-log"
    );
    let r = c
        .patch(
            &format!("{PODS}/a"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"containers": [{"name": "d", "$patch": "delete"}]}}),
        )
        .await;
    let after = r.json();
    let names: Vec<&str> = after["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c"]);

    // Stale resourceVersion in a PUT body or a patch.
    let mut stale = created.clone();
    stale["metadata"]["resourceVersion"] = json!(rv);
    let r = c.put(&format!("{PODS}/a"), stale).await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["reason"], "Conflict");
    assert_eq!(
        r.json()["message"],
        "Operation cannot be fulfilled on pods \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );
    let r = c
        .patch(
            &format!("{PODS}/a"),
            "application/merge-patch+json",
            json!({"metadata": {"resourceVersion": rv, "labels": {"q": "1"}}}),
        )
        .await;
    assert_eq!(r.status, 409);

    let current = c.get(&format!("{PODS}/a")).await.json();
    let mut fresh = current.clone();
    fresh["metadata"]["labels"] = json!({"fresh": "yes"});
    let r = c.put(&format!("{PODS}/a"), fresh).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_ne!(
        r.json()["metadata"]["resourceVersion"],
        current["metadata"]["resourceVersion"]
    );

    let r = c.json_patch(&format!("{PODS}/missing"), json!([])).await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn events_both_groups_and_namespaces() {
    let (d, c) = start().await;
    let r = c.post("/api/v1/namespaces/kube-system/events", json!({"metadata": {"name": "e1"}, "reason": "Cleared", "message": "m", "involvedObject": {"kind": "Pod", "name": "a"}})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = c
        .post(
            "/apis/events.k8s.io/v1/namespaces/default/events",
            json!({"metadata": {"name": "e2"}, "reason": "Cleared", "note": "n"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["apiVersion"], "events.k8s.io/v1");
    let r = c
        .patch(
            "/api/v1/namespaces/kube-system/events/e1",
            "application/strategic-merge-patch+json",
            json!({"count": 2}),
        )
        .await;
    assert_eq!(r.status, 200);
    let events = d.events();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["count"], 2);
    let list = c.get("/api/v1/events").await.json();
    assert_eq!(list["kind"], "EventList");
    let ns = c.get("/api/v1/namespaces").await.json();
    let ns_names = names(&ns);
    assert_eq!(ns_names, vec!["default", "kube-system"]);
    c.post("/api/v1/namespaces/zeta/pods", pod("z")).await;
    assert!(names(&c.get("/api/v1/namespaces").await.json()).contains(&"zeta".to_string()));
    let ctl = c.get("/_double/events").await.json();
    assert_eq!(ctl.as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn tables_for_kubectl() {
    let (_d, c) = start().await;
    let mut p = pod("gated");
    p["spec"]["schedulingGates"] = json!([{"name": "g"}]);
    c.post(PODS, p).await;
    c.post(PODS, pod("free")).await;
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let t = c.get_accept(PODS, accept).await.json();
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        cols,
        vec![
            "Name",
            "Ready",
            "Status",
            "Restarts",
            "Age",
            "IP",
            "Node",
            "Nominated Node",
            "Readiness Gates"
        ]
    );
    assert_eq!(t["columnDefinitions"][5]["priority"], 1);
    let rows = t["rows"].as_array().unwrap();
    let status_of = |n: &str| rows.iter().find(|r| r["cells"][0] == n).unwrap()["cells"][2].clone();
    assert_eq!(status_of("gated"), "SchedulingGated");
    assert_eq!(status_of("free"), "Pending");
    assert_eq!(rows[0]["object"]["kind"], "PartialObjectMetadata");
    let t = c
        .get_accept(&format!("{PODS}/gated?includeObject=Object"), accept)
        .await
        .json();
    assert_eq!(t["rows"][0]["object"]["kind"], "Pod");
    let t = c
        .get_accept(&format!("{PODS}?includeObject=None"), accept)
        .await
        .json();
    assert!(t["rows"][0].get("object").is_none());
    c.post(
        "/apis/apps/v1/namespaces/default/deployments",
        json!({"metadata": {"name": "d"}}),
    )
    .await;
    let t = c
        .get_accept("/apis/apps/v1/namespaces/default/deployments", accept)
        .await
        .json();
    assert_eq!(t["columnDefinitions"].as_array().unwrap().len(), 2);
    assert_eq!(c.get(PODS).await.json()["kind"], "PodList");
}

#[tokio::test]
async fn discovery_and_version() {
    let legacy = Double::start(Config::legacy()).await.unwrap();
    let l = Client::new(&legacy.url());
    let v = l.get("/version").await.json();
    assert_eq!(
        (
            v["major"].as_str(),
            v["minor"].as_str(),
            v["gitVersion"].as_str()
        ),
        (Some("1"), Some("13"), Some("v1.13.12"))
    );
    // 1.13.12's apimachinery words a bad operator as it did then.
    let r = l.get("/api/v1/pods?labelSelector=a%20b").await;
    assert_eq!(
        r.json()["message"],
        "unable to parse requirement: found 'b', expected: '=', '!=', '==', 'in', notin'"
    );
    let (_d, c) = start().await;
    let v = c.get("/version").await.json();
    assert_eq!(
        (v["minor"].as_str(), v["gitVersion"].as_str()),
        (Some("33"), Some("v1.33.4"))
    );
    let core = c.get("/api/v1").await.json();
    let pods = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods")
        .unwrap()
        .clone();
    assert_eq!(pods["kind"], "Pod");
    assert_eq!(pods["singularName"], "pod");
    assert_eq!(pods["namespaced"], true);
    assert_eq!(pods["shortNames"], json!(["po"]));
    let ev = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "events")
        .unwrap()
        .clone();
    assert_eq!(ev["shortNames"], json!(["ev"]));
    let apps = c.get("/apis/apps/v1").await.json();
    assert_eq!(apps["resources"][0]["shortNames"], json!(["deploy"]));
    let groups = c.get("/apis").await.json();
    let gnames: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        gnames,
        vec![
            "apps",
            "events.k8s.io",
            "coordination.k8s.io",
            "discovery.k8s.io",
            "admissionregistration.k8s.io"
        ]
    );
    assert_eq!(
        c.get("/apis/events.k8s.io").await.json()["kind"],
        "APIGroup"
    );
    assert_eq!(
        c.get("/apis/events.k8s.io/v1").await.json()["groupVersion"],
        "events.k8s.io/v1"
    );
    assert_eq!(c.get("/api").await.json()["versions"], json!(["v1"]));
    assert_eq!(c.get("/apis/nope/v1").await.status, 404);
}

#[tokio::test]
async fn extra_resources_and_library_api() {
    let mut cfg = Config::modern();
    cfg.extra_resources = vec!["configmaps".into(), "statefulsets.apps".into()];
    let d = Double::start(cfg).await.unwrap();
    let c = Client::new(&d.url());
    let r = c
        .post(
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": "cm"}, "data": {"a": "b"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["kind"], "ConfigMap");
    let r = c
        .post(
            "/apis/apps/v1/namespaces/default/statefulsets",
            json!({"metadata": {"name": "s"}}),
        )
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["kind"], "StatefulSet");

    let p = d.create("pods", "ns", pod("lib")).unwrap();
    assert_eq!(p["metadata"]["namespace"], "ns");
    assert_eq!(
        d.create("pods", "ns", pod("lib")).unwrap_err()["reason"],
        "AlreadyExists"
    );
    let mut upd = p.clone();
    upd["metadata"]["labels"] = json!({"k": "v"});
    let u = d.update("pods", "ns", upd).unwrap();
    assert_eq!(u["metadata"]["labels"]["k"], "v");
    assert_eq!(
        d.get("pods", "ns", "lib").unwrap()["metadata"]["labels"]["k"],
        "v"
    );
    assert_eq!(d.list("pods").len(), 1);
    assert_eq!(d.list("configmaps").len(), 1);
    d.delete("pods", "ns", "lib").unwrap();
    assert!(d.get("pods", "ns", "lib").is_none());
    assert_eq!(d.delete("pods", "ns", "lib").unwrap_err()["code"], 404);
    assert!(d.create("widgets", "ns", pod("x")).is_err());
    let hist = c.get("/_double/history/pods/ns/lib").await.json();
    assert_eq!(hist.as_array().unwrap().len(), 3);
    let objs = c.get("/_double/objects/configmaps").await.json();
    assert_eq!(objs.as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn request_log() {
    let (d, c) = start().await;
    c.post(PODS, pod("a")).await;
    c.get(&format!("{PODS}/zzz")).await;
    let reqs = d.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[0].path_and_query, PODS);
    assert_eq!(reqs[0].content_type.as_deref(), Some("application/json"));
    assert_eq!(reqs[0].user_agent.as_deref(), Some("kube-double-tests/1.0"));
    assert!(reqs[0].body.contains("\"a\""));
    assert_eq!(reqs[0].status, 201);
    assert_eq!(reqs[1].status, 404);
    let wire = c.get("/_double/requests").await.json();
    assert_eq!(wire.as_array().unwrap().len(), 2);
    assert_eq!(wire[0]["status"], 201);
    c.delete("/_double/requests").await;
    assert!(d.requests().is_empty());
    d.clear_requests();
}

#[tokio::test]
async fn kubeconfig_written() {
    let (d, _c) = start().await;
    let dir = std::env::temp_dir().join(format!("kd-kc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config");
    d.write_kubeconfig(&path, Some("secret")).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(&format!("server: {}", d.url())));
    assert!(text.contains("token: \"secret\""));
    assert!(text.contains("current-context: kube-double"));
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn tokens_gate_every_verb() {
    let mut cfg = Config::modern();
    let mut tokens = std::collections::HashMap::new();
    tokens.insert(
        "reader".to_string(),
        vec!["get pods".into(), "list pods".into()],
    );
    tokens.insert("watcher".to_string(), vec!["watch *".into()]);
    tokens.insert("root".to_string(), vec!["*".into()]);
    cfg.tokens = Some(tokens);
    let d = Double::start(cfg).await.unwrap();
    let c = Client::new(&d.url());
    assert_eq!(c.get("/api/v1").await.status, 401);
    let r = c.with_token("nope").get(PODS).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
    );
    let reader = c.with_token("reader");
    assert_eq!(reader.get("/api/v1").await.status, 200);
    assert_eq!(reader.get(PODS).await.status, 200);
    let r = reader.get("/api/v1/pods?watch=true").await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "pods is forbidden: User \"token:reader\" cannot watch resource \"pods\" in API group \"\" at the cluster scope"
    );
    let r = reader.post(PODS, pod("a")).await;
    assert_eq!(r.status, 403);
    let root = c.with_token("root");
    assert_eq!(root.post(PODS, pod("a")).await.status, 201);
    let r = reader
        .patch(
            &format!("{PODS}/a"),
            "application/merge-patch+json",
            json!({}),
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "pods \"a\" is forbidden: User \"token:reader\" cannot patch resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    assert_eq!(reader.delete(&format!("{PODS}/a")).await.status, 403);
    let mut w = c
        .with_token("watcher")
        .watch(&format!("{PODS}?watch=true"))
        .await;
    assert_eq!(w.status, 200);
    assert_eq!(w.event().await["type"], "ADDED");
    // The library and control routes need no token.
    assert_eq!(c.get("/_double/objects/pods").await.status, 200);
    let out = d
        .patch(
            "pods",
            "default",
            "a",
            "application/json-patch+json",
            &json!([{"op": "add", "path": "/metadata/labels", "value": {"l": "1"}}]),
        )
        .unwrap();
    assert_eq!(out["metadata"]["labels"]["l"], "1");
    assert_eq!(
        d.patch("pods", "default", "a", "text/plain", &json!({}))
            .unwrap_err()["code"],
        415
    );
}

#[tokio::test]
async fn finalizers_keep_deleted_objects_terminating() {
    let (d, c) = start().await;
    let mut p = pod("f");
    p["metadata"]["finalizers"] = json!(["example.com/hold"]);
    c.post(PODS, p).await;
    let mut w = c.watch(&format!("{PODS}?watch=true")).await;
    assert_eq!(w.event().await["type"], "ADDED");
    let r = c.delete(&format!("{PODS}/f")).await;
    assert_eq!(r.status, 200);
    assert!(r.json()["metadata"]["deletionTimestamp"].is_string());
    let e = w.event().await;
    assert_eq!(e["type"], "MODIFIED");
    assert!(e["object"]["metadata"]["deletionTimestamp"].is_string());
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let t = c.get_accept(&format!("{PODS}/f"), accept).await.json();
    assert_eq!(t["rows"][0]["cells"][2], "Terminating");
    // Deleting again changes nothing.
    assert_eq!(c.delete(&format!("{PODS}/f")).await.status, 200);
    let r = c
        .json_patch(
            &format!("{PODS}/f"),
            json!([{"op": "remove", "path": "/metadata/finalizers"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(w.event().await["type"], "DELETED");
    assert!(d.get("pods", "default", "f").is_none());
}
