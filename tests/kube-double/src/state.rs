// State shared by the HTTP server and the library handle: config, store, faults, request log.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use crate::config::{Config, Faults};
use crate::resources::Registry;
use crate::store::{Snapshot, Store};

/// Bearer token to permissions; `None` disables authentication.
pub type Tokens = Option<Arc<HashMap<String, Vec<String>>>>;

/// One request the double received.
#[derive(Clone, Debug)]
pub struct RequestRecord {
    pub at: SystemTime,
    pub method: String,
    pub path_and_query: String,
    pub content_type: Option<String>,
    pub user_agent: Option<String>,
    pub body: String,
    pub status: u16,
}

pub struct Shared {
    pub config: Config,
    pub registry: Registry,
    pub store: Store,
    pub addr: SocketAddr,
    faults: Mutex<Faults>,
    tokens: Mutex<Tokens>,
    rng: Mutex<fastrand::Rng>,
    requests: Mutex<Vec<RequestRecord>>,
    /// Requests received so far, answered or not, by method.
    arrived: Mutex<std::collections::HashMap<String, usize>>,
    /// Snapshots taken over `POST /_double/snapshot`, by id (index).
    snapshots: Mutex<Vec<Snapshot>>,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub fn new(config: Config, addr: SocketAddr) -> Shared {
        Shared {
            registry: Registry::from_config(&config),
            store: Store::new(config.history_window),
            faults: Mutex::new(config.faults.clone()),
            tokens: Mutex::new(config.tokens.clone().map(Arc::new)),
            rng: Mutex::new(fastrand::Rng::with_seed(config.seed)),
            requests: Mutex::new(Vec::new()),
            arrived: Mutex::new(std::collections::HashMap::new()),
            snapshots: Mutex::new(Vec::new()),
            addr,
            config,
        }
    }

    pub fn faults(&self) -> Faults {
        relock(&self.faults).clone()
    }

    pub fn set_faults(&self, f: Faults) {
        *relock(&self.faults) = f;
    }

    /// Counts a request as it arrives, before any fault delays or drops its answer.
    pub fn arrive(&self, method: &str) {
        *relock(&self.arrived).entry(method.to_string()).or_default() += 1;
    }

    /// How many requests with this method arrived, answered or not.
    pub fn arrived(&self, method: &str) -> usize {
        relock(&self.arrived).get(method).copied().unwrap_or(0)
    }

    /// True when a request with this method and path must hang: takes one from
    /// `hang_count`, once `hang_after` requests that would have hung were answered.
    pub fn take_hang(&self, method: &str, path: &str) -> bool {
        let mut f = relock(&self.faults);
        let hit = f.hang_count > 0
            && f.hang_method
                .as_deref()
                .is_some_and(|m| m.eq_ignore_ascii_case(method))
            && f.hang_path.as_deref().is_none_or(|p| path.starts_with(p));
        if !hit {
            return false;
        }
        if f.hang_after > 0 {
            f.hang_after -= 1;
            return false;
        }
        f.hang_count -= 1;
        true
    }

    /// The token table now in force (cheap: shared).
    pub fn tokens(&self) -> Tokens {
        relock(&self.tokens).clone()
    }

    pub fn set_tokens(&self, tokens: Option<HashMap<String, Vec<String>>>) {
        *relock(&self.tokens) = tokens.map(Arc::new);
    }

    /// Keeps a snapshot for the control routes; returns its id.
    pub fn keep_snapshot(&self, s: Snapshot) -> usize {
        let mut all = relock(&self.snapshots);
        all.push(s);
        all.len() - 1
    }

    pub fn kept_snapshot(&self, id: usize) -> Option<Snapshot> {
        relock(&self.snapshots).get(id).cloned()
    }

    /// A uniform draw in [0, 1) from the seeded generator.
    pub fn draw(&self) -> f64 {
        relock(&self.rng).f64()
    }

    /// True with probability `p`.
    pub fn chance(&self, p: f64) -> bool {
        p > 0.0 && self.draw() < p
    }

    pub fn pick<T: Copy>(&self, items: &[T]) -> Option<T> {
        if items.is_empty() {
            return None;
        }
        let i = relock(&self.rng).usize(..items.len());
        items.get(i).copied()
    }

    /// A random RFC 4122 version 4 uid from the seeded generator.
    pub fn uid(&self) -> String {
        let mut rng = relock(&self.rng);
        let mut b = [0u8; 16];
        for x in &mut b {
            *x = rng.u8(..);
        }
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }

    /// Five characters as the real server appends for `generateName` (and names a pod's
    /// token volume with).
    pub fn name_suffix(&self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut rng = relock(&self.rng);
        (0..5)
            .map(|_| ALPHABET[rng.usize(..ALPHABET.len())] as char)
            .collect()
    }

    pub fn log_request(&self, r: RequestRecord) {
        relock(&self.requests).push(r);
    }

    /// Answered requests in order of arrival (a request is logged once answered,
    /// so a blocked POST shows up when it returns, in its arrival position).
    pub fn requests(&self) -> Vec<RequestRecord> {
        let mut all = relock(&self.requests).clone();
        all.sort_by_key(|r| r.at);
        all
    }

    pub fn clear_requests(&self) {
        relock(&self.requests).clear();
    }
}

/// Now as RFC 3339 with second precision, as metav1.Time renders.
pub fn now_rfc3339() -> String {
    format_time(SystemTime::now())
}

pub fn format_time(t: SystemTime) -> String {
    let ts = jiff::Timestamp::try_from(t).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub fn format_time_micro(t: SystemTime) -> String {
    let ts = jiff::Timestamp::try_from(t).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    ts.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// Parses an RFC 3339 timestamp.
pub fn parse_time(s: &str) -> Option<SystemTime> {
    let ts: jiff::Timestamp = s.parse().ok()?;
    Some(SystemTime::from(ts))
}
