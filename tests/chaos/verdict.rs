//! The end of a run: liveness (every object to clear cleared, within the bound after
//! recovery), the evidence each fault left, safety (tests/chaos/safety.rs), the request rate
//! during outages, memory, and a clean stop on SIGTERM; all into the row of the table.

use super::*;

impl Run<'_> {
    pub async fn finish(mut self) -> Row {
        // Late wrong PATCHes, if any, would come now.
        tokio::time::sleep(self.size.settle).await;
        for p in self.procs.iter_mut() {
            if let Some(problem) = p.check() {
                self.problems.push(problem);
            }
        }
        self.expiry_report().await;
        let w = std::mem::take(&mut *self.writer.lock().unwrap_or_else(|p| p.into_inner()));
        self.liveness(&w);
        if self.s == Scenario::Writer {
            self.row.faults.push_str(&format!(
                " ({} updates, {} names removed, {} deleted, {} writer conflicts)",
                w.updates,
                w.removed.values().map(Vec::len).sum::<usize>(),
                w.deleted.len(),
                w.conflicts
            ));
        }
        self.request_report();
        self.scenario_checks().await;
        self.races_report();
        self.dump();
        self.safety();
        if let Some(rps) = self.outage_rps {
            self.row.outage_rps = Some(rps);
            if rps > OUTAGE_RPS_BOUND {
                self.problems.push(format!(
                    "{rps} requests/s per process during the outage, over the bound of {OUTAGE_RPS_BOUND}"
                ));
            }
        }
        for p in self.procs.iter_mut().chain(self.retired.iter_mut()) {
            self.problems.extend(p.finish());
            self.row.peak_rss_kib = self.row.peak_rss_kib.max(p.peak_rss_kib);
        }
        for p in std::mem::take(&mut self.procs) {
            let status = p.m.stop().await;
            if !status.success() {
                self.problems.push(format!(
                    "metainit did not stop cleanly on SIGTERM: {status}"
                ));
            }
        }
        self.row.problems = std::mem::take(&mut self.problems);
        self.row.wall = self.started.elapsed();
        self.row
    }

    /// versions-expired: the lists expired between their pages, and the continue 410s
    /// (the fault must have happened).
    async fn expiry_report(&mut self) {
        let Some(task) = self.continue_expiry.take() else {
            return;
        };
        let done = task.await.unwrap_or(0);
        let continue_410 = self
            .double
            .requests()
            .iter()
            .filter(|r| r.status == 410 && r.path_and_query.contains("continue="))
            .count();
        self.row.faults.push_str(&format!(
            "; {done} list(s) expired between pages, {continue_410} continue 410s"
        ));
        if continue_410 < 2 {
            self.problems.push(format!(
                "{continue_410} continue requests answered 410, wanted 2: the fault did not happen"
            ));
        }
    }

    /// Every object to clear is in its expected state, reached within the bound after
    /// recovery (or after it was created, if later); one the writer deleted stays gone.
    fn liveness(&mut self, w: &WriterLog) {
        let (g, size) = (self.g, self.size);
        let recovered = self.recovered.unwrap_or(self.t0 + size.create_over);
        let (row, problems) = (&mut self.row, &mut self.problems);
        for o in self.objs.iter().filter(|o| o.cat.must_clear()) {
            let key = format!("{}/{}", o.ns, o.name);
            if w.deleted.contains(&key) {
                row.deleted += 1;
                if self.double.get("pods", o.ns, &o.name).is_some() {
                    problems.push(format!("{key} was deleted but is back"));
                }
                continue;
            }
            row.must_clear += 1;
            let removed = w.removed.get(&key).cloned().unwrap_or_default();
            let cur = self.double.get("pods", o.ns, &o.name);
            let want = expected(g, o, &removed);
            match (&cur, o.cleared) {
                (Some(cur), Some(at)) if g.names(cur) == want => {
                    row.cleared += 1;
                    let created = o.created.unwrap_or(self.t0);
                    row.worst_from_create = row.worst_from_create.max(at - created);
                    let after = at.saturating_duration_since(recovered.max(created));
                    row.worst_after_recovery = row.worst_after_recovery.max(after);
                    if after > size.bound {
                        problems.push(format!(
                            "{key} cleared {after:?} after recovery, over the bound of {:?}",
                            size.bound
                        ));
                    }
                }
                _ => {
                    row.missed += 1;
                    if row.missed <= 5 {
                        problems.push(format!(
                            "{key} ({:?}) not cleared: pending {:?}, expected {want:?}",
                            o.cat,
                            cur.as_ref().map(|c| g.names(c))
                        ));
                    }
                }
            }
        }
    }

    /// The watches and lists metainit sent; malformed-watch: that it saw (and survived) at
    /// least one of the double's malformed lines, a syntax error mid-line.
    fn request_report(&mut self) {
        let (watches, lists) = self
            .double
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path_and_query.contains("labelSelector"))
            .fold((0, 0), |(w, l), r| {
                if r.path_and_query.contains("watch=true") {
                    (w + 1, l)
                } else {
                    (w, l + 1)
                }
            });
        self.row
            .faults
            .push_str(&format!(" [{watches} watch and {lists} list requests]"));
        if self.s == Scenario::Malformed {
            let seen = logged(&self.procs, &["watch failed"]).len();
            assert!(seen > 0, "no malformed watch line reached metainit");
            self.row
                .faults
                .push_str(&format!("; metainit logged {seen} watch errors"));
        }
    }

    /// concurrent-writer, 3-replicas-kill: the PATCHes that lost a race or found the object
    /// deleted.
    fn races_report(&mut self) {
        if !matches!(self.s, Scenario::Writer | Scenario::Replicas) {
            return;
        }
        let requests = self.double.requests();
        let patches = |codes: &[u16]| {
            requests
                .iter()
                .filter(|r| r.method == "PATCH" && codes.contains(&r.status))
                .count()
        };
        let (raced, gone) = (patches(&[409, 422]), patches(&[404]));
        self.row.faults.push_str(&format!(
            "; {raced} PATCHes lost a race (409/422), {gone} found the object deleted (404)"
        ));
    }

    /// `METAINIT_CHAOS_DUMP=DIR`: the request log, one file per run.
    fn dump(&self) {
        let Ok(dir) = std::env::var("METAINIT_CHAOS_DUMP") else {
            return;
        };
        let mut text = String::new();
        for r in self.double.requests() {
            let at = r.at.duration_since(self.t0_sys).unwrap_or_default();
            let _ = writeln!(
                text,
                "{:8.3} {} {} {}",
                at.as_secs_f64(),
                r.status,
                r.method,
                r.path_and_query
            );
        }
        let file = format!(
            "{}-{}.log",
            self.s.name().replace('%', "pct"),
            self.g.mode()
        );
        let _ = std::fs::write(std::path::Path::new(&dir).join(file), text);
    }
}
