//! Instances that share the work (src/peers/): each keeps a Lease, and each pod is patched
//! by its owner alone; an instance killed leaves its pods to the next in rank; without the
//! rights or the API, every instance clears every pod at once, and looks again in minutes.
//! On the double, with the
//! rights of the shipped manifests/rbac.yaml (tests/control_plane_ha.rs plays it on three
//! real API servers, and `cargo bench --bench peers` measures it).

mod common;

use std::time::Duration;

use common::*;

const KUEUE: &str = "kueue.x-k8s.io/admission";
const WAIT: Duration = Duration::from_secs(30);
const SHARING: &[&str] = &["--peer-delay", "500ms"];

async fn rbac_bed(drop_leases: bool) -> Bed {
    let perms: Vec<String> = manifest_perms(&["rbac.yaml"])
        .into_iter()
        .filter(|p| !(drop_leases && p.ends_with("leases.coordination.k8s.io")))
        .collect();
    assert!(
        drop_leases
            || perms
                .iter()
                .any(|p| p == "patch leases.coordination.k8s.io"),
        "{perms:?}"
    );
    let perms: Vec<&str> = perms.iter().map(String::as_str).collect();
    Bed::as_user(kube_double::Config::modern(), &perms).await
}

/// `n` instances, each counting `n` alive.
async fn instances(bed: &Bed, n: usize) -> Vec<(Metainit, String)> {
    let mut all = Vec::new();
    for _ in 0..n {
        let m = bed.metainit(SHARING);
        let addr = m.admin_addr().await;
        all.push((m, addr));
    }
    for (_, addr) in &all {
        metrics_until(addr, "every instance alive", WAIT, |t| {
            t.contains(&format!("\nmetainit_peers {n}\n"))
        })
        .await;
    }
    all
}

fn create(bed: &Bed, prefix: &str, n: usize) {
    for i in 0..n {
        bed.double
            .create(
                "pods",
                "default",
                gated_pod(&format!("{prefix}-{i:03}"), true, &[KUEUE]),
            )
            .unwrap();
    }
}

async fn all_cleared(bed: &Bed, prefix: &str, n: usize) {
    eventually("every pod cleared", WAIT, || {
        (0..n).all(|i| {
            bed.double
                .get("pods", "default", &format!("{prefix}-{i:03}"))
                .is_some_and(|p| gates(&p).is_empty())
        })
    })
    .await;
}

fn pod_patches(bed: &Bed, prefix: &str) -> usize {
    let prefix = format!("default/{prefix}-");
    bed.patched()
        .iter()
        .filter(|p| p.starts_with(&prefix))
        .count()
}

#[tokio::test]
async fn three_instances_clear_each_pod_with_one_patch() {
    let bed = rbac_bed(false).await;
    let all = instances(&bed, 3).await;
    create(&bed, "p", 90);
    all_cleared(&bed, "p", 90).await;
    let patches = pod_patches(&bed, "p");
    assert!(
        patches <= 108,
        "{patches} PATCHes for 90 pods (at most 1.2 a pod)"
    );
    // The others saw each pod cleared while they waited their turn.
    let mut left = 0.0;
    for (_, addr) in &all {
        let text = metrics_until(addr, "the left counted", WAIT, |_| true).await;
        left += counter_sum(&text, "metainit_objects_left_to_peers_total");
    }
    eprintln!("90 pods, 3 instances: {patches} PATCHes, {left} left to a peer");
    assert!(
        left >= 90.0,
        "{left} objects left to a peer, want 2 a pod less races"
    );
    for (m, _) in all {
        assert!(m.problems().is_empty(), "{:#?}", m.problems());
        assert!(m.stop().await.success());
    }
    // Stopped, each deleted its Lease.
    eventually("no Lease left", WAIT, || {
        bed.double.list("leases.coordination.k8s.io").is_empty()
    })
    .await;
}

#[tokio::test]
async fn an_instance_killed_leaves_its_pods_to_the_next() {
    let bed = rbac_bed(false).await;
    let mut all = instances(&bed, 3).await;
    let (killed, _) = all.remove(0);
    killed.signal("KILL");
    // Its Lease is fresh for 10 s more: its pods wait for the next in rank, not for that.
    create(&bed, "k", 60);
    all_cleared(&bed, "k", 60).await;
    let patches = pod_patches(&bed, "k");
    assert!(patches <= 72, "{patches} PATCHes for 60 pods");
    for (_, addr) in &all {
        metrics_until(addr, "the killed one no longer counted", WAIT, |t| {
            t.contains("\nmetainit_peers 2\n")
        })
        .await;
    }
    for (m, _) in all {
        assert!(m.problems().is_empty(), "{:#?}", m.problems());
    }
}

