//! Outages and refusals: a listener that counts connection attempts while the double is
//! down, the peak requests per second, and no hot loop on one refused object.

use super::*;

pub struct Knocks {
    pub times: Arc<Mutex<Vec<Instant>>>,
    pub task: tokio::task::JoinHandle<()>,
}

impl Knocks {
    /// Binds the double's (stopped) address; accepts every connection and drops it at once.
    pub async fn listen(addr: SocketAddr) -> Knocks {
        let start = Instant::now();
        let listener = loop {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(e) => {
                    assert!(
                        start.elapsed() < Duration::from_secs(5),
                        "cannot bind {addr} while the double is down: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        let times = Arc::new(Mutex::new(Vec::new()));
        let t = times.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok((stream, _)) = listener.accept().await {
                    t.lock().unwrap().push(Instant::now());
                    drop(stream);
                }
            }
        });
        Knocks { times, task }
    }

    /// Releases the address; returns when each connection attempt came.
    pub async fn release(self) -> Vec<Instant> {
        self.task.abort();
        let _ = self.task.await;
        self.times.lock().unwrap().clone()
    }
}

/// The highest count in any one-second window starting at `from`, stepped by 100 ms.
pub fn peak_per_second(times: &[Instant], from: Instant, to: Instant) -> f64 {
    let mut peak = 0usize;
    let mut start = from;
    while start < to {
        let end = start + Duration::from_secs(1);
        let n = times.iter().filter(|t| **t >= start && **t < end).count();
        peak = peak.max(n);
        start += TICK;
    }
    peak as f64
}

/// When each request metainit sent arrived, on the suite's clock.
pub fn request_times(double: &Double, t0: Instant, t0_sys: SystemTime) -> Vec<Instant> {
    double
        .requests()
        .iter()
        .filter_map(|r| Some(t0 + r.at.duration_since(t0_sys).ok()?))
        .collect()
}

/// Phases during which the server refuses on purpose: every request failing, RBAC not
/// granted yet, or admission refusing the writes of some objects.
#[derive(Default)]
pub struct Refusal {
    pub since: Option<Instant>,
    pub phases: Vec<(Instant, Instant)>,
    /// First attempts of objects created at the start of this phase.
    pub first_attempts: usize,
}

impl Refusal {
    pub fn start(&mut self, at: Instant) {
        self.since = Some(at);
        self.first_attempts = 0;
    }

    /// `n` objects were created as this phase began: each gets a first attempt, which
    /// is not a retry against the refusing server and is not counted.
    pub fn allow(&mut self, n: usize) {
        self.first_attempts += n;
    }

    /// Ends the phase, if one is under way: the peak requests per second during it.
    pub fn end(&mut self, double: &Double, t0: Instant, t0_sys: SystemTime) -> Option<f64> {
        let from = self.since.take()?;
        let to = Instant::now();
        self.phases.push((from, to));
        let peak = peak_per_second(&request_times(double, t0, t0_sys), from, to);
        Some((peak - self.first_attempts as f64).max(0.0))
    }
}

/// No hot loop on one object. In each refusal phase, the PATCHes of one object answered
/// with one of `codes` are at most what its backoff allows (0.1 s doubling, drawn down by
/// up to a fifth, capped at 30 s) from its first such PATCH to the end of the phase,
/// T seconds: log2(T / 0.1) + T / 30 + 3. Returns how many such PATCHes there were, and
/// the most one object got in one phase.
pub fn refused_per_object(
    double: &Double,
    t0: Instant,
    t0_sys: SystemTime,
    phases: &[(Instant, Instant)],
    codes: &[u16],
    problems: &mut Vec<String>,
) -> (usize, usize) {
    let requests = double.requests();
    let (mut total, mut worst) = (0, 0);
    for &(from, to) in phases {
        let mut per: HashMap<&str, Vec<Instant>> = HashMap::new();
        for r in requests
            .iter()
            .filter(|r| r.method == "PATCH" && codes.contains(&r.status))
        {
            let Ok(since) = r.at.duration_since(t0_sys) else {
                continue;
            };
            let at = t0 + since;
            if at >= from && at < to {
                let path = r.path_and_query.split('?').next().unwrap_or("");
                per.entry(path).or_default().push(at);
            }
        }
        for (path, times) in per {
            total += times.len();
            worst = worst.max(times.len());
            let first = times.iter().min().copied().unwrap_or(to);
            let t = to.saturating_duration_since(first).as_secs_f64();
            let bound = (t / 0.1).log2().max(0.0) + t / 30.0 + 3.0;
            if times.len() as f64 > bound {
                problems.push(format!(
                    "{} refused PATCHes of {path} in {t:.1}s, over the backoff's bound of {bound:.1}",
                    times.len()
                ));
            }
        }
    }
    (total, worst)
}
