//! Serving HTTP/1.1 with the bounds every local API of strata keeps: a cap on open
//! connections, a deadline for request heads (which also closes idle connections), a
//! write-stall timeout on the socket, an optional TLS handshake with its own deadline, and a
//! graceful stop that waits a bounded time. Request bodies are the handlers' to bound (see
//! `tier::api`): hyper reads them only as the handler asks.
//!
//! Used by the tier API (TCP and Unix socket) and the metrics endpoint; each connection gets
//! its own service from `per_connection`, so a caller can attach per-connection state.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;

/// The bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; more wait in the kernel's accept queue.
    pub max_connections: usize,
    /// Time a client has to send a whole request head, counted from the end of the previous
    /// exchange: a connection left idle this long is closed.
    pub header_timeout: Duration,
    /// A response the client does not read for this long is abandoned with its connection.
    pub write_timeout: Duration,
    /// Time a TLS handshake may take.
    pub handshake_timeout: Duration,
    /// Time in-flight requests get to finish after a stop.
    pub drain: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            header_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(60),
            handshake_timeout: Duration::from_secs(10),
            drain: Duration::from_secs(10),
        }
    }
}

/// A source of connections: TCP or Unix listener.
pub trait Listener: Send + 'static {
    type Io: AsyncRead + AsyncWrite + Send + Unpin + 'static;
    fn accept(&self) -> impl Future<Output = std::io::Result<Self::Io>> + Send;
}

impl Listener for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept(&self) -> std::io::Result<Self::Io> {
        let (s, _) = tokio::net::TcpListener::accept(self).await?;
        // Answers go out as soon as they are written: no Nagle delay between a response's
        // head and its body on short request/response exchanges.
        let _ = s.set_nodelay(true);
        Ok(s)
    }
}

impl Listener for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&self) -> std::io::Result<Self::Io> {
        let (s, _) = tokio::net::UnixListener::accept(self).await?;
        Ok(s)
    }
}

/// Serves connections from `listener` until `stop` resolves, then lets open requests finish
/// for at most `limits.drain`. `name` labels logs and the `strata_http_rejected_total` metric.
pub async fn serve<L, F, S>(
    name: &'static str,
    listener: L,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
    per_connection: F,
    stop: S,
) where
    L: Listener,
    F: Fn() -> Router + Send + 'static,
    S: Future<Output = ()> + Send,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (closing_tx, closing) = tokio::sync::watch::channel(false);
    let accept_loop = async {
        let mut last_warned: Option<std::time::Instant> = None;
        loop {
            let permit = match slots.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => {
                    metrics::counter!("strata_http_rejected_total", "listener" => name, "reason" => "connections").increment(1);
                    if last_warned.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                        tracing::warn!(
                            listener = name,
                            max = limits.max_connections,
                            "connection cap reached: new connections wait until one closes"
                        );
                        last_warned = Some(std::time::Instant::now());
                    }
                    match slots.clone().acquire_owned().await {
                        Ok(p) => p,
                        Err(_) => return,
                    }
                }
            };
            let io = match listener.accept().await {
                Ok(io) => io,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(listener = name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let service = per_connection();
            let tls = tls.clone();
            let closing = closing.clone();
            tokio::spawn(async move {
                let _permit = permit;
                // Only writes get a socket timeout: hyper keeps a read pending during a request
                // (to notice a client hanging up), which a read timeout would cut short.
                let mut io = tokio_io_timeout::TimeoutStream::new(io);
                io.set_write_timeout(Some(limits.write_timeout));
                let io = Box::pin(io);
                match tls {
                    None => connection(io, service, limits, closing).await,
                    Some(acceptor) => {
                        match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(io))
                            .await
                        {
                            Ok(Ok(tls_io)) => connection(tls_io, service, limits, closing).await,
                            Ok(Err(e)) => {
                                tracing::debug!(listener = name, error = %e, "TLS handshake failed")
                            }
                            Err(_) => tracing::debug!(listener = name, "TLS handshake timed out"),
                        }
                    }
                }
            });
        }
    };
    tokio::select! {
        _ = accept_loop => {}
        _ = stop => {}
    }
    let _ = closing_tx.send(true);
    // Every slot back means every connection ended.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(limits.drain, slots.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(
            listener = name,
            "requests still open {:?} after the stop; quitting anyway",
            limits.drain
        );
    }
}

async fn connection<I>(
    io: I,
    service: Router,
    limits: Limits,
    mut closing: tokio::sync::watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
    let mut conn: Pin<Box<_>> = Box::pin(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            return;
        }
        _ = closing.wait_for(|c| *c) => {}
    }
    conn.as_mut().graceful_shutdown();
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}
