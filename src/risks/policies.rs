//! Admission policies in CEL (ValidatingAdmissionPolicy, GA in 1.30; MutatingAdmissionPolicy,
//! GA in 1.36): never "down", but a binding whose parameter does not exist, with
//! `parameterNotFoundAction: Deny`, refuses every request it matches (openshift's
//! cluster-capi-operator PR 321: it refused the controller that would create it), and a
//! mutating policy can add scheduling gates with no webhook at all. What the forecast reads
//! of them, and its two findings. Their CEL is not evaluated: a policy's gates are the
//! names its mutations write under `schedulingGates`.

use serde_json::Value;

use super::{Finding, Risk, Running};

/// A policy, as the findings read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Policy {
    /// `validating` or `mutating`.
    pub kind: String,
    pub name: String,
    /// `spec.paramKind`, as `Kind apiVersion` (`ConfigMap v1`).
    pub param_kind: Option<String>,
    /// The gates its mutations add (a mutating policy's).
    pub gates: Vec<String>,
}

/// A binding, and what became of its parameter.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Binding {
    pub kind: String,
    pub name: String,
    pub policy: String,
    /// `paramRef` with `parameterNotFoundAction: Deny`: the parameter it names
    /// (`ConfigMap ns/name`, `ConfigMap ns/{selector}`).
    pub denies_without: Option<String>,
    /// Whether that parameter is there now.
    pub param: Param,
}

/// What became of a `Deny` binding's parameter.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Param {
    /// Not needed, or there.
    #[default]
    There,
    Missing,
    /// Not told, and why (no right to read it, each request's own namespace).
    Unchecked(String),
}

/// The policy of `spec`, `kind` `validating` or `mutating`.
pub fn policy(kind: &str, name: &str, spec: &Value) -> Policy {
    let param_kind = spec.get("paramKind").map(|p| {
        let text = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or_default();
        format!("{} {}", text("kind"), text("apiVersion"))
    });
    let gates = match kind {
        "mutating" => spec
            .get("mutations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .flat_map(|m| {
                ["applyConfiguration", "jsonPatch"]
                    .iter()
                    .filter_map(|k| m.pointer(&format!("/{k}/expression"))?.as_str())
                    .flat_map(gates_written)
                    .collect::<Vec<_>>()
            })
            .collect(),
        _ => Vec::new(),
    };
    Policy {
        kind: kind.into(),
        name: name.into(),
        param_kind,
        gates,
    }
}

/// The gate names a CEL mutation writes: each string given as a `name` after its first
/// `schedulingGates` (`Object.spec{schedulingGates: [...{name: "x.io/hold"}]}`, or a JSON
/// patch's `{"name": "x.io/hold"}`).
pub fn gates_written(expression: &str) -> Vec<String> {
    let Some(at) = expression.find("schedulingGates") else {
        return Vec::new();
    };
    let mut rest = &expression[at..];
    let mut out = Vec::new();
    while let Some(i) = rest.find("name") {
        rest = &rest[i + 4..];
        let after = rest.trim_start_matches(['"', '\'', ' ']);
        let Some(value) = after.strip_prefix(':').map(str::trim_start) else {
            continue;
        };
        let Some(quote) = value.chars().next().filter(|c| matches!(c, '"' | '\'')) else {
            continue;
        };
        if let Some(end) = value[1..].find(quote) {
            let gate = value[1..1 + end].to_string();
            if !out.contains(&gate) {
                out.push(gate);
            }
        }
    }
    out
}

/// The parameter a binding's `spec` cannot do without (`parameterNotFoundAction: Deny`),
/// of a policy whose parameters are `param_kind`: `Kind ns/name`, or `None`.
pub fn denies_without(spec: &Value, param_kind: Option<&str>) -> Option<(String, ParamRef)> {
    let r = spec.get("paramRef")?;
    if r.get("parameterNotFoundAction").and_then(Value::as_str) != Some("Deny") {
        return None;
    }
    let text = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_string);
    let param = ParamRef {
        name: text("name"),
        namespace: text("namespace"),
        selector: r.get("selector").cloned(),
    };
    let kind = param_kind.and_then(|k| k.split(' ').next()).unwrap_or("?");
    let ns = param
        .namespace
        .as_deref()
        .map(|n| format!("{n}/"))
        .unwrap_or_default();
    let what = match &param.name {
        Some(n) => format!("{kind} {ns}{n}"),
        None => format!(
            "{kind} {ns}{}",
            param.selector.clone().unwrap_or(Value::Null)
        ),
    };
    Some((what, param))
}

/// What a binding's `paramRef` names.
#[derive(Clone, Debug, Default)]
pub struct ParamRef {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub selector: Option<Value>,
}

/// The findings of policies and their bindings: a binding that refuses everything it
/// matches for want of its parameter; a bound mutating policy that adds gates.
pub fn findings(policies: &[Policy], bindings: &[Binding], running: &Running) -> Vec<Finding> {
    let mut out = Vec::new();
    for b in bindings {
        if let Some(param) = &b.denies_without
            && b.param != Param::There
        {
            out.push(missing_parameter(b, param));
        }
    }
    for p in policies.iter().filter(|p| !p.gates.is_empty()) {
        let bound: Vec<&Binding> = bindings
            .iter()
            .filter(|b| b.kind == p.kind && b.policy == p.name)
            .collect();
        if !bound.is_empty() {
            out.push(gate_injector(p, &bound, running));
        }
    }
    out
}

