//! One run of one scenario in one mode: the double started with the scenario's config, the
//! plan of objects created over time while the timed steps come and go, metainit's
//! processes watched, and when each object reached its expected state.

use super::*;

#[derive(Default)]
pub struct Row {
    pub scenario: &'static str,
    pub mode: &'static str,
    /// The seed every choice of the run came from (`seed_of`).
    pub seed: u64,
    pub labelled: usize,
    pub labelled_pending: usize,
    pub unlabelled: usize,
    pub faults: String,
    pub must_clear: usize,
    pub cleared: usize,
    pub deleted: usize,
    pub missed: usize,
    pub wrong: usize,
    pub worst_after_recovery: Duration,
    pub worst_from_create: Duration,
    pub peak_rss_kib: u64,
    pub outage_rps: Option<f64>,
    pub wall: Duration,
    pub problems: Vec<String>,
}

/// The state of a run, from the double's start to the row of the table.
pub struct Run<'a> {
    pub s: Scenario,
    pub g: Gen,
    pub size: &'a Size,
    pub started: Instant,
    pub bed: Bed,
    pub double: Double,
    pub rng: Rng,
    pub objs: Vec<Obj>,
    pub row: Row,
    pub problems: Vec<String>,
    pub steps: Vec<(Duration, Step)>,
    pub knocks: Option<(Knocks, Instant)>,
    pub outage_rps: Option<f64>,
    pub recovered: Option<Instant>,
    pub writer: Arc<Mutex<WriterLog>>,
    pub replicas: usize,
    pub procs: Vec<Proc>,
    /// Killed and replaced: their memory and log still count.
    pub retired: Vec<Proc>,
    pub next_obj: usize,
    pub refusal: Refusal,
    pub expiries: usize,
    pub recreated: usize,
    pub snapshot: Option<kube_double::Snapshot>,
    pub restore: RestoreLog,
    pub t0: Instant,
    pub t0_sys: SystemTime,
    /// versions-expired: the task expiring versions between the pages of a list.
    pub continue_expiry: Option<tokio::task::JoinHandle<usize>>,
}

pub async fn run(s: Scenario, g: Gen, size: &Size) -> Row {
    let mut r = Run::new(s, g, size).await;
    r.start().await;
    r.timeline().await;
    r.finish().await
}

