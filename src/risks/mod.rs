//! `metainit status --risks`: what would stall a cold start, read from the API objects
//! before it happens. Read-only. `graph` says which webhooks would stall what; this module
//! turns that into findings, each with the objects involved, why, the fix, and whether the
//! running metainit (its label key, `--webhooks`, `--release-gate`) would clear it.
//! `status --risks` runs it and prints the findings (`status/risks.rs`, `status/forecast.rs`).

mod control;
mod down;
pub mod graph;
pub mod policies;
pub mod read;
pub mod select;

use serde::Serialize;

use graph::{Template, Webhook, World};

/// What a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Risk {
    Down,
    SelfInterception,
    Cycle,
    Binding,
    SystemPods,
    ControlPlane,
    PolicyParameter,
    GateInjector,
    UnliftedGates,
}

impl Risk {
    pub fn label(self) -> &'static str {
        match self {
            Risk::Down => "down",
            Risk::SelfInterception => "self-interception",
            Risk::Cycle => "cycle",
            Risk::Binding => "binding",
            Risk::SystemPods => "system-pods",
            Risk::ControlPlane => "control-plane",
            Risk::PolicyParameter => "policy-parameter",
            Risk::GateInjector => "gate-injector",
            Risk::UnliftedGates => "unlifted-gates",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    pub risk: Risk,
    /// `kind/configuration/webhook`, in cycle order for a cycle.
    pub webhooks: Vec<String>,
    /// `Kind namespace/name` of each pod template involved.
    pub objects: Vec<String>,
    pub why: String,
    pub fix: String,
    /// Whether metainit, as configured, clears it at the next cold start, and what to add.
    pub metainit: String,
    /// Whether `metainit` clears it as configured.
    pub covered: bool,
}

/// The running configuration the forecast weighs each finding against.
#[derive(Clone, Debug, Default)]
pub struct Running {
    pub label_key: String,
    pub webhooks: bool,
    /// The gates `--release-gate` releases, with their ages as given.
    pub release_gates: Vec<(String, String)>,
}

/// Every finding, in the order of `Risk`, then of the objects.
pub fn forecast(world: &World, running: &Running) -> Vec<Finding> {
    let mut out = Vec::new();
    for w in &world.webhooks {
        if !(w.fails_closed && w.service.is_some()) {
            continue;
        }
        let own = world.self_admitted(w);
        if !own.is_empty() {
            out.push(self_interception(world, w, &own, running));
        }
        let bound = world.binding_blocked(w);
        if !bound.is_empty() {
            out.push(binding(world, w, &bound, running));
        }
        let system = world.system_in_scope(w);
        if !system.is_empty() {
            out.push(system_pods(world, w, &system, running));
        }
    }
    out.extend(
        world
            .webhooks
            .iter()
            .filter_map(|w| control::finding(world, w, running)),
    );
    out.extend(policies::findings(
        &world.policies,
        &world.bindings,
        running,
    ));
    for service in &world.down {
        out.extend(down::finding(world, service, running));
    }
    for cycle in world.cycles() {
        out.push(cycle_finding(world, &cycle, running));
    }
    for t in &world.templates {
        if !t.gates.is_empty() && !t.labels.contains_key(&running.label_key) {
            out.push(unlifted(t, running));
        }
    }
    out.sort_by(|a, b| (a.risk, &a.objects, &a.webhooks).cmp(&(b.risk, &b.objects, &b.webhooks)));
    out
}

/// What the forecast cannot tell of these webhooks: their CEL `matchConditions`.
fn unevaluated(ws: &[&Webhook]) -> String {
    let n: usize = ws.iter().map(|w| w.match_conditions).sum();
    match n {
        0 => String::new(),
        n => format!(" ({n} matchConditions not evaluated: taken as matching)"),
    }
}

fn ids(world: &World, templates: &[usize]) -> Vec<String> {
    templates.iter().map(|&t| world.templates[t].id()).collect()
}

/// What `--webhooks` does for a webhook, as configured.
fn by_webhooks(ws: &[&Webhook], running: &Running) -> (bool, String) {
    let unlabelled: Vec<String> = ws
        .iter()
        .filter(|w| !w.labelled)
        .map(|w| w.config.clone())
        .collect();
    match (running.webhooks, unlabelled.is_empty()) {
        (true, true) => (
            true,
            "cleared: metainit --webhooks exempts the service's own namespace once it has had no ready endpoint for --webhook-grace (30s by default)".into(),
        ),
        (false, true) => (
            false,
            "not cleared: the configuration carries the label key, but metainit runs without --webhooks: add it (and manifests/rbac-webhooks.yaml)".into(),
        ),
        (_, false) => (
            false,
            format!(
                "not cleared: label {} with {} and run metainit --webhooks (manifests/rbac-webhooks.yaml)",
                unlabelled
                    .iter()
                    .map(|c| format!("configuration {c}"))
                    .collect::<Vec<_>>()
                    .join(" and "),
                running.label_key
            ),
        ),
    }
}

fn self_interception(world: &World, w: &Webhook, own: &[usize], running: &Running) -> Finding {
    let (covered, metainit) = by_webhooks(&[w], running);
    let service = w
        .service
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    Finding {
        risk: Risk::SelfInterception,
        webhooks: vec![w.id()],
        objects: ids(world, own),
        why: format!(
            "{} fails closed on pod CREATE and sees the pods that serve it (service {service}): with none of them running, none can be created{}",
            w.id(),
            unevaluated(&[w])
        ),
        fix: format!(
            "exclude the service's namespace: add {{key: kubernetes.io/metadata.name, operator: NotIn, values: [{}]}} to its namespaceSelector, or an objectSelector that leaves its own pods out",
            w.service
                .as_ref()
                .map(|s| s.namespace.as_str())
                .unwrap_or_default()
        ),
        metainit,
        covered,
    }
}

fn binding(world: &World, w: &Webhook, bound: &[usize], running: &Running) -> Finding {
    let (covered, metainit) = by_webhooks(&[w], running);
    Finding {
        risk: Risk::Binding,
        webhooks: vec![w.id()],
        objects: ids(world, bound),
        why: format!(
            "{} fails closed on pods/binding or pods/status, its own pods included: with it down the scheduler binds none of the pods it sees, or the kubelet reports none Ready, its own neither{}",
            w.id(),
            unevaluated(&[w])
        ),
        fix: "drop pods/binding and pods/status from its rules, or give it a namespaceSelector or objectSelector that leaves its own pods (and kube-system) out".into(),
        metainit,
        covered,
    }
}

fn system_pods(world: &World, w: &Webhook, system: &[usize], running: &Running) -> Finding {
    let (covered, metainit) = by_webhooks(&[w], running);
    Finding {
        risk: Risk::SystemPods,
        webhooks: vec![w.id()],
        objects: ids(world, system),
        why: format!(
            "{} fails closed on the creation of system pods (kube-system's, hostNetwork DaemonSets') and no pod that serves it is hostNetwork: a pod network outage stops it, and it stops what would heal the network{}",
            w.id(),
            unevaluated(&[w])
        ),
        fix: "exclude kube-system and the network's namespaces from its namespaceSelector, or run its backend with hostNetwork".into(),
        metainit: if covered {
            metainit
        } else {
            format!("{metainit}; metainit exempts only the service's own namespace, not kube-system")
        },
        covered: false,
    }
}

fn cycle_finding(world: &World, cycle: &[usize], running: &Running) -> Finding {
    let ws: Vec<&Webhook> = cycle.iter().map(|&i| &world.webhooks[i]).collect();
    let mut objects: Vec<String> = ws
        .iter()
        .flat_map(|w| ids(world, &world.backends(w)))
        .collect();
    objects.dedup();
    let (covered, metainit) = by_webhooks(&ws, running);
    let mut names: Vec<String> = ws.iter().map(|w| w.id()).collect();
    let path = format!("{} -> {}", names.join(" -> "), names[0]);
    names.truncate(ws.len());
    Finding {
        risk: Risk::Cycle,
        webhooks: names,
        objects,
        why: format!(
            "the pods of each webhook are admitted by the next one, which fails closed ({path}): after a restart none of them starts{}",
            unevaluated(&ws)
        ),
        fix: "exclude each other's namespaces from one of them (a namespaceSelector), or make one fail open (failurePolicy: Ignore)".into(),
        metainit: if covered {
            format!("{metainit}; exempting the namespaces one by one breaks the cycle")
        } else {
            metainit
        },
        covered,
    }
}

fn unlifted(t: &Template, running: &Running) -> Finding {
    let released: Vec<&(String, String)> = running
        .release_gates
        .iter()
        .filter(|(gate, _)| t.gates.contains(gate))
        .collect();
    let all = released.len() == t.gates.len();
    let metainit = if all {
        let rules: Vec<String> = released.iter().map(|(g, a)| format!("{g}={a}")).collect();
        format!(
            "released by --release-gate {} once its pods are that old",
            rules.join(", ")
        )
    } else {
        format!(
            "not cleared: label the pod template with {} (metainit clears every gate of a labelled pod), or add --release-gate GATE=AGE",
            running.label_key
        )
    };
    Finding {
        risk: Risk::UnliftedGates,
        webhooks: Vec::new(),
        objects: vec![t.id()],
        why: format!(
            "its pods are created with scheduling gates {} and carry no {} label: if the controller that lifts them is among the pods held back, or gone, they stay SchedulingGated",
            t.gates.join(", "),
            running.label_key
        ),
        fix: "make sure the gate's controller does not depend on these pods; `metainit status --max-age` lists pods gated too long".into(),
        metainit,
        covered: all,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhooks::hook::Service;
    use graph::{Template, Webhook};
    use serde_json::json;

    fn world() -> World {
        let mut w = World::default();
        w.services.insert(
            Service {
                namespace: "gk".into(),
                name: "gk-svc".into(),
            },
            Some([("app".to_string(), "gk".to_string())].into()),
        );
        w.templates.push(Template {
            kind: "Deployment".into(),
            namespace: "gk".into(),
            name: "gk-controller".into(),
            labels: [("app".to_string(), "gk".to_string())].into(),
            ..Template::default()
        });
        w.webhooks.push(Webhook {
            kind: "validating".into(),
            config: "gk".into(),
            name: "check.gk.io".into(),
            service: Some(Service { namespace: "gk".into(), name: "gk-svc".into() }),
            fails_closed: true,
            rules: json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]),
            ..Webhook::default()
        });
        w
    }

