//! The decision: for one webhook of a configuration, whether to exempt its service's
//! namespace now, later or never, and whether to restore it, as pure functions over what
//! is known of the service's endpoints and of what metainit added.

use std::time::Duration;

// `--once` names these through the decision.
pub use super::hook::{Service, guarded_services};
use super::{
    hook::{Hook, expression},
    record::Record,
};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhooks::{
        fixtures::{S, apply, config, entry, gk_record, hooks_with, meta, recorded},
        hook,
        patch::patch,
        record::ANNOTATION,
    };
    use serde_json::json;

    #[test]
    fn decisions() {
        let hooks = hook::hooks(&config(json!([entry("w.example.com", None, json!({}))])));
        let h = &hooks[0];
        let grace = 30 * S;
        let rec = gk_record();
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
        let ignore = hook::hooks(&config(json!([entry(
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
        let old = gk_record();
        let mut moved = entry(
            "w.example.com",
            None,
            json!({"matchExpressions": [expression("gk")]}),
        );
        moved["clientConfig"]["service"]["namespace"] = json!("gk2");
        let hooks = hook::hooks(&config(json!([moved])));
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
        let text = recorded("w.example.com", &old);
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
        let hooks = hook::hooks(&json!({"webhooks": after["webhooks"]}));
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
        let rec = gk_record();
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
}
