//! Which gates went between two sightings of a pod: what `metainit_gate_held_seconds`
//! observes (`watch::objects`), read from the store before the new sighting replaces it.

use super::{HAS_UUID, Slim, Store, packed::uuid};
use crate::object::Held;

impl Store {
    /// The gates the stored object held that `obj`, the same object seen again, holds no
    /// more: gates are only ever removed (set at creation), so each is one that went, by
    /// whoever removed it. Empty for an object not stored, or another under its name.
    pub fn lifted(&self, obj: &Held) -> Vec<String> {
        let s = self.read();
        let Some(old) = s.objects.get(obj.key().as_str()) else {
            return Vec::new();
        };
        let Some(before) = old.gates.as_deref() else {
            return Vec::new();
        };
        // The same text: nothing went (a repeated event, a relist; most sightings).
        let after = obj
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_deref());
        if after.map(|g| g.get()) == Some(before) || !old.has_uid(obj.uid()) {
            return Vec::new();
        }
        #[derive(serde::Deserialize)]
        struct Gate {
            name: String,
        }
        let now = crate::blocker::gates::names_of(obj);
        serde_json::from_str::<Vec<Gate>>(before)
            .unwrap_or_default()
            .into_iter()
            .map(|g| g.name)
            .filter(|g| !now.contains(g))
            .collect()
    }
}

impl Slim {
    /// Whether it is the object of uid `uid` (a relist or watch may show a new object
    /// under an old name).
    fn has_uid(&self, uid: Option<&str>) -> bool {
        match (uid, self.flags & HAS_UUID != 0) {
            (Some(u), true) => uuid(u) == Some(self.uid),
            (u, false) => self.rest.as_deref().and_then(|r| r.uid.as_deref()) == u,
            (None, true) => false,
        }
    }
}
