//! The listening socket and accepted connections, with the socket options
//! tonic does not set under `serve_with_incoming` (TRANSPORT-NOTES.md): a
//! large listen backlog, TCP keepalive, `TCP_USER_TIMEOUT` (so writes stuck
//! to a dead peer fail in seconds, not ~15 minutes) and `TCP_NODELAY`. Each
//! connection carries a kill switch so the hub can cut off a subscriber
//! that stopped reading. The incoming stream is injectable: tests and
//! simulations may hand the server any stream of connections.
//!
//! Before any authentication, each listener caps its open connections
//! relay-wide and per client address ([`Admission`]): a connection past a
//! cap is counted (`flagstream_limit_hits_total{limit="connections"}` or
//! `{limit="connections_per_address"}`), logged (rate-limited), answered
//! (plaintext listeners) with `RESOURCE_EXHAUSTED` naming the option and a
//! retry hint on every request it sends within a second, and closed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Semaphore;

use futures_util::Stream;
use futures_util::task::AtomicWaker;
use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::error;
use crate::ops::limit::{ConnCaps, client_of};
use crate::ops::metrics::Metrics;

/// Socket settings for accepted connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SocketOptions {
    /// Listen backlog (tokio's default of 128 is too small for a
    /// reconnect storm).
    pub backlog: u32,
    /// Unacknowledged data older than this fails the connection.
    pub tcp_user_timeout: Duration,
    /// Idle time before TCP keepalive probes.
    pub keepalive_idle: Duration,
    /// Interval between keepalive probes.
    pub keepalive_interval: Duration,
    /// Probes before the connection is dropped.
    pub keepalive_retries: u32,
}

/// Binds a listener with the configured backlog.
pub(crate) fn bind(addr: SocketAddr, opts: &SocketOptions) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(opts.backlog as i32)?;
    TcpListener::from_std(socket.into())
}

fn configure(stream: &TcpStream, opts: &SocketOptions) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let sock = SockRef::from(stream);
    let ka = TcpKeepalive::new()
        .with_time(opts.keepalive_idle)
        .with_interval(opts.keepalive_interval)
        .with_retries(opts.keepalive_retries);
    sock.set_tcp_keepalive(&ka)?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    sock.set_tcp_user_timeout(Some(opts.tcp_user_timeout))?;
    Ok(())
}

/// How long a refused connection is answered before it is closed.
const REFUSAL_ANSWER: Duration = Duration::from_secs(1);
/// Refused connections answered at once; past that they are closed
/// without an answer (a flood costs no more than this).
const REFUSALS_ANSWERED: usize = 64;
/// Log lines about refused connections per second (bursts of twice that).
const REFUSAL_LOGS_PER_SEC: u32 = 5;

/// Open connections of one listener, held to its [`ConnCaps`].
pub(crate) struct Admission {
    caps: ConnCaps,
    /// How long a connection may carry no request before it is closed.
    idle: Duration,
    /// The listener's name in metrics and logs (`grpc`, `admin`).
    listener: &'static str,
    /// Whether a refused connection gets a gRPC answer (plaintext only: a
    /// TLS client cannot read one before the handshake).
    answer: bool,
    open: Mutex<Open>,
    metrics: Metrics,
    gauge: Gauge,
    logs: DefaultDirectRateLimiter,
    /// Refusal log lines the rate limit dropped since the last one logged.
    unlogged: AtomicU64,
    answering: Arc<Semaphore>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission").field("caps", &self.caps).field("listener", &self.listener).finish()
    }
}

/// Open connections: in total and per address (an entry per address with
/// at least one open connection, so at most `caps.total` entries).
#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// Milliseconds on a process-wide monotonic clock.
fn mono_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64
}

/// Closes `info`'s connection once it has carried no request for
/// `within` (from its accept, or from the end of its last request), counted
/// as `limit_hits{limit="connection_idle"}`: a client cannot hold a
/// connection slot by connecting and saying nothing, or by sending one
/// request and idling. Ends when the connection closes.
async fn idle_deadline(info: ConnInfo, within: Duration, admission: Arc<Admission>) {
    let within_ms = within.as_millis() as u64;
    let mut wait = within;
    loop {
        tokio::select! {
            _ = info.closed.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        let a = &info.activity;
        if a.open.load(Ordering::Acquire) > 0 {
            wait = within;
            continue;
        }
        let idle = mono_ms().saturating_sub(a.idle_since_ms.load(Ordering::Acquire));
        if idle < within_ms {
            wait = Duration::from_millis(within_ms - idle);
            continue;
        }
        admission.metrics.limit_hit("connection_idle");
        tracing::debug!(listener = admission.listener, client.addr = ?info.remote, idle_ms = idle, "no request on the connection for the idle timeout: closing it");
        info.kill.fire();
        return;
    }
}

/// Requests open on one connection, and since when it has had none.
#[derive(Debug)]
pub(crate) struct Activity {
    open: AtomicUsize,
    idle_since_ms: AtomicU64,
}

/// One request open on a connection, for as long as it is held.
pub(crate) struct Request(Arc<Activity>);

impl Drop for Request {
    fn drop(&mut self) {
        // Stamp before the count drops, so the deadline never sees an idle
        // connection with a stale stamp.
        self.0.idle_since_ms.store(mono_ms(), Ordering::Release);
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's place under its listener's caps, freed when dropped.
pub(crate) struct Slot {
    admission: Arc<Admission>,
    address: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.admission.open.lock().unwrap_or_else(|p| p.into_inner());
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.by_address.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                open.by_address.remove(&self.address);
            }
        }
        drop(open);
        self.admission.gauge.dec();
    }
}

