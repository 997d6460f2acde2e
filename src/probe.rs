//! `metainit probe SERVICE`: GETs a path (default `/readyz`) on every pod the Service
//! selects, ready or not, at the Service port's target, and says which answered 200: what
//! the Helm chart's `helm test` runs against the release's metrics Service. Every pod, not
//! only the ready ones: a metainit that is not ready is exactly what its `/readyz` should
//! show (503 and why). The pods, not the EndpointSlices: the Service's selector and target
//! port are what its endpoints are made of, and they hold where the slices do not (the
//! endpoint-slice controller down in a cold start; a hostNetwork pod on a node whose
//! address is loopback, which no EndpointSlice may carry). Read-only: one GET of the
//! Service, one LIST of its pods.

use std::{collections::BTreeMap, process::ExitCode, time::Duration};

use k8s_openapi::{
    api::core::v1::{Service, ServicePort},
    apimachinery::pkg::util::intstr::IntOrString,
};
use kube::{
    Api,
    api::{ApiResource, DynamicObject, ListParams},
};
use serde_json::Value;

use crate::{
    Error, Result,
    budget::Budget,
    client::probe_path::{self, Answer},
    discovery::with_retries,
    kubeconfig,
    logging::{self, LogFormat},
    setup::{self, ClientSettings},
    webhooks::hook,
};

/// What `probe` needs, checked by the command line.
#[derive(Clone, Debug)]
pub struct Settings {
    pub service: String,
    /// The Service port's name.
    pub port: String,
    /// The path to GET, beginning with '/'.
    pub path: String,
    /// `None`: the kubeconfig context's namespace, or in a pod its own.
    pub namespace: Option<String>,
    pub kubeconfig: kubeconfig::Settings,
    /// How long each API request (retried meanwhile) and each GET may wait.
    pub timeout: Duration,
    /// The node the probe runs on, in its network namespace: a hostNetwork pod there
    /// without an IP is asked at loopback.
    pub node: Option<String>,
}

/// Where a hostNetwork pod on the probe's own node listens when it has no IP.
pub const LOOPBACK: &str = "127.0.0.1";

/// Where a Service port sends its traffic on each pod: a number, or a container port's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Number(i32),
    Name(String),
}

/// One pod address to GET: the pod, its IP (`None` before it has one), the port its
/// containers give the target, whether the pod is Ready.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    pub pod: String,
    pub address: Option<String>,
    pub port: Option<i32>,
    pub ready: bool,
    /// Asked at loopback: a hostNetwork pod of the probe's own node, without an IP.
    pub loopback: bool,
}

impl Endpoint {
    /// `http://ADDR:PORT/PATH`, an IPv6 address in brackets.
    pub fn url(&self, address: &str, port: i32, path: &str) -> String {
        match address.parse::<std::net::Ipv6Addr>() {
            Ok(_) => format!("http://[{address}]:{port}{path}"),
            Err(_) => format!("http://{address}:{port}{path}"),
        }
    }
}

pub async fn run(settings: Settings, format: LogFormat) -> Result<ExitCode> {
    let (service, endpoints) = match read(&settings).await {
        Ok(found) => found,
        // As `status`: 2 for a failure to ask, 1 kept for the answer "not every one is up".
        Err(e) => return Ok(logging::fatal_with(format, &e, 2)),
    };
    if endpoints.is_empty() {
        let message = format!("service {service} has no endpoints: its selector matches no pod");
        return Ok(logging::final_line(format, &message, 1));
    }
    let lines = futures::future::join_all(
        endpoints
            .iter()
            .map(|e| check(e, &settings.path, settings.timeout)),
    )
    .await;
    let failed = lines.iter().filter(|(ok, _)| !ok).count();
    let mut out: String = lines.iter().map(|(_, line)| format!("{line}\n")).collect();
    if failed == 0 {
        out.push_str(&format!(
            "all {} endpoints of service {service} answered 200 on {}\n",
            endpoints.len(),
            settings.path
        ));
    }
    crate::output::print(&out)?;
    if failed == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    let message = format!(
        "{failed} of {} endpoints of service {service} did not answer 200 on {}",
        endpoints.len(),
        settings.path
    );
    Ok(logging::final_line(format, &message, 1))
}

