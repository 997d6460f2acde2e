// Validating- and MutatingWebhookConfiguration (admissionregistration.k8s.io/v1): the
// defaults the API server fills in when it decodes one, and its validation, so that a GET
// returns what a real server stores and a bad write is the real 422.
//
// Defaults: kubernetes `pkg/apis/admissionregistration/v1/defaults.go` (1.33.4):
// `SetDefaults_ValidatingWebhook` / `SetDefaults_MutatingWebhook` (failurePolicy Fail,
// matchPolicy Equivalent, namespaceSelector and objectSelector `{}`, timeoutSeconds 10,
// reinvocationPolicy Never for mutating), `SetDefaults_Rule` (scope `*`),
// `SetDefaults_ServiceReference` (port 443). sideEffects and admissionReviewVersions have
// no default in v1: validation requires them.
//
// Validation: kubernetes `pkg/apis/admissionregistration/validation/validation.go`
// (`validateValidatingWebhookConfiguration`, `validateValidatingWebhook`,
// `validateMutatingWebhook`, `validateRuleWithOperations`, `validateRule`,
// `validateResources`, `validateAdmissionReviewVersions`) and k8s.io/apiserver
// `pkg/util/webhook/validation.go` (`ValidateWebhookURL`, `ValidateWebhookService`), in
// their order. Not modelled: `matchConditions` (CEL) and the looser rules an update gets
// when the stored object already broke them (the double never stores such an object).

use serde_json::{Value, json};

use crate::labelselector;
use crate::status::Cause;
use crate::validation::{self, go_slice, quote, supported};

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
                labelselector::canonical(s);
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

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn str_of<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