impl Admission {
    /// The caps of the listener named `listener`; a connection with no
    /// request for `idle` is closed; `answer`: refused connections get a
    /// gRPC status (plaintext listeners).
    pub(crate) fn new(
        caps: ConnCaps,
        idle: Duration,
        listener: &'static str,
        answer: bool,
        metrics: Metrics,
    ) -> Arc<Admission> {
        let gauge = metrics.connections.get_or_create(&vec![("listener", listener.to_owned())]).clone();
        let per_sec = NonZeroU32::new(REFUSAL_LOGS_PER_SEC).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(REFUSAL_LOGS_PER_SEC * 2).unwrap_or(NonZeroU32::MIN);
        Arc::new(Admission {
            caps,
            idle,
            listener,
            answer,
            open: Mutex::new(Open::default()),
            metrics,
            gauge,
            logs: RateLimiter::direct(Quota::per_second(per_sec).allow_burst(burst)),
            unlogged: AtomicU64::new(0),
            answering: Arc::new(Semaphore::new(REFUSALS_ANSWERED)),
        })
    }

    /// A place for a connection from `address`, or the refusal: the
    /// limit's name, what it allows, and the option that sets it.
    fn admit(self: &Arc<Self>, address: IpAddr) -> Result<Slot, (&'static str, usize, &'static str)> {
        let address = client_of(address);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.total >= self.caps.total {
            return Err(("connections", self.caps.total, "max-connections"));
        }
        let from = open.by_address.entry(address).or_insert(0);
        if *from >= self.caps.per_address {
            return Err(("connections_per_address", self.caps.per_address, "max-connections-per-address"));
        }
        *from += 1;
        open.total += 1;
        drop(open);
        self.gauge.inc();
        Ok(Slot { admission: self.clone(), address })
    }

    /// Counts, logs (rate-limited) and answers a refused connection.
    fn refuse(
        &self,
        stream: TcpStream,
        remote: SocketAddr,
        (limit, cap, option): (&'static str, usize, &'static str),
    ) {
        self.metrics.limit_hit(limit);
        if self.logs.check().is_ok() {
            let unlogged = self.unlogged.swap(0, Ordering::Relaxed);
            tracing::warn!(listener = self.listener, client.addr = %remote, limit = cap, unlogged, "connection refused: {option} ({cap}) reached");
        } else {
            self.unlogged.fetch_add(1, Ordering::Relaxed);
        }
        let Some(permit) = self.answer.then(|| self.answering.clone().try_acquire_owned().ok()).flatten()
        else {
            return; // closed unanswered when dropped
        };
        let message = format!("relay connection limit reached: {option} is {cap}");
        tokio::spawn(async move {
            let _permit = permit;
            let svc = hyper::service::service_fn(move |_req: http::Request<hyper::body::Incoming>| {
                let delay = rand::Rng::random_range(&mut rand::rng(), 1_000..=5_000);
                let status = error::retry_later(&message, delay);
                async move { Ok::<_, Infallible>(status.into_http::<tonic::body::Body>()) }
            });
            let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .serve_connection(TokioIo::new(stream), svc);
            // Whatever the client does, the connection ends within the
            // answer time; its outcome is of no interest (already counted).
            if let Ok(Err(e)) = tokio::time::timeout(REFUSAL_ANSWER, conn).await {
                tracing::debug!(client.addr = %remote, error = %e, "refused connection ended");
            }
        });
    }
}

/// Per-connection facts, visible to services in request extensions.
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo {
    /// Peer address.
    pub remote: Option<SocketAddr>,
    /// Firing this closes the connection.
    pub kill: Arc<KillSwitch>,
    /// Its requests, for the idle deadline.
    pub activity: Arc<Activity>,
    /// Cancelled when the connection is dropped (ends its idle deadline).
    pub closed: CancellationToken,
}

impl ConnInfo {
    /// Counts a request on this connection until the returned guard is
    /// dropped (with the request's response): a connection with no request
    /// open for the idle timeout is closed.
    pub(crate) fn request(&self) -> Request {
        self.activity.open.fetch_add(1, Ordering::AcqRel);
        Request(self.activity.clone())
    }
}

/// Cuts one connection off: fired by the hub (a subscriber past its send
/// or behind deadline) and by the idle deadline; every read and write of
/// the connection that would block waits on it too. Registering the
/// connection's task is a compare-and-swap: a cancellation token would
/// take a mutex on every such wait, i.e. on every delivery to a
/// subscriber on a connection of its own (2.6 % of the relay's CPU at
/// 10,000 connections, docs/BENCHMARKS.md "Fan-out at one connection per
/// subscriber").
#[derive(Debug, Default)]
pub(crate) struct KillSwitch {
    fired: AtomicBool,
    /// The connection's task (one task drives a connection's reads and
    /// writes, TLS included).
    waker: AtomicWaker,
}

