//! A controllable TCP fault proxy between a client and a server (a relay,
//! a replica's upstream, PostgreSQL, Redis). Every accepted connection gets
//! a number and a [`Mode`] that can be changed at any time, per connection
//! or for all of them, and a mode for connections made later:
//!
//! - [`Mode::Pass`] forwards bytes as they come;
//! - [`Mode::Latency`] delays every chunk by a fixed time, both ways;
//! - [`Mode::Throttle`] forwards at most so many bytes per second from the
//!   server to the client (a slow reader: the rest stays in the kernel
//!   buffers, so the server sees backpressure, never an error);
//! - [`Mode::Blackhole`] forwards nothing either way and closes nothing (no
//!   FIN, no RST), the way a failed-over peer looks to an established
//!   connection. Bytes read while blackholed are held and forwarded, in
//!   order, if the connection passes again;
//! - [`Mode::Reset`] closes both sockets with an RST.
//!
//! The proxy's own kernel still ACKs what it receives, so a blackhole
//! cannot exercise `TCP_USER_TIMEOUT`; the SDK's HTTP/2 keepalive and
//! heartbeat watchdog are what it tests.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with one connection's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything.
    Pass,
    /// Forward everything, each chunk this much later.
    Latency(Duration),
    /// Forward server-to-client bytes at most this fast (bytes/s);
    /// client-to-server bytes pass.
    Throttle(u32),
    /// Forward nothing, close nothing.
    Blackhole,
    /// Close both sides with an RST (final).
    Reset,
}

/// A running proxy.
#[derive(Debug, Clone)]
pub struct Proxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Every connection's mode, by number.
    conns: Mutex<Vec<watch::Sender<Mode>>>,
    /// The mode a new connection starts in.
    new_mode: Mutex<Mode>,
    /// One-shot: the next client-to-server chunk holding these bytes is
    /// forwarded, then its connection is cut before any answer gets back.
    cut_after: Mutex<Option<Vec<u8>>>,
    /// Connections cut by `cut_after`.
    cuts: AtomicU64,
    /// Bytes forwarded server-to-client, all connections.
    down_bytes: AtomicU64,
}

impl Proxy {
    /// Starts a proxy to `upstream` on 127.0.0.1:0.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let p = Proxy {
            addr: listener.local_addr().expect("proxy addr"),
            shared: Arc::new(Shared {
                conns: Mutex::default(),
                new_mode: Mutex::new(Mode::Pass),
                cut_after: Mutex::default(),
                cuts: AtomicU64::new(0),
                down_bytes: AtomicU64::new(0),
            }),
        };
        let shared = p.shared.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mode = *shared.new_mode.lock().unwrap();
                let (tx, rx) = watch::channel(mode);
                shared.conns.lock().unwrap().push(tx);
                let shared = shared.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let cut = Arc::new(AtomicBool::new(false));
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let up =
                        Pump { dir: Dir::Up, mode: rx.clone(), cut: cut.clone(), shared: shared.clone() };
                    let down = Pump { dir: Dir::Down, mode: rx, cut, shared };
                    let (a, b) = tokio::join!(up.run(cr, sw), down.run(sr, cw));
                    if let (Some((cr, sw)), Some((sr, cw))) = (a, b) {
                        // Reset: both pumps handed their halves back.
                        for s in [cr.reunite(cw), sr.reunite(sw)].into_iter().flatten() {
                            reset(s);
                        }
                    }
                });
            }
        });
        p
    }

    /// `http://addr` of the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.conns.lock().unwrap().len() as u64
    }

    /// Sets connection `n`'s mode (numbered from 0 in accept order).
    pub fn set(&self, n: usize, mode: Mode) {
        let conns = self.shared.conns.lock().unwrap();
        conns[n].send_replace(mode);
    }

    /// Sets the mode of every connection open now.
    pub fn set_existing(&self, mode: Mode) {
        for c in self.shared.conns.lock().unwrap().iter() {
            c.send_replace(mode);
        }
    }

    /// Sets the mode connections made from now on start in.
    pub fn set_new(&self, mode: Mode) {
        *self.shared.new_mode.lock().unwrap() = mode;
    }

    /// Blackholes every connection open now; later ones pass.
    pub fn blackhole_existing(&self) {
        self.set_existing(Mode::Blackhole);
    }

    /// Blackholes every connection, open now or made later, until
    /// [`Proxy::pass_new`]: the upstream is unreachable without anything
    /// being refused or closed.
    pub fn blackhole_all(&self) {
        self.set_new(Mode::Blackhole);
        self.set_existing(Mode::Blackhole);
    }

    /// New connections pass again (blackholed ones stay blackholed).
    pub fn pass_new(&self) {
        self.set_new(Mode::Pass);
    }

    /// Arms a one-shot cut: the next chunk a client sends that contains
    /// `pattern` reaches the server, then that connection is closed before
    /// any answer is passed back (a commit whose outcome the client never
    /// hears).
    pub fn cut_after(&self, pattern: &[u8]) {
        *self.shared.cut_after.lock().unwrap() = Some(pattern.to_vec());
    }

    /// Connections cut by [`Proxy::cut_after`] so far.
    pub fn cuts(&self) -> u64 {
        self.shared.cuts.load(Ordering::SeqCst)
    }

    /// Bytes forwarded from the server to clients so far.
    pub fn bytes_down(&self) -> u64 {
        self.shared.down_bytes.load(Ordering::SeqCst)
    }
}