fn missing_parameter(b: &Binding, param: &str) -> Finding {
    let now = match &b.param {
        Param::Unchecked(why) => format!(
            "would refuse every request it matches if its parameter {param} were missing (not checked: {why})"
        ),
        _ => format!("refuses every request it matches: its parameter {param} does not exist"),
    };
    Finding {
        risk: Risk::PolicyParameter,
        webhooks: vec![format!("{}-policy/{}/{}", b.kind, b.policy, b.name)],
        objects: vec![param.to_string()],
        why: format!(
            "binding {} of {} admission policy {} {now} (paramRef.parameterNotFoundAction: Deny); the controller that would create it may be among what it refuses",
            b.name, b.kind, b.policy
        ),
        fix: format!(
            "create {param}, or set parameterNotFoundAction: Allow on binding {} (the policy then admits what it matches without it)",
            b.name
        ),
        metainit: "not cleared: a refused create is not a gate metainit could remove".into(),
        covered: false,
    }
}

fn gate_injector(p: &Policy, bound: &[&Binding], running: &Running) -> Finding {
    let released: Vec<String> = running
        .release_gates
        .iter()
        .filter(|(g, _)| p.gates.contains(g))
        .map(|(g, a)| format!("{g}={a}"))
        .collect();
    let all = released.len() == p.gates.len();
    let metainit = match all {
        true => format!(
            "released by --release-gate {} once its pods are that old; cleared at once on pods labelled {}",
            released.join(", "),
            running.label_key
        ),
        false => format!(
            "cleared only on pods labelled {} (metainit clears every gate of a labelled pod); for the others add --release-gate GATE=AGE",
            running.label_key
        ),
    };
    let names: Vec<&str> = bound.iter().map(|b| b.name.as_str()).collect();
    Finding {
        risk: Risk::GateInjector,
        webhooks: vec![format!("mutating-policy/{}", p.name)],
        objects: p.gates.clone(),
        why: format!(
            "mutating admission policy {} adds scheduling gates {} to the pods it matches (bound by {}), with no webhook: the pods wait until something removes them, and nothing names their controller",
            p.name,
            p.gates.join(", "),
            names.join(", ")
        ),
        fix: "make sure what removes these gates runs without them, and does not depend on the pods they hold; `metainit status` names who added each gate (ADDED BY)".into(),
        metainit,
        covered: all,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_gates_a_mutation_writes() {
        let apply = r#"Object{spec: Object.spec{schedulingGates: [Object.spec.schedulingGates{name: "example.com/hold"}]}}"#;
        assert_eq!(gates_written(apply), ["example.com/hold"]);
        let patch = r#"[JSONPatch{op: "add", path: "/spec/schedulingGates", value: [{"name": 'a.io/x'}, {"name": "b.io/y"}]}]"#;
        assert_eq!(gates_written(patch), ["a.io/x", "b.io/y"]);
        let labels = r#"Object{metadata: Object.metadata{labels: {"name": "x"}}}"#;
        assert!(gates_written(labels).is_empty(), "no schedulingGates");
    }

    #[test]
    fn a_missing_parameter_and_a_gate_injector_are_found() {
        let spec = json!({"paramRef": {"name": "limits", "namespace": "ops", "parameterNotFoundAction": "Deny"}});
        let (param, r) = denies_without(&spec, Some("ConfigMap v1")).expect("denies");
        assert_eq!(param, "ConfigMap ops/limits");
        assert_eq!(r.name.as_deref(), Some("limits"));
        let allow = json!({"paramRef": {"name": "limits", "parameterNotFoundAction": "Allow"}});
        assert!(denies_without(&allow, Some("ConfigMap v1")).is_none());

        let mutation = json!({"mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
            "Object{spec: Object.spec{schedulingGates: [Object.spec.schedulingGates{name: \"example.com/hold\"}]}}"}}]});
        let p = policy("mutating", "hold", &mutation);
        assert_eq!(p.gates, ["example.com/hold"]);
        let b = Binding {
            kind: "validating".into(),
            name: "need-limits".into(),
            policy: "limits".into(),
            denies_without: Some(param),
            param: Param::Missing,
        };
        let hold = Binding {
            kind: "mutating".into(),
            name: "hold-all".into(),
            policy: "hold".into(),
            ..Binding::default()
        };
        let mut running = Running {
            label_key: "k8s.opsani.io/initializer".into(),
            ..Running::default()
        };
        let f = findings(
            std::slice::from_ref(&p),
            &[b.clone(), hold.clone()],
            &running,
        );
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!(f[0].risk, Risk::PolicyParameter);
        assert_eq!(f[0].webhooks, ["validating-policy/limits/need-limits"]);
        assert!(
            f[0].fix.starts_with("create ConfigMap ops/limits"),
            "{}",
            f[0].fix
        );
        assert_eq!(f[1].risk, Risk::GateInjector);
        assert_eq!(f[1].objects, ["example.com/hold"]);
        assert!(!f[1].covered && f[1].metainit.starts_with("cleared only on pods labelled"));
        running.release_gates = vec![("example.com/hold".into(), "1h".into())];
        let f = findings(std::slice::from_ref(&p), &[hold], &running);
        assert!(f[0].covered, "{f:?}");
        // Unbound, or the parameter there: nothing; not read: said so.
        assert!(findings(&[p], &[], &running).is_empty());
        let there = Binding {
            param: Param::There,
            ..b.clone()
        };
        assert!(findings(&[], &[there], &running).is_empty());
        let unread = Binding {
            param: Param::Unchecked("forbidden".into()),
            ..b
        };
        let f = findings(&[], &[unread], &running);
        assert!(
            f[0].why.contains(
                "if its parameter ConfigMap ops/limits were missing (not checked: forbidden)"
            ),
            "{}",
            f[0].why
        );
    }
}
