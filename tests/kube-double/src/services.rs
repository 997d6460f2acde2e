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
// (port name "" and protocol TCP).

use serde_json::{Value, json};

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

#[cfg(test)]
mod tests {
    use super::*;

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
