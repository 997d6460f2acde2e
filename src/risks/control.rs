//! Fail-closed webhooks on the control plane's own objects: Leases in kube-system (leader
//! election, metainit's peers) and kube-node-lease (node heartbeats), Nodes, TokenReviews,
//! SubjectAccessReviews and CertificateSigningRequests. Down, such a webhook stalls no pod
//! of its own but what every pod depends on: GKE's troubleshooting pages list these objects
//! as unsafe for a webhook to intercept (kyverno 16177: an AKS cluster's nodes could not
//! register after a stop and start). A `url` webhook counts as much as a service's.

use super::{
    Finding, Risk, Running,
    graph::{Webhook, World},
    select::{self, Labels, Request},
};

/// A control-plane object and what a fail-closed webhook on it stalls.
struct Target {
    /// As the finding names it: `Leases kube-node-lease/*`, `Nodes`.
    object: &'static str,
    group: &'static str,
    resource: &'static str,
    subresource: Option<&'static str>,
    operations: &'static [&'static str],
    /// The namespace of a namespaced object; `None`: cluster-scoped, which a
    /// namespaceSelector never leaves out.
    namespace: Option<&'static str>,
    /// Whether its writers set labels an objectSelector could read: a Node's come from its
    /// kubelet and are not known here (taken as matching); the others carry none.
    labelled: bool,
    stalls: &'static str,
}

const TARGETS: &[Target] = &[
    Target {
        object: "Leases kube-system/*",
        group: "coordination.k8s.io",
        resource: "leases",
        subresource: None,
        operations: &["CREATE", "UPDATE"],
        namespace: Some("kube-system"),
        labelled: false,
        stalls: "leader election: kube-controller-manager and kube-scheduler renew their Leases in kube-system every few seconds and stop leading when they cannot (no controller creates pods, no pod is scheduled); metainit's peers share work through Leases there too (--peers-namespace)",
    },
    Target {
        object: "Leases kube-node-lease/*",
        group: "coordination.k8s.io",
        resource: "leases",
        subresource: None,
        operations: &["CREATE", "UPDATE"],
        namespace: Some("kube-node-lease"),
        labelled: false,
        stalls: "node heartbeats: each kubelet renews its Lease in kube-node-lease every 10 s; without one for --node-monitor-grace-period (50 s) the node controller marks the node NotReady and its pods are evicted 5 minutes later",
    },
    Target {
        object: "Nodes",
        group: "",
        resource: "nodes",
        subresource: None,
        operations: &["CREATE"],
        namespace: None,
        labelled: true,
        stalls: "node registration: a new or rebuilt node's kubelet cannot register its Node",
    },
    Target {
        object: "Nodes/status",
        group: "",
        resource: "nodes",
        subresource: Some("status"),
        operations: &["UPDATE"],
        namespace: None,
        labelled: true,
        stalls: "node status: kubelets cannot report their conditions, addresses or capacity",
    },
    Target {
        object: "TokenReviews",
        group: "authentication.k8s.io",
        resource: "tokenreviews",
        subresource: None,
        operations: &["CREATE"],
        namespace: None,
        labelled: false,
        stalls: "delegated authentication: the kubelet's API (logs, exec, metrics scrapes) and aggregated API servers (metrics-server) authenticate nobody",
    },
    Target {
        object: "SubjectAccessReviews",
        group: "authorization.k8s.io",
        resource: "subjectaccessreviews",
        subresource: None,
        operations: &["CREATE"],
        namespace: None,
        labelled: false,
        stalls: "delegated authorization: the kubelet's API and aggregated API servers authorize nobody",
    },
    Target {
        object: "CertificateSigningRequests",
        group: "certificates.k8s.io",
        resource: "certificatesigningrequests",
        subresource: None,
        operations: &["CREATE"],
        namespace: None,
        labelled: false,
        stalls: "kubelet certificates: a joining node's TLS bootstrap and every kubelet's certificate rotation; a kubelet whose certificate expires is shut out of the API server",
    },
];

/// The finding for `w`, if it fails closed and sees any of the control plane's objects.
pub fn finding(world: &World, w: &Webhook, running: &Running) -> Option<Finding> {
    if !w.fails_closed {
        return None;
    }
    let seen: Vec<&Target> = TARGETS.iter().filter(|t| sees(world, w, t)).collect();
    if seen.is_empty() {
        return None;
    }
    let stalls: Vec<&str> = seen.iter().map(|t| t.stalls).collect();
    Some(Finding {
        risk: Risk::ControlPlane,
        webhooks: vec![w.id()],
        objects: seen.iter().map(|t| t.object.to_string()).collect(),
        why: format!(
            "{} fails closed on the control plane's own objects{}: while it is down it stalls {}{}",
            w.id(),
            down_now(world, w),
            stalls.join("; "),
            not_evaluated(w, &seen)
        ),
        fix: fix(&seen),
        metainit: format!(
            "not cleared: metainit --webhooks exempts only the namespace of a pod webhook's own service, not these objects{}",
            match running.webhooks {
                true => "",
                false => " (and runs without --webhooks)",
            }
        ),
        covered: false,
    })
}