/// The field errors of a (defaulted) configuration, metadata excepted.
pub fn validate(obj: &Value, mutating: bool) -> Vec<Cause> {
    let mut out = Vec::new();
    let hooks = obj
        .get("webhooks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut names: Vec<String> = Vec::new();
    for (i, hook) in hooks.iter().enumerate() {
        let p = format!("webhooks[{i}]");
        out.extend(validate_hook(hook, mutating, &p));
        out.extend(review_versions(
            &strings(hook.get("admissionReviewVersions")),
            &format!("{p}.admissionReviewVersions"),
        ));
        let name = str_of(hook, "name").unwrap_or_default();
        if !name.is_empty() {
            if names.iter().any(|n| n == name) {
                out.push(Cause::duplicate(format!("{p}.name"), quote(name)));
            } else {
                names.push(name.to_string());
            }
        }
    }
    out
}

fn validate_hook(hook: &Value, mutating: bool, p: &str) -> Vec<Cause> {
    let mut out = validation::fully_qualified_name(
        &format!("{p}.name"),
        str_of(hook, "name").unwrap_or_default(),
    );
    if let Some(rules) = hook.get("rules").and_then(Value::as_array) {
        for (i, r) in rules.iter().enumerate() {
            out.extend(validate_rule(r, &format!("{p}.rules[{i}]")));
        }
    }
    let one_of = |out: &mut Vec<Cause>, k: &str, allowed: &[&str]| {
        if let Some(v) = str_of(hook, k)
            && !allowed.contains(&v)
        {
            out.push(Cause::not_supported(
                format!("{p}.{k}"),
                quote(v),
                supported(allowed),
            ));
        }
    };
    one_of(&mut out, "failurePolicy", &["Fail", "Ignore"]);
    one_of(&mut out, "matchPolicy", &["Equivalent", "Exact"]);
    match str_of(hook, "sideEffects") {
        None => out.push(Cause::required(
            format!("{p}.sideEffects"),
            "must specify one of None, NoneOnDryRun",
        )),
        Some(_) => one_of(&mut out, "sideEffects", &["None", "NoneOnDryRun"]),
    }
    if let Some(t) = hook.get("timeoutSeconds").and_then(Value::as_i64)
        && !(1..=30).contains(&t)
    {
        out.push(Cause::invalid(
            format!("{p}.timeoutSeconds"),
            t.to_string(),
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    for k in ["namespaceSelector", "objectSelector"] {
        if let Some(s) = hook.get(k) {
            out.extend(labelselector::validate(s, &format!("{p}.{k}")));
        }
    }
    if mutating {
        one_of(&mut out, "reinvocationPolicy", &["IfNeeded", "Never"]);
    }
    let cc = hook.get("clientConfig").cloned().unwrap_or(Value::Null);
    let cc_path = format!("{p}.clientConfig");
    match (
        str_of(&cc, "url"),
        cc.get("service").filter(|s| !s.is_null()),
    ) {
        (Some(url), None) => out.extend(validate_url(&format!("{cc_path}.url"), url)),
        (None, Some(svc)) => out.extend(validate_service(&format!("{cc_path}.service"), svc)),
        _ => out.push(Cause::required(
            cc_path,
            "exactly one of url or service is required",
        )),
    }
    out
}

fn validate_rule(r: &Value, p: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    let ops = strings(r.get("operations"));
    if ops.is_empty() {
        out.push(Cause::required(format!("{p}.operations"), ""));
    }
    if ops.len() > 1 && ops.iter().any(|o| o == "*") {
        out.push(Cause::invalid(
            format!("{p}.operations"),
            go_slice("admissionregistration.OperationType", &ops),
            "if '*' is present, must not specify other operations",
        ));
    }
    const OPS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
    for (i, o) in ops.iter().enumerate() {
        if !OPS.contains(&o.as_str()) {
            out.push(Cause::not_supported(
                format!("{p}.operations[{i}]"),
                quote(o),
                supported(OPS),
            ));
        }
    }
    let groups = strings(r.get("apiGroups"));
    if groups.is_empty() {
        out.push(Cause::required(format!("{p}.apiGroups"), ""));
    }
    if groups.len() > 1 && groups.iter().any(|g| g == "*") {
        out.push(Cause::invalid(
            format!("{p}.apiGroups"),
            go_slice("string", &groups),
            "if '*' is present, must not specify other API groups",
        ));
    }
    let versions = strings(r.get("apiVersions"));
    if versions.is_empty() {
        out.push(Cause::required(format!("{p}.apiVersions"), ""));
    }
    if versions.len() > 1 && versions.iter().any(|v| v == "*") {
        out.push(Cause::invalid(
            format!("{p}.apiVersions"),
            go_slice("string", &versions),
            "if '*' is present, must not specify other API versions",
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        if v.is_empty() {
            out.push(Cause::required(format!("{p}.apiVersions[{i}]"), ""));
        }
    }
    out.extend(validate_resources(
        &strings(r.get("resources")),
        &format!("{p}.resources"),
    ));
    if let Some(s) = str_of(r, "scope") {
        const SCOPES: &[&str] = &["*", "Cluster", "Namespaced"];
        if !SCOPES.contains(&s) {
            out.push(Cause::not_supported(
                format!("{p}.scope"),
                quote(s),
                supported(SCOPES),
            ));
        }
    }
    out
}

fn validate_resources(resources: &[String], p: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    if resources.is_empty() {
        out.push(Cause::required(p, ""));
    }
    let mut res_with_wild_sub: Vec<&str> = Vec::new();
    let mut sub_with_wild_res: Vec<&str> = Vec::new();
    let (mut double, mut single, mut plain) = (false, false, false);
    for (i, rs) in resources.iter().enumerate() {
        if rs.is_empty() {
            out.push(Cause::required(format!("{p}[{i}]"), ""));
            continue;
        }
        double |= rs == "*/*";
        single |= rs == "*";
        let Some((res, sub)) = rs.split_once('/') else {
            plain = rs != "*";
            continue;
        };
        if res_with_wild_sub.contains(&res) {
            out.push(Cause::invalid(
                format!("{p}[{i}]"),
                quote(rs),
                format!("if '{res}/*' is present, must not specify {rs}"),
            ));
        }
        if sub_with_wild_res.contains(&sub) {
            out.push(Cause::invalid(
                format!("{p}[{i}]"),
                quote(rs),
                format!("if '*/{sub}' is present, must not specify {rs}"),
            ));
        }
        if sub == "*" {
            res_with_wild_sub.push(res);
        }
        if res == "*" {
            sub_with_wild_res.push(sub);
        }
    }
    if resources.len() > 1 && double {
        out.push(Cause::invalid(
            p,
            go_slice("string", resources),
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if single && plain {
        out.push(Cause::invalid(
            p,
            go_slice("string", resources),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
    out
}

/// `validateAdmissionReviewVersions` with `requireRecognizedAdmissionReviewVersion`.
fn review_versions(versions: &[String], p: &str) -> Vec<Cause> {
    if versions.is_empty() {
        return vec![Cause::required(p, "must specify one of v1, v1beta1")];
    }
    let mut out = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        if seen.contains(&v.as_str()) {
            out.push(Cause::invalid(
                format!("{p}[{i}]"),
                quote(v),
                "duplicate version",
            ));
            continue;
        }
        seen.push(v);
        for m in validation::dns1035_label(v) {
            out.push(Cause::invalid(format!("{p}[{i}]"), quote(v), m));
        }
    }
    if !versions.iter().any(|v| v == "v1" || v == "v1beta1") {
        out.push(Cause::invalid(
            p,
            go_slice("string", versions),
            "must include at least one of v1, v1beta1",
        ));
    }
    out
}

/// `ValidateWebhookURL(fldPath, url, forceHttps=true)`, for the URLs Go's `url.Parse` accepts.
fn validate_url(p: &str, url: &str) -> Vec<Cause> {
    const FORM: &str = "; desired format: https://host[/path]";
    let mut out = Vec::new();
    let (rest, fragment) = url.split_once('#').unwrap_or((url, ""));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (scheme, authority) = match rest.split_once("://") {
        Some((s, after)) => (s, after.split('/').next().unwrap_or("")),
        None => ("", ""),
    };
    let (user, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if scheme != "https" {
        out.push(Cause::invalid(
            p,
            quote(scheme),
            format!("'https' is the only allowed URL scheme{FORM}"),
        ));
    }
    if host.is_empty() {
        out.push(Cause::invalid(
            p,
            quote(host),
            format!("host must be specified{FORM}"),
        ));
    }
    if let Some(u) = user {
        out.push(Cause::invalid(
            p,
            quote(u),
            "user information is not permitted in the URL",
        ));
    }
    if !fragment.is_empty() {
        out.push(Cause::invalid(
            p,
            quote(fragment),
            "fragments are not permitted in the URL",
        ));
    }
    if !query.is_empty() {
        out.push(Cause::invalid(
            p,
            quote(query),
            "query parameters are not permitted in the URL",
        ));
    }
    out
}

/// `ValidateWebhookService`.
fn validate_service(p: &str, svc: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    if str_of(svc, "name").unwrap_or_default().is_empty() {
        out.push(Cause::required(
            format!("{p}.name"),
            "service name is required",
        ));
    }
    if str_of(svc, "namespace").unwrap_or_default().is_empty() {
        out.push(Cause::required(
            format!("{p}.namespace"),
            "service namespace is required",
        ));
    }
    let port = svc.get("port").and_then(Value::as_i64).unwrap_or(443);
    if !(1..=65535).contains(&port) {
        out.push(Cause::invalid(
            format!("{p}.port"),
            port.to_string(),
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
    let Some(path) = str_of(svc, "path") else {
        return out;
    };
    let pp = format!("{p}.path");
    if path.is_empty() || path == "/" {
        return out;
    }
    if path == "//" {
        out.push(Cause::invalid(
            pp,
            quote(path),
            "segment[0] may not be empty",
        ));
        return out;
    }
    if !path.starts_with('/') {
        out.push(Cause::invalid(&pp, quote(path), "must start with a '/'"));
    }
    let check = path.get(1..).unwrap_or_default();
    let check = check.strip_suffix('/').unwrap_or(check);
    for (i, step) in check.split('/').enumerate() {
        if step.is_empty() {
            out.push(Cause::invalid(
                &pp,
                quote(path),
                format!("segment[{i}] may not be empty"),
            ));
            continue;
        }
        for m in validation::dns1123_subdomain(step) {
            out.push(Cause::invalid(
                &pp,
                quote(path),
                format!("segment[{i}]: {m}"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook() -> Value {
        json!({
            "name": "v.example.com",
            "clientConfig": {"service": {"namespace": "gk", "name": "svc", "path": "/validate"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })
    }

    #[test]
    fn defaults_as_v1() {
        let mut c = json!({"webhooks": [hook()]});
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
        assert!(validate(&c, true).is_empty());
    }

    #[test]
    fn each_rule_reports_its_field() {
        let mut h = hook();
        h["name"] = json!("short");
        h["rules"][0]["operations"] = json!(["*", "CREATE"]);
        h["rules"][0]["resources"] = json!(["*", "pods"]);
        h["rules"][0]["scope"] = json!("Everywhere");
        h["failurePolicy"] = json!("Sometimes");
        h.as_object_mut().unwrap().remove("sideEffects");
        h["admissionReviewVersions"] = json!(["v2"]);
        h["clientConfig"]["url"] = json!("http://x/y");
        let mut dup = hook();
        dup["name"] = json!("v.example.com");
        let c = json!({"webhooks": [h, hook(), dup]});
        let got: Vec<String> = validate(&c, false)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            got,
            [
                "webhooks[0].name: Invalid value: \"short\": should be a domain with at least three segments separated by dots",
                "webhooks[0].rules[0].operations: Invalid value: []admissionregistration.OperationType{\"*\", \"CREATE\"}: if '*' is present, must not specify other operations",
                "webhooks[0].rules[0].resources: Invalid value: []string{\"*\", \"pods\"}: if '*' is present, must not specify other resources without subresources",
                "webhooks[0].rules[0].scope: Unsupported value: \"Everywhere\": supported values: \"*\", \"Cluster\", \"Namespaced\"",
                "webhooks[0].failurePolicy: Unsupported value: \"Sometimes\": supported values: \"Fail\", \"Ignore\"",
                "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun",
                "webhooks[0].clientConfig: Required value: exactly one of url or service is required",
                "webhooks[0].admissionReviewVersions: Invalid value: []string{\"v2\"}: must include at least one of v1, v1beta1",
                "webhooks[2].name: Duplicate value: \"v.example.com\"",
            ]
        );
    }

    #[test]
    fn urls_and_services() {
        let got = validate_url("u", "http://user@h/p?q=1#f");
        assert_eq!(got.len(), 4);
        assert!(validate_url("u", "https://policy.example.com/validate").is_empty());
        let got = validate_service("s", &json!({"name": "a", "namespace": "b", "path": "x/y"}));
        let msgs: Vec<&str> = got.iter().map(|c| c.message.as_str()).collect();
        assert_eq!(
            msgs,
            [
                "Invalid value: \"x/y\": must start with a '/'",
                "Invalid value: \"x/y\": segment[0] may not be empty"
            ]
        );
    }
}
