//! Serving HTTP/1.1 with the bounds every local API of strata keeps: a cap on open
//! connections, a deadline for request heads (which also closes idle connections), a
//! write-stall timeout on the socket, an optional TLS handshake with its own deadline, and a
//! graceful stop that waits a bounded time. Request bodies are the handlers' to bound (see
//! `tier::api`): hyper reads them only as the handler asks.
//!
//! A listener whose service authenticates its callers ([`Limits::unauthenticated`]) keeps
//! connections that have not yet authenticated under a small cap and a deadline of their own,
//! so callers without the secret never hold the slots of those with it ([`Admission`]).
//!
//! Used by the tier API (TCP and Unix socket) and the metrics endpoint; each connection gets
//! its own service from `per_connection`, so a caller can attach per-connection state.

use crate::throttle::Throttle;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// The bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once (authenticated ones, when the service authenticates); on a
    /// listener without authentication, more wait in the kernel's accept queue.
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
    /// `Some` when the service authenticates its callers: the bounds of connections until
    /// then. `None`: every connection counts against `max_connections` from its accept.
    pub unauthenticated: Option<Unauthenticated>,
}

/// The bounds of connections whose caller has not yet authenticated.
#[derive(Debug, Clone, Copy)]
pub struct Unauthenticated {
    /// Such connections open at once; a new one closes the oldest (a caller holding the secret
    /// authenticates within a round trip or two, so the oldest is the slowest).
    pub max_connections: usize,
    /// Time from the accept to the authentication (TLS handshake, hello and first request
    /// included); a connection still unauthenticated then is closed.
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            header_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(60),
            handshake_timeout: Duration::from_secs(10),
            drain: Duration::from_secs(10),
            unauthenticated: None,
        }
    }
}

/// Refusals are logged at most once per this interval per listener and reason, with a count.
pub const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// Why a listener closed or refused a connection (the `reason` label of
/// `strata_http_rejected_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// A listener without authentication at its connection cap (the connection waits).
    Connections,
    /// The oldest unauthenticated connection, closed for a new one.
    UnauthenticatedCap,
    /// An unauthenticated connection at its deadline.
    UnauthenticatedDeadline,
    /// A caller that authenticated while every authenticated slot was taken.
    AuthenticatedCap,
}

impl Refusal {
    const ALL: [Refusal; 4] = [
        Refusal::Connections,
        Refusal::UnauthenticatedCap,
        Refusal::UnauthenticatedDeadline,
        Refusal::AuthenticatedCap,
    ];

    fn label(self) -> &'static str {
        match self {
            Refusal::Connections => "connections",
            Refusal::UnauthenticatedCap => "unauthenticated_cap",
            Refusal::UnauthenticatedDeadline => "unauthenticated_deadline",
            Refusal::AuthenticatedCap => "authenticated_cap",
        }
    }

    fn warn(self, listener: &'static str, limits: &Limits, count: u64) {
        let pre = limits.unauthenticated;
        let max_pre = pre.map_or(0, |p| p.max_connections);
        let deadline = pre.map_or(Duration::ZERO, |p| p.deadline);
        match self {
            Refusal::Connections => tracing::warn!(
                listener,
                max = limits.max_connections,
                count,
                "connection cap reached: new connections wait until one closes ({count} since the last line)"
            ),
            Refusal::UnauthenticatedCap => tracing::warn!(
                listener,
                max = max_pre,
                count,
                "more than {max_pre} unauthenticated connections: the oldest closed ({count} since the last line; callers without the secret, or a flood of connections)"
            ),
            Refusal::UnauthenticatedDeadline => tracing::warn!(
                listener,
                ?deadline,
                count,
                "unauthenticated connections closed at their deadline of {deadline:?} ({count} since the last line)"
            ),
            Refusal::AuthenticatedCap => tracing::warn!(
                listener,
                max = limits.max_connections,
                count,
                "all {} authenticated connection slots taken: a caller refused ({count} since the last line)",
                limits.max_connections
            ),
        }
    }
}

/// Counts refusals and logs them, throttled.
struct Refusals {
    listener: &'static str,
    limits: Limits,
    throttles: Mutex<[Throttle; 4]>,
}

impl Refusals {
    fn new(listener: &'static str, limits: Limits) -> Self {
        Self {
            listener,
            limits,
            throttles: Mutex::new(Refusal::ALL.map(|_| Throttle::new(WARN_INTERVAL))),
        }
    }

    fn count(&self, why: Refusal) {
        metrics::counter!("strata_http_rejected_total", "listener" => self.listener, "reason" => why.label()).increment(1);
        let line = lock(&self.throttles)[why as usize].event(Instant::now());
        if let Some(n) = line {
            why.warn(self.listener, &self.limits, n);
        }
    }

