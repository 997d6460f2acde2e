// Admission webhooks as kube-apiserver 1.33 calls them (modern double only): which
// webhooks of the stored Mutating/ValidatingWebhookConfigurations a write matches, and
// what the client sees when a call fails.
//
// Sources, k8s.io/apiserver 1.33.4 `pkg/admission/plugin/webhook/`:
// - `generic/webhook.go` `Dispatch`: writes of the admission-configuration kinds are never
//   sent to webhooks (`rules.IsExemptAdmissionConfigurationResource`: by kind, group
//   admissionregistration.k8s.io: Validating/MutatingWebhookConfiguration,
//   ValidatingAdmissionPolicy(Binding), MutatingAdmissionPolicy(Binding));
//   `ShouldCallHook`: namespaceSelector, then objectSelector, then the rules.
// - `predicates/namespace/matcher.go` `MatchNamespaceSelector`: a cluster-scoped object
//   other than a Namespace is never excluded; `{}` matches everything; a Namespace's own
//   create or update is matched on the object's labels, anything else on the labels of its
//   namespace (see `namespaces.rs` for namespaces that were never created).
// - `predicates/object/matcher.go` `MatchObjectSelector`: the new or the old object.
// - `predicates/rules/rules.go` `Matcher`: scope (`Namespaced` excludes Namespace objects,
//   `Cluster` includes them), operations (`*`), apiGroups, apiVersions (`*`), resources
//   (`*`, `res/*`, `*/sub`, `res/sub`).
// - `mutating/dispatcher.go` and `validating/dispatcher.go`: a call that fails with
//   `failurePolicy: Ignore` lets the request through; with `Fail` the request fails with
//   `apierrors.NewInternalError(err)`, `err` being `webhookutil.ErrCallingWebhook`
//   (`pkg/util/webhook/error.go`: `failed calling webhook "NAME": REASON`) whose reason is
//   `failed to call webhook: ` and the client-go error `Post "URL": DIAL ERROR`. The URL is
//   `https://SVC.NS.svc:PORT/PATH?timeout=Ns` (`pkg/util/webhook/client.go`
//   `hookClientConfig`; the rest client adds `timeout`, the webhook's `timeoutSeconds`).
//   Mutating webhooks run in the handler before the strategy's validation, validating
//   ones after it, just before storage; each kind in order of configuration name, then of
//   webhook (`configuration/*_manager.go` sort the configurations by name). The real
//   validating dispatcher calls its webhooks in parallel and answers the first failure to
//   arrive; the double answers the first in that order.
//
// The double runs no webhook servers: a webhook whose service has a ready endpoint
// (`resolver.rs`) allows the request unchanged; a `clientConfig.url` webhook is taken as
// reachable and allowing (the double cannot know what is behind a URL). Not modelled:
// `matchConditions` (CEL), `matchPolicy: Equivalent` (the double serves one version of each
// resource, so only the request's own resource can match), dry run, reinvocation.

use serde_json::{Map, Value};

use crate::labelselector;
use crate::namespaces;
use crate::resolver;
use crate::resources::ResourceInfo;
use crate::status::{self, ApiError, go_duration};
use crate::store::Inner;

pub const VALIDATING: &str = "validatingwebhookconfigurations.admissionregistration.k8s.io";
pub const MUTATING: &str = "mutatingwebhookconfigurations.admissionregistration.k8s.io";

/// `admission.Operation` (CONNECT is never produced: the double has no connect verbs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Mutating,
    Validating,
}

/// `admission.Attributes`, the part the matchers read.
pub struct Attributes<'a> {
    pub res: &'a ResourceInfo,
    /// `""`, `"status"`, `"binding"`.
    pub subresource: &'a str,
    pub operation: Operation,
    /// The request's namespace: for a Namespace object, its own name (RequestInfo reads
    /// `/api/v1/namespaces/NAME` so), `""` for other cluster-scoped objects.
    pub namespace: &'a str,
    pub name: &'a str,
    pub object: Option<&'a Value>,
    pub old: Option<&'a Value>,
}

