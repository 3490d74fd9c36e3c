//! The listening socket and accepted connections, with the socket options
//! tonic does not set under `serve_with_incoming` (TRANSPORT-NOTES.md): a
//! large listen backlog, TCP keepalive, `TCP_USER_TIMEOUT` (so writes stuck
//! to a dead peer fail in seconds, not ~15 minutes) and `TCP_NODELAY`. Each
//! connection carries a kill switch so the hub can cut off a subscriber
//! that stopped reading. The incoming stream is injectable: tests and
//! simulations may hand the server any stream of connections.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

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

/// Per-connection facts, visible to services in request extensions.
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo {
    /// Peer address.
    pub remote: Option<SocketAddr>,
    /// Cancelling this closes the connection.
    pub kill: CancellationToken,
}

/// An accepted connection that fails all I/O once its kill switch fires.
pub(crate) struct RelayIo {
    inner: TcpStream,
    info: ConnInfo,
    /// Polled only when the socket would block (polling the token takes a
    /// lock), so a kill wakes a blocked read or write.
    killed: Pin<Box<WaitForCancellationFutureOwned>>,
    /// Set once the kill fired.
    dead: bool,
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
    /// After the socket returned Pending: also wait for the kill switch.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.killed.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.dead = true;
                Poll::Ready(Err(aborted()))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

use std::future::Future;

impl AsyncRead for RelayIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.dead {
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
        if self.dead {
            return Poll::Ready(Err(aborted()));
        }
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.pending(cx),
            ready => ready,
        }
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.dead {
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

/// Accepted connections from `listener`, configured with `opts`. Accept
/// errors (e.g. out of file descriptors) are logged and retried after a
/// pause, never ending the stream.
pub(crate) fn incoming(
    listener: TcpListener,
    opts: SocketOptions,
) -> impl Stream<Item = Result<RelayIo, io::Error>> + Send + 'static {
    futures_util::stream::unfold(listener, move |listener| async move {
        loop {
            match listener.accept().await {
                Ok((stream, remote)) => {
                    if let Err(e) = configure(&stream, &opts) {
                        tracing::warn!(error = %e, client.addr = %remote, "setting socket options failed; closing");
                        continue;
                    }
                    let kill = CancellationToken::new();
                    let io = RelayIo {
                        inner: stream,
                        info: ConnInfo { remote: Some(remote), kill: kill.clone() },
                        killed: Box::pin(kill.cancelled_owned()),
                        dead: false,
                    };
                    return Some((Ok(io), listener));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed; retrying in 100 ms");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
}
