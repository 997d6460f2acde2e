//! The timed steps of a run, applied to the double when their time comes: faults set and
//! lifted (each refusal phase measured as it ends), the server stopped and resumed, a
//! replica killed and respawned, RBAC granted, objects re-created, an etcd snapshot taken
//! and restored.

use super::*;

impl Run<'_> {
    /// Applies every step due by `elapsed`; a step applied late delays the later ones by
    /// as much.
    pub async fn timed_steps(&mut self, elapsed: Duration) {
        while self.steps.first().is_some_and(|(at, _)| *at <= elapsed) {
            if let Some((at, _)) = self.steps.first()
                && elapsed > *at + TICK
            {
                let late = elapsed - *at;
                for (t, _) in self.steps.iter_mut().skip(1) {
                    *t += late;
                }
            }
            let (_, step) = self.steps.remove(0);
            if !self.apply(step, elapsed).await {
                break;
            }
        }
    }

    /// Applies one step; false when it must wait for the next tick.
    async fn apply(&mut self, step: Step, elapsed: Duration) -> bool {
        match step {
            Step::Faults(f) => {
                self.end_refusal();
                if f.error_fraction >= 1.0 || f.reject_writes.is_some() {
                    self.refusal.start(Instant::now());
                }
                self.double.set_faults(f);
            }
            Step::Tokens(t) => {
                self.end_refusal();
                self.double.set_tokens(t);
            }
            Step::Recreate => self.recreate(),
            Step::Snapshot => return self.take_snapshot(elapsed),
            Step::Restore => self.restore_snapshot(),
            Step::Stop => self.stop().await,
            Step::Expire => expire(&self.double, self.g, &mut self.expiries),
            Step::Resume => self.resume().await,
            Step::Kill(i) => {
                self.procs[i].m.signal("KILL");
                let _ = self.procs[i].m.wait(Duration::from_secs(10)).await;
                self.procs[i].killed = true;
            }
            Step::Respawn(i) => {
                let fresh = Proc::spawn(&self.bed, self.g, self.s);
                self.retired
                    .push(std::mem::replace(&mut self.procs[i], fresh));
            }
            Step::Recovered => self.recovered = Some(Instant::now()),
        }
        true
    }

    /// Ends the refusal phase under way, if any: its peak requests per second.
    fn end_refusal(&mut self) {
        if let Some(rps) = self.refusal.end(&self.double, self.t0, self.t0_sys) {
            self.outage_rps = Some(rps.max(self.outage_rps.unwrap_or(0.0)));
        }
    }

    /// Stops the double and counts connection attempts at its address instead.
    pub async fn stop(&mut self) {
        self.double.stop();
        self.knocks = Some((Knocks::listen(self.double.addr()).await, Instant::now()));
    }

    /// Releases the counting listener (the peak attempts per second, per process) and
    /// serves again.
    async fn resume(&mut self) {
        if let Some((k, from)) = self.knocks.take() {
            let to = Instant::now();
            let times = k.release().await;
            let rps = peak_per_second(&times, from, to) / self.replicas as f64;
            self.outage_rps = Some(rps.max(self.outage_rps.unwrap_or(0.0)));
        }
        self.double.resume().await.expect("double serves again");
    }

    /// Deletes and creates again every object named `REJECT_PREFIX…` created so far. A
    /// re-created object starts afresh: its count of refused PATCHes too.
    fn recreate(&mut self) {
        self.end_refusal();
        self.refusal.start(Instant::now());
        for o in self
            .objs
            .iter_mut()
            .filter(|o| o.created.is_some() && o.name.starts_with(REJECT_PREFIX))
        {
            match self.double.recreate("pods", o.ns, &o.name) {
                Ok(new) => {
                    let new_uid = uid(&new);
                    if new_uid.is_empty() || new_uid == o.uid {
                        self.problems.push(format!(
                            "{}/{} re-created with the same uid {new_uid:?}",
                            o.ns, o.name
                        ));
                    }
                    o.old_uid = Some(std::mem::replace(&mut o.uid, new_uid));
                    o.original = self.g.names(&new);
                    o.created = Some(Instant::now());
                    o.cleared = None;
                    o.rv = rv(&new);
                    self.recreated += 1;
                    self.refusal.allow(1);
                }
                Err(e) => self
                    .problems
                    .push(format!("{}/{} not re-created: {e}", o.ns, o.name)),
            }
        }
    }

    /// Not before metainit has cleared the first objects (false: next tick again). A few
    /// objects to clear, still pending in the snapshot: created now, ahead of their turn,
    /// and the snapshot taken before metainit can act; then the unrelated writes.
    fn take_snapshot(&mut self, elapsed: Duration) -> bool {
        if elapsed < self.size.create_over && !self.objs.iter().any(|o| o.cleared.is_some()) {
            self.steps.insert(0, (elapsed, Step::Snapshot));
            return false;
        }
        for o in self
            .objs
            .iter_mut()
            .filter(|o| o.cat.must_clear() && o.created.is_none())
            .take(3)
        {
            o.create(&self.double, self.g);
        }
        self.snapshot = Some(self.double.snapshot());
        for o in self.objs.iter_mut() {
            o.in_snapshot = o.created.is_some();
        }
        for i in 0..burst(self.size) {
            let name = format!("{BURST_PREFIX}{i:05}");
            self.double
                .create("pods", "default", Cat::UnlabelledNone.object(self.g, &name))
                .expect("an unrelated write");
        }
        true
    }

    /// Restores the snapshot: objects created since are lost and created again, as their
    /// controllers would; objects cleared since are pending again.
    fn restore_snapshot(&mut self) {
        let (g, double) = (self.g, &self.double);
        let snap = self.snapshot.take().expect("a snapshot before the restore");
        let was_clear: Vec<bool> = self
            .objs
            .iter()
            .map(|o| {
                o.cat.must_clear()
                    && double
                        .get("pods", o.ns, &o.name)
                        .is_some_and(|cur| g.names(&cur) == expected(g, o, &[]))
            })
            .collect();
        let restore = &mut self.restore;
        restore.revision_before = double.resource_version();
        double.restore(&snap);
        restore.at = Some(Instant::now());
        restore.revision_after = double.resource_version();
        for (o, was_clear) in self.objs.iter_mut().zip(was_clear) {
            if o.created.is_some() && !o.in_snapshot {
                o.create(double, g);
                restore.lost += 1;
                o.pending_after_restore = o.cat.must_clear();
            } else if o.cat.must_clear() && o.created.is_some() {
                let cur = double
                    .get("pods", o.ns, &o.name)
                    .expect("an object of the snapshot is back");
                o.rv = rv(&cur);
                o.cleared = None;
                o.pending_after_restore = g.names(&cur) != expected(g, o, &[]);
                if was_clear && o.pending_after_restore {
                    restore.pending_again += 1;
                }
            }
        }
    }
}
