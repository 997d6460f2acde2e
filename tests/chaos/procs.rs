//! metainit's processes: spawned, watched for an exit or a panic, their peak memory, their
//! log lines and metrics.

use super::*;

/// Lines metainit logged that contain every one of `parts`, over its processes.
pub fn logged(procs: &[Proc], parts: &[&str]) -> Vec<String> {
    procs
        .iter()
        .flat_map(|p| p.m.log())
        .filter(|l| parts.iter().all(|part| l.contains(part)))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Processes

pub struct Proc {
    pub m: Metainit,
    pub pid: u32,
    pub peak_rss_kib: u64,
    /// Killed on purpose by the scenario: its exit is expected.
    pub killed: bool,
}

impl Proc {
    pub fn spawn(bed: &Bed, g: Gen, s: Scenario) -> Proc {
        let extra = s.args();
        let mut args = vec!["--mode", g.mode(), "--only", g.cleared()];
        args.extend(extra.iter().map(String::as_str));
        let m = bed.metainit(&args);
        let pid = m.child.id().expect("metainit runs");
        Proc {
            m,
            pid,
            peak_rss_kib: 0,
            killed: false,
        }
    }

    pub fn status_kib(&self, field: &str) -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        text.lines()
            .find(|l| l.starts_with(field))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    }

    /// Records the RSS; returns a problem if the process has exited.
    pub fn check(&mut self) -> Option<String> {
        if self.killed {
            return None;
        }
        if let Some(rss) = self.status_kib("VmRSS:") {
            self.peak_rss_kib = self.peak_rss_kib.max(rss);
        }
        match self.m.child.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => Some(format!(
                "metainit (pid {}) exited while it should run: {status}; last log lines: {:#?}",
                self.pid,
                tail(&self.m.log(), 15)
            )),
            Err(e) => Some(format!("cannot poll metainit (pid {}): {e}", self.pid)),
        }
    }

    /// The peak RSS over the process's life (VmHWM), and any panic in its log.
    pub fn finish(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.killed
            && let Some(hwm) = self.status_kib("VmHWM:")
        {
            self.peak_rss_kib = self.peak_rss_kib.max(hwm);
        }
        let log = self.m.log();
        if let Some(l) = log.iter().find(|l| l.contains("panicked")) {
            problems.push(format!("metainit (pid {}) panicked: {l}", self.pid));
        }
        if self.peak_rss_kib > RSS_BOUND_KIB {
            problems.push(format!(
                "metainit (pid {}) peak RSS {} KiB over the bound of {} KiB",
                self.pid, self.peak_rss_kib, RSS_BOUND_KIB
            ));
        }
        problems
    }
}

pub fn tail(lines: &[String], n: usize) -> Vec<String> {
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// The sum of the samples of metainit's metrics whose name and labels start with
/// `prefix`, over its running processes.
pub async fn metric(procs: &[Proc], prefix: &str) -> f64 {
    let mut sum = 0.0;
    for p in procs.iter().filter(|p| !p.killed) {
        let addr = p.m.admin_addr().await;
        let text = admin_get(&addr, "/metrics").await.1;
        sum += text
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    sum
}

/// The number after `key` (e.g. `from=`) in a log line.
pub fn number_after(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(key)? + key.len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}
