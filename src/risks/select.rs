//! What a webhook's selectors and rules pick, as pure functions over the JSON the server
//! sends: a label selector against labels, a rule against an operation on a resource.
//! The API server's own rules (k8s.io/apiserver `pkg/admission/plugin/webhook/predicates`,
//! `k8s.io/apimachinery/pkg/labels`): an absent selector matches everything, an empty one
//! too; `In`/`NotIn` take values, `Exists`/`DoesNotExist` none; `NotIn` and
//! `DoesNotExist` match labels that lack the key.

use std::collections::BTreeMap;

use serde_json::Value;

/// Labels, as a map.
pub type Labels = BTreeMap<String, String>;

/// The labels of a JSON `labels` map (anything else: none).
pub fn labels(v: &Value) -> Labels {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a `LabelSelector` (`matchLabels`, `matchExpressions`; `null` or absent: every
/// object) selects `labels`. An operator it does not know selects nothing, as the API
/// server refuses to store one.
pub fn selects(selector: &Value, labels: &Labels) -> bool {
    if selector.is_null() {
        return true;
    }
    let by_label = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str());
    let by_expression = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|e| expression(e, labels));
    by_label && by_expression
}

fn expression(e: &Value, labels: &Labels) -> bool {
    let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
    let values: Vec<&str> = e
        .get("values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let value = labels.get(key).map(String::as_str);
    match e.get("operator").and_then(Value::as_str) {
        Some("In") => value.is_some_and(|v| values.contains(&v)),
        Some("NotIn") => value.is_none_or(|v| !values.contains(&v)),
        Some("Exists") => value.is_some(),
        Some("DoesNotExist") => value.is_none(),
        _ => false,
    }
}

/// A selector that a Service has (`spec.selector`, a plain map): `None` if empty or absent
/// (a Service without one selects no pod).
pub fn service_selector(service: &Value) -> Option<Labels> {
    let s = labels(service.pointer("/spec/selector").unwrap_or(&Value::Null));
    (!s.is_empty()).then_some(s)
}

/// Whether a plain selector map selects `labels`.
pub fn map_selects(selector: &Labels, labels: &Labels) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// An admission request, as a webhook's rules see it: a group's v1 (`""`: the core group),
/// an operation on a resource and, maybe, a subresource (`pods`, `CREATE`; `pods/binding`,
/// `CREATE`), namespaced or cluster-scoped (a rule's `scope`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    pub operation: &'a str,
    pub namespaced: bool,
}

impl Request<'static> {
    /// A namespaced request on a core-group resource.
    pub const fn core(resource: &'static str, operation: &'static str) -> Request<'static> {
        Request {
            group: "",
            resource,
            subresource: None,
            operation,
            namespaced: true,
        }
    }
}

pub const POD_CREATE: Request<'static> = Request::core("pods", "CREATE");

pub const POD_BINDING: Request<'static> = Request {
    subresource: Some("binding"),
    ..Request::core("pods", "CREATE")
};

/// The kubelet's (and the scheduler's) writes of a pod's status: its Ready condition, which
/// a Service's endpoints wait for.
pub const POD_STATUS: Request<'static> = Request {
    subresource: Some("status"),
    ..Request::core("pods", "UPDATE")
};

/// Whether any of a webhook's `rules` covers `request` (a v1 request): its group or `*`,
/// its version `v1` or `*`, the operation or `*`, a scope that takes it (`*`, `Namespaced`
/// or `Cluster`), and a resource entry `pods`, `pods/binding`, `pods/*`, `*`, `*/binding`
/// or `*/*` (`pods` and `*` are the main resource only; `x/*` x and every subresource of
/// it, `*/*` everything).
pub fn covers(rules: &Value, request: Request<'_>) -> bool {
    rules
        .as_array()
        .into_iter()
        .flatten()
        .any(|rule| rule_covers(rule, request))
}

