//! The pages of one list are one list for the request ceiling (#58): a list of many pages is
//! sent back to back, never held to the LISTs' one a second past their burst of 100. On the
//! double's modern generation, 60,000 unbound pods gated by a watched gate
//! (`--release-gate`): 120 pages of 500 in the watch's first list, which used to take a
//! LIST's token each (120,000 pods then took 140 s to list; `cargo bench --bench scale`
//! measures the time, this test the structure).

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

const GATE: &str = "example.com/held";
/// 120 pages: past the LISTs' burst (100) by more than the tokens a slow listing earns
/// meanwhile (one a second: 120 pages in 20 s would still leave some to wait).
const PODS: usize = 60_000;
const PAGES: usize = PODS / 500;

/// The GETs of the pods collection that are pages of a list (not a watch, not the
/// `limit=1` probe), in the order the double received them.
fn pages(bed: &Bed) -> Vec<kube_double::RequestRecord> {
    bed.double
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path_and_query.starts_with("/api/v1/pods?"))
        .filter(|r| r.path_and_query.contains("limit=500"))
        .filter(|r| !r.path_and_query.contains("watch="))
        .collect()
}

/// A page that waited for a token arrives a second after the one before (the LISTs'
/// refill), however fast the server answers; a page of 500 pods is read in tens of
/// milliseconds here. So no gap between two pages of the list reaches this.
const HELD_FOR_A_TOKEN: Duration = Duration::from_millis(900);

#[tokio::test]
async fn the_pages_of_one_list_are_not_held_to_the_lists_ceiling() {
    let bed = Bed::modern().await;
    for i in 0..PODS {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p-{i}"), "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "registry.example/c:1"}],
                     "schedulingGates": [{"name": GATE}]}
        });
        bed.double
            .create("pods", "default", pod)
            .unwrap_or_else(|e| panic!("pod {i}: {e}"));
    }
    let rule = format!("{GATE}=24h");
    let m = bed.metainit(&["--release-gate", &rule]);
    // The list is done when its last page (one without a continue token after it) is in.
    eventually(
        &format!("the first list's {PAGES} pages"),
        Duration::from_secs(240),
        || pages(&bed).len() >= PAGES,
    )
    .await;
    let list: Vec<_> = pages(&bed).into_iter().take(PAGES).collect();
    let at = |r: &kube_double::RequestRecord| r.at;
    let gaps: Vec<(usize, Duration)> = list
        .windows(2)
        .enumerate()
        .map(|(i, w)| {
            let gap = at(&w[1]).duration_since(at(&w[0]));
            (i + 2, gap.unwrap_or_default())
        })
        .filter(|(_, gap)| *gap >= HELD_FOR_A_TOKEN)
        .collect();
    let took = at(&list[PAGES - 1])
        .duration_since(at(&list[0]))
        .unwrap_or_default();
    let most = list
        .windows(2)
        .filter_map(|w| at(&w[1]).duration_since(at(&w[0])).ok())
        .max()
        .unwrap_or_default();
    eprintln!("{PAGES} pages in {took:?}, the longest gap {most:?}");
    assert!(
        gaps.is_empty(),
        "{} of {PAGES} pages held about a second each (page, gap): {gaps:?}; the list took {took:?}",
        gaps.len()
    );
    let held: Vec<String> = m
        .log()
        .into_iter()
        .filter(|l| l.contains("request held back by the client's rate limit"))
        .collect();
    assert!(held.is_empty(), "{held:?}");
    assert!(
        list.iter()
            .skip(1)
            .all(|r| r.path_and_query.contains("continue=")),
        "one list, page after page"
    );
}
