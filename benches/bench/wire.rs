//! The harness's own HTTP: a minimal keep-alive HTTP/1.1 client (the floors are measured
//! with it, so they carry no client library's cost) and a counting TCP proxy that sits
//! between metainit and the double and tallies what the server sends back.

use std::{
    io,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};

/// One keep-alive connection that sends requests one after the other.
pub struct Conn {
    stream: BufReader<TcpStream>,
    host: String,
    request: Vec<u8>,
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream: BufReader::with_capacity(64 * 1024, stream),
            host: addr.to_string(),
            request: Vec::with_capacity(4096),
        })
    }

    /// Sends one request and reads the whole response: status and body.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> io::Result<(u16, Vec<u8>)> {
        self.request.clear();
        self.request.extend_from_slice(
            format!(
                "{method} {path} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\n\
                 Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
                self.host,
                body.len()
            )
            .as_bytes(),
        );
        self.request.extend_from_slice(body);
        self.stream.get_mut().write_all(&self.request).await?;
        self.read_response().await
    }

    async fn read_response(&mut self) -> io::Result<(u16, Vec<u8>)> {
        let mut line = String::new();
        self.stream.read_line(&mut line).await?;
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| bad(format!("bad status line {line:?}")))?;
        let mut length = None;
        let mut chunked = false;
        loop {
            line.clear();
            if self.stream.read_line(&mut line).await? == 0 {
                return Err(bad("connection closed in the headers"));
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.parse::<usize>().ok();
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    chunked = value.eq_ignore_ascii_case("chunked");
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.stream.read_line(&mut line).await?;
                let size = usize::from_str_radix(line.trim(), 16)
                    .map_err(|_| bad(format!("bad chunk size {line:?}")))?;
                let start = body.len();
                body.resize(start + size + 2, 0);
                self.stream.read_exact(&mut body[start..]).await?;
                body.truncate(start + size);
                if size == 0 {
                    break;
                }
            }
        } else if let Some(n) = length {
            body.resize(n, 0);
            self.stream.read_exact(&mut body).await?;
        }
        Ok((status, body))
    }
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// What a stream of responses carried, by line. Watch events are one JSON line each
/// (`{"type":"ADDED","object":...}`), so each line is classified by how it starts: a
/// watch event (its type read from the line's head), the framing of chunked encoding
/// (`1a3\r\n`, `\r\n`), or anything else (headers, list bodies, other responses).
/// Counting whole lines rather than every `"type":"` avoids counting the
/// `{"type":"PodScheduled",...}` conditions inside gated pods.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    pub bytes: u64,
    pub events: u64,
    pub event_bytes: u64,
    pub bookmarks: u64,
    pub bookmark_bytes: u64,
    pub framing_bytes: u64,
    pub other_bytes: u64,
}

impl Tally {
    pub fn since(&self, before: &Tally) -> Tally {
        Tally {
            bytes: self.bytes - before.bytes,
            events: self.events - before.events,
            event_bytes: self.event_bytes - before.event_bytes,
            bookmarks: self.bookmarks - before.bookmarks,
            bookmark_bytes: self.bookmark_bytes - before.bookmark_bytes,
            framing_bytes: self.framing_bytes - before.framing_bytes,
            other_bytes: self.other_bytes - before.other_bytes,
        }
    }
}

const EVENT_HEAD: &[u8] = b"{\"type\":\"";

/// Splits one connection's bytes into lines and adds each to a shared tally.
pub struct LineCounter {
    tally: Arc<Mutex<Tally>>,
    head: Vec<u8>,
    len: u64,
}

impl LineCounter {
    pub fn new(tally: Arc<Mutex<Tally>>) -> LineCounter {
        LineCounter {
            tally,
            head: Vec::with_capacity(32),
            len: 0,
        }
    }

