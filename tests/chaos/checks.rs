//! The scenarios of refusals, hangs, re-creations and restores: evidence that the fault
//! happened (or the scenario fails: it would prove nothing), what metainit logged at WARN
//! and counted about it, and no hot loop on any one refused object. Liveness, safety,
//! memory and the request rate are judged as for every scenario (tests/chaos/verdict.rs).

use super::*;

/// restored: what the restore did.
#[derive(Default)]
pub struct RestoreLog {
    pub at: Option<Instant>,
    pub revision_before: u64,
    pub revision_after: u64,
    /// Objects created after the snapshot, lost, and created again.
    pub lost: usize,
    /// Objects to clear that were clear before the restore and pending after it.
    pub pending_again: usize,
}

fn failures(reason: &str) -> String {
    format!("metainit_clear_failures_total{{reason=\"{reason}\"}}")
}

impl Run<'_> {
    pub async fn scenario_checks(&mut self) {
        match self.s {
            Scenario::RbacLate => {
                let patches = self.refused("forbidden (403)");
                let counted = metric(&self.procs, &failures("forbidden")).await;
                let parts = ["WARN", "403 Forbidden", "cannot clear yet"];
                let warns = self.warned(&parts, "forbidden", counted);
                self.row.faults.push_str(&format!("; {patches}; {warns}"));
            }
            Scenario::Rejected | Scenario::Recreated => {
                let patches = self.refused("refused (422)");
                let counted = metric(&self.procs, &failures("rejected")).await;
                let parts = ["WARN", "422 Invalid", "cannot clear yet"];
                let warns = self.warned(&parts, "rejected", counted);
                if self.s == Scenario::Recreated {
                    self.recreated_checks();
                }
                self.row.faults.push_str(&format!("; {patches}; {warns}"));
            }
            Scenario::Hung => self.hung_checks().await,
            Scenario::Restored => self.restored_checks().await,
            _ => {}
        }
    }

    /// The PATCHes refused on purpose, and no hot loop on any one object.
    fn refused(&mut self, what: &str) -> String {
        let (n, worst) = refused_per_object(
            &self.double,
            self.t0,
            self.t0_sys,
            &self.refusal.phases,
            self.s.refused(),
            &mut self.problems,
        );
        if n == 0 {
            self.problems
                .push(format!("no PATCH was {what}: the fault did not happen"));
        }
        format!("{n} PATCHes {what}, at most {worst} per object")
    }

    /// The WARN lines with `parts`, and the failures counted with `reason`: at least one of
    /// each.
    fn warned(&mut self, parts: &[&str], reason: &str, counted: f64) -> String {
        let n = logged(&self.procs, parts).len();
        if n == 0 || counted < 1.0 {
            self.problems.push(format!(
                "metainit logged {n} WARN lines with {parts:?} and counted {counted} failures with reason {reason:?}, wanted at least 1 of each"
            ));
        }
        format!("{n} WARN lines, {counted} counted as {reason:?}")
    }

    /// recreated: some objects were re-created, and the one cleared is the new one, under
    /// the old name.
    fn recreated_checks(&mut self) {
        if self.recreated == 0 {
            self.problems
                .push("no object was re-created: the fault did not happen".into());
        }
        for o in self.objs.iter().filter(|o| o.old_uid.is_some()) {
            let now = self.double.get("pods", o.ns, &o.name).map(|cur| uid(&cur));
            if now.as_deref() != Some(o.uid.as_str()) || o.old_uid.as_ref() == now.as_ref() {
                self.problems.push(format!(
                    "{}/{}: uid {now:?} at the end, re-created as {:?} (was {:?})",
                    o.ns, o.name, o.uid, o.old_uid
                ));
            }
        }
        let recreated = self.recreated;
        self.row
            .faults
            .push_str(&format!("; {recreated} re-created (new uid)"));
    }

    /// hung: every hanging PATCH used up, and the timeouts logged and counted.
    async fn hung_checks(&mut self) {
        let left = self.double.faults().hang_count;
        if left > 0 {
            self.problems.push(format!(
                "only {} of the {HANG_COUNT} hanging PATCHes used up: metainit stopped sending PATCHes, or the fault did not happen",
                HANG_COUNT - left
            ));
        }
        let counted = metric(&self.procs, &failures("timeout")).await;
        let parts = ["WARN", "--request-timeout", "cannot clear yet"];
        let warns = self.warned(&parts, "timeout", counted);
        self.row
            .faults
            .push_str(&format!("; {} PATCHes hung; {warns}", HANG_COUNT - left));
    }

    /// restored: metainit saw the revision go backwards, logged and counted it, and some
    /// object to clear after the restore had a revision below the one it had seen.
    async fn restored_checks(&mut self) {
        let warns = logged(&self.procs, &["WARN", "revision went backwards"]);
        let cause = "metainit_watch_restarts_total{cause=\"revision_backwards\"}";
        let counted = metric(&self.procs, cause).await;
        // The revision metainit had seen, as it said when it found the server below it.
        let seen = warns.iter().filter_map(|l| number_after(l, "from=")).max();
        if warns.is_empty() || counted < 1.0 {
            self.problems.push(format!(
                "metainit logged {} WARN lines \"revision went backwards\" and counted {counted} restarts with cause \"revision_backwards\", wanted at least 1 of each",
                warns.len()
            ));
        }
        let after: Vec<&Obj> = self
            .objs
            .iter()
            .filter(|o| o.pending_after_restore)
            .collect();
        let below = after
            .iter()
            .filter(|o| seen.is_some_and(|r| o.rv < r))
            .count();
        let restore = &self.restore;
        if restore.pending_again == 0 {
            self.problems.push(
                "no cleared object was pending again after the restore: the fault did not happen"
                    .into(),
            );
        }
        if let Some(seen) = seen
            && below == 0
        {
            self.problems.push(format!(
                "no object to clear after the restore had a revision below the {seen} metainit had seen: the fault did not happen"
            ));
        }
        self.row.faults.push_str(&format!(
            "; revision {} -> {}, {} objects lost and created again, {} cleared ones pending again; {below} of the {} to clear after it below the revision metainit had seen ({}); {} WARN lines, {counted} counted as \"revision_backwards\"",
            restore.revision_before,
            restore.revision_after,
            restore.lost,
            restore.pending_again,
            after.len(),
            seen.map_or("-".to_string(), |r| r.to_string()),
            warns.len()
        ));
    }
}