#[tokio::test]
async fn without_the_rights_every_instance_clears_at_once() {
    let bed = rbac_bed(true).await;
    let a = bed.metainit(SHARING);
    let b = bed.metainit(SHARING);
    for m in [&a, &b] {
        m.logged("the missing right said", |l| {
            l.contains("WARN") && l.contains("grant") && l.contains("leases")
        })
        .await;
    }
    create(&bed, "r", 20);
    all_cleared(&bed, "r", 20).await;
    let addr = a.admin_addr().await;
    metrics_until(&addr, "not sharing", WAIT, |t| {
        t.contains("\nmetainit_peers 0\n")
    })
    .await;
}

#[tokio::test]
async fn before_the_lease_api_each_instance_clears_at_once() {
    let bed = Bed::legacy(&["example.com/init"]).await;
    let m = bed.metainit(SHARING);
    m.logged("no Lease API said", |l| {
        l.contains("INFO") && l.contains("no Lease API")
    })
    .await;
    assert!(m.problems().is_empty(), "{:#?}", m.problems());
}

/// How long the absent Lease API, or the missing right, is held: a round every renewal
/// (2 s) is 15 rounds in it, a round every five minutes one.
const ABSENT_WINDOW: Duration = Duration::from_secs(30);

/// metainit sharing on `bed` for `ABSENT_WINDOW`: the Lease requests the double saw in it,
/// and the line that said why it does not share.
async fn lease_requests_in_the_window(bed: &Bed, said: &str) -> (Vec<String>, String) {
    let start = std::time::SystemTime::now();
    let began = std::time::Instant::now();
    let m = bed.metainit(SHARING);
    m.logged(said, |l| l.contains(said)).await;
    tokio::time::sleep(ABSENT_WINDOW.saturating_sub(began.elapsed())).await;
    let until = start + ABSENT_WINDOW;
    let leases = bed
        .double
        .requests()
        .into_iter()
        .filter(|r| r.path_and_query.contains("/leases") && r.at >= start && r.at <= until)
        .map(|r| format!("{} {} {}", r.method, r.path_and_query, r.status))
        .collect();
    let line = m
        .log()
        .into_iter()
        .find(|l| l.contains(said))
        .unwrap_or_default();
    (leases, line)
}

/// Without the Lease API (Kubernetes 1.13 answers 404) or the right to it (403), the Lease
/// is asked for again in minutes, not at every renewal (#58: 60 requests a minute, for
/// ever), and the log says when: one round in the window, at most a few requests.
#[tokio::test]
async fn an_absent_lease_api_or_right_is_asked_again_in_minutes() {
    let legacy = Bed::legacy(&["example.com/init"]).await;
    let denied = rbac_bed(true).await;
    let ((absent, absent_said), (forbidden, forbidden_said)) = tokio::join!(
        lease_requests_in_the_window(&legacy, "no Lease API"),
        lease_requests_in_the_window(&denied, "grant list, create, patch and delete"),
    );
    eprintln!(
        "in {ABSENT_WINDOW:?}: {} Lease requests without the API, {} without the right",
        absent.len(),
        forbidden.len()
    );
    for (what, seen, said, code) in [
        ("without the API", &absent, &absent_said, 404),
        ("without the right", &forbidden, &forbidden_said, 403),
    ] {
        assert!(!seen.is_empty(), "{what}: never asked");
        assert!(
            seen.len() <= 4,
            "{what}: {} Lease requests: {seen:#?}",
            seen.len()
        );
        assert!(
            seen.iter().all(|r| r.ends_with(&format!(" {code}"))),
            "{what}: {seen:#?}"
        );
        assert!(said.contains(msg::LOOKING_AGAIN), "{what}: {said}");
    }
}

#[tokio::test]
async fn a_lease_not_renewed_for_an_hour_is_deleted() {
    let bed = rbac_bed(false).await;
    let two_hours_ago =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(2);
    let stale = |name: &str, renewed: String| {
        serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": "kube-system",
                "labels": {"app.kubernetes.io/name": "metainit", "app.kubernetes.io/component": "peer"},
            },
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 10, "renewTime": renewed},
        })
    };
    let old = format!("{}", two_hours_ago.strftime("%Y-%m-%dT%H:%M:%S%.6fZ"));
    let recent = format!(
        "{}",
        k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
    );
    for (name, renewed) in [("metainit-gone", old), ("metainit-recent", recent)] {
        bed.double
            .create(
                "leases.coordination.k8s.io",
                "kube-system",
                stale(name, renewed),
            )
            .unwrap();
    }
    let lease = |name: &str| {
        bed.double
            .get("leases.coordination.k8s.io", "kube-system", name)
            .is_some()
    };
    assert!(lease("metainit-gone") && lease("metainit-recent"));
    let m = bed.metainit(SHARING);
    eventually("the long-gone Lease deleted", WAIT, || {
        !lease("metainit-gone")
    })
    .await;
    assert!(
        lease("metainit-recent"),
        "a Lease renewed a moment ago was deleted"
    );
    assert!(m.problems().is_empty(), "{:#?}", m.problems());
}
