//! Faults made by writing to the double: versions expired (between the pages of a list too),
//! and the concurrent writer between metainit's read and its PATCH.

use super::*;

/// The cluster moves on (one unrelated write), then every resource version before now
/// expires: watches and continue tokens from before the write get 410. Like etcd's
/// compaction, the current revision stays usable.
pub fn expire(double: &Double, g: Gen, n: &mut usize) {
    *n += 1;
    let name = format!("{}expire-{n:03}", Cat::UnlabelledNone.prefix());
    double
        .create("pods", "default", Cat::UnlabelledNone.object(g, &name))
        .expect("a write before the expiry");
    double.expire_versions();
}

/// Expires every resource version right after the first page of a paged list of labelled
/// pods, until `times` continue requests were answered 410 (a miss, when the second page
/// came first, is tried again on the next list); returns how many lists it expired.
pub async fn expire_between_pages(double: Double, g: Gen, times: usize, limit: Duration) -> usize {
    let start = Instant::now();
    let mut seen = 0;
    let mut done = 0;
    let mut n = 1000;
    while start.elapsed() < limit {
        let requests = double.requests();
        let lists = |r: &&kube_double::RequestRecord| {
            r.method == "GET"
                && r.path_and_query.contains("limit=500")
                && r.path_and_query.contains("labelSelector")
                && !r.path_and_query.contains("watch=")
        };
        let expired = requests
            .iter()
            .filter(lists)
            .filter(|r| r.status == 410 && r.path_and_query.contains("continue="))
            .count();
        if expired >= times {
            break;
        }
        let firsts = requests
            .iter()
            .filter(lists)
            .filter(|r| r.status == 200 && !r.path_and_query.contains("continue="))
            .count();
        if firsts > seen {
            seen = firsts;
            expire(&double, g, &mut n);
            done += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    done
}

/// The concurrent writer on one freshly created labelled object: between metainit's read
/// and its PATCH it changes labels and annotations (never the pending list), removes one
/// pending name itself (a competing initializer or gate controller), or deletes it.
pub async fn write_on(
    double: Double,
    g: Gen,
    ns: &'static str,
    name: String,
    seed: u64,
    log: Arc<Mutex<WriterLog>>,
) {
    let mut rng = Rng::new(seed);
    tokio::time::sleep(Duration::from_millis(rng.below(150))).await;
    let key = format!("{ns}/{name}");
    if rng.chance(15) {
        if double.delete("pods", ns, &name).is_ok() {
            log.lock().unwrap().deleted.insert(key);
        }
        return;
    }
    for round in 0..3 {
        let Some(mut obj) = double.get("pods", ns, &name) else {
            return;
        };
        obj["metadata"]["labels"]["chaos.example.com/round"] = json!(round.to_string());
        obj["metadata"]["annotations"]["chaos.example.com/touched"] =
            json!(format!("{seed}-{round}"));
        let mut removed = None;
        let names = g.names(&obj);
        if round == 1 && !names.is_empty() && rng.chance(40) {
            let gone = names[rng.below(names.len() as u64) as usize].clone();
            let rest: Vec<Value> = names
                .iter()
                .filter(|n| **n != gone)
                .map(|n| json!({"name": n}))
                .collect();
            match g {
                Gen::Legacy => obj["metadata"]["initializers"]["pending"] = json!(rest),
                Gen::Modern => obj["spec"]["schedulingGates"] = json!(rest),
            }
            removed = Some(gone);
        }
        // The read's resourceVersion stays in the object: a conflict, not a lost update.
        let result = double.update("pods", ns, obj);
        {
            let mut l = log.lock().unwrap();
            match result {
                Ok(_) => {
                    l.updates += 1;
                    if let Some(gone) = removed {
                        l.removed.entry(key.clone()).or_default().push(gone);
                    }
                }
                Err(_) => l.conflicts += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.below(60))).await;
    }
}
