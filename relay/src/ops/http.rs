//! A bounded HTTP/1.1 listener, for the relay's HTTP surfaces (the
//! metrics listener and its status page, the OFREP listener): connections
//! capped in all and per client address (more are closed at once and
//! counted as `limit_hits{limit="<name>_connections"}` and
//! `{limit="<name>_connections_per_address"}`), a deadline for each
//! request's headers, a lifetime per connection, TLS with the relay's
//! certificate when asked, and a failing `accept` (e.g. out of file
//! descriptors) backing off instead of spinning. Refusals are logged at
//! most 5 a second (the rest counted into the next line).

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::{Quota, RateLimiter};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
pub use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::ops::metrics::Metrics;

/// Who sent a request: the client's address, and whether the connection
/// is TLS.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    /// The client's address.
    pub peer: SocketAddr,
    /// Whether the request came over TLS.
    pub tls: bool,
}

/// A response body: whole ([`full`]), or streamed (server-sent events).
pub type Body = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

/// A whole response body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    use http_body_util::BodyExt;
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

/// What answers a listener's requests.
pub trait Handler: Clone + Send + Sync + 'static {
    /// The response to `req` from `caller`.
    fn call(
        &self,
        req: Request<Incoming>,
        caller: Caller,
    ) -> impl Future<Output = Result<Response<Body>, std::io::Error>> + Send;
}

/// A listener's bounds, and the name its limits are counted under.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// `limit_hits` label prefix and log name (`metrics`, `ofrep`).
    pub name: &'static str,
    /// Most connections open at once.
    pub connections: usize,
    /// Most connections open at once from one client address.
    pub per_address: usize,
    /// Time a connection has to send each request's headers (and, with
    /// keep-alive, between requests).
    pub header_timeout: Duration,
    /// Longest a connection stays open (its TLS handshake included).
    pub lifetime: Duration,
    /// Several requests per connection (browsers), or one.
    pub keep_alive: bool,
}

/// A TLS acceptor from the relay's certificate chain and key (PEM), with
/// the ring provider the rest of the relay uses.
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
            .map_err(|e| anyhow::anyhow!("TLS: {e}"))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| anyhow::anyhow!("TLS (tls-cert, tls-key): {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves `listener` with `handler` within `bounds` until `stop` fires.
pub async fn serve<H: Handler>(
    listener: TcpListener,
    bounds: Bounds,
    handler: H,
    metrics: Metrics,
    tls: Option<TlsAcceptor>,
    stop: CancellationToken,
) {
    let name = bounds.name;
    let permits = Arc::new(Semaphore::new(bounds.connections));
    let per_address = Arc::new(std::sync::Mutex::new(HashMap::<IpAddr, usize>::new()));
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
                    tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "{name} accept failed");
                    metrics.limit_hit(&format!("{name}_accept_error"));
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
            Err(_) => ("connections", bounds.connections, "too many open"),
            Ok(permit) => {
                match AddressSlot::take(&per_address, crate::ops::limit::client_of(peer.ip()), bounds) {
                    Some(from) => {
                        let (handler, metrics, tls, stop) =
                            (handler.clone(), metrics.clone(), tls.clone(), stop.clone());
                        tokio::spawn(async move {
                            let slots = (permit, from);
                            let lifetime = tokio::time::Instant::now() + bounds.lifetime;
                            match tls {
                                None => {
                                    serve_one(stream, peer, false, handler, bounds, lifetime, stop, slots)
                                        .await
                                }
                                Some(tls) => {
                                    match tokio::time::timeout_at(lifetime, tls.accept(stream)).await {
                                        Ok(Ok(stream)) => {
                                            serve_one(
                                                stream, peer, true, handler, bounds, lifetime, stop, slots,
                                            )
                                            .await
                                        }
                                        Ok(Err(e)) => {
                                            metrics.limit_hit(&format!("{name}_tls_handshake"));
                                            tracing::debug!(listener = name, %peer, error = %e, "TLS handshake failed");
                                        }
                                        Err(_) => {
                                            metrics.limit_hit(&format!("{name}_tls_handshake"));
                                            tracing::debug!(listener = name, %peer, "TLS handshake took too long");
                                        }
                                    }
                                }
                            }
                        });
                        continue;
                    }
                    None => {
                        ("connections_per_address", bounds.per_address, "too many open from this address")
                    }
                }
            }
        };
        let (limit, cap, why) = refused;
        metrics.limit_hit(&format!("{name}_{limit}"));
        if logs.check().is_ok() {
            tracing::warn!(%peer, limit = cap, unlogged, "{name} connection refused: {why}");
            unlogged = 0;
        } else {
            unlogged += 1;
        }
        drop(stream);
    }
}

/// Serves one connection, holding its places (`_slots`) until it ends (at
/// its lifetime, or when the listener stops).
#[allow(clippy::too_many_arguments)] // one connection's parts, passed on
async fn serve_one<S, H>(
    stream: S,
    peer: SocketAddr,
    tls: bool,
    handler: H,
    bounds: Bounds,
    lifetime: tokio::time::Instant,
    stop: CancellationToken,
    _slots: (tokio::sync::OwnedSemaphorePermit, AddressSlot),
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    let caller = Caller { peer, tls };
    let svc = service_fn(move |req: Request<Incoming>| {
        let handler = handler.clone();
        async move { handler.call(req, caller).await }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .keep_alive(bounds.keep_alive)
        .header_read_timeout(bounds.header_timeout)
        // Request heads of at most 16 KiB (hyper's default allows ~400 KB).
        .max_buf_size(16 * 1024)
        .serve_connection(TokioIo::new(stream), svc);
    let name = bounds.name;
    tokio::select! {
        ended = tokio::time::timeout_at(lifetime, conn) => match ended {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(listener = name, %peer, error = %e, "connection ended"),
            Err(_) => tracing::debug!(listener = name, %peer, "connection closed after its lifetime"),
        },
        _ = stop.cancelled() => {}
    }
}

/// A connection's place among those of its client address.
struct AddressSlot {
    open: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
    address: IpAddr,
}

impl AddressSlot {
    /// A place for one more connection from `address`, if it has fewer
    /// than the bounds allow.
    fn take(
        open: &Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
        address: IpAddr,
        bounds: Bounds,
    ) -> Option<AddressSlot> {
        let mut map = open.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(address).or_insert(0);
        if *n >= bounds.per_address {
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
