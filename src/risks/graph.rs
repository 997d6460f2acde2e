//! The forecast as pure functions: from what the cluster holds (webhooks, namespaces,
//! services, pod templates), which webhooks would stall a cold start and why. Edges of the
//! graph: a fail-closed webhook W → the pod templates that serve it (its service's
//! selector) → the webhooks those pods' creation passes through.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::Value;

use super::select::{self, Labels, POD_BINDING, POD_CREATE, POD_STATUS, Request};
use crate::webhooks::hook::{NS_LABEL, Service};

/// One webhook of a configuration.
#[derive(Clone, Debug, Default)]
pub struct Webhook {
    /// `mutating` or `validating`.
    pub kind: String,
    pub config: String,
    pub name: String,
    /// Its configuration carries the label key: a running `--webhooks` would act on it.
    pub labelled: bool,
    pub service: Option<Service>,
    pub fails_closed: bool,
    pub rules: Value,
    pub namespace_selector: Value,
    pub object_selector: Value,
    /// How many `matchConditions`: CEL, not evaluated here (counted as matching).
    pub match_conditions: usize,
}

impl Webhook {
    /// `kind/configuration/webhook`, as the findings name it.
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.kind, self.config, self.name)
    }
}

/// A pod template: a workload's (Deployment, StatefulSet, DaemonSet, Job) or a bare pod's.
#[derive(Clone, Debug, Default)]
pub struct Template {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    pub host_network: bool,
    pub gates: Vec<String>,
}

