//! The metrics listener on its own port: `/metrics` and whatever [`Pages`]
//! adds (the status page), over plain HTTP/1.1 or, with `metrics-tls`,
//! over TLS with the relay's certificate. Bounded like the gRPC listener
//! (connections in all and per client address, one request per
//! connection, header and lifetime deadlines); rendering and pages run on
//! the blocking pool.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::{Quota, RateLimiter};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
pub use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::ops::metrics::Metrics;

/// Who asked for a page: the client's address, and whether the
/// connection is TLS.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    /// The client's address.
    pub peer: SocketAddr,
    /// Whether the request came over TLS.
    pub tls: bool,
}

/// What the metrics listener serves besides `/metrics`: the status page
/// (`crate::server::status_page`), and gauges computed from state just before a
/// scrape.
pub trait Pages: Send + Sync {
    /// Called before each `/metrics` rendering.
    fn before_scrape(&self);
    /// The response to `GET path` with `authorization` (the header's
    /// value) from `caller`, or `None`: not a page of its (404).
    fn get(&self, path: &str, authorization: Option<&str>, caller: Caller) -> Option<Response<Full<Bytes>>>;
}

/// A TLS acceptor for the metrics listener from the relay's certificate
/// chain and key (PEM), with the ring provider the rest of the relay uses.
pub fn tls_acceptor(cert_pem: &[u8], key_pem: &[u8]) -> anyhow::Result<TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("tls-cert: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| anyhow::anyhow!("tls-key: {e}"))?;
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| anyhow::anyhow!("metrics TLS: {e}"))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| anyhow::anyhow!("metrics TLS (tls-cert, tls-key): {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Most scrape connections open at once; more are closed on accept.
pub const MAX_METRICS_CONNECTIONS: usize = 32;
/// Most scrape connections open at once from one client address: idle or
/// slow clients on one host cannot hold every slot.
pub const MAX_METRICS_CONNECTIONS_PER_ADDRESS: usize = 4;
/// Time a scrape connection has to send its request headers.
pub const METRICS_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a scrape connection stays open, however slowly its client reads.
const METRICS_CONNECTION_LIFETIME: Duration = Duration::from_secs(10);

/// Serves `GET /metrics` on `listener` until `stop` fires. Bounded like the
/// gRPC listener: at most [`MAX_METRICS_CONNECTIONS`] connections, at most
/// [`MAX_METRICS_CONNECTIONS_PER_ADDRESS`] from one address (more are
/// closed at once and counted as `limit_hits{limit="metrics_connections"}`
/// or `{limit="metrics_connections_per_address"}`), one request per
/// connection (no keep-alive: an idle client holds no slot),
/// [`METRICS_HEADER_TIMEOUT`] to send the headers, ten seconds per
/// connection, and a failing `accept` (e.g. out of file descriptors) backs
/// off instead of spinning.
pub async fn serve(
    listener: TcpListener,
    metrics: Metrics,
    pages: Option<Arc<dyn Pages>>,
    tls: Option<TlsAcceptor>,
    stop: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(MAX_METRICS_CONNECTIONS));
    let per_address = Arc::new(std::sync::Mutex::new(HashMap::<IpAddr, usize>::new()));
    // Refusal lines: at most 5 a second (bursts of 10); the rest are
    // counted and reported with the next line.
    let logs = RateLimiter::direct(
        Quota::per_second(NonZeroU32::MIN.saturating_add(4)).allow_burst(NonZeroU32::MIN.saturating_add(9)),
    );
    let mut unlogged = 0u64;
    let mut backoff = Duration::from_millis(10);
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => {
                    backoff = Duration::from_millis(10);
                    a
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "metrics accept failed");
                    metrics.limit_hit("metrics_accept_error");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    continue;
                }
            },
        };
        let refused = match permits.clone().try_acquire_owned() {
            Err(_) => ("metrics_connections", MAX_METRICS_CONNECTIONS, "too many open"),
            Ok(permit) => match AddressSlot::take(&per_address, crate::ops::limit::client_of(peer.ip())) {
                Some(from) => {
                    let (metrics, pages, tls) = (metrics.clone(), pages.clone(), tls.clone());
                    tokio::spawn(async move {
                        let slots = (permit, from);
                        // The handshake counts against the connection's
                        // lifetime too.
                        let lifetime = tokio::time::Instant::now() + METRICS_CONNECTION_LIFETIME;
                        match tls {
                            None => serve_one(stream, peer, false, metrics, pages, lifetime, slots).await,
                            Some(tls) => match tokio::time::timeout_at(lifetime, tls.accept(stream)).await {
                                Ok(Ok(stream)) => {
                                    serve_one(stream, peer, true, metrics, pages, lifetime, slots).await
                                }
                                Ok(Err(e)) => {
                                    metrics.limit_hit("metrics_tls_handshake");
                                    tracing::debug!(%peer, error = %e, "metrics TLS handshake failed");
                                }
                                Err(_) => {
                                    metrics.limit_hit("metrics_tls_handshake");
                                    tracing::debug!(%peer, "metrics TLS handshake took too long");
                                }
                            },
                        }
                    });
                    continue;
                }
                None => (
                    "metrics_connections_per_address",
                    MAX_METRICS_CONNECTIONS_PER_ADDRESS,
                    "too many open from this address",
                ),
            },
        };
        let (limit, cap, why) = refused;
        metrics.limit_hit(limit);
        if logs.check().is_ok() {
            tracing::warn!(%peer, limit = cap, unlogged, "metrics connection refused: {why}");
            unlogged = 0;
        } else {
            unlogged += 1;
        }
        drop(stream);
    }
}