/// The Service (which must have the port and a selector) and every address of its pods.
async fn read(settings: &Settings) -> Result<(hook::Service, Vec<Endpoint>)> {
    // `--timeout` bounds each request too; a probe has no per-object requests or legacy
    // switch to use.
    let client = ClientSettings {
        kubeconfig: settings.kubeconfig.clone(),
        request_timeout: settings.timeout,
    };
    let conn = setup::connect(&client, None).await?;
    let (client, url) = (&conn.client, conn.url.as_str());
    let service = hook::Service {
        namespace: settings
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string()),
        name: settings.service.clone(),
    };
    let budget = || Some(Budget::from_now(settings.timeout));
    let api: Api<Service> = Api::namespaced(client.clone(), &service.namespace);
    let what = format!("probe: GET services/{}", service.name);
    let Some(found) =
        with_retries(client, &what, url, budget(), || api.get_opt(&service.name)).await?
    else {
        return Err(Error::Config(format!(
            "service \"{}\" not found in namespace \"{}\": check the name, and give its namespace with -n",
            service.name, service.namespace
        )));
    };
    let target = target(&found, &service, &settings.port)?;
    let selector = selector(&found, &service)?;
    // Pods as JSON, not k8s-openapi's `Pod`: its typed PodSpec and Volume decoders alone
    // took some 400 KB of the static binary, for the five fields read here.
    let pods: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &service.namespace, &pods_resource());
    let what = format!("probe: LIST pods of {service} ({selector})");
    let params = ListParams::default().labels(&selector);
    let list = with_retries(client, &what, url, budget(), || pods.list(&params)).await?;
    Ok((
        service,
        endpoints(&list.items, &target, settings.node.as_deref()),
    ))
}

/// The target of the Service's port named `port` (its `port` when it names none).
pub fn target(found: &Service, service: &hook::Service, port: &str) -> Result<Target> {
    let ports: &[ServicePort] = found
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    if let Some(p) = ports
        .iter()
        .find(|p| p.name.as_deref().unwrap_or("") == port)
    {
        return Ok(match &p.target_port {
            Some(IntOrString::Int(n)) => Target::Number(*n),
            Some(IntOrString::String(name)) => match name.parse() {
                Ok(n) => Target::Number(n),
                Err(_) => Target::Name(name.clone()),
            },
            None => Target::Number(p.port),
        });
    }
    let shown: Vec<String> = ports
        .iter()
        .map(|p| format!("'{}'", p.name.as_deref().unwrap_or("")))
        .collect();
    Err(Error::Config(format!(
        "service {service} has no port named '{port}' (its ports: {}): pass --port NAME",
        if shown.is_empty() {
            "none".to_string()
        } else {
            shown.join(", ")
        }
    )))
}

/// The Service's selector as a label selector; a Service without one has no pods.
pub fn selector(found: &Service, service: &hook::Service) -> Result<String> {
    let selector: BTreeMap<String, String> = found
        .spec
        .as_ref()
        .and_then(|s| s.selector.clone())
        .unwrap_or_default();
    if selector.is_empty() {
        return Err(Error::Config(format!(
            "service {service} has no selector: its endpoints are not pods it selects, and probe GETs pods"
        )));
    }
    Ok(selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(","))
}

/// The core group's pods, as a dynamic resource.
fn pods_resource() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Pod".into(),
        plural: "pods".into(),
    }
}