fn rule_covers(rule: &Value, r: Request<'_>) -> bool {
    let has = |field: &str, wanted: &[&str]| {
        rule.get(field)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .any(|v| wanted.contains(&v))
    };
    let scope = rule.get("scope").and_then(Value::as_str).unwrap_or("*");
    let resource_ok = rule
        .get("resources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(|entry| resource_matches(entry, r));
    let scope_ok = match r.namespaced {
        true => matches!(scope, "*" | "Namespaced"),
        false => matches!(scope, "*" | "Cluster"),
    };
    has("apiGroups", &[r.group, "*"])
        && has("apiVersions", &["v1", "*"])
        && has("operations", &[r.operation, "*"])
        && scope_ok
        && resource_ok
}

fn resource_matches(entry: &str, r: Request<'_>) -> bool {
    let (res, sub) = match entry.split_once('/') {
        Some((res, sub)) => (res, Some(sub)),
        None => (entry, None),
    };
    let res_ok = res == "*" || res == r.resource;
    let sub_ok = match (sub, r.subresource) {
        (None, None) => true,
        // As the API server's rule matcher: `x/*` takes x itself too (its subresource
        // `""` against `*`), though the API reference says "all subresources of x".
        (Some("*"), _) => true,
        (Some(s), Some(wanted)) => s == wanted,
        _ => false,
    };
    res_ok && sub_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn l(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selectors_as_the_api_server_reads_them() {
        let app = l(&[("app", "gk"), ("tier", "web")]);
        assert!(selects(&Value::Null, &app));
        assert!(selects(&json!({}), &app));
        assert!(selects(&json!({"matchLabels": {"app": "gk"}}), &app));
        assert!(!selects(&json!({"matchLabels": {"app": "x"}}), &app));
        let e = |op: &str, values: Value| json!({"matchExpressions": [{"key": "app", "operator": op, "values": values}]});
        assert!(selects(&e("In", json!(["gk", "x"])), &app));
        assert!(!selects(&e("In", json!(["x"])), &app));
        assert!(selects(&e("NotIn", json!(["x"])), &app));
        assert!(!selects(&e("NotIn", json!(["gk"])), &app));
        assert!(
            selects(&e("NotIn", json!(["gk"])), &l(&[])),
            "NotIn: the key absent"
        );
        assert!(selects(&e("Exists", Value::Null), &app));
        assert!(!selects(&e("DoesNotExist", Value::Null), &app));
        assert!(selects(&e("DoesNotExist", Value::Null), &l(&[])));
        assert!(!selects(&e("Gt", json!(["1"])), &app), "unknown operator");
        // Both parts must hold.
        let both = json!({"matchLabels": {"tier": "web"},
                          "matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]});
        assert!(!selects(&both, &app));
    }

    #[test]
    fn rules_cover_pod_creation_and_binding() {
        let rule = |resources: Value, ops: Value| json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ops, "resources": resources}]);
        let create = json!(["CREATE"]);
        assert!(covers(&rule(json!(["pods"]), create.clone()), POD_CREATE));
        assert!(!covers(&rule(json!(["pods"]), create.clone()), POD_BINDING));
        assert!(covers(&rule(json!(["*"]), json!(["*"])), POD_CREATE));
        assert!(
            !covers(&rule(json!(["*"]), json!(["*"])), POD_BINDING),
            "* is main resources only"
        );
        assert!(covers(&rule(json!(["*/*"]), create.clone()), POD_BINDING));
        assert!(covers(
            &rule(json!(["pods/*"]), create.clone()),
            POD_BINDING
        ));
        assert!(
            covers(&rule(json!(["pods/*"]), create.clone()), POD_CREATE),
            "pods/* takes pods too, as kube-apiserver's matcher does"
        );
        assert!(covers(&rule(json!(["*/*"]), create.clone()), POD_CREATE));
        assert!(covers(
            &rule(json!(["pods/binding"]), create.clone()),
            POD_BINDING
        ));
        assert!(!covers(
            &rule(json!(["pods"]), json!(["UPDATE"])),
            POD_CREATE
        ));
        assert!(!covers(
            &rule(json!(["services"]), create.clone()),
            POD_CREATE
        ));
        let apps = json!([{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]);
        assert!(!covers(&apps, POD_CREATE));
        let cluster = json!([{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["pods"], "scope": "Cluster"}]);
        assert!(!covers(&cluster, POD_CREATE));
        assert!(!covers(&Value::Null, POD_CREATE));
    }

    #[test]
    fn rules_cover_other_groups_and_cluster_scoped_resources() {
        let node = Request {
            namespaced: false,
            ..Request::core("nodes", "CREATE")
        };
        let lease = Request {
            group: "coordination.k8s.io",
            ..Request::core("leases", "UPDATE")
        };
        let everything = json!([{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]);
        assert!(covers(&everything, node) && covers(&everything, lease));
        let cluster = json!([{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"], "scope": "Cluster"}]);
        assert!(covers(&cluster, node) && !covers(&cluster, lease));
        let core = json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["*"]}]);
        assert!(
            covers(&core, node) && !covers(&core, lease),
            "leases are not core"
        );
        let leases = json!([{"apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["leases"]}]);
        assert!(!covers(&leases, lease), "renewals are UPDATEs");
    }

    #[test]
    fn a_services_selector() {
        let svc = json!({"spec": {"selector": {"app": "gk"}}});
        assert_eq!(service_selector(&svc), Some(l(&[("app", "gk")])));
        assert_eq!(service_selector(&json!({"spec": {}})), None);
        let s = l(&[("app", "gk")]);
        assert!(map_selects(&s, &l(&[("app", "gk"), ("x", "y")])));
        assert!(!map_selects(&s, &l(&[("x", "y")])));
    }
}