    fn running(webhooks: bool) -> Running {
        Running {
            label_key: "k8s.opsani.io/initializer".into(),
            webhooks,
            release_gates: vec![],
        }
    }

    #[test]
    fn self_interception_and_what_metainit_would_do() {
        let mut w = world();
        let f = forecast(&w, &running(true));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].risk, Risk::SelfInterception);
        assert_eq!(f[0].webhooks, ["validating/gk/check.gk.io"]);
        assert_eq!(f[0].objects, ["Deployment gk/gk-controller"]);
        assert!(!f[0].why.contains("matchConditions"), "{}", f[0].why);
        assert!(!f[0].covered);
        assert!(
            f[0].metainit
                .contains("label configuration gk with k8s.opsani.io/initializer"),
            "{}",
            f[0].metainit
        );
        w.webhooks[0].labelled = true;
        let f = forecast(&w, &running(true));
        assert!(f[0].covered, "{f:?}");
        let f = forecast(&w, &running(false));
        assert!(
            !f[0].covered && f[0].metainit.contains("without --webhooks"),
            "{f:?}"
        );
        w.webhooks[0].match_conditions = 2;
        let f = forecast(&w, &running(true));
        assert!(
            f[0].why
                .ends_with("(2 matchConditions not evaluated: taken as matching)"),
            "{}",
            f[0].why
        );
        // Ignore: nothing.
        w.webhooks[0].fails_closed = false;
        assert!(forecast(&w, &running(true)).is_empty());
    }

    #[test]
    fn gates_nobody_lifts() {
        let mut w = World::default();
        w.templates.push(Template {
            kind: "Deployment".into(),
            namespace: "kueue-system".into(),
            name: "kueue-controller".into(),
            gates: vec!["kueue.x-k8s.io/admission".into()],
            ..Template::default()
        });
        let mut r = running(false);
        let f = forecast(&w, &r);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].risk, Risk::UnliftedGates);
        assert!(!f[0].covered);
        r.release_gates = vec![("kueue.x-k8s.io/admission".into(), "2h".into())];
        let f = forecast(&w, &r);
        assert!(
            f[0].covered && f[0].metainit.contains("kueue.x-k8s.io/admission=2h"),
            "{f:?}"
        );
        // Labelled with the key: metainit clears it, nothing to report.
        w.templates[0]
            .labels
            .insert(r.label_key.clone(), String::new());
        assert!(forecast(&w, &r).is_empty());
    }
}
