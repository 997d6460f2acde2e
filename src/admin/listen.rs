//! The admin server's listener, built so that a neighbour who can reach the port cannot
//! use it to run metainit out of memory or file descriptors (issue #34): every connection
//! is accepted at once, at most `MAX_CONNECTIONS` stay open, and when that many are open
//! the one that has gone longest without sending a request is closed to make room. A
//! request head must arrive whole within `HEAD_TIMEOUT` of the connection (or of the
//! previous response), and fit in `MAX_HEAD` bytes.
//!
//! Why close the oldest rather than wait for a free slot: a waiting accept leaves the new
//! connections in the kernel's backlog behind the flood, and a kubelet probe with a 1 s
//! timeout would fail. Closing the oldest lets the newest in, and a probe sends its request
//! as it connects, which moves it to the back of the line until it is answered.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use axum::{Router, extract::Request};
use hyper::{body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore, oneshot},
};
use tower::ServiceExt;
use tracing::{info, trace, warn};

/// Open connections at most. About 12 KiB each while waiting for a request head (measured
/// under a flood: RELIABILITY.md), so 256 stay well within the 8 MiB the admin server may
/// add to the process. Prometheus and the kubelet use one or two at a time.
pub const MAX_CONNECTIONS: usize = 256;

/// Connections told to close that may still hold their socket: the loop waits for one to
/// go before it accepts beyond `MAX_CONNECTIONS + CLOSING`, so that is a hard bound on the
/// sockets and tasks, however fast connections arrive.
const CLOSING: usize = 16;

/// The admin server's sockets at most, the listener's aside.
pub const MAX_SOCKETS: usize = MAX_CONNECTIONS + CLOSING;

/// Connections the kernel may hold for the loop to accept (capped by net.core.somaxconn,
/// 4096 by default): tokio's 1024 overflowed under a flood reconnecting in waves, and a
/// probe whose SYN is dropped waits a second for its retry.
pub(super) const BACKLOG: u32 = 4096;

/// How long a connection has to send a request head, from its opening or from the previous
/// response: a client that means it sends it in one write, and Prometheus reconnects when
/// an idle keep-alive connection was closed.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest request head taken, in bytes (hyper's least read buffer): a GET of a path
/// with a few headers needs well under 1 KiB.
const MAX_HEAD: usize = 8 * 1024;

/// How long the loop waits after an accept failed for want of a resource (file descriptors,
/// memory), so as not to spin while none frees.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// Accepts and serves connections until the process ends; never stops on an error.
pub async fn run(listener: TcpListener, app: Router) {
    let open = Open::default();
    let http = http1_settings();
    let sockets = Arc::new(Semaphore::new(MAX_SOCKETS));
    let mut failing = false;
    loop {
        // Never closed, so never an error.
        let Ok(socket) = sockets.clone().acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                if failing {
                    info!("admin server accepts connections again");
                    failing = false;
                }
                let conn = Conn {
                    open: open.clone(),
                    admitted: open.admit(),
                    _socket: socket,
                };
                tokio::spawn(serve(stream, app.clone(), http.clone(), conn));
            }
            // A connection that went away before it was accepted: nothing is short.
            Err(e) if is_connection_error(&e) => trace!(error = %e, "admin connection lost"),
            Err(e) => {
                if !failing {
                    warn!(error = %e, "admin server cannot accept a connection; retrying");
                    failing = true;
                }
                tokio::time::sleep(ACCEPT_PAUSE).await;
            }
        }
    }
}

fn http1_settings() -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .max_headers(32);
    b
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// One accepted connection's place: its entry in the table, its stamp and what tells it to
/// close (`Open::admit`), and its share of the sockets. Leaving the table when dropped, it
/// frees its place however the connection ends.
struct Conn {
    open: Open,
    admitted: (Arc<AtomicU64>, oneshot::Receiver<()>),
    _socket: OwnedSemaphorePermit,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.open.leave(&self.admitted.0);
    }
}

/// Serves one connection until it ends, its head deadline passes, or the table says room
/// was needed for a newer one.
async fn serve(stream: TcpStream, app: Router, http: http1::Builder, mut conn: Conn) {
    let (open, stamp) = (conn.open.clone(), conn.admitted.0.clone());
    let service = service_fn(move |req: Request<Incoming>| {
        open.touch(&stamp);
        app.clone().oneshot(req)
    });
    let closed = &mut conn.admitted.1;
    tokio::select! {
        done = http.serve_connection(TokioIo::new(stream), service) => {
            if let Err(e) = done {
                trace!(error = %e, "admin connection ended");
            }
        }
        // Dropping the connection closes it.
        _ = closed => trace!("admin connection closed to make room"),
    }
}