impl Template {
    pub fn id(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// What the forecast reads.
#[derive(Clone, Debug, Default)]
pub struct World {
    pub webhooks: Vec<Webhook>,
    /// Each namespace's labels.
    pub namespaces: BTreeMap<String, Labels>,
    /// Each Service's selector (`None`: it has none).
    pub services: BTreeMap<Service, Option<Labels>>,
    pub templates: Vec<Template>,
    /// The services of fail-closed webhooks that have no ready endpoint now.
    pub down: BTreeSet<Service>,
    /// The admission policies in CEL, and their bindings.
    pub policies: Vec<super::policies::Policy>,
    pub bindings: Vec<super::policies::Binding>,
}

impl World {
    /// A namespace's labels, with the one the API server sets on every namespace.
    pub(super) fn namespace_labels(&self, ns: &str) -> Labels {
        let mut labels = self.namespaces.get(ns).cloned().unwrap_or_default();
        labels
            .entry(NS_LABEL.to_string())
            .or_insert_with(|| ns.to_string());
        labels
    }

    /// Whether `w` sees `request` for a pod of template `t` (its rules, namespace selector,
    /// object selector; match conditions counted as matching). Fail-closed or not.
    pub fn sees(&self, w: &Webhook, t: &Template, request: Request<'_>) -> bool {
        select::covers(&w.rules, request)
            && select::selects(&w.namespace_selector, &self.namespace_labels(&t.namespace))
            && select::selects(&w.object_selector, &t.labels)
    }

    /// The templates whose pods serve `w`: in its service's namespace, selected by the
    /// service's selector. Empty for a `url` webhook or a service that is absent or has
    /// no selector.
    pub fn backends(&self, w: &Webhook) -> Vec<usize> {
        let Some(service) = &w.service else {
            return Vec::new();
        };
        let Some(Some(selector)) = self.services.get(service) else {
            return Vec::new();
        };
        self.templates
            .iter()
            .enumerate()
            .filter(|(_, t)| {
                t.namespace == service.namespace && select::map_selects(selector, &t.labels)
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// The fail-closed webhooks with a service, by index.
    fn closed(&self) -> impl Iterator<Item = (usize, &Webhook)> {
        self.webhooks
            .iter()
            .enumerate()
            .filter(|(_, w)| w.fails_closed && w.service.is_some())
    }

    /// For each fail-closed webhook, the other fail-closed webhooks whose backends' pod
    /// creation it sees: `needs[b]` holds `a` when `a` admits `b`'s pods (b needs a up).
    fn needs(&self) -> BTreeMap<usize, BTreeSet<usize>> {
        let mut needs: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        for (b, wb) in self.closed() {
            for t in self.backends(wb) {
                for (a, wa) in self.closed() {
                    if a != b && self.sees(wa, &self.templates[t], POD_CREATE) {
                        needs.entry(b).or_default().insert(a);
                    }
                }
            }
        }
        needs
    }

    /// The shortest cycles of two or more webhooks, each once (as its smallest rotation).
    pub fn cycles(&self) -> Vec<Vec<usize>> {
        let needs = self.needs();
        let mut found = BTreeSet::new();
        for &start in needs.keys() {
            if let Some(path) = shortest_back(&needs, start) {
                let min = path
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, w)| **w)
                    .map(|(i, _)| i);
                let mut cycle = path.clone();
                cycle.rotate_left(min.unwrap_or(0));
                found.insert(cycle);
            }
        }
        found.into_iter().collect()
    }

    /// The backends of `w` that `w` itself admits (pod creation).
    pub fn self_admitted(&self, w: &Webhook) -> Vec<usize> {
        self.backends(w)
            .into_iter()
            .filter(|&t| self.sees(w, &self.templates[t], POD_CREATE))
            .collect()
    }

    /// The backends of `w` whose binding (the scheduler's) or status (the kubelet's Ready
    /// condition) `w` sees: with `w` down, none of them is scheduled, or none is ever Ready
    /// and so never an endpoint of `w`'s service.
    pub fn binding_blocked(&self, w: &Webhook) -> Vec<usize> {
        self.backends(w)
            .into_iter()
            .filter(|&t| {
                let t = &self.templates[t];
                self.sees(w, t, POD_BINDING) || self.sees(w, t, POD_STATUS)
            })
            .collect()
    }

    /// What `w` blocks while down: the namespaces whose pod creation it sees, and the
    /// templates there whose pods it sees.
    pub fn blocked(&self, w: &Webhook) -> (Vec<String>, Vec<usize>) {
        let namespaces = self
            .namespaces
            .keys()
            .filter(|ns| select::selects(&w.namespace_selector, &self.namespace_labels(ns)))
            .filter(|_| select::covers(&w.rules, POD_CREATE))
            .cloned()
            .collect();
        let templates = (0..self.templates.len())
            .filter(|&t| self.sees(w, &self.templates[t], POD_CREATE))
            .collect();
        (namespaces, templates)
    }

    /// The system templates (kube-system's, and hostNetwork DaemonSets': CNI, kube-proxy,
    /// CSI) whose pod creation `w` sees, when no backend of `w` is hostNetwork (so a pod
    /// network outage stops `w` and, through it, what would heal the network).
    pub fn system_in_scope(&self, w: &Webhook) -> Vec<usize> {
        let backends = self.backends(w);
        if backends.iter().any(|&t| self.templates[t].host_network) {
            return Vec::new();
        }
        self.templates
            .iter()
            .enumerate()
            .filter(|(i, t)| {
                !backends.contains(i)
                    && (t.namespace == "kube-system" || (t.kind == "DaemonSet" && t.host_network))
                    && self.sees(w, t, POD_CREATE)
            })
            .map(|(i, _)| i)
            .collect()
    }
}

/// The shortest path from `start` back to `start` through `needs`, at least two nodes.
fn shortest_back(needs: &BTreeMap<usize, BTreeSet<usize>>, start: usize) -> Option<Vec<usize>> {
    let mut previous: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(at) = queue.pop_front() {
        for &next in needs.get(&at).into_iter().flatten() {
            if next == start {
                let mut path = vec![at];
                let mut node = at;
                while let Some(&p) = previous.get(&node) {
                    path.push(p);
                    node = p;
                }
                path.reverse();
                return Some(path);
            }
            if next != start && !previous.contains_key(&next) {
                previous.insert(next, at);
                queue.push_back(next);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub fn hook(config: &str, ns: &str, svc: &str, fails_closed: bool) -> Webhook {
        Webhook {
            kind: "validating".into(),
            config: config.into(),
            name: format!("{config}.example.com"),
            labelled: false,
            service: Some(Service {
                namespace: ns.into(),
                name: svc.into(),
            }),
            fails_closed,
            rules: json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]),
            namespace_selector: Value::Null,
            object_selector: Value::Null,
            match_conditions: 0,
        }
    }

    pub fn template(kind: &str, ns: &str, name: &str, app: &str) -> Template {
        Template {
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
            labels: [("app".to_string(), app.to_string())].into(),
            ..Template::default()
        }
    }

    pub fn service(world: &mut World, ns: &str, name: &str, app: &str) {
        world.services.insert(
            Service {
                namespace: ns.into(),
                name: name.into(),
            },
            Some([("app".to_string(), app.to_string())].into()),
        );
    }

    #[test]
    fn a_webhook_that_admits_its_own_pods_and_one_that_does_not() {
        let mut w = World::default();
        service(&mut w, "gk", "gk-svc", "gk");
        w.templates
            .push(template("Deployment", "gk", "gk-controller", "gk"));
        w.webhooks.push(hook("gk", "gk", "gk-svc", true));
        assert_eq!(w.self_admitted(&w.webhooks[0]), [0]);
        // Its own namespace excluded: nothing.
        let mut excluded = w.clone();
        excluded.webhooks[0].namespace_selector = json!({"matchExpressions": [
            {"key": NS_LABEL, "operator": "NotIn", "values": ["gk"]}]});
        assert!(excluded.self_admitted(&excluded.webhooks[0]).is_empty());
        // Its objectSelector excludes its pods: nothing.
        let mut by_object = w.clone();
        by_object.webhooks[0].object_selector =
            json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["gk"]}]});
        assert!(by_object.self_admitted(&by_object.webhooks[0]).is_empty());
        // The namespace's own labels decide too.
        let mut by_label = w.clone();
        by_label.webhooks[0].namespace_selector = json!({"matchLabels": {"policy": "on"}});
        assert!(by_label.self_admitted(&by_label.webhooks[0]).is_empty());
        by_label.namespaces.insert(
            "gk".into(),
            [("policy".to_string(), "on".to_string())].into(),
        );
        assert_eq!(by_label.self_admitted(&by_label.webhooks[0]), [0]);
    }

