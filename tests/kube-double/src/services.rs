// Services and EndpointSlices on the modern double: the defaults a client sees in what it
// stored, enough for webhooks' service references and for kubectl's tables. No kube-proxy,
// no endpoint controller: EndpointSlices are what tests write.
//
// Service: kubernetes `pkg/apis/core/v1/defaults.go` `SetDefaults_Service` (type
// ClusterIP, sessionAffinity None, internalTrafficPolicy Cluster, ports' protocol TCP and
// targetPort = port) and the registry's allocation of `spec.clusterIP(s)`,
// `spec.ipFamilies`, `spec.ipFamilyPolicy` (`pkg/registry/core/service/storage/alloc.go`);
// `PrepareForUpdate` keeps the old status (`pkg/registry/core/service/strategy.go`). The
// address is a hash of namespace and name inside 10.96.0.0/16, not a real allocator (no
// range exhaustion, collisions are possible and harmless here).
//
// EndpointSlice: kubernetes `pkg/apis/discovery/v1/defaults.go` `SetDefaults_EndpointPort`
// (port name "" and protocol TCP), and the addresses an endpoint may not have
// (`ValidateEndpointIP`, `pkg/apis/core/validation`, checked by the real 1.37.2: a slice
// with 127.0.0.1 is refused).

use std::net::IpAddr;

use serde_json::{Value, json};

use crate::status::Cause;

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Service defaults and a ClusterIP (unless `type: ExternalName` or `clusterIP: None`).
pub fn service_on_create(obj: &mut Value, namespace: &str, name: &str) {
    let Some(spec) = obj
        .as_object_mut()
        .map(|o| o.entry("spec").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let ty = spec
        .entry("type")
        .or_insert_with(|| json!("ClusterIP"))
        .as_str()
        .unwrap_or("ClusterIP")
        .to_string();
    spec.entry("sessionAffinity").or_insert(json!("None"));
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert(json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                p.entry("targetPort").or_insert(port);
            }
        }
    }
    if ty != "ExternalName" {
        spec.entry("internalTrafficPolicy")
            .or_insert(json!("Cluster"));
        let h = fnv(&format!("{namespace}/{name}"));
        let ip = format!("10.96.{}.{}", (h >> 8) & 0xff, 2 + (h & 0xff) % 250);
        let ip = spec
            .entry("clusterIP")
            .or_insert(json!(ip))
            .as_str()
            .unwrap_or_default()
            .to_string();
        spec.entry("clusterIPs").or_insert(json!([ip]));
        spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
        spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
    }
    if let Some(o) = obj.as_object_mut() {
        o.insert("status".into(), json!({"loadBalancer": {}}));
    }
}

/// A PUT or PATCH of the main resource keeps the status and, when the body leaves them
/// out, the allocated addresses (as a client that read the object first would send them).
pub fn service_on_update(new: &mut Value, old: &Value) {
    let Some(o) = new.as_object_mut() else {
        return;
    };
    match old.get("status") {
        Some(s) => o.insert("status".into(), s.clone()),
        None => o.remove("status"),
    };
    if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) {
        for k in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if let Some(v) = old.pointer(&format!("/spec/{k}")) {
                spec.entry(k).or_insert(v.clone());
            }
        }
    }
}

/// `SetDefaults_EndpointPort`.
pub fn endpointslice_defaults(obj: &mut Value) {
    if let Some(ports) = obj.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("name").or_insert(json!(""));
            p.entry("protocol").or_insert(json!("TCP"));
        }
    }
}

/// The 422 causes of an EndpointSlice's IP addresses that no endpoint may have.
pub fn endpointslice_causes(obj: &Value) -> Vec<Cause> {
    if !matches!(obj["addressType"].as_str(), Some("IPv4" | "IPv6")) {
        return Vec::new();
    }
    let mut causes = Vec::new();
    for (i, endpoint) in obj["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for (j, address) in endpoint["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let Some(text) = address.as_str() else {
                continue;
            };
            let Ok(ip) = text.parse::<IpAddr>() else {
                continue;
            };
            let why = match ip {
                ip if ip.is_unspecified() => format!("may not be unspecified ({text})"),
                ip if ip.is_loopback() => {
                    "may not be in the loopback range (127.0.0.0/8, ::1/128)".into()
                }
                IpAddr::V4(v4) if v4.is_link_local() => {
                    "may not be in the link-local range (169.254.0.0/16, fe80::/10)".into()
                }
                IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => {
                    "may not be in the link-local range (169.254.0.0/16, fe80::/10)".into()
                }
                IpAddr::V4(v4) if v4.octets()[..3] == [224, 0, 0] => {
                    "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)".into()
                }
                IpAddr::V6(v6) if (v6.segments()[0] & 0xff0f) == 0xff02 => {
                    "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)".into()
                }
                _ => continue,
            };
            causes.push(Cause::invalid(
                format!("endpoints[{i}].addresses[{j}]"),
                format!("\"{text}\""),
                why,
            ));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_addresses_the_real_server_refuses() {
        let slice = |a: &str| json!({"addressType": "IPv4", "endpoints": [{"addresses": ["192.0.2.10", a]}]});
        assert!(endpointslice_causes(&slice("192.0.2.11")).is_empty());
        let causes = endpointslice_causes(&slice("127.0.0.1"));
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "endpoints[0].addresses[1]");
        assert_eq!(
            causes[0].message,
            "Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)"
        );
        for a in ["0.0.0.0", "169.254.1.1", "224.0.0.5"] {
            assert_eq!(endpointslice_causes(&slice(a)).len(), 1, "{a}");
        }
    }

    #[test]
    fn service_defaults() {
        let mut s = json!({"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 443}]}});
        service_on_create(&mut s, "gk", "svc");
        assert_eq!(s["spec"]["type"], "ClusterIP");
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 443);
        assert_eq!(s["spec"]["ports"][0]["protocol"], "TCP");
        let ip = s["spec"]["clusterIP"].as_str().unwrap().to_string();
        assert!(ip.starts_with("10.96."), "{ip}");
        let mut u = json!({"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 443}]}});
        service_on_update(&mut u, &s);
        assert_eq!(u["spec"]["clusterIP"], json!(ip));
        let mut e = json!({"ports": [{"port": 8443}]});
        endpointslice_defaults(&mut e);
        assert_eq!(
            e["ports"][0],
            json!({"port": 8443, "name": "", "protocol": "TCP"})
        );
    }
}
