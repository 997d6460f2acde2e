//! Issue 52's figures: instances that share the work, on the real control plane with three
//! kube-apiservers on one etcd (tests/common/ha.rs), exactly manifests/rbac.yaml, one
//! metainit against each server. For each setting, a fresh control plane, the instances
//! counting each other, then PODS labelled gated pods created through server 1, 100 a
//! second (`ha::RATE`, at most 16 at a time): PATCHes of a pod by the user metainit (any answer, from the three audit logs),
//! each pod's latency from its create's answer to its clearing PATCH's (the servers' own
//! stamps), and the CPU the three API servers used from the first create to the last pod
//! cleared.
//!
//!     cargo bench --bench peers                          # 1,000 pods a setting
//!     METAINIT_BENCH_QUICK=1 cargo bench --bench peers   # 200
//!     METAINIT_BENCH_BUSY=2 cargo bench --bench peers    # beside 2 threads that only spin
//!
//! The busy threads take cores from the API servers and the instances, as a control plane
//! under load would: owners slower than `--peer-delay`, watches late.
//!
//! Settings: one instance; three; three with one killed (SIGKILL, its Lease left to expire)
//! just before the pods; three with one killed and another one's API server stopped.

#[path = "../tests/common/mod.rs"]
mod common;

use std::{fmt::Write, time::Instant};

use common::ha::{Ha, RATE};

struct Setting {
    name: &'static str,
    instances: usize,
    killed: bool,
    server_stopped: bool,
}

const SETTINGS: [Setting; 4] = [
    Setting {
        name: "1 instance",
        instances: 1,
        killed: false,
        server_stopped: false,
    },
    Setting {
        name: "3 instances, all up",
        instances: 3,
        killed: false,
        server_stopped: false,
    },
    Setting {
        name: "3, one killed",
        instances: 3,
        killed: true,
        server_stopped: false,
    },
    Setting {
        name: "3, one killed, another's API server stopped",
        instances: 3,
        killed: true,
        server_stopped: true,
    },
];

async fn run(s: &Setting, pods: usize) -> String {
    let mut ha = Ha::start(s.instances, &[]).await;
    if s.killed {
        ha.kill(0);
    }
    if s.server_stopped {
        ha.cp.stop("kube-apiserver-2");
    }
    let (cpu, start) = (ha.apiservers_cpu(), Instant::now());
    ha.create("p", pods).await;
    ha.until_cleared("p", pods).await;
    let (cpu, took) = (ha.apiservers_cpu() - cpu, start.elapsed());
    let f = ha.figures("p");
    eprintln!("{}: {f:?}, cpu {cpu:?}, {took:?}", s.name);
    format!(
        "| {} | {} | {} | {:.2} | {:.3} s | {:.3} s | {:.3} s | {:.1} s | {:.1} s |",
        s.name,
        f.pods,
        f.patches,
        f.per_pod(),
        f.p50.as_secs_f64(),
        f.p99.as_secs_f64(),
        f.max.as_secs_f64(),
        cpu.as_secs_f64(),
        took.as_secs_f64()
    )
}

fn main() {
    let quick = std::env::var("METAINIT_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
        || !std::env::args().any(|a| a == "--bench");
    let pods = if quick { 200 } else { 1000 };
    let busy: usize = std::env::var("METAINIT_BENCH_BUSY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let spinning = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let spinners: Vec<_> = (0..busy)
        .map(|_| {
            let spinning = spinning.clone();
            std::thread::spawn(move || {
                while spinning.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut report = String::new();
    let _ = writeln!(
        report,
        "## Instances sharing the work: three kube-apiservers on one etcd, {pods} pods a setting, {RATE} a second{}\n",
        if busy > 0 {
            format!(", beside {busy} busy threads")
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        report,
        "| setting | pods | PATCHes | a pod | latency p50 | p99 | max | API servers' CPU | all cleared in |"
    );
    let _ = writeln!(report, "|---|---|---|---|---|---|---|---|---|");
    for s in &SETTINGS {
        let row = runtime.block_on(run(s, pods));
        let _ = writeln!(report, "{row}");
    }
    spinning.store(false, std::sync::atomic::Ordering::Relaxed);
    spinners.into_iter().for_each(|t| t.join().unwrap());
    println!("{report}");
}
