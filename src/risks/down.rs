//! A fail-closed webhook that is down now (its service has no ready endpoint): not a
//! forecast but the present, what it blocks while it stays down: every pod CREATE it sees,
//! in the namespaces its selector takes. The webhook's own backends are named apart (those
//! are the deadlock `--webhooks` breaks); hostNetwork DaemonSets are named (a CNI's cannot
//! start either).

use super::{
    Finding, Risk, Running, by_webhooks,
    graph::{Webhook, World},
    ids,
    select::{self, POD_CREATE},
};
use crate::webhooks::hook::Service;

/// The finding for `service`, down: its fail-closed webhooks on pod CREATE together (a pod
/// any of them sees is refused); none if none of them is on pod CREATE.
pub fn finding(world: &World, service: &Service, running: &Running) -> Option<Finding> {
    let ws: Vec<&Webhook> = world
        .webhooks
        .iter()
        .filter(|w| w.fails_closed && w.service.as_ref() == Some(service))
        .filter(|w| select::covers(&w.rules, POD_CREATE))
        .collect();
    let first = ws.first()?;
    let mut namespaces: Vec<String> = Vec::new();
    let mut templates: Vec<usize> = Vec::new();
    for w in &ws {
        let (n, t) = world.blocked(w);
        namespaces.extend(n);
        templates.extend(t);
    }
    namespaces.sort();
    namespaces.dedup();
    templates.sort_unstable();
    templates.dedup();
    let own = world.backends(first);
    let daemons: Vec<String> = templates
        .iter()
        .map(|&t| &world.templates[t])
        .filter(|t| t.kind == "DaemonSet" && t.host_network)
        .map(|t| t.id())
        .collect();
    let names: Vec<String> = ws.iter().map(|w| w.id()).collect();
    let mut why = format!(
        "{} fail{} closed and {service} has no ready endpoint now: no pod can be created in {}",
        names.join(" and "),
        if ws.len() == 1 { "s" } else { "" },
        blocked_where(&ws, &namespaces)
    );
    if !daemons.is_empty() {
        why += &format!(
            " (hostNetwork DaemonSets among them: {})",
            daemons.join(", ")
        );
    }
    let (covered, metainit) = if own.iter().any(|t| templates.contains(t)) {
        by_webhooks(&ws, running)
    } else {
        let backend = match own.is_empty() {
            true => "its backend".to_string(),
            false => ids(world, &own).join(", "),
        };
        (
            false,
            format!(
                "not cleared: metainit --webhooks exempts only the webhook's own namespace, which it already leaves out, so its own pods can start: bring {backend} back (labelling these pods with {} does not help: metainit clears gates, not a refused create)",
                running.label_key
            ),
        )
    };
    Some(Finding {
        risk: Risk::Down,
        webhooks: names,
        objects: ids(world, &templates),
        why,
        fix: "bring its backend back; to keep what must start without it starting, add to its namespaceSelector {key: kubernetes.io/metadata.name, operator: NotIn, values: [...]} for those namespaces, or an objectSelector that leaves those pods out".into(),
        metainit,
        covered,
    })
}

/// Where the webhooks `ws` refuse pods: today's namespaces, or, when their selectors take
/// none of them, the selectors (a namespace created later that matches is blocked).
fn blocked_where(ws: &[&Webhook], namespaces: &[String]) -> String {
    match namespaces {
        [one] => format!("namespace {one}"),
        [] => {
            let selectors: Vec<String> = ws
                .iter()
                .map(|w| match &w.namespace_selector {
                    serde_json::Value::Null => "{}".to_string(),
                    selector => selector.to_string(),
                })
                .collect();
            format!(
                "a namespace {} namespaceSelector {} takes (none of today's does)",
                if ws.len() == 1 { "its" } else { "their" },
                selectors.join(" or ")
            )
        }
        many => format!("namespaces {}", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{Risk, Running, forecast, graph::Template};
    use super::*;
    use crate::webhooks::hook::Service;

    /// Kueue's shape: mpod.kb.io fails closed on every namespace but kube-system and
    /// kueue-system; its manager down.
    fn kueue_down() -> World {
        let mut w = World::default();
        let svc = Service {
            namespace: "kueue-system".into(),
            name: "kueue-webhook-service".into(),
        };
        w.services.insert(
            svc.clone(),
            Some([("app".to_string(), "kueue".to_string())].into()),
        );
        for ns in ["default", "kube-system", "kueue-system", "team-a", "cni"] {
            w.namespaces.insert(ns.into(), Default::default());
        }
        let t = |kind: &str, ns: &str, name: &str, host_network: bool| Template {
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
            labels: [("app".to_string(), name.to_string())].into(),
            host_network,
            ..Template::default()
        };
        w.templates
            .push(t("Deployment", "kueue-system", "kueue", false));
        w.templates.push(t("DaemonSet", "cni", "bridge", true));
        w.templates.push(t("Job", "team-a", "train", false));
        w.templates
            .push(t("Deployment", "kube-system", "coredns", false));
        w.webhooks.push(Webhook {
            kind: "mutating".into(),
            config: "kueue-mutating-webhook-configuration".into(),
            name: "mpod.kb.io".into(),
            service: Some(svc.clone()),
            fails_closed: true,
            rules: json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]),
            namespace_selector: json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kueue-system"]}]}),
            ..Webhook::default()
        });
        w.down.insert(svc);
        w
    }

    #[test]
    fn a_down_webhook_names_what_it_blocks_and_that_metainit_does_not_clear_it() {
        let w = kueue_down();
        let running = Running {
            label_key: "k8s.opsani.io/initializer".into(),
            webhooks: true,
            ..Running::default()
        };
        let f: Vec<_> = forecast(&w, &running)
            .into_iter()
            .filter(|f| f.risk == Risk::Down)
            .collect();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].objects, ["DaemonSet cni/bridge", "Job team-a/train"]);
        assert!(
            f[0].why
                .contains("no pod can be created in namespaces cni, default, team-a"),
            "{}",
            f[0].why
        );
        assert!(
            f[0].why
                .contains("hostNetwork DaemonSets among them: DaemonSet cni/bridge"),
            "{}",
            f[0].why
        );
        assert!(
            !f[0].covered && f[0].metainit.contains("Deployment kueue-system/kueue"),
            "{}",
            f[0].metainit
        );
        // Up again: nothing of the kind.
        let mut up = w.clone();
        up.down.clear();
        assert!(forecast(&up, &running).iter().all(|f| f.risk != Risk::Down));
    }

    /// A down webhook whose namespaceSelector takes no namespace that exists today: what it
    /// would block is its selector, never an empty list (issue 61, item 6).
    #[test]
    fn a_down_webhook_that_takes_no_namespace_today_names_its_selector() {
        let mut w = kueue_down();
        w.webhooks[0].namespace_selector = json!({"matchLabels": {"team": "ml"}});
        let running = Running {
            label_key: "k8s.opsani.io/initializer".into(),
            ..Running::default()
        };
        let f: Vec<_> = forecast(&w, &running)
            .into_iter()
            .filter(|f| f.risk == Risk::Down)
            .collect();
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].objects.is_empty(), "{:?}", f[0].objects);
        assert!(!f[0].why.contains("in namespaces "), "{}", f[0].why);
        assert!(
            f[0].why.contains(
                r#"no pod can be created in a namespace its namespaceSelector {"matchLabels":{"team":"ml"}} takes (none of today's does)"#
            ),
            "{}",
            f[0].why
        );
    }
}
