//! The patch: the one guarded JSON patch that makes a configuration's steps and rewrites
//! the annotation record to match.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{
    decide::Step,
    hook::{Hook, expression},
    record::{ANNOTATION, Record, records},
};

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
        step_ops(hook, step, &mut recs, now_rfc3339, &mut ops);
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
        guarded.extend(annotation_op(meta, annotation.is_some(), &recs));
    }
    Some(Value::Array(guarded))
}

/// Whether the configuration's webhooks as answered (`answered`) show `steps` made (by
/// webhook index into `seen`): each exempted webhook holds its expression, each restored one
/// no longer does. A success that does not is no success (`blocker::kept`).
pub fn shows(answered: &[Hook], seen: &[Hook], steps: &[(usize, Step)]) -> bool {
    steps.iter().all(|(index, step)| {
        let Some(name) = seen.iter().find(|h| h.index == *index).map(|h| &h.name) else {
            return true;
        };
        let now = answered.iter().find(|h| &h.name == name);
        match step {
            Step::Exempt { namespace, .. } => {
                now.is_some_and(|h| h.position(&expression(namespace)).is_some())
            }
            Step::Restore { record, .. } => {
                now.is_none_or(|h| h.position(&record.expression).is_none())
            }
            Step::Nothing | Step::Wait(_) => true,
        }
    })
}

/// A PATCH of a configuration answered with success whose webhooks (`names`) do not show
/// its steps: the failure `kept`.
pub fn kept(names: Vec<String>, answer: &kube::api::DynamicObject) -> crate::failure::Failure {
    let meta = &answer.metadata;
    let object = crate::object::Held {
        metadata: crate::object::HeldMeta {
            meta: kube::core::ObjectMeta {
                name: meta.name.clone(),
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
                ..Default::default()
            },
            ..Default::default()
        },
        spec: None,
    };
    crate::failure::Failure::kept(Box::new(crate::blocker::Kept {
        what: "webhooks unchanged:",
        names,
        manager: None,
        object,
    }))
}

/// The operations of one step on `hook`, onto `ops`; its record in `recs` follows.
fn step_ops(
    hook: &Hook,
    step: &Step,
    recs: &mut BTreeMap<String, Record>,
    now_rfc3339: &str,
    ops: &mut Vec<Value>,
) {
    let at = format!("/webhooks/{}", hook.index);
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

/// The operation that writes `recs` as the annotation (`had`: whether it is there now),
/// if one is needed.
fn annotation_op(
    meta: &kube::core::ObjectMeta,
    had: bool,
    recs: &BTreeMap<String, Record>,
) -> Option<Value> {
    let key = format!("/metadata/annotations/{}", pointer_part(ANNOTATION));
    if recs.is_empty() {
        return had.then(|| json!({"op": "remove", "path": key}));
    }
    let text = serde_json::to_string(recs).unwrap_or_default();
    Some(if meta.annotations.is_some() {
        json!({"op": "add", "path": key, "value": text})
    } else {
        json!({"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION: text}})
    })
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
    use crate::webhooks::{
        fixtures::{apply, exempt, gk_record, hooks_with, meta, recorded, restore},
        hook,
    };

    /// A success is one when the answer shows the steps: the expression there after an
    /// exemption, gone after a restore (a webhook gone is restored too).
    #[test]
    fn an_answer_shows_the_steps_or_not() {
        let plain = hooks_with(json!({}));
        let exempted = hooks_with(json!({"matchExpressions": [hook::expression("gk")]}));
        assert!(shows(&exempted, &plain, &[(0, exempt())]));
        assert!(!shows(&plain, &plain, &[(0, exempt())]), "kept as it was");
        assert!(shows(&plain, &exempted, &[(0, restore(gk_record()))]));
        assert!(
            !shows(&exempted, &exempted, &[(0, restore(gk_record()))]),
            "kept"
        );
        assert!(shows(&[], &exempted, &[(0, restore(gk_record()))]), "gone");
        assert!(!shows(&[], &plain, &[(0, exempt())]));
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
                let after = hook::hooks(&json!({"webhooks": exempted["webhooks"]}));
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
                let p = patch(&m2, &after, &[(0, restore(rec))], "").unwrap();
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
        let rec = gk_record();
        let text = recorded("w.example.com", &rec);
        let m = meta(Some(json!({ ANNOTATION: text })));
        let hooks = hooks_with(json!({}));
        let p = patch(&m, &hooks, &[(0, restore(rec))], "").unwrap();
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
        let rec = gk_record();
        let text = recorded("old.example.com", &rec);
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