/// The open connections by the stamp of their last request (or of their opening), oldest
/// first. Dropping a connection's sender closes it.
#[derive(Clone, Default)]
struct Open(Arc<Mutex<Table>>);

#[derive(Default)]
struct Table {
    next: u64,
    by_age: BTreeMap<u64, oneshot::Sender<()>>,
    full: bool,
}

impl Open {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a new connection as the newest, closing the oldest when `MAX_CONNECTIONS`
    /// are open; returns its stamp and what tells it to close.
    fn admit(&self) -> (Arc<AtomicU64>, oneshot::Receiver<()>) {
        let mut t = self.lock();
        let open = t.by_age.len();
        // Once per flood: it leaves the full state at half the limit, not at the first
        // connection to end, or a churning flood would log a pair of lines per connection.
        if open >= MAX_CONNECTIONS && !t.full {
            warn!(
                max = MAX_CONNECTIONS,
                "admin server at its connection limit; closing the connections idle longest"
            );
            t.full = true;
        } else if open < MAX_CONNECTIONS / 2 && t.full {
            info!("admin server below half its connection limit again");
            t.full = false;
        }
        if open >= MAX_CONNECTIONS {
            t.by_age.pop_first();
        }
        let (tx, rx) = oneshot::channel();
        let stamp = t.next;
        t.next += 1;
        t.by_age.insert(stamp, tx);
        (Arc::new(AtomicU64::new(stamp)), rx)
    }

    /// A request arrived on the connection: it becomes the newest.
    fn touch(&self, stamp: &AtomicU64) {
        let mut t = self.lock();
        let Some(tx) = t.by_age.remove(&stamp.load(Ordering::Relaxed)) else {
            return; // already told to close
        };
        let now = t.next;
        t.next += 1;
        t.by_age.insert(now, tx);
        stamp.store(now, Ordering::Relaxed);
    }

    fn leave(&self, stamp: &AtomicU64) {
        self.lock().by_age.remove(&stamp.load(Ordering::Relaxed));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_age.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        time::Instant,
    };

    /// How long the server takes to close `s`, reading whatever it sends meanwhile.
    async fn closes(s: &mut TcpStream) -> Duration {
        let start = Instant::now();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest).await;
        start.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_head_has_its_deadline_from_the_opening_and_from_each_response() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        tokio::spawn(run(listener, app));

        let mut half = TcpStream::connect(addr).await.unwrap();
        half.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let took = closes(&mut half).await;
        assert!(took >= HEAD_TIMEOUT && took < HEAD_TIMEOUT * 2, "{took:?}");

        let mut kept = TcpStream::connect(addr).await.unwrap();
        kept.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        while !answer.ends_with(b"ok") {
            let mut buf = [0; 256];
            let n = kept.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before answering");
            answer.extend_from_slice(&buf[..n]);
        }
        let took = closes(&mut kept).await;
        assert!(took >= HEAD_TIMEOUT && took < HEAD_TIMEOUT * 2, "{took:?}");
    }

    #[test]
    fn the_connection_idle_longest_makes_room_and_a_request_renews_one() {
        let open = Open::default();
        let mut conns: Vec<_> = (0..MAX_CONNECTIONS).map(|_| open.admit()).collect();
        assert_eq!(open.len(), MAX_CONNECTIONS);
        // The first one sends a request: the second is now the one idle longest.
        open.touch(&conns[0].0);
        let newest = open.admit();
        assert_eq!(open.len(), MAX_CONNECTIONS, "the bound holds");
        assert!(
            conns[1]
                .1
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Closed),
            "the one idle longest is told to close"
        );
        assert_eq!(
            conns[0].1.try_recv(),
            Err(oneshot::error::TryRecvError::Empty),
            "the renewed one stays"
        );
        // A closed connection that ends leaves the table alone; a live one frees its slot.
        open.leave(&conns[1].0);
        assert_eq!(open.len(), MAX_CONNECTIONS);
        open.leave(&newest.0);
        assert_eq!(open.len(), MAX_CONNECTIONS - 1);
        open.touch(&conns[1].0);
        assert_eq!(
            open.len(),
            MAX_CONNECTIONS - 1,
            "a closed one is not renewed"
        );
    }
}
