//! The two mechanisms that hold objects back, behind one enum: what counts as pending,
//! and which JSON patch clears it. The engine and `status` only talk to this module;
//! `initializers` and `gates` hold the rules of each, `decision` what they share.

mod decision;
pub mod gates;
pub mod initializers;
pub mod kept;

pub use decision::{Decision, Leave, Patch, names, push_json_string};
pub use kept::Kept;

use crate::object::Held;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `metadata.initializers.pending`, Kubernetes 1.7 to 1.13.
    Initializers,
    /// `spec.schedulingGates`, Kubernetes 1.26 and later.
    SchedulingGates,
}

impl Mode {
    /// The label used in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Initializers => "initializers",
            Mode::SchedulingGates => "scheduling-gates",
        }
    }

    /// Decides what to do with an object as seen, given the `--only` names (empty: all).
    /// The clearing patch first tests the object's uid and its `label_key` label as seen,
    /// so that it never clears an object re-created under the same name, nor one whose
    /// label was removed meanwhile: either is a race, and the newest state is looked at.
    pub fn decide(self, obj: &Held, only: &[String], label_key: &str) -> Decision {
        let decision = match self {
            Mode::Initializers => initializers::decide(
                obj.initializers().as_ref(),
                obj.metadata.initializers.as_deref().map(|r| r.get()),
                only,
            ),
            Mode::SchedulingGates => gates::decide(obj, only),
        };
        match decision {
            Decision::Clear { names, patch } => Decision::Clear {
                names,
                patch: guarded(obj, label_key, patch),
            },
            leave => leave,
        }
    }

    /// Whether `decide` would do anything but leave the object silently (nothing pending,
    /// terminating, bound): the watch's filter, on every event, so without building the
    /// patch that `decide` builds.
    pub fn needs_reconcile(self, obj: &Held) -> bool {
        match self {
            Mode::Initializers => {
                let (pending, failed) = obj.initializers_state();
                pending || failed
            }
            Mode::SchedulingGates => {
                obj.has_gates()
                    && !obj.is_terminating()
                    && obj
                        .spec
                        .as_ref()
                        .is_none_or(|s| s.node_name.as_deref().is_none_or(str::is_empty))
            }
        }
    }

    /// The names holding the object back, whatever `--only` says (for `status`).
    pub fn blocking_names(self, obj: &Held) -> Vec<String> {
        match self {
            Mode::Initializers => initializers::pending_names(obj.initializers().as_ref()),
            Mode::SchedulingGates => names(obj.scheduling_gates().as_ref()),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Escapes a JSON pointer segment (RFC 6901): `~` as `~0`, `/` as `~1` (the reference
/// `push_pointer` is tested against).
#[cfg(test)]
fn pointer_segment(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// Prepends a `test` of the uid as seen to a patch (for a release, where no label is read).
pub fn guard_uid(obj: &Held, patch: Patch) -> Patch {
    guarded(obj, "", patch)
}

/// Prepends `test` operations on the uid and on the label as seen to a clearing patch
/// (no label test for an empty `label_key`).
fn guarded(obj: &Held, label_key: &str, patch: Patch) -> Patch {
    let uid = obj.uid();
    let label = obj.label(label_key).filter(|_| !label_key.is_empty());
    if uid.is_none() && label.is_none() {
        return patch;
    }
    // Written straight into the patch's text: no string per operation, path and value.
    let mut text = String::with_capacity(patch.as_str().len() + 128 + 2 * label_key.len());
    text.push('[');
    if let Some(uid) = uid {
        push_test(&mut text, |t| t.push_str("\"/metadata/uid\""), uid);
    }
    if let Some(value) = label {
        push_test(
            &mut text,
            |t| push_pointer(t, "/metadata/labels/", label_key),
            value,
        );
    }
    // What follows the patch's own `[`.
    text.push_str(&patch.as_str()[1..]);
    Patch::from_text(text)
}

/// Appends `{"op":"test","path":PATH,"value":VALUE},`, the path written by `path` as a
/// JSON string, `value` escaped as one.
fn push_test(text: &mut String, path: impl FnOnce(&mut String), value: &str) {
    text.push_str("{\"op\":\"test\",\"path\":");
    path(text);
    text.push_str(",\"value\":");
    decision::push_json_string(text, value);
    text.push_str("},");
}

/// Appends `prefix` and `segment` escaped as a JSON pointer segment (RFC 6901), as one
/// JSON string: what `json_string(prefix + pointer_segment(segment))` gives.
fn push_pointer(text: &mut String, prefix: &str, segment: &str) {
    text.push('"');
    text.push_str(prefix);
    for c in segment.chars() {
        match c {
            '~' => text.push_str("~0"),
            '/' => text.push_str("~1"),
            '"' | '\\' | '\u{0}'..='\u{1f}' => {
                let mut one = [0u8; 4];
                let quoted = decision::json_string(c.encode_utf8(&mut one));
                text.push_str(&quoted[1..quoted.len() - 1]);
            }
            c => text.push(c),
        }
    }
    text.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_patch_tests_uid_and_label_first() {
        let pod = crate::object::held(json!({
            "metadata": {"name": "p", "uid": "u-1",
                         "labels": {"k8s.opsani.io/initializer": "x~y"}},
            "spec": {"schedulingGates": [{"name": "g"}]}
        }));
        let mut trimmed = pod.clone();
        trimmed.trim("k8s.opsani.io/initializer");
        assert_eq!(
            Mode::SchedulingGates.decide(&trimmed, &[], "k8s.opsani.io/initializer"),
            Mode::SchedulingGates.decide(&pod, &[], "k8s.opsani.io/initializer"),
            "the store's trimmed copy gets the same patch"
        );
        let Decision::Clear { patch, .. } =
            Mode::SchedulingGates.decide(&pod, &[], "k8s.opsani.io/initializer")
        else {
            panic!("not cleared")
        };
        assert_eq!(
            patch.value(),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u-1"},
                {"op": "test", "path": "/metadata/labels/k8s.opsani.io~1initializer", "value": "x~y"},
                {"op": "test", "path": "/spec/schedulingGates", "value": [{"name": "g"}]},
                {"op": "remove", "path": "/spec/schedulingGates"}
            ])
        );
        assert_eq!(pointer_segment("a~b/c"), "a~0b~1c");
        for key in ["k8s.opsani.io/initializer", "a~b/c", "q\"b\\s\n\u{1}é", ""] {
            let mut text = String::new();
            push_pointer(&mut text, "/metadata/labels/", key);
            assert_eq!(
                text,
                decision::json_string(&["/metadata/labels/", &pointer_segment(key)].concat())
            );
        }
    }

    #[test]
    fn needs_reconcile_agrees_with_decide() {
        let objects = [
            json!({"metadata": {"name": "p"}}),
            json!({"metadata": {"name": "p", "initializers": null}}),
            json!({"metadata": {"name": "p", "initializers": {"pending": []}}}),
            json!({"metadata": {"name": "p", "initializers": {"pending": [{"name": "a"}]}}}),
            json!({"metadata": {"name": "p", "initializers": {"pending": [{"name": "b"}]}}}),
            json!({"metadata": {"name": "p", "initializers": {"pending": [{}]}}}),
            json!({"metadata": {"name": "p", "initializers": {"pending": [], "result": {"status": "Failure"}}}}),
            json!({"metadata": {"name": "p"}, "spec": {}}),
            json!({"metadata": {"name": "p"}, "spec": {"schedulingGates": []}}),
            json!({"metadata": {"name": "p"}, "spec": {"schedulingGates": [{"name": "a"}]}}),
            json!({"metadata": {"name": "p"}, "spec": {"schedulingGates": [{"name": "b"}]}}),
            json!({"metadata": {"name": "p"}, "spec": {"schedulingGates": [{"name": "a"}], "nodeName": "n"}}),
            json!({"metadata": {"name": "p"}, "spec": {"schedulingGates": [{"name": "a"}], "nodeName": ""}}),
            json!({"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"},
                   "spec": {"schedulingGates": [{"name": "a"}]}}),
        ];
        for mode in [Mode::Initializers, Mode::SchedulingGates] {
            for only in [vec![], vec!["a".to_string()]] {
                for o in &objects {
                    let obj = crate::object::held(o.clone());
                    let quiet = matches!(
                        mode.decide(&obj, &only, "k"),
                        Decision::Leave(Leave::NotPending | Leave::Terminating | Leave::Bound)
                    );
                    assert_eq!(mode.needs_reconcile(&obj), !quiet, "{mode} {only:?} {o}");
                }
            }
        }
    }
}