    #[test]
    fn a_cycle_of_two_and_none_without_it() {
        let mut w = World::default();
        service(&mut w, "istio", "istiod", "istiod");
        service(&mut w, "pepr", "pepr", "pepr");
        w.templates
            .push(template("Deployment", "istio", "istiod", "istiod"));
        w.templates
            .push(template("Deployment", "pepr", "pepr", "pepr"));
        let mut istio = hook("istio", "istio", "istiod", true);
        istio.namespace_selector = json!({"matchExpressions": [
            {"key": NS_LABEL, "operator": "NotIn", "values": ["istio"]}]});
        let mut pepr = hook("pepr", "pepr", "pepr", true);
        pepr.namespace_selector = json!({"matchExpressions": [
            {"key": NS_LABEL, "operator": "NotIn", "values": ["pepr"]}]});
        w.webhooks = vec![istio, pepr];
        assert!(w.self_admitted(&w.webhooks[0]).is_empty());
        assert_eq!(w.cycles(), [vec![0, 1]]);
        // One of them Ignore: no cycle.
        let mut ignore = w.clone();
        ignore.webhooks[1].fails_closed = false;
        assert!(ignore.cycles().is_empty());
        // A third webhook that admits istiod's pods, its own pods admitted by neither: on
        // the side, not in a cycle.
        for (i, own) in [(0, "istio"), (1, "pepr")] {
            w.webhooks[i].namespace_selector = json!({"matchExpressions": [
                {"key": NS_LABEL, "operator": "NotIn", "values": [own, "c"]}]});
        }
        service(&mut w, "c", "c", "c");
        w.templates.push(template("Deployment", "c", "c", "c"));
        let mut c = hook("c", "c", "c", true);
        c.namespace_selector = json!({"matchLabels": {NS_LABEL: "istio"}});
        w.webhooks.push(c);
        assert_eq!(w.cycles(), [vec![0, 1]]);
        // Pepr admitting c's pods closes a cycle of three, the shortest through c.
        w.webhooks[1].namespace_selector = json!({"matchExpressions": [
            {"key": NS_LABEL, "operator": "NotIn", "values": ["pepr"]}]});
        assert_eq!(w.cycles(), [vec![0, 1], vec![0, 2, 1]]);
    }

    #[test]
    fn binding_and_system_pods() {
        let mut w = World::default();
        service(&mut w, "slurm", "slurm-webhook", "slurm");
        w.templates
            .push(template("Deployment", "slurm", "slurm-webhook", "slurm"));
        let mut dns = template("Deployment", "kube-system", "coredns", "coredns");
        dns.host_network = false;
        w.templates.push(dns);
        let mut cni = template("DaemonSet", "cni", "cilium", "cilium");
        cni.host_network = true;
        w.templates.push(cni);
        let mut h = hook("slurm", "slurm", "slurm-webhook", true);
        h.rules = json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                          "resources": ["pods", "pods/binding"]}]);
        w.webhooks.push(h);
        assert_eq!(w.binding_blocked(&w.webhooks[0]), [0]);
        assert_eq!(w.system_in_scope(&w.webhooks[0]), [1, 2]);
        // A hostNetwork backend survives a pod network outage: no system finding.
        w.templates[0].host_network = true;
        assert!(w.system_in_scope(&w.webhooks[0]).is_empty());
        // The kubelet's status writes: the same stall (never Ready, never an endpoint).
        w.webhooks[0].rules = json!([{"apiGroups": [""], "apiVersions": ["v1"],
                                     "operations": ["UPDATE"], "resources": ["pods/status"]}]);
        assert_eq!(w.binding_blocked(&w.webhooks[0]), [0]);
        // No binding or status rule: no binding finding.
        w.webhooks[0].rules = json!([{"apiGroups": [""], "apiVersions": ["v1"],
                                     "operations": ["CREATE"], "resources": ["pods"]}]);
        assert!(w.binding_blocked(&w.webhooks[0]).is_empty());
    }
}
