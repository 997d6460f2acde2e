//! The resync never cuts a list: a list slower than `--resync-period` completes, and the pods
//! on its last page are cleared (the period once ran from the previous resync's start, and a
//! resync replaced the watch even mid-list: such a list never finished, `/readyz` stayed 503
//! and the pods past the pages reached were never seen).

mod common;

use std::time::Duration;

use common::*;
use kube_double::Faults;

#[tokio::test]
async fn a_list_slower_than_the_resync_period_completes() {
    let bed = Bed::modern().await;
    // Three pages of 500; the one gated pod sorts last, on the third.
    for i in 0..1000 {
        bed.double
            .create("pods", "default", pod(&format!("p-{i:04}"), true))
            .unwrap();
    }
    bed.double
        .create(
            "pods",
            "default",
            gated_pod("p-9999", true, &["example.com/g"]),
        )
        .unwrap();
    // Each page 600 ms: the list takes 1.8 s, the period is 1 s.
    bed.double.set_faults(Faults {
        latency: Duration::from_millis(600),
        ..Faults::default()
    });
    let m = bed.metainit(&["--resync-period", "1s"]);
    let addr = m.admin_addr().await;
    eventually(
        "the pod on the last page cleared",
        Duration::from_secs(60),
        || {
            bed.double
                .get("pods", "default", "p-9999")
                .is_some_and(|p| gates(&p).is_empty())
        },
    )
    .await;
    until_readyz(&addr, Duration::from_secs(30)).await;
    let continued = bed
        .double
        .requests()
        .iter()
        .filter(|r| r.path_and_query.contains("continue="))
        .count();
    assert!(
        continued >= 2,
        "the list was paged: {continued} continue requests"
    );
    m.stop().await;
}
