//! The relay's listeners: the SDK-facing gRPC address (Sync, Replication,
//! health, and Admin unless it has its own), the optional Admin address,
//! and the metrics address; bound before anything is served, so a taken
//! port fails the start at once.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;

use crate::config::Config;
use crate::ops::metrics::Metrics;
use crate::stream::grpc::{SyncFirstLayer, SyncRoute};
use crate::stream::refusal::RefusalLayer;
use crate::stream::transport::{self, SocketOptions};

/// A started relay's addresses.
#[derive(Debug, Clone)]
pub(crate) struct Running {
    /// Bound gRPC address.
    pub grpc: SocketAddr,
    /// Bound metrics address.
    pub metrics: SocketAddr,
    /// Where the Admin API is served (`grpc` unless `admin-listen` is set).
    pub admin: SocketAddr,
    /// Bound OFREP address, when `ofrep-listen` is set.
    pub ofrep: Option<SocketAddr>,
}

/// The bound sockets.
pub(super) struct Listeners {
    pub grpc: tokio::net::TcpListener,
    pub admin: Option<tokio::net::TcpListener>,
    pub metrics: tokio::net::TcpListener,
    pub ofrep: Option<tokio::net::TcpListener>,
    pub options: SocketOptions,
    pub running: Running,
}

impl Listeners {
    /// Binds every address of the configuration.
    pub(super) async fn bind(cfg: &Config) -> anyhow::Result<Listeners> {
        let options = SocketOptions {
            backlog: cfg.listen.backlog,
            tcp_user_timeout: cfg.listen.tcp_user_timeout,
            keepalive_idle: cfg.listen.tcp_keepalive_idle,
            keepalive_interval: Duration::from_secs(5),
            keepalive_retries: 3,
        };
        let grpc = transport::bind(cfg.listen.grpc, &options)?;
        let admin = cfg.listen.admin.map(|a| transport::bind(a, &options)).transpose()?;
        let metrics = super::scrape::bind(cfg.listen.metrics).await?;
        let ofrep = match &cfg.ofrep {
            Some(o) => Some(
                tokio::net::TcpListener::bind(o.listen)
                    .await
                    .map_err(|e| anyhow::anyhow!("ofrep-listen {}: {e}", o.listen))?,
            ),
            None => None,
        };
        let running = Running {
            ofrep: ofrep.as_ref().map(tokio::net::TcpListener::local_addr).transpose()?,
            grpc: grpc.local_addr()?,
            metrics: metrics.local_addr()?,
            admin: match &admin {
                Some(l) => l.local_addr()?,
                None => grpc.local_addr()?,
            },
        };
        warn_if_plaintext(cfg, &running);
        Ok(Listeners { grpc, admin, metrics, ofrep, options, running })
    }
}

/// The relay's layers around tonic's router, outermost first: every
/// response's status counted, then the Sync service served ahead of the
/// router.
pub(super) type GrpcLayers =
    tower_layer::Stack<SyncFirstLayer, tower_layer::Stack<RefusalLayer, tower_layer::Identity>>;

/// A tonic server with the relay's settings for both gRPC listeners: TLS
/// (mutual when a client CA is set), the refusal layer, HTTP/2 keepalive
/// (when set),
/// the stream cap, `TCP_NODELAY`.
pub(super) fn grpc_server(
    cfg: &Config,
    refusals: &RefusalLayer,
    sync: Option<SyncRoute>,
) -> anyhow::Result<Server<GrpcLayers>> {
    let mut builder = Server::builder();
    if let Some(tls) = &cfg.listen.tls {
        let mut t = tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(&tls.cert, &tls.key));
        if let Some(ca) = &tls.client_ca {
            t = t.client_ca_root(tonic::transport::Certificate::from_pem(ca));
        }
        builder = builder.tls_config(t).map_err(|e| anyhow::anyhow!("TLS configuration: {e}"))?;
    }
    Ok(builder
        .layer(refusals.clone())
        .layer(SyncFirstLayer::new(sync))
        // Off unless set: each stream's heartbeat (every 15 s) with
        // TCP_USER_TIMEOUT, and TCP keepalive, fail a dead peer's
        // connection; a wedged one stops taking data and the behind
        // deadline closes it.
        .http2_keepalive_interval(cfg.listen.keepalive_interval)
        .http2_keepalive_timeout(Some(cfg.listen.keepalive_timeout))
        .max_concurrent_streams(Some(cfg.listen.max_concurrent_streams))
        .tcp_nodelay(true))
}

/// The admission control of one listener (`name`: `grpc` or `admin`).
pub(super) fn admission(
    cfg: &Config,
    name: &'static str,
    metrics: &Metrics,
) -> std::sync::Arc<transport::Admission> {
    transport::Admission::new(
        cfg.listen.connections,
        cfg.listen.connection_idle_timeout,
        name,
        cfg.listen.tls.is_none(),
        metrics.clone(),
    )
}

/// The gRPC servers, running until `stop`.
pub(super) struct Servers {
    pub tasks: Vec<JoinHandle<Result<(), tonic::transport::Error>>>,
    pub stop: CancellationToken,
}

impl Servers {
    /// Stops accepting, lets the calls in progress end (up to 5 s).
    pub(super) async fn stop(self) {
        self.stop.cancel();
        for server in self.tasks {
            match tokio::time::timeout(Duration::from_secs(5), server).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "gRPC server ended with an error"),
                Ok(Err(e)) => tracing::warn!(error = %e, "gRPC server task failed"),
                Err(_) => tracing::warn!("gRPC server did not stop within 5s; exiting anyway"),
            }
        }
    }
}

/// Warns, loudly, for every gRPC listener that is reachable from other
/// hosts without TLS: SDK keys and admin tokens would cross the network in
/// clear.
fn warn_if_plaintext(cfg: &Config, running: &Running) {
    if let Some(ofrep) = running.ofrep
        && cfg.listen.tls.is_none()
        && !ofrep.ip().is_loopback()
    {
        tracing::warn!(addr = %ofrep, "serving OFREP WITHOUT TLS on a non-loopback address: SDK keys cross the network in clear; set tls-cert and tls-key, or put a TLS proxy in front (docs/SECURITY.md)");
    }
    if !cfg.listen.metrics_tls && !running.metrics.ip().is_loopback() {
        tracing::warn!(addr = %running.metrics, remote_tokens = cfg.listen.status_page_remote_plaintext, "serving metrics and the status page WITHOUT TLS on a non-loopback address: the status page takes a token only from this host unless status-page-remote-plaintext is set; set metrics-tls (docs/SECURITY.md)");
    }
    if cfg.listen.tls.is_some() {
        return;
    }
    let mut exposed = vec![("grpc", running.grpc)];
    if cfg.listen.admin.is_some() {
        exposed.push(("admin", running.admin));
    }
    for (what, addr) in exposed {
        if !addr.ip().is_loopback() {
            tracing::warn!(listener = what, %addr, "serving gRPC WITHOUT TLS on a non-loopback address: SDK keys and admin tokens cross the network in clear; set tls-cert and tls-key (docs/SECURITY.md)");
        }
    }
}
