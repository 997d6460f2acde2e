//! Who clears an object first, when the others step in, and who is alive: pure rules, no
//! I/O.
//!
//! Every instance ranks the live instances for an object the same way (rendezvous hashing:
//! each instance's score is a hash of the object's uid and the instance's name, highest
//! first), so without a word between them they agree on one owner per object, which
//! patches at once; the next in rank waits one delay, the next two, and each looks again
//! before it patches: when the owner is gone, the object waits one delay, not a lease's
//! expiry. A waiting instance that sees one of those ranked before it at work (an object
//! that one owns cleared while this one waited next in rank) counts its delay from then
//! instead: a control plane under load makes an owner slower than the delay, not gone
//! (`turn`). Liveness is what each
//! instance saw change: a Lease whose renewal this instance has not seen change for its
//! duration is gone, whatever the clocks of other nodes say.

use std::{collections::HashMap, time::Duration};

use tokio::time::Instant;

/// FNV-1a, 64 bits, then MurmurHash3's finalizer (FNV alone spreads names that differ in
/// their last byte badly: `node-1` owned half of the objects): the same on every instance,
/// every platform and every version, which the standard library's hasher does not promise.
fn hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.iter().chain(std::iter::once(&0xff)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Where `me` stands among `live` for the object `uid`: 0 is the owner. `me` counts as
/// live whether listed or not.
pub fn rank(uid: &str, me: &str, live: &[String]) -> usize {
    above(uid, me, live).len()
}

/// The instances ranked before `me` for the object `uid` among `live`, the owner first.
pub fn above<'a>(uid: &str, me: &str, live: &'a [String]) -> Vec<&'a str> {
    let score = |name: &str| (hash(&[uid.as_bytes(), name.as_bytes()]), name.to_string());
    let mine = score(me);
    let mut above: Vec<(_, &str)> = live
        .iter()
        .filter(|name| name.as_str() != me)
        .map(|name| (score(name), name.as_str()))
        .filter(|(s, _)| *s > mine)
        .collect();
    above.sort_by(|a, b| b.0.cmp(&a.0));
    above.into_iter().map(|(_, name)| name).collect()
}

/// The most the instances ranked before one at work defer it, in delays beyond its turn.
pub const AT_WORK: u32 = 3;

/// How long after first seeing an object (`first`) the instance of rank `rank` (from 1)
/// patches it: `rank` delays after the later of that sight and the last time it saw one
/// of the instances ranked before it at work (`seen`), never more than `AT_WORK` delays
/// beyond its own turn.
pub fn turn(rank: u32, delay: Duration, first: Instant, seen: Option<Instant>) -> Duration {
    let own = delay * rank;
    let from = seen.map_or(Duration::ZERO, |at| at.saturating_duration_since(first));
    (from + own).min(own + delay * AT_WORK)
}

/// One Lease as listed: its holder's name, its renewal as the server wrote it and how
/// long it lasts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewal {
    pub holder: String,
    pub renewed: String,
    pub duration: Duration,
}

/// What this instance saw of each Lease: its last renewal and when that changed here.
#[derive(Default)]
pub struct Seen(HashMap<String, (String, Instant, Duration)>);

