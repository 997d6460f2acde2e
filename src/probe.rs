//! `metainit probe SERVICE`: GETs a path (default `/readyz`) on every endpoint of a
//! Service, ready or not, and says which answered 200: what the Helm chart's `helm test`
//! runs against the release's metrics Service. Every address, not only the ready ones: a
//! metainit that is not ready is exactly what its `/readyz` should show (503 and why).
//! Read-only: one GET of the Service, one LIST of its EndpointSlices.

use std::{collections::BTreeSet, process::ExitCode, time::Duration};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::Api;

use crate::{
    Error, Result,
    budget::Budget,
    client::plain::{self, Answer},
    discovery::with_retries,
    kubeconfig,
    logging::{self, LogFormat},
    webhooks::{endpoints, hook},
};

/// What `probe` needs, checked by the command line.
#[derive(Clone, Debug)]
pub struct Settings {
    pub service: String,
    /// The EndpointSlice port's name.
    pub port: String,
    /// The path to GET, beginning with '/'.
    pub path: String,
    /// `None`: the kubeconfig context's namespace, or in a pod its own.
    pub namespace: Option<String>,
    pub kubeconfig: kubeconfig::Settings,
    /// How long each API request (retried meanwhile) and each GET may wait.
    pub timeout: Duration,
}

/// One endpoint to GET: its address, its port, whether the slice says it is ready.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    pub address: String,
    pub port: Option<i32>,
    pub ready: bool,
}

impl Endpoint {
    /// `http://ADDR:PORT/PATH`, an IPv6 address in brackets.
    pub fn url(&self, port: i32, path: &str) -> String {
        match self.address.parse::<std::net::Ipv6Addr>() {
            Ok(_) => format!("http://[{}]:{port}{path}", self.address),
            Err(_) => format!("http://{}:{port}{path}", self.address),
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
        let message = format!(
            "service {service} has no endpoints: no EndpointSlice labelled {}={} lists an address",
            endpoints::SERVICE_NAME_LABEL,
            settings.service
        );
        return Ok(logging::final_line(format, &message, 1));
    }
    let lines = futures::future::join_all(
        endpoints
            .iter()
            .map(|e| check(e, &settings.port, &settings.path, settings.timeout)),
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

/// The Service (which must have the port) and every address of its EndpointSlices.
async fn read(settings: &Settings) -> Result<(hook::Service, Vec<Endpoint>)> {
    // Not `setup::connect`: `setup` imports the command line, which imports `Settings`
    // from here; and a probe has no per-object requests or legacy switch to share.
    let config = kubeconfig::load(&settings.kubeconfig).await?;
    let url = config.cluster_url.to_string();
    let (client, _) = crate::client::build(config, settings.timeout, Default::default(), None)?;
    let (client, url) = (&client, url.as_str());
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
    has_port(&found, &service, &settings.port)?;
    let what = format!("probe: LIST endpointslices of {service}");
    let slices = with_retries(client, &what, url, budget(), || {
        endpoints::slices(client, &service)
    })
    .await?;
    Ok((service, addresses(&slices, &settings.port)))
}

/// A Service without a port named `port` has no such port on its endpoints either.
fn has_port(found: &Service, service: &hook::Service, port: &str) -> Result<()> {
    let names: Vec<&str> = found
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .map(|p| p.name.as_deref().unwrap_or(""))
        .collect();
    if names.contains(&port) {
        return Ok(());
    }
    let shown: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    Err(Error::Config(format!(
        "service {service} has no port named '{port}' (its ports: {}): pass --port NAME",
        if shown.is_empty() {
            "none".to_string()
        } else {
            shown.join(", ")
        }
    )))
}

/// Every address of every endpoint, ready or not, once each, with the port named `port`
/// of its slice (`None` if that slice lacks it).
pub fn addresses(slices: &[EndpointSlice], port: &str) -> Vec<Endpoint> {
    let mut out = BTreeSet::new();
    for slice in slices {
        let number = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or("") == port)
            .and_then(|p| p.port);
        for endpoint in slice.endpoints.iter().flatten() {
            // "A nil value should be interpreted as true" (the EndpointSlice API).
            let ready = endpoint.conditions.as_ref().and_then(|c| c.ready) != Some(false);
            for address in &endpoint.addresses {
                out.insert(Endpoint {
                    address: address.clone(),
                    port: number,
                    ready,
                });
            }
        }
    }
    out.into_iter().collect()
}

/// GETs one endpoint: whether it answered 200, and its line.
async fn check(endpoint: &Endpoint, port: &str, path: &str, timeout: Duration) -> (bool, String) {
    let state = if endpoint.ready { "ready" } else { "not ready" };
    let Some(number) = endpoint.port else {
        let line = format!(
            "{} ({state}): its EndpointSlice has no port named '{port}'",
            endpoint.address
        );
        return (false, line);
    };
    let url = endpoint.url(number, path);
    let answer = match url.parse() {
        Ok(uri) => plain::get(uri, timeout).await,
        Err(e) => Answer::Failed(format!("not a URL: {e}")),
    };
    line(&url, state, &answer)
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

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn every_address_ready_or_not_with_its_slices_port() {
        let a = slice(json!({
            "metadata": {"name": "a"}, "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
                {"addresses": ["10.0.0.3"]},
            ],
            "ports": [{"name": "http", "port": 80}, {"name": "metrics", "port": 10275}],
        }));
        // The same address in a second slice (a slice being replaced) is probed once.
        let b = slice(json!({
            "metadata": {"name": "b"}, "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "metrics", "port": 10275}],
        }));
        let c = slice(json!({
            "metadata": {"name": "c"}, "addressType": "IPv6",
            "endpoints": [{"addresses": ["fd00::9"]}],
            "ports": [{"name": "http", "port": 80}],
        }));
        let got = addresses(&[a, b, c], "metrics");
        let shown: Vec<_> = got
            .iter()
            .map(|e| (e.address.as_str(), e.port, e.ready))
            .collect();
        assert_eq!(
            shown,
            [
                ("10.0.0.1", Some(10275), true),
                ("10.0.0.2", Some(10275), false),
                ("10.0.0.3", Some(10275), true),
                ("fd00::9", None, true),
            ]
        );
        assert_eq!(got[0].url(10275, "/readyz"), "http://10.0.0.1:10275/readyz");
        assert_eq!(got[3].url(80, "/readyz"), "http://[fd00::9]:80/readyz");
        assert!(addresses(&[], "metrics").is_empty());
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
            line(u, "not ready", &status(503, "[-]watch not started")),
            (false, format!("{u} (not ready): 503: [-]watch not started"))
        );
        assert!(!line(u, "ready", &status(204, "")).0);
        assert_eq!(
            line(u, "ready", &Answer::Failed("connection refused".into())),
            (false, format!("{u} (ready): connection refused"))
        );
    }
}
