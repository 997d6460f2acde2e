// Where a webhook's `clientConfig.service` leads: a ready endpoint, or the error the API
// server's dialer reports. The double runs no webhook servers, so a service with a ready
// endpoint counts as a call that allowed the request (and changed nothing).
//
// kube-apiserver builds the webhook client's dialer with a ServiceResolver
// (`buildServiceResolver`, kubernetes `cmd/kube-apiserver/app/server.go`):
// with `--enable-aggregator-routing` it is `NewEndpointServiceResolver`, which calls
// `proxy.ResolveEndpoint` (k8s.io/apiserver `pkg/util/proxy/proxy.go`, 1.33.4); without
// it, `NewClusterIPServiceResolver` dials the ClusterIP and the error is the dial's
// (`dial tcp 10.96.x.y:443: connect: connection refused`, or a timeout). The double
// imitates the endpoints resolver, whose errors say what is wrong. `ResolveEndpoint`, in
// order: the service from the lister (`service "NAME" not found`, the generated
// lister's `errors.NewNotFound(v1.Resource("service"), name)`); its type
// (`unsupported service type "ExternalName"`); the service port equal to the webhook's
// port, 443 by default (`no service port 443 found for service "NAME"`); then an address
// in a subset that has a port named as that service port, else `no endpoints available
// for service "NAME"`.
//
// 1.33.4 reads the service's Endpoints object, whose `subsets[].addresses` are the ready
// addresses; the double reads what tests write, the EndpointSlices labelled
// `kubernetes.io/service-name: NAME` in the service's namespace (which the same endpoint
// controllers derive from the same pods, and which later releases' resolver reads):
// an endpoint counts when it has an address and its `conditions.ready` is not false ("A
// nil value should be interpreted as \"true\"", k8s.io/api `discovery/v1/types.go`,
// `EndpointConditions`), in a slice with a port named as the service port ("" when
// unnamed). A service with no slice at all has "no endpoints available" (the controller
// would have written an empty Endpoints object).

use serde_json::Value;

use crate::store::Inner;

pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// `Ok` when the service has a ready endpoint for `port`, else the resolver's error text.
pub fn resolve(inner: &Inner, namespace: &str, name: &str, port: i64) -> Result<(), String> {
    let svc = inner
        .get("services", namespace, name)
        .ok_or_else(|| format!("service \"{name}\" not found"))?;
    let ty = svc
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    if !matches!(ty, "ClusterIP" | "LoadBalancer" | "NodePort") {
        return Err(format!("unsupported service type \"{ty}\""));
    }
    let svc_port = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .and_then(|ports| {
            ports
                .iter()
                .find(|p| p.get("port").and_then(Value::as_i64) == Some(port))
        })
        .ok_or_else(|| format!("no service port {port} found for service \"{name}\""))?;
    let port_name = svc_port.get("name").and_then(Value::as_str).unwrap_or("");
    let ready = inner
        .range("endpointslices.discovery.k8s.io", Some(namespace), None)
        .into_iter()
        .map(|(_, s)| s)
        .filter(|s| {
            s.pointer(&format!(
                "/metadata/labels/{}",
                SERVICE_NAME_LABEL.replace('/', "~1")
            ))
            .and_then(Value::as_str)
                == Some(name)
        })
        .filter(|s| {
            s.get("ports").and_then(Value::as_array).is_some_and(|ps| {
                ps.iter()
                    .any(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
            })
        })
        .any(|s| has_ready_endpoint(s));
    if ready {
        Ok(())
    } else {
        Err(format!("no endpoints available for service \"{name}\""))
    }
}

fn has_ready_endpoint(slice: &Value) -> bool {
    slice
        .get("endpoints")
        .and_then(Value::as_array)
        .is_some_and(|eps| {
            eps.iter().any(|e| {
                let addressed = e
                    .get("addresses")
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty());
                let ready = e.pointer("/conditions/ready").and_then(Value::as_bool) != Some(false);
                addressed && ready
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nil_ready_is_ready() {
        assert!(has_ready_endpoint(
            &json!({"endpoints": [{"addresses": ["10.0.0.1"]}]})
        ));
        assert!(has_ready_endpoint(
            &json!({"endpoints": [{"addresses": ["10.0.0.1"], "conditions": {}}]})
        ));
        assert!(!has_ready_endpoint(
            &json!({"endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": false}}]})
        ));
        assert!(!has_ready_endpoint(&json!({"endpoints": []})));
    }
}