impl Seen {
    /// Takes a listing (every Lease of the instances, this one's included): the names of
    /// those alive, sorted. A Lease first seen counts from its renewal's age by this
    /// clock (`age`: `None` if unreadable, then from now); after that, from when its
    /// renewal last changed here.
    pub fn observe(
        &mut self,
        now: Instant,
        leases: &[Renewal],
        age: impl Fn(&str) -> Option<Duration>,
    ) -> Vec<String> {
        let mut next = HashMap::with_capacity(leases.len());
        for l in leases {
            let since = match self.0.get(&l.holder) {
                Some((renewed, at, _)) if *renewed == l.renewed => *at,
                Some(_) => now,
                None => now
                    .checked_sub(age(&l.renewed).unwrap_or_default())
                    .unwrap_or(now),
            };
            next.insert(l.holder.clone(), (l.renewed.clone(), since, l.duration));
        }
        self.0 = next;
        let mut live: Vec<String> = self
            .0
            .iter()
            .filter(|(_, (_, since, duration))| now.saturating_duration_since(*since) < *duration)
            .map(|(name, _)| name.clone())
            .collect();
        live.sort();
        live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("node-{i}")).collect()
    }

    #[test]
    fn every_instance_agrees_on_one_owner_and_an_order() {
        let live = names(3);
        for i in 0..1000 {
            let uid = format!("uid-{i}");
            let mut ranks: Vec<usize> = live.iter().map(|me| rank(&uid, me, &live)).collect();
            ranks.sort();
            assert_eq!(ranks, vec![0, 1, 2], "{uid}");
        }
    }

    #[test]
    fn the_work_is_spread_evenly() {
        let live = names(3);
        let owned = |me: &str| {
            (0..3000)
                .filter(|i| rank(&format!("7f3c9a2e-{i}"), me, &live) == 0)
                .count()
        };
        for me in &live {
            let n = owned(me);
            assert!((900..=1100).contains(&n), "{me} owns {n} of 3000");
        }
    }

    #[test]
    fn an_instance_gone_moves_only_its_own_objects() {
        let (all, two) = (names(3), names(2));
        for i in 0..1000 {
            let uid = format!("uid-{i}");
            for me in &two {
                if rank(&uid, me, &all) == 0 {
                    assert_eq!(rank(&uid, me, &two), 0, "{uid} moved from {me}");
                }
            }
        }
    }

    #[test]
    fn above_an_instance_are_those_ranked_before_it_in_order() {
        let live = names(3);
        for i in 0..100 {
            let uid = format!("uid-{i}");
            let mut order: Vec<&str> = live.iter().map(String::as_str).collect();
            order.sort_by_key(|me| rank(&uid, me, &live));
            for (r, me) in order.iter().enumerate() {
                assert_eq!(above(&uid, me, &live), order[..r], "{uid}");
            }
        }
        assert!(above("u", "node-1", &[]).is_empty());
    }

    #[test]
    fn those_before_seen_at_work_defer_the_others_within_a_bound() {
        let (d, t0) = (Duration::from_millis(500), Instant::now());
        let ms = Duration::from_millis;
        // Nothing seen of the owner, or only before the object: one delay a rank.
        assert_eq!(turn(1, d, t0, None), ms(500));
        assert_eq!(turn(2, d, t0, None), ms(1000));
        assert_eq!(turn(1, d, t0 + ms(300), Some(t0)), ms(500));
        // Seen at work 300 ms after: the delay counts from then.
        assert_eq!(turn(1, d, t0, Some(t0 + ms(300))), ms(800));
        assert_eq!(turn(2, d, t0, Some(t0 + ms(300))), ms(1300));
        // Never more than three delays beyond the instance's own turn.
        assert_eq!(turn(1, d, t0, Some(t0 + ms(9000))), ms(2000));
        assert_eq!(turn(2, d, t0, Some(t0 + ms(9000))), ms(2500));
    }

    #[test]
    fn alone_or_unlisted_an_instance_owns_everything() {
        assert_eq!(rank("u", "node-1", &[]), 0);
        assert_eq!(rank("u", "node-1", &["node-1".to_string()]), 0);
    }

    fn lease(holder: &str, renewed: &str) -> Renewal {
        Renewal {
            holder: holder.into(),
            renewed: renewed.into(),
            duration: Duration::from_secs(10),
        }
    }

    #[test]
    fn a_lease_not_renewed_for_its_duration_is_gone() {
        let mut seen = Seen::default();
        let t0 = Instant::now();
        let fresh = |_: &str| Some(Duration::ZERO);
        let live = seen.observe(t0, &[lease("a", "1"), lease("b", "1")], fresh);
        assert_eq!(live, ["a", "b"]);
        let t1 = t0 + Duration::from_secs(9);
        let live = seen.observe(t1, &[lease("a", "2"), lease("b", "1")], fresh);
        assert_eq!(live, ["a", "b"]);
        let t2 = t0 + Duration::from_secs(11);
        let live = seen.observe(t2, &[lease("a", "3"), lease("b", "1")], fresh);
        assert_eq!(live, ["a"], "b's renewal has not changed for 11 s");
        let t3 = t2 + Duration::from_secs(1);
        let live = seen.observe(t3, &[lease("a", "3"), lease("b", "2")], fresh);
        assert_eq!(live, ["a", "b"], "b renewed again");
    }

    #[test]
    fn a_lease_first_seen_counts_from_its_renewal() {
        let mut seen = Seen::default();
        let now = Instant::now() + Duration::from_secs(3600);
        let age = |r: &str| Some(Duration::from_secs(r.parse().unwrap()));
        let live = seen.observe(now, &[lease("old", "3600"), lease("new", "1")], age);
        assert_eq!(live, ["new"]);
        let live = seen.observe(now, &[lease("odd", "x")], |_| None);
        assert_eq!(live, ["odd"], "an unreadable renewal counts from now");
    }
}