/// Whether `w`'s rules, namespaceSelector and objectSelector take one of `t`'s writes.
fn sees(world: &World, w: &Webhook, t: &Target) -> bool {
    let covered = t.operations.iter().any(|&operation| {
        let request = Request {
            group: t.group,
            resource: t.resource,
            subresource: t.subresource,
            operation,
            namespaced: t.namespace.is_some(),
        };
        select::covers(&w.rules, request)
    });
    let in_namespace = t
        .namespace
        .is_none_or(|ns| select::selects(&w.namespace_selector, &world.namespace_labels(ns)));
    let by_object = t.labelled || select::selects(&w.object_selector, &Labels::new());
    covered && in_namespace && by_object
}

fn down_now(world: &World, w: &Webhook) -> String {
    match &w.service {
        Some(s) if world.down.contains(s) => {
            format!(" and its service {s} has no ready endpoint now")
        }
        _ => String::new(),
    }
}

/// What was taken as matching: CEL matchConditions, and a Node's objectSelector.
fn not_evaluated(w: &Webhook, seen: &[&Target]) -> String {
    let mut parts = Vec::new();
    if w.match_conditions > 0 {
        parts.push(format!("{} matchConditions", w.match_conditions));
    }
    let object_selector = !matches!(&w.object_selector, serde_json::Value::Null)
        && w.object_selector != serde_json::json!({});
    if object_selector && seen.iter().any(|t| t.labelled) {
        parts.push("its objectSelector on Nodes' labels".into());
    }
    match parts.is_empty() {
        true => String::new(),
        false => format!(
            " ({} not evaluated: taken as matching)",
            parts.join(" and ")
        ),
    }
}

fn fix(seen: &[&Target]) -> String {
    let mut fixes = Vec::new();
    let namespaces: Vec<&str> = seen.iter().filter_map(|t| t.namespace).collect();
    if !namespaces.is_empty() {
        fixes.push(format!(
            "add {{key: kubernetes.io/metadata.name, operator: NotIn, values: [{}]}} to its namespaceSelector",
            namespaces.join(", ")
        ));
    }
    let cluster: Vec<&str> = seen
        .iter()
        .filter(|t| t.namespace.is_none())
        .map(|t| t.object)
        .collect();
    if !cluster.is_empty() {
        fixes.push(format!(
            "take {} out of its rules (a rule's scope: Namespaced leaves every cluster-scoped object out)",
            cluster.join(", ")
        ));
    }
    format!(
        "{}; or make it fail open (failurePolicy: Ignore)",
        fixes.join(", and ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hook(rules: serde_json::Value) -> Webhook {
        Webhook {
            kind: "validating".into(),
            config: "policy".into(),
            name: "all.policy.io".into(),
            fails_closed: true,
            rules,
            ..Webhook::default()
        }
    }

    fn running() -> Running {
        Running {
            label_key: "k8s.opsani.io/initializer".into(),
            ..Running::default()
        }
    }

    #[test]
    fn a_webhook_on_everything_stalls_every_control_plane_object() {
        let w = hook(
            json!([{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*/*"]}]),
        );
        let f = finding(&World::default(), &w, &running()).expect("a finding");
        assert_eq!(f.risk, Risk::ControlPlane);
        assert_eq!(f.objects.len(), TARGETS.len(), "{:?}", f.objects);
        assert!(f.why.contains("leader election") && f.why.contains("node heartbeats"));
        assert!(
            f.fix.contains("values: [kube-system, kube-node-lease]")
                && f.fix.contains("Nodes, Nodes/status, TokenReviews"),
            "{}",
            f.fix
        );
        assert!(!f.covered && f.metainit.starts_with("not cleared"));
    }

    #[test]
    fn pods_only_namespaced_only_or_open_finds_nothing() {
        let pods = json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["pods"]}]);
        assert!(finding(&World::default(), &hook(pods), &running()).is_none());
        let mut open = hook(
            json!([{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]),
        );
        open.fails_closed = false;
        assert!(finding(&World::default(), &open, &running()).is_none());
        // Namespaced only, kube-system and kube-node-lease left out: nothing.
        let mut namespaced = hook(
            json!([{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"], "scope": "Namespaced"}]),
        );
        namespaced.namespace_selector = json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kube-node-lease"]}]});
        assert!(finding(&World::default(), &namespaced, &running()).is_none());
    }

    #[test]
    fn node_leases_and_registration_named_with_what_is_not_evaluated() {
        let mut w = hook(json!([
            {"apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["leases"]},
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["nodes"]}
        ]));
        w.namespace_selector =
            json!({"matchLabels": {"kubernetes.io/metadata.name": "kube-node-lease"}});
        w.object_selector = json!({"matchLabels": {"team": "a"}});
        w.match_conditions = 1;
        let f = finding(&World::default(), &w, &running()).expect("a finding");
        // Leases carry no label: the objectSelector leaves them out; Nodes' is not known.
        assert_eq!(f.objects, ["Nodes"]);
        assert!(
            f.why.ends_with(
                "(1 matchConditions and its objectSelector on Nodes' labels not evaluated: taken as matching)"
            ),
            "{}",
            f.why
        );
        w.object_selector = serde_json::Value::Null;
        let f = finding(&World::default(), &w, &running()).expect("a finding");
        assert_eq!(f.objects, ["Leases kube-node-lease/*", "Nodes"]);
        assert!(f.fix.contains("values: [kube-node-lease]"), "{}", f.fix);
        assert!(f.metainit.ends_with("(and runs without --webhooks)"));
    }
}
