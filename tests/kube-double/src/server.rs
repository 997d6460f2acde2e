// The listener: accepts HTTP/1.1 connections on loopback, and can stop (closing the
// listener and aborting every open connection) and resume on the same address.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::answers::ResetConnection;
use crate::routes;
use crate::state::Shared;

pub struct Server {
    pub shared: Arc<Shared>,
    control: Mutex<Control>,
    /// Bumped on every stop: connections of an older epoch abort.
    epoch: watch::Sender<u64>,
}

/// Put in every request's extensions: set by a control route that aborts every
/// connection (a restore) so that its own connection survives to carry the answer,
/// which then closes it (`Connection: close`).
#[derive(Clone, Default)]
pub struct Spare(Arc<AtomicBool>);

impl Spare {
    pub fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn take(&self) -> bool {
        self.0.swap(false, Ordering::SeqCst)
    }
}

#[derive(Default)]
struct Control {
    accept: Option<JoinHandle<()>>,
    resume: Option<JoinHandle<()>>,
}

impl Server {
    pub fn new(shared: Arc<Shared>) -> Arc<Server> {
        let (epoch, _) = watch::channel(0);
        Arc::new(Server {
            shared,
            control: Mutex::new(Control::default()),
            epoch,
        })
    }

    fn control(&self) -> MutexGuard<'_, Control> {
        self.control.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts accepting on an already bound listener.
    pub fn serve(self: &Arc<Self>, listener: TcpListener) {
        let me = self.clone();
        let task = tokio::spawn(async move { me.accept_loop(listener).await });
        if let Some(old) = self.control().accept.replace(task) {
            old.abort();
        }
    }

    async fn accept_loop(self: Arc<Self>, listener: TcpListener) {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let reset = Arc::new(AtomicBool::new(false));
            let stream = Resettable {
                stream,
                reset: reset.clone(),
            };
            let me = self.clone();
            let mut epoch = self.epoch.subscribe();
            tokio::spawn(async move {
                let shared = me.clone();
                let spare = Spare::default();
                let mark = spare.clone();
                let svc = service_fn(move |mut req| {
                    let server = shared.clone();
                    let reset = reset.clone();
                    req.extensions_mut().insert(mark.clone());
                    async move {
                        let r = routes::handle(server, req).await;
                        if r.extensions().get::<ResetConnection>().is_some() {
                            // An error of the service: hyper drops the connection unanswered.
                            reset.store(true, Ordering::SeqCst);
                            return Err(io::Error::new(
                                io::ErrorKind::ConnectionReset,
                                "connection reset by fault injection",
                            ));
                        }
                        Ok(r)
                    }
                });
                let conn = http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), svc);
                tokio::pin!(conn);
                loop {
                    tokio::select! {
                        r = &mut conn => {
                            if let Err(e) = r {
                                tracing::debug!("connection ended: {e}");
                            }
                            break;
                        }
                        r = epoch.changed() => {
                            // Dropping `conn` aborts the connection and every request on it.
                            if r.is_err() || !spare.take() {
                                break;
                            }
                        }
                    }
                }
            });
        }
    }

    pub fn is_running(&self) -> bool {
        self.control()
            .accept
            .as_ref()
            .is_some_and(|t| !t.is_finished())
    }

    /// Closes the listener and aborts every open connection; state is kept.
    pub fn stop(&self) {
        let mut c = self.control();
        if let Some(t) = c.accept.take() {
            t.abort();
        }
        if let Some(t) = c.resume.take() {
            t.abort();
        }
        drop(c);
        self.epoch.send_modify(|e| *e += 1);
    }

    /// Aborts every open connection (an API server restart) but keeps listening.
    pub fn drop_connections(&self) {
        self.epoch.send_modify(|e| *e += 1);
    }

    /// Binds the same address again and accepts connections.
    pub async fn resume(self: &Arc<Self>) -> io::Result<()> {
        if let Some(pending) = self.control().resume.take() {
            pending.abort();
        }
        if self.is_running() {
            return Ok(());
        }
        let listener = bind_retrying(self.shared.addr).await?;
        self.serve(listener);
        Ok(())
    }

    /// Stops now and resumes after `d` in the background.
    pub fn down_for(self: &Arc<Self>, d: Duration) {
        self.stop();
        self.resume_after(d);
    }

    pub fn resume_after(self: &Arc<Self>, d: Duration) {
        let me = self.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep(d).await;
            let listener = match bind_retrying(me.shared.addr).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!("cannot listen on {} again: {e}", me.shared.addr);
                    return;
                }
            };
            let mut c = me.control();
            c.resume = None;
            drop(c);
            me.serve(listener);
        });
        if let Some(old) = self.control().resume.replace(task) {
            old.abort();
        }
    }
}

/// The port was just released by us; give the kernel a moment if it is still busy.
async fn bind_retrying(addr: std::net::SocketAddr) -> io::Result<TcpListener> {
    let mut last = None;
    for _ in 0..50 {
        match TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) => {
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("bind failed")))
}

/// An accepted connection that, once `reset` is set, is closed with `SO_LINGER` 0: the
/// client reads a reset (ECONNRESET), not an orderly end.
struct Resettable {
    stream: TcpStream,
    reset: Arc<AtomicBool>,
}

impl Drop for Resettable {
    fn drop(&mut self) {
        if self.reset.load(Ordering::SeqCst) {
            let _ = self.stream.set_zero_linger();
        }
    }
}

impl AsyncRead for Resettable {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Resettable {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
