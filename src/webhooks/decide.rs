//! What to do with one webhook configuration, as pure functions over its JSON: which of
//! its webhooks can deadlock their own namespace, whether to exempt that namespace now,
//! later or never, whether to restore, and the one guarded JSON patch that does it.
//!
//! The exemption is one expression appended to the webhook's
//! `namespaceSelector.matchExpressions`:
//! `{key: kubernetes.io/metadata.name, operator: NotIn, values: [NS]}` (the API server
//! sets that label on every namespace since 1.21). What was added is recorded in the
//! annotation [`ANNOTATION`], one entry per webhook, so that a restore removes exactly it,
//! from any replica and after any restart.

use std::{collections::BTreeMap, time::Duration};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The label the API server puts on every namespace, its own name as the value.
pub const NS_LABEL: &str = "kubernetes.io/metadata.name";

/// The annotation on a configuration that records metainit's exemptions.
pub const ANNOTATION: &str = "k8s.opsani.io/metainit-exempted";

/// A webhook's service, `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Service {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A webhook of a configuration, as metainit reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Hook {
    pub index: usize,
    pub name: String,
    /// The entry as the server sent it: the patch tests it.
    pub entry: Value,
    /// `clientConfig.service`; `None` for a `url` webhook.
    pub service: Option<Service>,
    /// `failurePolicy: Fail`, or none given (the v1 default).
    pub fails_closed: bool,
}

impl Hook {
    /// The service whose lack of endpoints can deadlock its own namespace: a webhook
    /// that fails closed and calls a service. `Ignore` webhooks cannot deadlock anything;
    /// `url` webhooks have no service to watch.
    pub fn guarded_service(&self) -> Option<&Service> {
        self.service.as_ref().filter(|_| self.fails_closed)
    }

    /// Whether the entry's namespace selector already holds `expr`.
    pub fn has(&self, expr: &Value) -> bool {
        self.expressions().iter().any(|e| e == expr)
    }

    fn expressions(&self) -> &[Value] {
        self.entry
            .pointer("/namespaceSelector/matchExpressions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The index of the last expression equal to `expr`.
    fn position(&self, expr: &Value) -> Option<usize> {
        self.expressions().iter().rposition(|e| e == expr)
    }
}

/// The webhooks of a configuration (`webhooks` of its JSON, apart from metadata).
pub fn hooks(data: &Value) -> Vec<Hook> {
    let Some(list) = data.get("webhooks").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .enumerate()
        .map(|(index, entry)| {
            let service = entry.pointer("/clientConfig/service").and_then(|s| {
                Some(Service {
                    namespace: s.get("namespace")?.as_str()?.to_string(),
                    name: s.get("name")?.as_str()?.to_string(),
                })
            });
            let fails_closed = entry
                .get("failurePolicy")
                .and_then(Value::as_str)
                .is_none_or(|p| p == "Fail");
            Hook {
                index,
                name: entry
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                entry: entry.clone(),
                service,
                fails_closed,
            }
        })
        .collect()
}

/// The services that the fail-closed webhooks of these configurations call, each once,
/// sorted.
pub fn guarded_services<'a>(configs: impl IntoIterator<Item = &'a Value>) -> Vec<Service> {
    let mut services: Vec<Service> = configs
        .into_iter()
        .flat_map(hooks)
        .filter_map(|h| h.guarded_service().cloned())
        .collect();
    services.sort();
    services.dedup();
    services
}

/// The expression that exempts `namespace`.
pub fn expression(namespace: &str) -> Value {
    json!({"key": NS_LABEL, "operator": "NotIn", "values": [namespace]})
}

/// One exemption as the annotation records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The expression added, exactly.
    pub expression: Value,
    /// When it was added (RFC 3339).
    pub since: String,
}

