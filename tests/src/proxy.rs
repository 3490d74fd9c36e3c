//! A TCP fault proxy between a client and a relay. `pass` forwards bytes;
//! `blackhole` freezes every connection open at that moment: nothing is
//! forwarded either way and nothing is closed (no FIN, no RST), the way a
//! failed-over peer looks to an established connection; connections made
//! afterwards pass normally. (Its kernel still ACKs, so it cannot exercise
//! TCP_USER_TIMEOUT; the watchdog and HTTP/2 keepalive are what it tests.)

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running proxy.
#[derive(Debug, Clone)]
pub struct Proxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    /// Connections numbered below this are frozen.
    frozen_below: Arc<AtomicU64>,
    next: Arc<AtomicU64>,
    /// While set, every connection, new ones included, is frozen.
    all_frozen: Arc<std::sync::atomic::AtomicBool>,
    /// One-shot: the next client-to-server chunk holding these bytes is
    /// forwarded, then its connection is cut before any answer gets back.
    cut_after: Arc<std::sync::Mutex<Option<Vec<u8>>>>,
    /// Connections cut by `cut_after`.
    cuts: Arc<AtomicU64>,
}

impl Proxy {
    /// Starts a proxy to `upstream` on 127.0.0.1:0.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let p = Proxy {
            addr: listener.local_addr().expect("proxy addr"),
            frozen_below: Arc::new(AtomicU64::new(0)),
            next: Arc::new(AtomicU64::new(0)),
            all_frozen: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            cut_after: Arc::default(),
            cuts: Arc::default(),
        };
        let (frozen, next, all) = (p.frozen_below.clone(), p.next.clone(), p.all_frozen.clone());
        let (cut_after, cuts) = (p.cut_after.clone(), p.cuts.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let id = next.fetch_add(1, Ordering::SeqCst);
                let (frozen, all) = (frozen.clone(), all.clone());
                let cut = Cut { pattern: cut_after.clone(), cuts: cuts.clone(), cut: Arc::default() };
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else { return };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let a = tokio::spawn(pump(cr, sw, id, frozen.clone(), all.clone(), Some(cut.clone())));
                    let b = tokio::spawn(pump(
                        sr,
                        cw,
                        id,
                        frozen,
                        all,
                        Some(Cut { pattern: Arc::default(), ..cut }),
                    ));
                    let _ = tokio::join!(a, b); // each pump ends on its own
                });
            }
        });
        p
    }

    /// `http://addr` of the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Freezes every connection open now; later ones pass.
    pub fn blackhole_existing(&self) {
        self.frozen_below.store(self.next.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// Freezes every connection, open now or made later, until
    /// [`Proxy::pass_new`]: the upstream is unreachable without anything
    /// being refused or closed.
    pub fn blackhole_all(&self) {
        self.blackhole_existing();
        self.all_frozen.store(true, Ordering::SeqCst);
    }

    /// New connections pass again (frozen ones stay frozen).
    pub fn pass_new(&self) {
        self.blackhole_existing();
        self.all_frozen.store(false, Ordering::SeqCst);
    }

    /// Arms a one-shot cut: the next chunk a client sends that contains
    /// `pattern` reaches the server, then that connection is closed before
    /// any answer is passed back (a commit whose outcome the client never
    /// hears).
    pub fn cut_after(&self, pattern: &[u8]) {
        *self.cut_after.lock().unwrap() = Some(pattern.to_vec());
    }

    /// Connections cut by [`Proxy::cut_after`] so far.
    pub fn cuts(&self) -> u64 {
        self.cuts.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.next.load(Ordering::SeqCst)
    }
}

/// The cut state of one connection, shared by its two pumps.
#[derive(Clone)]
struct Cut {
    /// The armed pattern (client-to-server pump only; empty for the other).
    pattern: Arc<std::sync::Mutex<Option<Vec<u8>>>>,
    cuts: Arc<AtomicU64>,
    /// Set when this connection is cut: both pumps stop.
    cut: Arc<std::sync::atomic::AtomicBool>,
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    id: u64,
    frozen_below: Arc<AtomicU64>,
    all: Arc<std::sync::atomic::AtomicBool>,
    cut: Option<Cut>,
) {
    if all.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if id < frozen_below.load(Ordering::SeqCst) || all.load(Ordering::SeqCst) {
            // Blackholed: hold both sockets open, forward nothing, forever
            // (the task ends when the test's runtime does).
            std::future::pending::<()>().await;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if id < frozen_below.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let mut cutting = false;
        if let Some(c) = &cut {
            if c.cut.load(Ordering::SeqCst) {
                return; // cut: nothing more passes, both halves close
            }
            let mut armed = c.pattern.lock().unwrap();
            if armed.as_ref().is_some_and(|p| buf[..n].windows(p.len()).any(|w| w == p.as_slice())) {
                *armed = None;
                // Before forwarding: the answer must not get back.
                c.cut.store(true, Ordering::SeqCst);
                c.cuts.fetch_add(1, Ordering::SeqCst);
                cutting = true;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        if cutting {
            // Let the server act on it, then close everything.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            return;
        }
    }
}
