//! The plan of objects: what each is (encoded in its name, so the request log can be judged),
//! created in a seeded order, and the state each must end in.

use super::*;

/// What an object is, encoded in its name so the request log can be judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cat {
    /// Labelled, both names pending: the `--only` one goes, the other stays.
    Both,
    /// Labelled, only the `--only` name pending: fully cleared.
    One,
    /// Labelled, only the other name pending: never touched.
    Kept,
    /// Labelled and refused: legacy `initializers.result` set; modern a pod being deleted
    /// (held by a finalizer). Never touched.
    Refused,
    /// Labelled, nothing pending.
    None,
    /// Unlabelled, both names pending.
    UnlabelledPending,
    /// Unlabelled, nothing pending.
    UnlabelledNone,
}

impl Cat {
    pub fn prefix(self) -> &'static str {
        match self {
            Cat::Both => "l-both-",
            Cat::One => "l-one-",
            Cat::Kept => "l-kept-",
            Cat::Refused => "l-refused-",
            Cat::None => "l-none-",
            Cat::UnlabelledPending => "u-pending-",
            Cat::UnlabelledNone => "u-none-",
        }
    }
    pub fn of(name: &str) -> Option<Cat> {
        [
            Cat::Both,
            Cat::One,
            Cat::Kept,
            Cat::Refused,
            Cat::None,
            Cat::UnlabelledPending,
            Cat::UnlabelledNone,
        ]
        .into_iter()
        .find(|c| name.starts_with(c.prefix()))
    }
    pub fn labelled(self) -> bool {
        !matches!(self, Cat::UnlabelledPending | Cat::UnlabelledNone)
    }
    /// metainit must clear (some of) its names.
    pub fn must_clear(self) -> bool {
        matches!(self, Cat::Both | Cat::One)
    }
    /// Pending in the sense of the issue: something holds it back.
    pub fn pending(self) -> bool {
        !matches!(self, Cat::None | Cat::UnlabelledNone)
    }

    pub fn object(self, g: Gen, name: &str) -> Value {
        let (c, k) = (g.cleared(), g.kept());
        let labelled = self.labelled();
        match g {
            Gen::Legacy => {
                let mut p = pod(name, labelled);
                // Without an explicit list, admission fills both configured initializers.
                let explicit = match self {
                    Cat::Both | Cat::UnlabelledPending => None,
                    Cat::One => Some(json!({"pending": [{"name": c}]})),
                    Cat::Kept => Some(json!({"pending": [{"name": k}]})),
                    Cat::Refused => Some(json!({
                        "pending": [{"name": c}, {"name": k}],
                        "result": {"status": "Failure", "message": "rejected by the chaos suite",
                                   "reason": "Forbidden", "code": 403}
                    })),
                    Cat::None | Cat::UnlabelledNone => Some(json!({"pending": []})),
                };
                if let Some(init) = explicit {
                    p["metadata"]["initializers"] = init;
                }
                p
            }
            Gen::Modern => match self {
                Cat::Both | Cat::UnlabelledPending => gated_pod(name, labelled, &[c, k]),
                Cat::One => gated_pod(name, labelled, &[c]),
                Cat::Kept => gated_pod(name, labelled, &[k]),
                // A gated pod is never bound (create refuses `spec.nodeName` with gates, the
                // binding refuses a gated pod): one being deleted instead, held by a
                // finalizer. Created unlabelled: `Obj::create` deletes it, then labels it.
                Cat::Refused => {
                    let mut p = gated_pod(name, false, &[c, k]);
                    p["metadata"]["finalizers"] = json!(["chaos.example.com/hold"]);
                    p
                }
                Cat::None | Cat::UnlabelledNone => pod(name, labelled),
            },
        }
    }
}