/// The annotation's records by webhook name; `Err` if it is there but not ours to read.
pub fn records(annotation: Option<&str>) -> Result<BTreeMap<String, Record>, String> {
    match annotation {
        None => Ok(BTreeMap::new()),
        Some(text) => serde_json::from_str(text).map_err(|e| {
            format!("the annotation {ANNOTATION} is not metainit's record ({e}); remove it")
        }),
    }
}

/// What metainit knows of a service's endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoints {
    /// Its EndpointSlices are not listed yet.
    Unknown,
    /// At least one ready endpoint, since then (or since metainit first saw it).
    Ready { since: Duration },
    /// None ready, since then (or since metainit first saw it).
    Down { since: Duration },
}

/// What to do with one webhook. Times are on one monotonic clock, as `Duration`s since
/// an origin the caller picks.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Nothing,
    /// Look again after this long.
    Wait(Duration),
    /// Add the expression exempting the service's namespace.
    Exempt {
        namespace: String,
        down_for: Duration,
    },
    /// Remove the recorded expression (if still there) and the record.
    Restore {
        record: Record,
        up_for: Option<Duration>,
    },
}

/// How long ago the exemption was last added: the more recent of what this process
/// remembers and the record's `since`, which any replica and any restart reads (a record
/// dated in the future, another node's clock ahead, counts as just now).
pub fn added_ago(
    record: Option<&Record>,
    wall_now: k8s_openapi::jiff::Timestamp,
    remembered: Option<Duration>,
) -> Option<Duration> {
    let recorded = record
        .and_then(|r| r.since.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(|since| Duration::try_from(wall_now.duration_since(since)).unwrap_or_default());
    match (remembered, recorded) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Decides for one webhook. `record`: what the annotation says metainit added to it;
/// `added_ago`: how long ago it was last added ([`added_ago`]; a re-add within `grace`
/// waits: a GitOps tool reverting the configuration is not fought more than once per grace).
pub fn decide(
    hook: &Hook,
    record: Option<&Record>,
    endpoints: Endpoints,
    grace: Duration,
    now: Duration,
    added_ago: Option<Duration>,
) -> Step {
    let Some(service) = hook.guarded_service() else {
        // No longer a webhook that can deadlock (now `Ignore`, or a url): undo at once.
        return match record {
            Some(r) => Step::Restore {
                record: r.clone(),
                up_for: None,
            },
            None => Step::Nothing,
        };
    };
    let wanted = expression(&service.namespace);
    if let Some(r) = record
        && r.expression != wanted
    {
        // The webhook now calls a service in another namespace (a Helm upgrade moved it):
        // the old namespace's exemption is no longer about this webhook's deadlock. Undo
        // it at once; the new namespace is judged on its own endpoints afterwards.
        return Step::Restore {
            record: r.clone(),
            up_for: None,
        };
    }
    match endpoints {
        Endpoints::Unknown => Step::Nothing,
        Endpoints::Down { since } => {
            if hook.has(&wanted) {
                return Step::Nothing;
            }
            let down_for = now.saturating_sub(since);
            if down_for < grace {
                return Step::Wait(grace - down_for);
            }
            if let Some(ago) = added_ago
                && ago < grace
            {
                return Step::Wait(grace - ago);
            }
            Step::Exempt {
                namespace: service.namespace.clone(),
                down_for,
            }
        }
        Endpoints::Ready { since } => {
            let Some(r) = record else {
                return Step::Nothing;
            };
            let up_for = now.saturating_sub(since);
            if up_for < grace {
                return Step::Wait(grace - up_for);
            }
            Step::Restore {
                record: r.clone(),
                up_for: Some(up_for),
            }
        }
    }
}

/// `~` and `/` escaped for a JSON pointer (RFC 6901).
fn pointer_part(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The one JSON patch that applies `steps` (by webhook index) to the configuration: it
/// tests the uid, the resourceVersion (so the annotation cannot be lost to a concurrent
/// writer) and each webhook entry as seen, then adds or removes the expressions and
/// rewrites the annotation. `None` when nothing changes.
pub fn patch(
    meta: &kube::core::ObjectMeta,
    hooks: &[Hook],
    steps: &[(usize, Step)],
    now_rfc3339: &str,
) -> Option<Value> {
    let annotation = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
        .map(String::as_str);
    let mut recs = records(annotation).unwrap_or_default();
    let before = recs.clone();
    let mut ops = Vec::new();
    for (index, step) in steps {
        let Some(hook) = hooks.iter().find(|h| h.index == *index) else {
            continue;
        };
        let at = format!("/webhooks/{index}");
        match step {
            Step::Exempt { namespace, .. } => {
                let expr = expression(namespace);
                ops.push(json!({"op": "test", "path": at, "value": hook.entry}));
                match hook.entry.get("namespaceSelector") {
                    Some(sel) if sel.get("matchExpressions").is_some() => ops.push(
                        json!({"op": "add", "path": format!("{at}/namespaceSelector/matchExpressions/-"), "value": expr}),
                    ),
                    Some(_) => ops.push(
                        json!({"op": "add", "path": format!("{at}/namespaceSelector/matchExpressions"), "value": [expr]}),
                    ),
                    None => ops.push(
                        json!({"op": "add", "path": format!("{at}/namespaceSelector"), "value": {"matchExpressions": [expr]}}),
                    ),
                }
                recs.insert(
                    hook.name.clone(),
                    Record {
                        expression: expression(namespace),
                        since: now_rfc3339.to_string(),
                    },
                );
            }
            Step::Restore { record, .. } => {
                if let Some(pos) = hook.position(&record.expression) {
                    ops.push(json!({"op": "test", "path": at, "value": hook.entry}));
                    // The last expression goes with its list: the server omits an empty
                    // one, so the entry is byte for byte what it was.
                    let path = if hook.expressions().len() == 1 {
                        format!("{at}/namespaceSelector/matchExpressions")
                    } else {
                        format!("{at}/namespaceSelector/matchExpressions/{pos}")
                    };
                    ops.push(json!({"op": "remove", "path": path}));
                }
                recs.remove(&hook.name);
            }
            Step::Nothing | Step::Wait(_) => {}
        }
    }
    adopt_orphans(&mut recs, hooks, steps);
    if ops.is_empty() && recs == before {
        return None;
    }
    let mut guarded = vec![
        json!({"op": "test", "path": "/metadata/uid", "value": meta.uid}),
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": meta.resource_version}),
    ];
    guarded.append(&mut ops);
    if recs != before {
        let key = format!("/metadata/annotations/{}", pointer_part(ANNOTATION));
        if recs.is_empty() {
            if annotation.is_some() {
                guarded.push(json!({"op": "remove", "path": key}));
            }
        } else {
            let text = serde_json::to_string(&recs).unwrap_or_default();
            if meta.annotations.is_some() {
                guarded.push(json!({"op": "add", "path": key, "value": text}));
            } else {
                guarded.push(
                    json!({"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION: text}}),
                );
            }
        }
    }
    Some(Value::Array(guarded))
}

/// Records under a name no webhook of the configuration has any more. A webhook renamed
/// while exempted still holds the expression: the record goes to its new name, so what
/// metainit added stays recorded and the webhook, judged under its new name, has it
/// restored once it no longer needs it. A record whose expression no other webhook holds
/// is dropped: nothing of it is left to remove.
fn adopt_orphans(recs: &mut BTreeMap<String, Record>, hooks: &[Hook], steps: &[(usize, Step)]) {
    let orphans: Vec<String> = recs
        .keys()
        .filter(|name| !hooks.iter().any(|h| &h.name == *name))
        .cloned()
        .collect();
    for name in orphans {
        let Some(record) = recs.remove(&name) else {
            continue;
        };
        // Not a webhook with a record of its own, nor one this patch changes.
        let heir = hooks.iter().find(|h| {
            !recs.contains_key(&h.name)
                && h.has(&record.expression)
                && !steps.iter().any(|(index, step)| {
                    *index == h.index && matches!(step, Step::Exempt { .. } | Step::Restore { .. })
                })
        });
        if let Some(h) = heir {
            recs.insert(h.name.clone(), record);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn config(entries: Value) -> Value {
        json!({ "webhooks": entries })
    }

    fn entry(name: &str, policy: Option<&str>, selector: Value) -> Value {
        let mut e = json!({
            "name": name,
            "clientConfig": {"service": {"namespace": "gk", "name": "gk-svc", "port": 443}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}],
            "namespaceSelector": selector,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        });
        if let Some(p) = policy {
            e["failurePolicy"] = json!(p);
        }
        e
    }

    #[test]
    fn which_webhooks_can_deadlock() {
        let data = config(json!([
            entry("fail.example.com", Some("Fail"), json!({})),
            entry("default.example.com", None, json!({})),
            entry("ignore.example.com", Some("Ignore"), json!({})),
            {"name": "url.example.com", "clientConfig": {"url": "https://x.example.com/v"}, "failurePolicy": "Fail"},
        ]));
        let hooks = hooks(&data);
        let guarded: Vec<bool> = hooks
            .iter()
            .map(|h| h.guarded_service().is_some())
            .collect();
        assert_eq!(guarded, [true, true, false, false]);
        assert_eq!(hooks[1].service.as_ref().unwrap().to_string(), "gk/gk-svc");
        assert!(super::hooks(&json!({})).is_empty());
    }

    #[test]
    fn decisions() {
        let hooks = hooks(&config(json!([entry("w.example.com", None, json!({}))])));
        let h = &hooks[0];
        let grace = 30 * S;
        let rec = Record {
            expression: expression("gk"),
            since: "t".into(),
        };
        let down = |since| Endpoints::Down { since };
        let up = |since| Endpoints::Ready { since };
        // Down, not for long enough: wait for the rest of the grace period.
        assert_eq!(
            decide(h, None, down(100 * S), grace, 110 * S, None),
            Step::Wait(20 * S)
        );
        assert_eq!(
            decide(h, None, down(100 * S), grace, 130 * S, None),
            Step::Exempt {
                namespace: "gk".into(),
                down_for: 30 * S
            }
        );
        // Added by this process 10 s ago and reverted since: not before the grace passes.
        assert_eq!(
            decide(
                h,
                Some(&rec),
                down(Duration::ZERO),
                grace,
                130 * S,
                Some(10 * S)
            ),
            Step::Wait(20 * S)
        );
        assert!(matches!(
            decide(
                h,
                Some(&rec),
                down(Duration::ZERO),
                grace,
                130 * S,
                Some(40 * S)
            ),
            Step::Exempt { .. }
        ));
        // Already exempt (by anyone): nothing.
        let exempted = hooks_with(json!({"matchExpressions": [expression("gk")]}));
        assert_eq!(
            decide(
                &exempted[0],
                None,
                down(Duration::ZERO),
                grace,
                100 * S,
                None
            ),
            Step::Nothing
        );
        // Up: restore only what the record says metainit added, after the grace.
        assert_eq!(
            decide(&exempted[0], None, up(Duration::ZERO), grace, 100 * S, None),
            Step::Nothing
        );
        assert_eq!(
            decide(&exempted[0], Some(&rec), up(90 * S), grace, 100 * S, None),
            Step::Wait(20 * S)
        );
        assert_eq!(
            decide(&exempted[0], Some(&rec), up(70 * S), grace, 100 * S, None),
            Step::Restore {
                record: rec.clone(),
                up_for: Some(30 * S)
            }
        );
        // Endpoints not listed yet: nothing, whatever the record.
        assert_eq!(
            decide(h, Some(&rec), Endpoints::Unknown, grace, 100 * S, None),
            Step::Nothing
        );
        // Turned to Ignore while exempted: restored at once.
        let ignore = super::hooks(&config(json!([entry(
            "w.example.com",
            Some("Ignore"),
            json!({"matchExpressions": [expression("gk")]})
        )])));
        assert_eq!(
            decide(
                &ignore[0],
                Some(&rec),
                down(Duration::ZERO),
                grace,
                100 * S,
                None
            ),
            Step::Restore {
                record: rec,
                up_for: None
            }
        );
    }

    #[test]
    fn a_service_moved_to_another_namespace_undoes_the_old_exemption_first() {
        let grace = 30 * S;
        let old = Record {
            expression: expression("gk"),
            since: "t".into(),
        };
        let mut moved = entry(
            "w.example.com",
            None,
            json!({"matchExpressions": [expression("gk")]}),
        );
        moved["clientConfig"]["service"]["namespace"] = json!("gk2");
        let hooks = super::hooks(&config(json!([moved])));
        let restore = Step::Restore {
            record: old.clone(),
            up_for: None,
        };
        // Whatever the new service's endpoints say, and at once (no grace).
        for endpoints in [
            Endpoints::Unknown,
            Endpoints::Down {
                since: Duration::ZERO,
            },
            Endpoints::Ready { since: 99 * S },
        ] {
            assert_eq!(
                decide(&hooks[0], Some(&old), endpoints, grace, 100 * S, None),
                restore,
                "{endpoints:?}"
            );
        }
        // The patch removes the old expression and the record: nothing is left behind.
        let text = serde_json::to_string(&BTreeMap::from([("w.example.com", &old)])).unwrap();
        let doc = json!({
            "metadata": {"name": "c", "uid": "u1", "resourceVersion": "7", "annotations": {ANNOTATION: &text}},
            "webhooks": [hooks[0].entry.clone()],
        });
        let p = patch(
            &meta(Some(json!({ ANNOTATION: text }))),
            &hooks,
            &[(0, restore)],
            "",
        )
        .unwrap();
        let after = apply(&doc, &p);
        assert_eq!(
            after["webhooks"][0].get("namespaceSelector"),
            Some(&json!({}))
        );
        assert_eq!(after["metadata"]["annotations"], json!({}));
        // Then the new namespace, once its service has been down for the grace.
        let hooks = super::hooks(&json!({"webhooks": after["webhooks"]}));
        assert_eq!(
            decide(
                &hooks[0],
                None,
                Endpoints::Down { since: 70 * S },
                grace,
                100 * S,
                None
            ),
            Step::Exempt {
                namespace: "gk2".into(),
                down_for: grace
            }
        );
    }

    #[test]
    fn a_rewrite_that_drops_the_expression_but_keeps_the_record() {
        // A Helm upgrade or a GitOps sync rewrote the webhook (the expression is gone) but
        // not the configuration's annotations: still down, exempted again (not more than
        // once per grace); up, only the record goes.
        let grace = 30 * S;
        let rec = Record {
            expression: expression("gk"),
            since: "t".into(),
        };
        let hooks = hooks_with(json!({}));
        let down = Endpoints::Down {
            since: Duration::ZERO,
        };
        assert_eq!(
            decide(&hooks[0], Some(&rec), down, grace, 100 * S, None),
            Step::Exempt {
                namespace: "gk".into(),
                down_for: 100 * S
            }
        );
        assert_eq!(
            decide(&hooks[0], Some(&rec), down, grace, 100 * S, Some(5 * S)),
            Step::Wait(25 * S)
        );
        assert_eq!(
            decide(
                &hooks[0],
                Some(&rec),
                Endpoints::Ready { since: 10 * S },
                grace,
                100 * S,
                None
            ),
            Step::Restore {
                record: rec,
                up_for: Some(90 * S)
            }
        );
    }

    #[test]
    fn the_last_add_is_the_later_of_memory_and_record() {
        let now: k8s_openapi::jiff::Timestamp = "2026-11-25T12:00:30Z".parse().unwrap();
        let rec = |since: &str| Record {
            expression: expression("gk"),
            since: since.into(),
        };
        // Another replica (or this one before a restart) added it 10 s ago.
        let r = rec("2026-11-25T12:00:20Z");
        assert_eq!(added_ago(Some(&r), now, None), Some(10 * S));
        assert_eq!(added_ago(Some(&r), now, Some(3 * S)), Some(3 * S));
        assert_eq!(added_ago(Some(&r), now, Some(60 * S)), Some(10 * S));
        // Dated ahead of this node's clock: just now. Unreadable: only the memory.
        assert_eq!(
            added_ago(Some(&rec("2026-11-25T12:01:00Z")), now, None),
            Some(Duration::ZERO)
        );
        assert_eq!(added_ago(Some(&rec("t")), now, Some(S)), Some(S));
        assert_eq!(added_ago(None, now, None), None);
    }

    fn hooks_with(selector: Value) -> Vec<Hook> {
        hooks(&config(json!([entry("w.example.com", None, selector)])))
    }

    fn meta(annotations: Option<Value>) -> kube::core::ObjectMeta {
        serde_json::from_value(json!({
            "name": "c", "uid": "u1", "resourceVersion": "7", "annotations": annotations
        }))
        .unwrap()
    }

    fn apply(doc: &Value, patch: &Value) -> Value {
        let p: json_patch::Patch = serde_json::from_value(patch.clone()).unwrap();
        let mut d = doc.clone();
        json_patch::patch(&mut d, &p).unwrap();
        d
    }

    fn exempt() -> Step {
        Step::Exempt {
            namespace: "gk".into(),
            down_for: Duration::ZERO,
        }
    }

    #[test]
    fn exempt_then_restore_is_byte_for_byte_the_original() {
        let other = json!({"key": "tier", "operator": "In", "values": ["a"]});
        for selector in [
            json!({}),
            json!({"matchLabels": {"x": "y"}}),
            json!({"matchExpressions": [other]}),
        ] {
            for annotations in [None, Some(json!({"keep": "me"}))] {
                let hooks = hooks_with(selector.clone());
                let original = json!({
                    "metadata": {"name": "c", "uid": "u1", "resourceVersion": "7", "annotations": annotations},
                    "webhooks": [hooks[0].entry.clone()],
                });
                let m = meta(annotations.clone());
                let p = patch(&m, &hooks, &[(0, exempt())], "2026-11-24T12:00:00Z").unwrap();
                let tests: Vec<&str> = p
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|o| o["op"] == "test")
                    .map(|o| o["path"].as_str().unwrap())
                    .collect();
                assert_eq!(
                    tests,
                    ["/metadata/uid", "/metadata/resourceVersion", "/webhooks/0"]
                );
                let exempted = apply(&original, &p);
                let after = super::hooks(&json!({"webhooks": exempted["webhooks"]}));
                assert!(after[0].has(&expression("gk")), "{exempted}");
                let ann = exempted["metadata"]["annotations"][ANNOTATION]
                    .as_str()
                    .unwrap();
                let recs = records(Some(ann)).unwrap();
                assert_eq!(recs["w.example.com"].expression, expression("gk"));
                if annotations.is_some() {
                    assert_eq!(exempted["metadata"]["annotations"]["keep"], "me");
                }

                // Back: exactly the original, the annotation gone.
                let mut m2 = meta(Some(exempted["metadata"]["annotations"].clone()));
                m2.resource_version = Some("8".into());
                let mut served = exempted.clone();
                served["metadata"]["resourceVersion"] = json!("8");
                let rec = recs["w.example.com"].clone();
                let p = patch(
                    &m2,
                    &after,
                    &[(
                        0,
                        Step::Restore {
                            record: rec,
                            up_for: None,
                        },
                    )],
                    "",
                )
                .unwrap();
                let mut restored = apply(&served, &p);
                restored["metadata"]["resourceVersion"] = json!("7");
                if annotations.is_none() {
                    // The server omits an empty map, as it would the missing one.
                    assert_eq!(restored["metadata"]["annotations"], json!({}));
                    restored["metadata"]["annotations"] = Value::Null;
                }
                assert_eq!(restored, original, "selector {selector}");
            }
        }
    }

    #[test]
    fn a_patch_against_a_changed_object_fails() {
        let hooks = hooks_with(json!({}));
        let p = patch(&meta(None), &hooks, &[(0, exempt())], "t").unwrap();
        let mut moved = json!({
            "metadata": {"name": "c", "uid": "u1", "resourceVersion": "8"},
            "webhooks": [hooks[0].entry.clone()],
        });
        let parsed: json_patch::Patch = serde_json::from_value(p.clone()).unwrap();
        assert!(json_patch::patch(&mut moved.clone(), &parsed).is_err());
        moved["metadata"]["resourceVersion"] = json!("7");
        moved["webhooks"][0]["timeoutSeconds"] = json!(5);
        assert!(
            json_patch::patch(&mut moved, &parsed).is_err(),
            "entry rewritten"
        );
    }

    #[test]
    fn a_restore_after_someone_removed_the_expression_drops_the_record_only() {
        let rec = Record {
            expression: expression("gk"),
            since: "t".into(),
        };
        let text = serde_json::to_string(&BTreeMap::from([("w.example.com", &rec)])).unwrap();
        let m = meta(Some(json!({ ANNOTATION: text })));
        let hooks = hooks_with(json!({}));
        let p = patch(
            &m,
            &hooks,
            &[(
                0,
                Step::Restore {
                    record: rec,
                    up_for: None,
                },
            )],
            "",
        )
        .unwrap();
        let ops: Vec<(&str, &str)> = p
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (o["op"].as_str().unwrap(), o["path"].as_str().unwrap()))
            .collect();
        assert_eq!(
            ops,
            [
                ("test", "/metadata/uid"),
                ("test", "/metadata/resourceVersion"),
                (
                    "remove",
                    "/metadata/annotations/k8s.opsani.io~1metainit-exempted"
                )
            ]
        );
        // Nothing to do: no patch at all.
        assert_eq!(patch(&meta(None), &hooks, &[(0, Step::Nothing)], ""), None);
        assert!(records(Some("not json")).is_err());
    }

    #[test]
    fn a_renamed_webhook_keeps_the_record_of_its_exemption() {
        let rec = Record {
            expression: expression("gk"),
            since: "t".into(),
        };
        let text = serde_json::to_string(&BTreeMap::from([("old.example.com", &rec)])).unwrap();
        let m = meta(Some(json!({ ANNOTATION: text })));
        let annotation = |p: &Value| {
            let doc = json!({"metadata": {"annotations": {ANNOTATION: "x"}}});
            apply(&doc, &Value::Array(p.as_array().unwrap()[2..].to_vec()))["metadata"]
                .get("annotations")
                .and_then(|a| a.get(ANNOTATION))
                .and_then(Value::as_str)
                .map(|t| records(Some(t)).unwrap())
        };
        // Renamed, the expression kept: the record moves to the new name, as it was.
        let renamed = hooks_with(json!({"matchExpressions": [expression("gk")]}));
        let p = patch(&m, &renamed, &[(0, Step::Nothing)], "").unwrap();
        assert_eq!(
            annotation(&p),
            Some(BTreeMap::from([("w.example.com".to_string(), rec.clone())]))
        );
        // Renamed and the expression gone: nothing to record.
        let p = patch(&m, &hooks_with(json!({})), &[(0, Step::Nothing)], "").unwrap();
        assert_eq!(annotation(&p), None);
    }
}
