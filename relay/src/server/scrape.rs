//! The metrics listener on its own port: `/metrics` and whatever [`Pages`]
//! adds (the status page), over plain HTTP/1.1 or, with `metrics-tls`,
//! over TLS with the relay's certificate. Bounded by `ops::http` (32
//! connections, 4 per client address, one request per connection, header
//! and lifetime deadlines); rendering and pages run on the blocking pool.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::ops::http::{self, Body, Bounds, Handler, full};
pub use crate::ops::http::{Caller, TlsAcceptor, tls_acceptor};
use crate::ops::metrics::Metrics;

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

/// Most scrape connections open at once; more are closed on accept.
pub const MAX_METRICS_CONNECTIONS: usize = 32;
/// Most scrape connections open at once from one client address: idle or
/// slow clients on one host cannot hold every slot.
pub const MAX_METRICS_CONNECTIONS_PER_ADDRESS: usize = 4;
/// Time a scrape connection has to send its request headers.
pub const METRICS_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a scrape connection stays open, however slowly its client reads.
const METRICS_CONNECTION_LIFETIME: Duration = Duration::from_secs(10);

/// Serves `GET /metrics` (and the pages) on `listener` until `stop`
/// fires, within [`MAX_METRICS_CONNECTIONS`],
/// [`MAX_METRICS_CONNECTIONS_PER_ADDRESS`], one request per connection
/// (no keep-alive: an idle client holds no slot),
/// [`METRICS_HEADER_TIMEOUT`] to send the headers and ten seconds per
/// connection (refusals counted as `limit_hits{limit="metrics_…"}`).
pub async fn serve(
    listener: TcpListener,
    metrics: Metrics,
    pages: Option<Arc<dyn Pages>>,
    tls: Option<TlsAcceptor>,
    stop: CancellationToken,
) {
    let bounds = Bounds {
        name: "metrics",
        connections: MAX_METRICS_CONNECTIONS,
        per_address: MAX_METRICS_CONNECTIONS_PER_ADDRESS,
        header_timeout: METRICS_HEADER_TIMEOUT,
        lifetime: METRICS_CONNECTION_LIFETIME,
        keep_alive: false,
    };
    http::serve(listener, bounds, Scrape { metrics: metrics.clone(), pages }, metrics, tls, stop).await;
}

/// The metrics listener's requests.
#[derive(Clone)]
struct Scrape {
    metrics: Metrics,
    pages: Option<Arc<dyn Pages>>,
}

impl Handler for Scrape {
    fn call(
        &self,
        req: Request<Incoming>,
        caller: Caller,
    ) -> impl Future<Output = Result<Response<Body>, std::io::Error>> + Send {
        let (metrics, pages) = (self.metrics.clone(), self.pages.clone());
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
                        .body(full(metrics.render()))
                        .map_err(std::io::Error::other);
                }
                if let Some(resp) = pages.as_ref().and_then(|p| p.get(&path, auth.as_deref(), caller)) {
                    return Ok(resp.map(full_of));
                }
                Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .body(full(Bytes::from_static(b"not found\n")))
                    .map_err(std::io::Error::other)
            })
            .await
            .map_err(std::io::Error::other)?
        }
    }
}

/// A page's whole body as a listener body.
fn full_of(body: Full<Bytes>) -> Body {
    use http_body_util::BodyExt;
    body.map_err(|never| match never {}).boxed()
}

/// Binds the metrics listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