/// Every IP of every pod, ready or not (one line without an IP for a pod that has none
/// yet; loopback for a hostNetwork pod on `node`, the probe's own), with the port its
/// containers give `target`; terminating pods left out, as a Service's endpoints leave them.
pub fn endpoints(pods: &[DynamicObject], target: &Target, node: Option<&str>) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let (spec, status) = (&pod.data["spec"], &pod.data["status"]);
        let ready = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let port = match target {
            Target::Number(n) => Some(*n),
            Target::Name(wanted) => named_port(spec, wanted),
        };
        let mut ips: Vec<String> = status["podIPs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|ip| ip["ip"].as_str().map(str::to_string))
            .collect();
        if ips.is_empty() {
            ips.extend(status["podIP"].as_str().map(str::to_string));
        }
        let here =
            spec["hostNetwork"] == true && node.is_some() && spec["nodeName"].as_str() == node;
        let loopback = ips.is_empty() && here;
        if loopback {
            ips.push(LOOPBACK.to_string());
        }
        let address = |ip: Option<String>| Endpoint {
            pod: name.clone(),
            address: ip,
            port,
            ready,
            loopback,
        };
        if ips.is_empty() {
            out.push(address(None));
        }
        for ip in ips {
            out.push(address(Some(ip)));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The number of the container port named `wanted`, in any of the pod's containers.
fn named_port(spec: &Value, wanted: &str) -> Option<i32> {
    spec["containers"]
        .as_array()?
        .iter()
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .find(|p| p["name"].as_str() == Some(wanted))
        .and_then(|p| p["containerPort"].as_i64())
        .and_then(|n| i32::try_from(n).ok())
}

/// GETs one endpoint: whether it answered 200, and its line.
async fn check(endpoint: &Endpoint, path: &str, timeout: Duration) -> (bool, String) {
    let state = if endpoint.ready { "ready" } else { "not ready" };
    let pod = &endpoint.pod;
    let Some(address) = &endpoint.address else {
        return (false, format!("pod {pod} ({state}): no IP yet"));
    };
    let Some(number) = endpoint.port else {
        let line = format!(
            "pod {pod} {address} ({state}): no container port is the service port's target"
        );
        return (false, line);
    };
    let url = endpoint.url(address, number, path);
    let answer = match url.parse() {
        Ok(uri) => probe_path::get(uri, timeout).await,
        Err(e) => Answer::Failed(format!("not a URL: {e}")),
    };
    let place = if endpoint.loopback {
        ", on this node, no IP: at loopback"
    } else {
        ""
    };
    line(&url, &format!("pod {pod}, {state}{place}"), &answer)
}

/// What a user reads of one endpoint: the URL, the slice's readiness, the answer.
pub fn line(url: &str, state: &str, answer: &Answer) -> (bool, String) {
    match answer {
        Answer::Status { code, .. } if *code == http::StatusCode::OK => {
            (true, format!("{url} ({state}): 200"))
        }
        Answer::Status { code, body } if body.is_empty() => {
            (false, format!("{url} ({state}): {}", code.as_u16()))
        }
        Answer::Status { code, body } => {
            (false, format!("{url} ({state}): {}: {body}", code.as_u16()))
        }
        Answer::Failed(why) => (false, format!("{url} ({state}): {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn every_pod_ready_or_not_at_its_target_port() {
        let ready = |ok: &str| json!([{"type": "Ready", "status": ok}]);
        let ports = json!([{"name": "app", "ports": [{"name": "admin", "containerPort": 10275}]}]);
        let pods = [
            pod(
                json!({"metadata": {"name": "a"}, "spec": {"containers": ports},
                       "status": {"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}],
                                  "conditions": ready("True")}}),
            ),
            pod(
                json!({"metadata": {"name": "b"}, "spec": {"containers": ports},
                       "status": {"podIP": "127.0.0.1", "conditions": ready("False")}}),
            ),
            pod(json!({"metadata": {"name": "c"}, "spec": {"containers": ports}, "status": {}})),
            pod(
                json!({"metadata": {"name": "d", "deletionTimestamp": "2026-01-01T00:00:00Z"},
                       "spec": {"containers": ports}, "status": {"podIP": "10.0.0.4"}}),
            ),
            pod(
                json!({"metadata": {"name": "e"}, "spec": {"containers": [{"name": "x"}]},
                       "status": {"podIP": "10.0.0.5"}}),
            ),
        ];
        let got = endpoints(&pods, &Target::Name("admin".into()), None);
        let shown: Vec<_> = got
            .iter()
            .map(|e| (e.pod.as_str(), e.address.as_deref(), e.port, e.ready))
            .collect();
        assert_eq!(
            shown,
            [
                ("a", Some("10.0.0.1"), Some(10275), true),
                ("a", Some("fd00::1"), Some(10275), true),
                ("b", Some("127.0.0.1"), Some(10275), false),
                ("c", None, Some(10275), false),
                ("e", Some("10.0.0.5"), None, false),
            ]
        );
        assert_eq!(
            got[0].url("10.0.0.1", 10275, "/readyz"),
            "http://10.0.0.1:10275/readyz"
        );
        assert_eq!(
            got[1].url("fd00::1", 80, "/readyz"),
            "http://[fd00::1]:80/readyz"
        );
        let by_number = endpoints(&pods[4..], &Target::Number(9), None);
        assert_eq!(by_number[0].port, Some(9));
        assert!(endpoints(&[], &Target::Number(9), None).is_empty());
        // A hostNetwork pod without an IP: at loopback on the probe's own node only.
        let host = pod(json!({"metadata": {"name": "h"},
                              "spec": {"hostNetwork": true, "nodeName": "node-1", "containers": ports},
                              "status": {"conditions": ready("True")}}));
        let here = endpoints(
            std::slice::from_ref(&host),
            &Target::Number(9),
            Some("node-1"),
        );
        assert_eq!(
            (here[0].address.as_deref(), here[0].loopback),
            (Some(LOOPBACK), true)
        );
        let there = endpoints(
            std::slice::from_ref(&host),
            &Target::Number(9),
            Some("node-2"),
        );
        assert_eq!(
            (there[0].address.as_deref(), there[0].loopback),
            (None, false)
        );
        assert_eq!(
            endpoints(&[host], &Target::Number(9), None)[0].address,
            None
        );
    }

    #[test]
    fn the_target_and_the_selector_of_the_service() {
        let s = hook::Service {
            namespace: "ns".into(),
            name: "m".into(),
        };
        let found = svc(json!({"spec": {
            "selector": {"b": "2", "a": "1"},
            "ports": [{"name": "metrics", "port": 10275, "targetPort": "admin"},
                      {"name": "n", "port": 80, "targetPort": 8080},
                      {"name": "s", "port": 81, "targetPort": "8081"},
                      {"name": "p", "port": 82}]}}));
        assert_eq!(
            target(&found, &s, "metrics").unwrap(),
            Target::Name("admin".into())
        );
        assert_eq!(target(&found, &s, "n").unwrap(), Target::Number(8080));
        assert_eq!(target(&found, &s, "s").unwrap(), Target::Number(8081));
        assert_eq!(target(&found, &s, "p").unwrap(), Target::Number(82));
        let e = target(&found, &s, "http").unwrap_err().to_string();
        assert!(
            e.contains("no port named 'http' (its ports: 'metrics', 'n', 's', 'p')"),
            "{e}"
        );
        assert_eq!(selector(&found, &s).unwrap(), "a=1,b=2");
        let e = selector(&svc(json!({"spec": {}})), &s)
            .unwrap_err()
            .to_string();
        assert!(e.contains("service ns/m has no selector"), "{e}");
    }

    #[test]
    fn only_a_200_passes() {
        let status = |code: u16, body: &str| Answer::Status {
            code: http::StatusCode::from_u16(code).unwrap(),
            body: body.into(),
        };
        let u = "http://10.0.0.1:10275/readyz";
        assert_eq!(
            line(u, "ready", &status(200, "ok")),
            (true, format!("{u} (ready): 200"))
        );
        assert_eq!(
            line(u, "not ready", &status(503, "not ready: not watching yet")),
            (
                false,
                format!("{u} (not ready): 503: not ready: not watching yet")
            )
        );
        assert!(!line(u, "ready", &status(204, "")).0);
        assert_eq!(
            line(u, "ready", &Answer::Failed("connection refused".into())),
            (false, format!("{u} (ready): connection refused"))
        );
    }
}