impl<'a> Run<'a> {
    async fn new(s: Scenario, g: Gen, size: &'a Size) -> Run<'a> {
        let started = Instant::now();
        let seed = seed_of(&format!("{}/{}", s.name(), g.mode()));
        let mut rng = Rng::new(seed);
        let mut config = match g {
            Gen::Legacy => legacy_config(),
            // The grid's modern mode stays on the double: its request log judges every
            // request (refused ones too), and its faults make what no proxy in front of the
            // real server does (a server that stops listening, an exact count of hung
            // PATCHes, an etcd restore, the token table swapped mid-run).
            Gen::Modern => Config::modern(),
        };
        config.seed = rng.next();
        if s == Scenario::Expired {
            config.history_window = 64;
        }
        if s == Scenario::RbacLate {
            config.tokens = tokens(g, false);
        }
        let bed = Bed::start(config).await;
        if s == Scenario::RbacLate {
            bed.double
                .write_kubeconfig(&bed.kubeconfig, Some(TOKEN))
                .expect("kubeconfig with the token written");
        }
        let double = bed.double.clone();
        let objs = plan(size, &mut rng);
        let row = Row {
            scenario: s.name(),
            mode: g.mode(),
            seed,
            labelled: objs.iter().filter(|o| o.cat.labelled()).count(),
            labelled_pending: objs
                .iter()
                .filter(|o| o.cat.labelled() && o.cat.pending())
                .count(),
            unlabelled: objs.iter().filter(|o| !o.cat.labelled()).count(),
            faults: describe(s, size),
            ..Row::default()
        };
        Run {
            s,
            g,
            size,
            started,
            bed,
            double,
            rng,
            objs,
            row,
            problems: Vec::new(),
            steps: steps(s, g, size),
            knocks: None,
            outage_rps: None,
            recovered: None,
            writer: Arc::default(),
            replicas: if s == Scenario::Replicas { 3 } else { 1 },
            procs: Vec::new(),
            retired: Vec::new(),
            next_obj: 0,
            refusal: Refusal::default(),
            expiries: 0,
            recreated: 0,
            snapshot: None,
            restore: RestoreLog::default(),
            t0: started,
            t0_sys: SystemTime::now(),
            continue_expiry: None,
        }
    }

    /// Versions expire between the pages of a list only when there are two pages: 520
    /// labelled objects with nothing pending, there before metainit starts.
    fn bulk_for_expiry(&mut self) {
        for i in 0..520 {
            let name = format!("{}bulk-{i:04}", Cat::None.prefix());
            self.double
                .create("pods", "default", Cat::None.object(self.g, &name))
                .expect("bulk object created");
        }
        self.continue_expiry = Some(tokio::spawn(expire_between_pages(
            self.double.clone(),
            self.g,
            2,
            Duration::from_secs(20),
        )));
    }

    /// Faults from the start are there before metainit starts; so is a server that is
    /// down. Then the replicas, and the timeline's start once every one watches (start-up
    /// is part of it only in down-at-start, and under the faults set before).
    async fn start(&mut self) {
        if self.s == Scenario::Expired {
            self.bulk_for_expiry();
        }
        let down_at_start = matches!(self.steps.first(), Some((d, Step::Stop)) if d.is_zero());
        if self.steps.first().is_some_and(|(d, _)| d.is_zero()) {
            match self.steps.remove(0).1 {
                Step::Faults(f) => self.double.set_faults(f),
                Step::Stop => self.stop().await,
                _ => unreachable!("only faults or a stop come first"),
            }
        }
        self.procs = (0..self.replicas)
            .map(|_| Proc::spawn(&self.bed, self.g, self.s))
            .collect();
        if !down_at_start {
            let (double, replicas) = (&self.double, self.replicas);
            let watching = || {
                double
                    .requests()
                    .iter()
                    .filter(|r| r.status == 200 && r.path_and_query.contains("watch=true"))
                    .count()
                    >= replicas
            };
            let start = Instant::now();
            while !watching() && start.elapsed() < self.size.bound {
                tokio::time::sleep(TICK).await;
            }
            if !watching() {
                let bound = self.size.bound;
                self.problems
                    .push(format!("metainit did not start watching within {bound:?}"));
            }
        }
        self.t0 = Instant::now();
        self.t0_sys = SystemTime::now();
        // Refused from the start: RBAC not granted yet, or admission refusing writes.
        if self.s == Scenario::RbacLate || self.double.faults().reject_writes.is_some() {
            self.refusal.start(self.t0);
        }
    }

    /// Ticks until every object is created and cleared after the last step, or the bound
    /// after recovery has passed, or a process exited.
    async fn timeline(&mut self) {
        let size = self.size;
        let deadline_after =
            |recovered: Instant, t0: Instant| recovered.max(t0 + size.create_over) + size.bound;
        let hard_limit = size.create_over + size.down + size.bound + Duration::from_secs(30);
        loop {
            let now = Instant::now();
            let elapsed = now - self.t0;
            self.timed_steps(elapsed).await;
            self.create_due(elapsed);
            let waiting = self.bookkeeping(now);
            let exited: Vec<String> = self.procs.iter_mut().filter_map(Proc::check).collect();
            if !exited.is_empty() {
                self.problems.extend(exited);
                break;
            }
            let all_created = self.next_obj == self.objs.len();
            if self.steps.is_empty() && all_created && waiting == 0 {
                break;
            }
            if let Some(r) = self.recovered
                && self.steps.is_empty()
                && now >= deadline_after(r, self.t0)
            {
                break;
            }
            if elapsed > hard_limit {
                self.problems
                    .push(format!("scenario did not finish within {hard_limit:?}"));
                break;
            }
            tokio::time::sleep(TICK).await;
        }
    }

    /// Creates the objects due by now.
    fn create_due(&mut self, elapsed: Duration) {
        let n = self.objs.len();
        let due = if elapsed >= self.size.create_over {
            n
        } else {
            (n as f64 * elapsed.as_secs_f64() / self.size.create_over.as_secs_f64()) as usize
        };
        while self.next_obj < due {
            let o = &mut self.objs[self.next_obj];
            self.next_obj += 1;
            if o.created.is_some() {
                // Created ahead of its turn (restored).
                continue;
            }
            o.create(&self.double, self.g);
            o.pending_after_restore = self.restore.at.is_some() && o.cat.must_clear();
            if self.s == Scenario::Writer && o.cat.must_clear() {
                tokio::spawn(write_on(
                    self.double.clone(),
                    self.g,
                    o.ns,
                    o.name.clone(),
                    self.rng.next(),
                    self.writer.clone(),
                ));
            }
        }
    }

    /// Liveness bookkeeping: when each object reached its expected state. Returns how many
    /// have not yet.
    fn bookkeeping(&mut self, now: Instant) -> usize {
        let mut waiting = 0;
        let w = self.writer.lock().unwrap();
        for o in self
            .objs
            .iter_mut()
            .filter(|o| o.cat.must_clear() && o.created.is_some())
        {
            let key = format!("{}/{}", o.ns, o.name);
            if o.cleared.is_some() || w.deleted.contains(&key) {
                continue;
            }
            let removed = w.removed.get(&key).cloned().unwrap_or_default();
            match self.double.get("pods", o.ns, &o.name) {
                Some(cur) if self.g.names(&cur) == expected(self.g, o, &removed) => {
                    o.cleared = Some(now);
                }
                Some(_) => waiting += 1,
                // Deleted by the writer a moment ago; its log entry comes next.
                None => {}
            }
        }
        waiting
    }
}