    /// Logs what was held back and is due.
    fn flush(&self) {
        let now = Instant::now();
        let due: Vec<(Refusal, u64)> = {
            let mut t = lock(&self.throttles);
            Refusal::ALL
                .iter()
                .filter_map(|&r| t[r as usize].flush(now).map(|n| (r, n)))
                .collect()
        };
        for (why, n) in due {
            why.warn(self.listener, &self.limits, n);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The unauthenticated connections of a listener by age (ids grow with each accept), each with
/// the token that closes it. Pure bookkeeping.
#[derive(Default)]
struct Waiting {
    next_id: u64,
    by_age: BTreeMap<u64, CancellationToken>,
}

impl Waiting {
    /// Registers a new connection; when that makes more than `cap`, the oldest leaves and its
    /// token is returned, to be cancelled.
    fn enter(&mut self, token: CancellationToken, cap: usize) -> (u64, Option<CancellationToken>) {
        let id = self.next_id;
        self.next_id += 1;
        self.by_age.insert(id, token);
        let evicted = if self.by_age.len() > cap.max(1) {
            self.by_age.pop_first().map(|(_, t)| t)
        } else {
            None
        };
        (id, evicted)
    }

    /// Removes a connection; false if it was not waiting (closed or admitted before).
    fn leave(&mut self, id: u64) -> bool {
        self.by_age.remove(&id).is_some()
    }
}

/// The state of a listener whose service authenticates its callers.
struct Gate {
    pre: Unauthenticated,
    max_authenticated: usize,
    authenticated: Arc<Semaphore>,
    waiting: Mutex<Waiting>,
    refusals: Arc<Refusals>,
}

impl Gate {
    /// Admits a new connection as unauthenticated, closing the oldest one when too many wait.
    fn enter(self: &Arc<Self>) -> Admission {
        let token = CancellationToken::new();
        let (id, evicted) = lock(&self.waiting).enter(token.clone(), self.pre.max_connections);
        if let Some(oldest) = evicted {
            oldest.cancel();
            self.refusals.count(Refusal::UnauthenticatedCap);
        }
        Admission(Arc::new(Standing {
            id,
            gate: Some(self.clone()),
            permit: Mutex::new(None),
            evicted: token,
        }))
    }
}

/// A connection's standing with its listener. The service of a listener that authenticates its
/// callers calls [`Admission::authenticated`] once a caller proved who it is.
#[derive(Clone)]
pub struct Admission(Arc<Standing>);

struct Standing {
    id: u64,
    /// `None` on a listener without authentication.
    gate: Option<Arc<Gate>>,
    /// The connection's slot among authenticated ones (from the accept, without a gate).
    permit: Mutex<Option<OwnedSemaphorePermit>>,
    /// Cancelled when newer unauthenticated connections push this one out.
    evicted: CancellationToken,
}

impl Drop for Standing {
    fn drop(&mut self) {
        if let Some(g) = &self.gate {
            lock(&g.waiting).leave(self.id);
        }
    }
}

/// Why [`Admission::authenticated`] failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum AdmissionError {
    #[error("the connection was closed before its caller authenticated")]
    Closed,
    #[error("all {0} connection slots for authenticated callers are taken")]
    Full(usize),
}

/// How an unauthenticated connection ended.
enum Ended {
    Evicted,
    Deadline,
}

impl Admission {
    /// A connection of a listener without authentication, holding its slot.
    fn open(permit: OwnedSemaphorePermit) -> Self {
        Self(Arc::new(Standing {
            id: 0,
            gate: None,
            permit: Mutex::new(Some(permit)),
            evicted: CancellationToken::new(),
        }))
    }

    /// Moves the connection from the unauthenticated cap to a slot of the authenticated ones,
    /// which lifts the deadline. Call it after each request whose caller proved who it is (all
    /// but the first are no-ops).
    pub fn authenticated(&self) -> Result<(), AdmissionError> {
        let s = &self.0;
        let Some(gate) = &s.gate else {
            return Ok(());
        };
        let mut permit = lock(&s.permit);
        if permit.is_some() {
            return Ok(());
        }
        // Refused, it stays under the unauthenticated cap and deadline.
        let Ok(slot) = gate.authenticated.clone().try_acquire_owned() else {
            gate.refusals.count(Refusal::AuthenticatedCap);
            return Err(AdmissionError::Full(gate.max_authenticated));
        };
        if !lock(&gate.waiting).leave(s.id) {
            return Err(AdmissionError::Closed);
        }
        *permit = Some(slot);
        Ok(())
    }

    /// Resolves when the connection must close for not having authenticated in time (or for a
    /// newer one); never once it has.
    async fn unauthenticated_end(&self) -> Ended {
        let s = &self.0;
        let Some(gate) = &s.gate else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = s.evicted.cancelled() => Ended::Evicted,
            _ = tokio::time::sleep(gate.pre.deadline) => {
                if lock(&gate.waiting).leave(s.id) {
                    Ended::Deadline
                } else {
                    // Authenticated (the token is then never cancelled), or evicted just now.
                    s.evicted.cancelled().await;
                    Ended::Evicted
                }
            }
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
/// `per_connection` builds each connection's service, given the connection's [`Admission`].
pub async fn serve<L, F, S>(
    name: &'static str,
    listener: L,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
    per_connection: F,
    stop: S,
) where
    L: Listener,
    F: Fn(Admission) -> Router + Send + 'static,
    S: Future<Output = ()> + Send,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(Refusals::new(name, limits));
    let gate = limits.unauthenticated.map(|pre| {
        Arc::new(Gate {
            pre,
            max_authenticated: limits.max_connections,
            authenticated: slots.clone(),
            waiting: Mutex::new(Waiting::default()),
            refusals: refusals.clone(),
        })
    });
    let (closing_tx, closing) = tokio::sync::watch::channel(false);
    // Every connection task holds a sender: when all are gone, every connection ended.
    let (live_tx, mut live_rx) = tokio::sync::mpsc::channel::<()>(1);
    let accept_loop = async {
        let mut flush = tokio::time::interval(WARN_INTERVAL);
        loop {
            // Without authentication a connection takes its slot before it is accepted; with
            // it, every connection is accepted and waits under the unauthenticated cap.
            let permit = match &gate {
                Some(_) => None,
                None => match slots.clone().try_acquire_owned() {
                    Ok(p) => Some(p),
                    Err(_) => {
                        refusals.count(Refusal::Connections);
                        match slots.clone().acquire_owned().await {
                            Ok(p) => Some(p),
                            Err(_) => return,
                        }
                    }
                },
            };
            let io = tokio::select! {
                r = listener.accept() => r,
                _ = flush.tick() => {
                    refusals.flush();
                    continue;
                }
            };
            let io = match io {
                Ok(io) => io,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(listener = name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let admission = match (&gate, permit) {
                (Some(g), _) => g.enter(),
                (None, Some(p)) => Admission::open(p),
                (None, None) => continue,
            };
            let service = per_connection(admission.clone());
            let tls = tls.clone();
            let closing = closing.clone();
            let live = live_tx.clone();
            let gate = gate.clone();
            tokio::spawn(async move {
                let _live = live;
                let work = async move {
                    // Only writes get a socket timeout: hyper keeps a read pending during a
                    // request (to notice a client hanging up), which a read timeout would cut
                    // short.
                    let mut io = tokio_io_timeout::TimeoutStream::new(io);
                    io.set_write_timeout(Some(limits.write_timeout));
                    let io = Box::pin(io);
                    match tls {
                        None => connection(io, service, limits, closing).await,
                        Some(acceptor) => {
                            match tokio::time::timeout(
                                limits.handshake_timeout,
                                acceptor.accept(io),
                            )
                            .await
                            {
                                Ok(Ok(tls_io)) => {
                                    connection(tls_io, service, limits, closing).await
                                }
                                Ok(Err(e)) => {
                                    tracing::debug!(listener = name, error = %e, "TLS handshake failed")
                                }
                                Err(_) => {
                                    tracing::debug!(listener = name, "TLS handshake timed out")
                                }
                            }
                        }
                    }
                };
                tokio::select! {
                    _ = work => {}
                    ended = admission.unauthenticated_end() => {
                        // Dropping the connection closes it, whatever it was waiting for.
                        if let (Ended::Deadline, Some(g)) = (ended, &gate) {
                            g.refusals.count(Refusal::UnauthenticatedDeadline);
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
    drop(live_tx);
    if tokio::time::timeout(limits.drain, live_rx.recv())
        .await
        .is_err()
    {
        tracing::warn!(
            listener = name,
            "requests still open {:?} after the stop; quitting anyway",
            limits.drain
        );
    }
    refusals.flush();
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn the_oldest_unauthenticated_connection_makes_room() {
        let mut w = Waiting::default();
        let tokens: Vec<CancellationToken> = (0..4).map(|_| CancellationToken::new()).collect();
        let (a, none) = w.enter(tokens[0].clone(), 2);
        assert!(none.is_none());
        let (b, none) = w.enter(tokens[1].clone(), 2);
        assert!(none.is_none());
        let (c, oldest) = w.enter(tokens[2].clone(), 2);
        oldest.expect("over the cap").cancel();
        assert!(tokens[0].is_cancelled() && !tokens[1].is_cancelled());
        assert!(!w.leave(a), "the evicted one is gone");
        assert!(w.leave(b), "b authenticated");
        assert!(!w.leave(b), "once");
        let (_, none) = w.enter(tokens[3].clone(), 2);
        assert!(none.is_none(), "b's place was free");
        assert!(w.leave(c));
        assert!(a < b && b < c, "ids grow with age");
    }

    /// A listener whose service authenticates on `GET /auth` and answers `GET /ping`.
    async fn authenticating(
        max: usize,
        pre: Unauthenticated,
    ) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let limits = Limits {
            max_connections: max,
            unauthenticated: Some(pre),
            ..Limits::default()
        };
        let service = |admission: Admission| {
            Router::new()
                .route(
                    "/auth",
                    axum::routing::get(move || {
                        let a = admission.clone();
                        async move {
                            match a.authenticated() {
                                Ok(()) => StatusCode::OK,
                                Err(AdmissionError::Full(_)) => StatusCode::SERVICE_UNAVAILABLE,
                                Err(AdmissionError::Closed) => StatusCode::REQUEST_TIMEOUT,
                            }
                        }
                    }),
                )
                .route("/ping", axum::routing::get(|| async { StatusCode::OK }))
        };
        let task = tokio::spawn(serve(
            "test",
            l,
            None,
            limits,
            service,
            std::future::pending(),
        ));
        (addr, task)
    }

    /// The status of `GET path` on `s`, or `None` when the server closed instead.
    async fn get(s: &mut tokio::net::TcpStream, path: &str) -> Option<u16> {
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match tokio::time::timeout(Duration::from_secs(10), s.read(&mut b)).await {
                Ok(Ok(1)) => head.push(b[0]),
                Ok(_) => return None,
                Err(_) => panic!("no answer to {path} for 10 s"),
            }
        }
        String::from_utf8_lossy(&head)
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
    }

    /// Whether the server closes `s` (within a generous bound).
    async fn closed_by_server(s: &mut tokio::net::TcpStream) -> bool {
        let mut b = [0u8; 64];
        loop {
            match tokio::time::timeout(Duration::from_secs(10), s.read(&mut b)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    }

    #[tokio::test]
    async fn unauthenticated_connections_close_at_their_deadline() {
        let deadline = Duration::from_millis(300);
        let (addr, task) = authenticating(
            4,
            Unauthenticated {
                max_connections: 8,
                deadline,
            },
        )
        .await;
        let connect = || tokio::net::TcpStream::connect(addr);
        // Silent, and dribbling a request head: both closed at the deadline.
        let mut silent = connect().await.unwrap();
        let mut dribbling = connect().await.unwrap();
        dribbling
            .write_all(b"GET /ping HTTP/1.1\r\nX: ")
            .await
            .unwrap();
        let dribble = async {
            for _ in 0..100 {
                if dribbling.write_all(b"a").await.is_err() {
                    break;
                }
                tokio::time::sleep(deadline / 10).await;
            }
            closed_by_server(&mut dribbling).await
        };
        // Answered, but not authenticated: still closed at the deadline.
        let mut pinging = connect().await.unwrap();
        assert_eq!(get(&mut pinging, "/ping").await, Some(200));
        // Authenticated: kept past the deadline.
        let mut authed = connect().await.unwrap();
        assert_eq!(get(&mut authed, "/auth").await, Some(200));
        let (silent_closed, dribbling_closed, pinging_closed) = tokio::join!(
            closed_by_server(&mut silent),
            dribble,
            closed_by_server(&mut pinging)
        );
        assert!(silent_closed && dribbling_closed && pinging_closed);
        tokio::time::sleep(2 * deadline).await;
        assert_eq!(get(&mut authed, "/ping").await, Some(200));
        task.abort();
    }

    #[tokio::test]
    async fn a_flood_of_unauthenticated_connections_never_locks_out_callers() {
        let (addr, task) = authenticating(
            1,
            Unauthenticated {
                max_connections: 2,
                deadline: Duration::from_secs(60),
            },
        )
        .await;
        let connect = || tokio::net::TcpStream::connect(addr);
        let mut old = connect().await.unwrap();
        let _b = connect().await.unwrap();
        // A third pushes the oldest out, and authenticates at once.
        let mut caller = connect().await.unwrap();
        assert!(closed_by_server(&mut old).await, "the oldest is closed");
        assert_eq!(get(&mut caller, "/auth").await, Some(200));
        // Its slot is not the unauthenticated ones': two more may wait beside it.
        let mut c = connect().await.unwrap();
        let mut d = connect().await.unwrap();
        assert_eq!(get(&mut c, "/ping").await, Some(200));
        assert_eq!(get(&mut d, "/ping").await, Some(200));
        // With every authenticated slot taken, a caller that authenticates is refused.
        assert_eq!(get(&mut c, "/auth").await, Some(503));
        drop(caller);
        // Once one is free again, it is taken.
        let mut ok = false;
        for _ in 0..100 {
            if get(&mut d, "/auth").await == Some(200) {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(ok, "the authenticated slot came back");
        task.abort();
    }
}
