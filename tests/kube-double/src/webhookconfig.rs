// Validating- and MutatingWebhookConfiguration (admissionregistration.k8s.io/v1): the
// defaults the API server fills in when it decodes one, so that a GET returns what a real
// server stores (tests/clients/check.sh compares them). That is all the double does with
// them now: it calls no webhook and refuses no configuration. Which pods a webhook admits,
// and the 422 of a bad configuration, are the real server's: metainit's `--webhooks` is
// tested on it (tests/cluster_webhooks*.rs); the double keeps the configurations for the
// faults and the 1.13 tests that still need a server of its own (tests/webhooks.rs,
// tests/sweep.rs, tests/chaos.rs).
//
// Defaults: kubernetes `pkg/apis/admissionregistration/v1/defaults.go` (1.33.4):
// `SetDefaults_ValidatingWebhook` / `SetDefaults_MutatingWebhook` (failurePolicy Fail,
// matchPolicy Equivalent, namespaceSelector and objectSelector `{}`, timeoutSeconds 10,
// reinvocationPolicy Never for mutating), `SetDefaults_Rule` (scope `*`),
// `SetDefaults_ServiceReference` (port 443).

use serde_json::{Value, json};

/// Fills in the v1 defaults of every webhook of a configuration and drops what Go's
/// round trip drops (null fields, empty `rules`, empty selector parts).
pub fn default(obj: &mut Value, mutating: bool) {
    let Some(hooks) = obj.get_mut("webhooks").and_then(Value::as_array_mut) else {
        return;
    };
    for hook in hooks.iter_mut().filter_map(Value::as_object_mut) {
        hook.retain(|_, v| !v.is_null());
        let mut fill = |k: &str, v: Value| {
            hook.entry(k.to_string()).or_insert(v);
        };
        fill("failurePolicy", json!("Fail"));
        fill("matchPolicy", json!("Equivalent"));
        fill("namespaceSelector", json!({}));
        fill("objectSelector", json!({}));
        fill("timeoutSeconds", json!(10));
        if mutating {
            fill("reinvocationPolicy", json!("Never"));
        }
        for k in ["namespaceSelector", "objectSelector"] {
            if let Some(s) = hook.get_mut(k) {
                canonical(s);
            }
        }
        for k in ["rules", "matchConditions"] {
            if hook
                .get(k)
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty)
            {
                hook.remove(k);
            }
        }
        if let Some(rules) = hook.get_mut("rules").and_then(Value::as_array_mut) {
            for r in rules.iter_mut().filter_map(Value::as_object_mut) {
                r.retain(|_, v| !v.is_null());
                r.entry("scope").or_insert(json!("*"));
            }
        }
        if let Some(svc) = hook
            .get_mut("clientConfig")
            .and_then(|c| c.get_mut("service"))
            .and_then(Value::as_object_mut)
        {
            svc.retain(|_, v| !v.is_null());
            svc.entry("port").or_insert(json!(443));
        }
    }
}

/// What the stored selector looks like after Go decodes and encodes it: empty or null
/// `matchLabels`, `matchExpressions` and `values` are dropped (all `omitempty`).
pub fn canonical(selector: &mut Value) {
    let Some(m) = selector.as_object_mut() else {
        return;
    };
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    for k in ["matchLabels", "matchExpressions"] {
        if m.get(k).is_some_and(empty) {
            m.remove(k);
        }
    }
    if let Some(exprs) = m.get_mut("matchExpressions").and_then(Value::as_array_mut) {
        for e in exprs.iter_mut().filter_map(Value::as_object_mut) {
            if e.get("values").is_some_and(empty) {
                e.remove("values");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_as_v1() {
        let mut c = json!({"webhooks": [{
            "name": "v.example.com",
            "clientConfig": {"service": {"namespace": "gk", "name": "svc", "path": "/validate"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaceSelector": {"matchExpressions": [], "matchLabels": {}},
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }]});
        default(&mut c, true);
        let h = &c["webhooks"][0];
        assert_eq!(h["failurePolicy"], "Fail");
        assert_eq!(h["matchPolicy"], "Equivalent");
        assert_eq!(h["namespaceSelector"], json!({}));
        assert_eq!(h["objectSelector"], json!({}));
        assert_eq!(h["timeoutSeconds"], 10);
        assert_eq!(h["reinvocationPolicy"], "Never");
        assert_eq!(h["rules"][0]["scope"], "*");
        assert_eq!(h["clientConfig"]["service"]["port"], 443);
    }
}