impl KillSwitch {
    /// Closes the connection: its next (or current, blocked) read or write
    /// fails with `ConnectionAborted`.
    pub(crate) fn fire(&self) {
        self.fired.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Whether [`KillSwitch::fire`] was called.
    pub(crate) fn is_fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }

    /// Ready once fired; registers the task first, so a fire in between is
    /// not missed.
    fn poll_fired(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.waker.register(cx.waker());
        if self.is_fired() { Poll::Ready(()) } else { Poll::Pending }
    }
}

/// An accepted connection that fails all I/O once its kill switch fires.
///
/// It does not offer vectored writes, on purpose: without them h2 copies
/// a DATA payload of under 1 KiB into its write buffer, where the deltas
/// of many streams on one connection share a single socket write; with
/// them it chains every payload over 256 bytes as the one frame in
/// flight and writes it on its own (h2 `codec::framed_write`).
pub(crate) struct RelayIo {
    inner: TcpStream,
    info: ConnInfo,
    /// Its place under the listener's connection caps.
    _slot: Slot,
}

impl Drop for RelayIo {
    fn drop(&mut self) {
        self.info.closed.cancel();
        // `ConnInfo` clones (a subscriber's record, request extensions)
        // can outlive the connection: they must not keep its task alive.
        drop(self.info.kill.waker.take());
    }
}

impl std::fmt::Debug for RelayIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayIo").field("info", &self.info).finish()
    }
}

fn aborted() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "connection cut off by the relay")
}

impl RelayIo {
    /// Whether the kill switch fired: checked before every read and write
    /// (an atomic load), so a connection whose socket never blocks, e.g. a
    /// peer that keeps reading, is cut off too.
    fn is_dead(&self) -> bool {
        self.info.kill.is_fired()
    }

    /// After the socket returned Pending: also wait for the kill switch.
    fn pending<T>(&self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.info.kill.poll_fired(cx) {
            Poll::Ready(()) => Poll::Ready(Err(aborted())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for RelayIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.is_dead() {
            return Poll::Ready(Err(aborted()));
        }
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Pending => self.pending(cx),
            ready => ready,
        }
    }
}

impl AsyncWrite for RelayIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.is_dead() {
            return Poll::Ready(Err(aborted()));
        }
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.pending(cx),
            ready => ready,
        }
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.is_dead() {
            return Poll::Ready(Err(aborted()));
        }
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.pending(cx),
            ready => ready,
        }
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for RelayIo {
    type ConnectInfo = ConnInfo;
    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

/// Accepted connections from `listener`, configured with `opts`, within
/// the caps of `admission` (connections past them are refused, see
/// [`Admission`]). Accept errors (e.g. out of file descriptors) are logged
/// and retried after a pause, never ending the stream.
pub(crate) fn incoming(
    listener: TcpListener,
    opts: SocketOptions,
    admission: Arc<Admission>,
) -> impl Stream<Item = Result<RelayIo, io::Error>> + Send + 'static {
    futures_util::stream::unfold(listener, move |listener| {
        let admission = admission.clone();
        async move {
            loop {
                match listener.accept().await {
                    Ok((stream, remote)) => {
                        let slot = match admission.admit(remote.ip()) {
                            Ok(slot) => slot,
                            Err(refused) => {
                                admission.refuse(stream, remote, refused);
                                continue;
                            }
                        };
                        if let Err(e) = configure(&stream, &opts) {
                            tracing::warn!(error = %e, client.addr = %remote, "setting socket options failed; closing");
                            continue;
                        }
                        let info = ConnInfo {
                            remote: Some(remote),
                            kill: Arc::new(KillSwitch::default()),
                            activity: Arc::new(Activity {
                                open: AtomicUsize::new(0),
                                idle_since_ms: AtomicU64::new(mono_ms()),
                            }),
                            closed: CancellationToken::new(),
                        };
                        tokio::spawn(idle_deadline(info.clone(), admission.idle, admission.clone()));
                        let io = RelayIo { inner: stream, info, _slot: slot };
                        return Some((Ok(io), listener));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed; retrying in 100 ms");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::task::{ArcWake, waker};

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl ArcWake for Count {
        fn wake_by_ref(arc_self: &Arc<Self>) {
            arc_self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_kill_wakes_the_waiting_connection_and_is_never_missed() {
        let count = Arc::new(Count::default());
        let w = waker(count.clone());
        let mut cx = Context::from_waker(&w);

        let kill = KillSwitch::default();
        assert!(kill.poll_fired(&mut cx).is_pending());
        kill.fire();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the waiting task is woken");
        assert!(kill.poll_fired(&mut cx).is_ready());
        assert!(kill.is_fired(), "a fired switch stays fired");

        // Fired before anyone waits: the first wait sees it.
        let early = KillSwitch::default();
        early.fire();
        assert!(early.poll_fired(&mut cx).is_ready());
    }
}