/// A scenario's seed: the FNV-1a hash of its `name/mode`, so every run makes the same
/// choices.
pub fn seed_of(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

// ---------------------------------------------------------------------------------------
// The plan of objects

pub struct Obj {
    pub ns: &'static str,
    pub name: String,
    pub cat: Cat,
    pub created: Option<Instant>,
    pub original: Vec<String>,
    pub cleared: Option<Instant>,
    pub uid: String,
    /// resourceVersion when created (restored: when it became pending again).
    pub rv: u64,
    /// recreated: the uid before it was deleted and created again under its name.
    pub old_uid: Option<String>,
    /// restored: it existed when the snapshot was taken.
    pub in_snapshot: bool,
    /// restored: it had to be cleared (again) after the restore.
    pub pending_after_restore: bool,
}

impl Obj {
    /// Creates it on the server now (again, after a restore that lost it), and records
    /// what it was created with.
    pub fn create(&mut self, double: &Double, g: Gen) {
        let mut created = double
            .create("pods", self.ns, self.cat.object(g, &self.name))
            .unwrap_or_else(|e| panic!("{} not created: {e}", self.name));
        if g == Gen::Modern && self.cat == Cat::Refused {
            // Terminating before it is labelled: metainit never sees it otherwise.
            double
                .delete("pods", self.ns, &self.name)
                .unwrap_or_else(|e| panic!("{} not deleted: {e}", self.name));
            let mut obj = double
                .get("pods", self.ns, &self.name)
                .unwrap_or_else(|| panic!("{} gone: its finalizer should hold it", self.name));
            obj["metadata"]["labels"][LABEL] = json!("true");
            created = double
                .update("pods", self.ns, obj)
                .unwrap_or_else(|e| panic!("{} not labelled: {e}", self.name));
        }
        self.original = g.names(&created);
        self.created = Some(Instant::now());
        self.cleared = None;
        self.uid = uid(&created);
        self.rv = rv(&created);
    }
}

pub fn uid(obj: &Value) -> String {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

pub fn rv(obj: &Value) -> u64 {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub fn plan(size: &Size, rng: &mut Rng) -> Vec<Obj> {
    let mut objs = Vec::new();
    let labelled = [
        Cat::Both,
        Cat::Both,
        Cat::Both,
        Cat::Both,
        Cat::Both,
        Cat::One,
        Cat::One,
        Cat::Kept,
        Cat::Refused,
        Cat::None,
    ];
    for i in 0..size.labelled {
        let cat = labelled[i % labelled.len()];
        objs.push((cat, i));
    }
    for i in 0..size.unlabelled {
        let cat = if i % 2 == 0 {
            Cat::UnlabelledPending
        } else {
            Cat::UnlabelledNone
        };
        objs.push((cat, i));
    }
    // Fisher-Yates, seeded: labelled objects arrive spread among the others.
    for i in (1..objs.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        objs.swap(i, j);
    }
    objs.into_iter()
        .enumerate()
        .map(|(n, (cat, i))| Obj {
            ns: NAMESPACES[n % NAMESPACES.len()],
            name: format!("{}{i:05}", cat.prefix()),
            cat,
            created: None,
            original: Vec::new(),
            cleared: None,
            uid: String::new(),
            rv: 0,
            old_uid: None,
            in_snapshot: false,
            pending_after_restore: false,
        })
        .collect()
}

/// What the concurrent writer did, for the expected final state.
#[derive(Default)]
pub struct WriterLog {
    /// `ns/name` to the names it removed itself, as a competing initializer or gate controller.
    pub removed: HashMap<String, Vec<String>>,
    pub deleted: HashSet<String>,
    pub updates: usize,
    pub conflicts: usize,
}

pub fn expected(g: Gen, obj: &Obj, removed: &[String]) -> Vec<String> {
    let cleared = if obj.cat.must_clear() {
        Some(g.cleared())
    } else {
        None
    };
    obj.original
        .iter()
        .filter(|n| Some(n.as_str()) != cleared && !removed.contains(n))
        .cloned()
        .collect()
}