/// Calls the webhooks of one phase that match `attrs`: `Err` is the Status the client gets.
pub fn admit(inner: &Inner, attrs: &Attributes, phase: Phase) -> Result<(), ApiError> {
    if attrs.res.is_webhook_configuration() {
        return Ok(());
    }
    let key = match phase {
        Phase::Mutating => MUTATING,
        Phase::Validating => VALIDATING,
    };
    // Stored under ("", name): key order is configuration-name order.
    for (_, config) in inner.range(key, None, None) {
        let hooks = config.get("webhooks").and_then(Value::as_array);
        for hook in hooks.into_iter().flatten() {
            if !should_call(inner, hook, attrs) {
                continue;
            }
            let Err(reason) = call(inner, hook) else {
                continue;
            };
            if hook.get("failurePolicy").and_then(Value::as_str) == Some("Ignore") {
                continue;
            }
            let name = hook.get("name").and_then(Value::as_str).unwrap_or("");
            return Err(status::internal(&format!(
                "failed calling webhook \"{name}\": failed to call webhook: {reason}"
            )));
        }
    }
    Ok(())
}

/// `ShouldCallHook` without matchConditions and equivalent resources.
pub fn should_call(inner: &Inner, hook: &Value, attrs: &Attributes) -> bool {
    namespace_matches(inner, hook, attrs)
        && object_matches(hook, attrs)
        && hook
            .get("rules")
            .and_then(Value::as_array)
            .is_some_and(|rules| rules.iter().any(|r| rule_matches(r, attrs)))
}

fn labels_of(obj: Option<&Value>) -> Map<String, Value> {
    obj.and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn namespace_matches(inner: &Inner, hook: &Value, attrs: &Attributes) -> bool {
    let is_ns = attrs.res.is_namespaces();
    if attrs.namespace.is_empty() && !is_ns {
        return true;
    }
    let selector = hook
        .get("namespaceSelector")
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}));
    if labelselector::is_empty(&selector) {
        return true;
    }
    let labels = if is_ns
        && attrs.subresource.is_empty()
        && matches!(attrs.operation, Operation::Create | Operation::Update)
    {
        // The object as decoded: defaulting (`SetDefaults_Namespace`) has already put the
        // name label on it.
        let mut l = labels_of(attrs.object);
        l.insert(namespaces::NAME_LABEL.into(), Value::from(attrs.name));
        l
    } else {
        namespaces::labels(inner, attrs.namespace)
    };
    labelselector::matches(&selector, &labels)
}

fn object_matches(hook: &Value, attrs: &Attributes) -> bool {
    let Some(selector) = hook.get("objectSelector") else {
        return true;
    };
    if labelselector::is_empty(selector) {
        return true;
    }
    let check = |o: Option<&Value>| {
        o.is_some_and(|o| labelselector::matches(selector, &labels_of(Some(o))))
    };
    check(attrs.object) || check(attrs.old)
}