    pub fn feed(&mut self, mut bytes: &[u8]) {
        let mut tally = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        tally.bytes += bytes.len() as u64;
        while !bytes.is_empty() {
            let (line, rest, ended) = match bytes.iter().position(|b| *b == b'\n') {
                Some(i) => (&bytes[..=i], &bytes[i + 1..], true),
                None => (bytes, &[][..], false),
            };
            let room = 32usize.saturating_sub(self.head.len());
            self.head.extend_from_slice(&line[..line.len().min(room)]);
            self.len += line.len() as u64;
            if ended {
                classify(&mut tally, &self.head, self.len);
                self.head.clear();
                self.len = 0;
            }
            bytes = rest;
        }
    }
}

fn classify(tally: &mut Tally, head: &[u8], len: u64) {
    if let Some(kind) = head.strip_prefix(EVENT_HEAD) {
        if kind.starts_with(b"BOOKMARK\"") {
            tally.bookmarks += 1;
            tally.bookmark_bytes += len;
        } else {
            tally.events += 1;
            tally.event_bytes += len;
        }
        return;
    }
    let trimmed = head.strip_suffix(b"\r\n").unwrap_or(head);
    if len <= 12 && trimmed.iter().all(u8::is_ascii_hexdigit) {
        tally.framing_bytes += len;
    } else {
        tally.other_bytes += len;
    }
}

/// A TCP proxy on loopback that counts the bytes going back to the client.
pub struct Proxy {
    pub addr: SocketAddr,
    pub down: Arc<Mutex<Tally>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> io::Result<Proxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let down = Arc::new(Mutex::new(Tally::default()));
        let tally = down.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let tally = tally.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut server_read, mut server_write) = server.into_split();
                    let up = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                        let _ = server_write.shutdown().await;
                    });
                    let mut counter = LineCounter::new(tally);
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        match server_read.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                counter.feed(&buf[..n]);
                                if client_write.write_all(&buf[..n]).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = client_write.shutdown().await;
                    up.abort();
                });
            }
        });
        Ok(Proxy { addr, down, accept })
    }

    pub fn tally(&self) -> Tally {
        self.down.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// A raw WATCH (no client library) whose response stream is counted into a tally;
/// stops when dropped.
pub struct RawWatch {
    pub tally: Arc<Mutex<Tally>>,
    task: JoinHandle<()>,
}

impl RawWatch {
    pub async fn start(addr: SocketAddr, path_and_query: &str) -> io::Result<RawWatch> {
        let mut stream = TcpStream::connect(addr).await?;
        stream
            .write_all(
                format!(
                    "GET {path_and_query} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n"
                )
                .as_bytes(),
            )
            .await?;
        let tally = Arc::new(Mutex::new(Tally::default()));
        let mut counter = LineCounter::new(tally.clone());
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = stream.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                counter.feed(&buf[..n]);
            }
        });
        Ok(RawWatch { tally, task })
    }

    pub fn tally(&self) -> Tally {
        self.tally.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for RawWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Checks the line classifier on a known stream; the harness runs it before measuring
/// (a `harness = false` bench has no `#[test]`s).
pub fn self_check() {
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut c = LineCounter::new(tally.clone());
    let stream = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
        2a\r\n{\"type\":\"ADDED\",\"object\":{\"status\":{\"conditions\":[{\"type\":\"PodScheduled\"}]}}}\n\r\n\
        40\r\n{\"type\":\"BOOKMARK\",\"object\":{}}\n\r\n";
    for piece in stream.chunks(7) {
        c.feed(piece);
    }
    let t = tally.lock().unwrap().clone();
    assert_eq!(t.events, 1);
    assert_eq!(t.bookmarks, 1);
    assert_eq!(t.bytes, stream.len() as u64);
    assert_eq!(
        t.bytes,
        t.event_bytes + t.bookmark_bytes + t.framing_bytes + t.other_bytes
    );
    // The status line and two headers; the blank line after them is framing-shaped.
    assert_eq!(
        t.other_bytes,
        "HTTP/1.1 200 OK\r\n".len() as u64 + "transfer-encoding: chunked\r\n".len() as u64
    );
}