/// Serves one scrape connection, holding its places (`_slots`) until it
/// ends: one request, at most [`METRICS_CONNECTION_LIFETIME`].
async fn serve_one<S>(
    stream: S,
    peer: SocketAddr,
    tls: bool,
    metrics: Metrics,
    pages: Option<Arc<dyn Pages>>,
    lifetime: tokio::time::Instant,
    _slots: (tokio::sync::OwnedSemaphorePermit, AddressSlot),
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let caller = Caller { peer, tls };
    let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
        let metrics = metrics.clone();
        let pages = pages.clone();
        async move {
            let path = req.uri().path().to_owned();
            let auth = req
                .headers()
                .get(hyper::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            // Rendering and the pages walk state (the relay tree, usage):
            // on the blocking pool, never on the async workers.
            tokio::task::spawn_blocking(move || {
                if path == "/metrics" {
                    if let Some(p) = &pages {
                        p.before_scrape();
                    }
                    return Response::builder()
                        .header("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")
                        .body(Full::new(Bytes::from(metrics.render())))
                        .map_err(std::io::Error::other);
                }
                if let Some(resp) = pages.as_ref().and_then(|p| p.get(&path, auth.as_deref(), caller)) {
                    return Ok(resp);
                }
                Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .body(Full::new(Bytes::from_static(b"not found\n")))
                    .map_err(std::io::Error::other)
            })
            .await
            .map_err(std::io::Error::other)?
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .keep_alive(false)
        .header_read_timeout(METRICS_HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), svc);
    match tokio::time::timeout_at(lifetime, conn).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "metrics connection ended"),
        Err(_) => tracing::debug!(%peer, "metrics connection closed after its lifetime"),
    }
}

/// A scrape connection's place among those of its client address.
struct AddressSlot {
    open: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
    address: IpAddr,
}

impl AddressSlot {
    /// A place for one more connection from `address`, if it has fewer
    /// than [`MAX_METRICS_CONNECTIONS_PER_ADDRESS`] open.
    fn take(open: &Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>, address: IpAddr) -> Option<AddressSlot> {
        let mut map = open.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(address).or_insert(0);
        if *n >= MAX_METRICS_CONNECTIONS_PER_ADDRESS {
            return None;
        }
        *n += 1;
        Some(AddressSlot { open: open.clone(), address })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut map = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.address);
            }
        }
    }
}

/// Binds the metrics listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