fn strings(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn exact_or_wildcard(items: &[&str], requested: &str) -> bool {
    items.iter().any(|i| *i == "*" || *i == requested)
}

/// `rules.Matcher.Matches`.
pub fn rule_matches(rule: &Value, attrs: &Attributes) -> bool {
    let res = attrs.res;
    let is_ns_resource = res.is_namespaces();
    let scope = match rule.get("scope").and_then(Value::as_str) {
        None | Some("*") => true,
        Some("Namespaced") => !is_ns_resource && !attrs.namespace.is_empty(),
        Some("Cluster") => is_ns_resource || attrs.namespace.is_empty(),
        Some(_) => false,
    };
    let ops = strings(rule.get("operations"));
    let operation = ops
        .iter()
        .any(|o| *o == "*" || *o == attrs.operation.as_str());
    let group = exact_or_wildcard(&strings(rule.get("apiGroups")), &res.group);
    let version = exact_or_wildcard(&strings(rule.get("apiVersions")), &res.version);
    let resource = strings(rule.get("resources")).iter().any(|rs| {
        let (r, s) = rs.split_once('/').unwrap_or((rs, ""));
        (r == "*" || r == res.plural) && (s == "*" || s == attrs.subresource)
    });
    scope && operation && group && version && resource
}

/// `path.Join("/", path)` as client-go builds the request path.
fn clean_path(p: &str) -> String {
    let segs: Vec<&str> = p
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    format!("/{}", segs.join("/"))
}

/// One webhook call: `Err` is the reason (`Post "URL": …`).
fn call(inner: &Inner, hook: &Value) -> Result<(), String> {
    let Some(svc) = hook.pointer("/clientConfig/service") else {
        // A URL: taken as reachable and allowing (see the module comment).
        return Ok(());
    };
    let s = |k: &str| svc.get(k).and_then(Value::as_str).unwrap_or("");
    let (ns, name) = (s("namespace"), s("name"));
    let port = svc.get("port").and_then(Value::as_i64).unwrap_or(443);
    let timeout = hook
        .get("timeoutSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(10);
    let url = format!(
        "https://{name}.{ns}.svc:{port}{}?timeout={}",
        clean_path(s("path")),
        go_duration(std::time::Duration::from_secs(timeout))
    );
    resolver::resolve(inner, ns, name, port).map_err(|e| format!("Post \"{url}\": {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs<'a>(
        res: &'a ResourceInfo,
        op: Operation,
        ns: &'a str,
        sub: &'a str,
    ) -> Attributes<'a> {
        Attributes {
            res,
            subresource: sub,
            operation: op,
            namespace: ns,
            name: "x",
            object: None,
            old: None,
        }
    }

    #[test]
    fn rules_like_the_rules_matcher() {
        let pods = ResourceInfo::new("pods");
        let nss = ResourceInfo::new("namespaces");
        let rule = |ops: Value, res: Value, scope: &str| json!({"operations": ops, "apiGroups": [""], "apiVersions": ["*"], "resources": res, "scope": scope});
        let create = attrs(&pods, Operation::Create, "a", "");
        let status = attrs(&pods, Operation::Update, "a", "status");
        assert!(rule_matches(
            &rule(json!(["CREATE"]), json!(["pods"]), "*"),
            &create
        ));
        assert!(!rule_matches(
            &rule(json!(["UPDATE"]), json!(["pods"]), "*"),
            &create
        ));
        assert!(rule_matches(
            &rule(json!(["*"]), json!(["*"]), "Namespaced"),
            &create
        ));
        assert!(!rule_matches(
            &rule(json!(["*"]), json!(["*"]), "Cluster"),
            &create
        ));
        assert!(!rule_matches(
            &rule(json!(["*"]), json!(["pods"]), "*"),
            &status
        ));
        assert!(rule_matches(
            &rule(json!(["*"]), json!(["pods/*"]), "*"),
            &status
        ));
        assert!(rule_matches(
            &rule(json!(["*"]), json!(["*/status"]), "*"),
            &status
        ));
        assert!(!rule_matches(
            &rule(json!(["*"]), json!(["*"]), "*"),
            &status
        ));
        // A Namespace is cluster-scoped even though its requests carry its name.
        let ns = attrs(&nss, Operation::Create, "x", "");
        assert!(rule_matches(
            &rule(json!(["*"]), json!(["namespaces"]), "Cluster"),
            &ns
        ));
        assert!(!rule_matches(
            &rule(json!(["*"]), json!(["*"]), "Namespaced"),
            &ns
        ));
        assert_eq!(clean_path(""), "/");
        assert_eq!(clean_path("/validate/"), "/validate");
    }
}