/// Closes a socket with an RST instead of a FIN.
fn reset(s: TcpStream) {
    let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
    drop(s);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

/// One direction of one connection.
struct Pump {
    dir: Dir,
    mode: watch::Receiver<Mode>,
    /// Set when this connection is cut by `cut_after`: both pumps stop.
    cut: Arc<AtomicBool>,
    shared: Arc<Shared>,
}

impl Pump {
    /// Forwards until either side closes (returns `None`) or the mode turns
    /// to `Reset` (returns the halves, to be reset together).
    async fn run(
        mut self,
        mut from: OwnedReadHalf,
        mut to: OwnedWriteHalf,
    ) -> Option<(OwnedReadHalf, OwnedWriteHalf)> {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let mode = self.settled().await;
            if mode == Mode::Reset {
                return Some((from, to));
            }
            let want = match (mode, self.dir) {
                // Small reads so the pacing is smooth; the rest waits in
                // the kernel's buffers.
                (Mode::Throttle(rate), Dir::Down) => (rate as usize / 10).clamp(1, buf.len()),
                _ => buf.len(),
            };
            let n = tokio::select! {
                r = from.read(&mut buf[..want]) => match r {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => n,
                },
                // A mode change while waiting: look again (a reset or a
                // blackhole applies at once, not after the next read).
                Ok(()) = self.mode.changed() => continue,
            };
            // Read while blackholed: hold the bytes until it passes again.
            let mode = self.settled().await;
            if mode == Mode::Reset {
                return Some((from, to));
            }
            if self.cut.load(Ordering::SeqCst) {
                return None;
            }
            let cutting = self.dir == Dir::Up && self.arm_cut(&buf[..n]);
            match mode {
                Mode::Latency(d) => tokio::time::sleep(d).await,
                Mode::Throttle(rate) if self.dir == Dir::Down => {
                    tokio::time::sleep(Duration::from_secs_f64(n as f64 / f64::from(rate.max(1)))).await;
                }
                _ => {}
            }
            if to.write_all(&buf[..n]).await.is_err() {
                return None;
            }
            if self.dir == Dir::Down {
                self.shared.down_bytes.fetch_add(n as u64, Ordering::SeqCst);
            }
            if cutting {
                // Let the server act on it, then close everything.
                tokio::time::sleep(Duration::from_millis(200)).await;
                return None;
            }
        }
    }

    /// The current mode once it is not `Blackhole` (waits while it is).
    async fn settled(&mut self) -> Mode {
        loop {
            let mode = *self.mode.borrow_and_update();
            if mode != Mode::Blackhole {
                return mode;
            }
            if self.mode.changed().await.is_err() {
                // The proxy is gone: stay blackholed until the runtime ends.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Whether this chunk trips the armed one-shot cut (and disarms it).
    fn arm_cut(&self, chunk: &[u8]) -> bool {
        let mut armed = self.shared.cut_after.lock().unwrap();
        if armed.as_ref().is_some_and(|p| chunk.windows(p.len()).any(|w| w == p.as_slice())) {
            *armed = None;
            // Before forwarding: the answer must not get back.
            self.cut.store(true, Ordering::SeqCst);
            self.shared.cuts.fetch_add(1, Ordering::SeqCst);
            return true;
        }
        false
    }
}
