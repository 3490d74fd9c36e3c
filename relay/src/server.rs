//! Starting and stopping a relay: open the store, seed the demo, bind the
//! listeners, serve gRPC (Sync, Admin, health) and metrics, then on SIGTERM
//! or SIGINT drain: NOT_SERVING, ask subscribers to reconnect elsewhere with
//! jitter, wait up to the grace period, flush, exit.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flagstream::Limits;
use flagstream_proto::v1::admin_server::AdminServer;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;

use crate::access::Tokens;
use crate::admin::AdminService;
use crate::auth::AdminAuth;
use crate::config::Config;
use crate::config::StoreUrl;
use crate::grpc::SyncRoute;
use crate::hub::{Hub, HubLimits};
use crate::metrics::Metrics;
use crate::promote::ROLE_SETTING;
use crate::quota::Quotas;
use crate::refusal::RefusalLayer;
use crate::replication::ReplicationService;
use crate::secret;
use crate::store::postgres::PostgresBackend;
use crate::store::sled::SledBackend;
use crate::store::{Backend, Retention, Source as StoreSource, Store};
use crate::subscribe::{StreamConfig, SyncService};
use crate::transport::{self, SocketOptions};
use flagstream_proto::v1::replication_server::ReplicationServer;

/// Largest admin request (must exceed the 3 MiB segment limit).
const MAX_ADMIN_REQUEST: usize = 8 << 20;
/// Largest message the relay sends: a chunk bound or one large item.
const MAX_RESPONSE: usize = 8 << 20;
/// Largest catalog sent (every environment's key hashes and every token):
/// ~100 bytes a key or token, so hundreds of thousands fit.
const MAX_CATALOG: usize = 64 << 20;

/// A started relay's addresses and its stop switch.
#[derive(Debug, Clone)]
pub(crate) struct Running {
    /// Bound gRPC address.
    pub grpc: SocketAddr,
    /// Bound metrics address.
    pub metrics: SocketAddr,
    /// Where the Admin API is served (`grpc` unless `admin-listen` is set).
    pub admin: SocketAddr,
}

/// Runs a relay until SIGTERM/SIGINT, then drains and returns. With
/// `demo`, also runs the live demo, changing a flag every `demo` period.
pub(crate) async fn run(cfg: Config, demo: Option<Duration>) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    let signal = stop.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        signal.cancel();
    });
    serve(cfg, stop, demo, |r| {
        println!("flagstream-relay listening grpc={} metrics={} admin={}", r.grpc, r.metrics, r.admin);
        // Tests and scripts read this line; make sure it is out.
        std::io::stdout().flush()
    })
    .await
}

/// Once a second: SDK keys whose rotation grace period is over are removed
/// and their open streams end with UNAUTHENTICATED (new Subscribe calls
/// are refused from the moment of expiry).
async fn expire_keys(store: Store, hub: Arc<Hub>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        for (env, id) in store.expire_sdk_keys().await {
            hub.end_key(&env, &id, "expired (its rotation grace period is over)");
        }
    }
}

/// Every minute: rate buckets of keys not seen lately are forgotten.
async fn prune_quotas(quotas: Arc<Quotas>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => quotas.prune(),
        }
    }
}

/// On SIGHUP: re-reads the configuration (command line, environment and
/// the `--config` file, as at start) and applies the quota settings; a bad
/// file is logged and changes nothing. Other settings need a restart.
async fn reload_on_sighup(
    source: Option<crate::config::Options>,
    store: Store,
    quotas: Arc<Quotas>,
    hub: Arc<Hub>,
) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGHUP; quotas cannot be reloaded");
                return;
            }
        };
        while hup.recv().await.is_some() {
            let Some(options) = source.clone() else { continue };
            match options.resolve() {
                Ok(cfg) => {
                    quotas.reload(cfg.quotas);
                    store.set_size_quota(cfg.quotas.sizes());
                    hub.set_subscriber_quota(cfg.quotas.subscribers);
                    tracing::info!(quotas = ?cfg.quotas, "SIGHUP: configuration reloaded (quotas applied; other settings need a restart)");
                }
                Err(e) => {
                    tracing::error!(error = %e, "SIGHUP: configuration not reloaded; the quotas in force stay")
                }
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (source, store, quotas, hub);
}

/// Sets health SERVING once `ready` (unless the relay is draining by then).
async fn serve_when_ready(
    mut ready: tokio::sync::watch::Receiver<bool>,
    health: tonic_health::server::HealthReporter,
    hub: Arc<Hub>,
) {
    if ready.wait_for(|r| *r).await.is_err() || hub.is_draining() {
        return;
    }
    health.set_serving::<SyncRoute>().await;
    health.set_service_status("", tonic_health::ServingStatus::Serving).await;
    tracing::info!("ready: health SERVING");
}

/// The role a data directory was made for (`role` setting): a primary's
/// store never becomes a replica's (its audit log and history would be
/// overwritten), and a replica's becomes a primary only by `promote`.
async fn check_role(
    backend: &dyn Backend,
    source: &StoreSource,
    dir: &std::path::Path,
) -> anyhow::Result<()> {
    let want = match source {
        StoreSource::Primary => "primary",
        StoreSource::Replica { .. } => "replica",
        // The database is every relay's; there is no local role to guard.
        StoreSource::Shared => return Ok(()),
    };
    let have = backend.setting(ROLE_SETTING).await?;
    match have.as_deref() {
        None => {
            // A new store, or one from before roles were recorded (always a
            // primary's).
            // Every primary's store holds its bootstrap token.
            let legacy = !backend.tokens().await?.is_empty();
            if legacy && want == "replica" {
                anyhow::bail!(
                    "{} holds a primary's store; a replica needs a data directory of its own",
                    dir.display()
                );
            }
            backend.put_setting(ROLE_SETTING, want.to_owned()).await?;
            Ok(())
        }
        Some(r) if r == want => Ok(()),
        Some("replica") => anyhow::bail!(
            "{} holds a replica's store; to make it the primary run `flagstream-relay promote --data-dir {}` first (docs/OPERATIONS.md, promotion)",
            dir.display(),
            dir.display()
        ),
        Some(r) => anyhow::bail!(
            "{} holds a {r}'s store; a replica needs a data directory of its own",
            dir.display()
        ),
    }
}

/// A primary's sled store opened without its commit marks file (restored
/// from a backup with the file deleted, or accepted short after the marks
/// refused it: OPERATIONS.md §2): revisions after its head may have been
/// served, so every environment gets a new epoch (its revision continues)
/// and every subscriber resyncs once with a snapshot, never mistaking the
/// old revision numbers for new ones. A new data directory has nothing to
/// renew.
async fn restored_epochs(backend: &dyn Backend, metrics: &Metrics) -> anyhow::Result<()> {
    for r in crate::promote::new_epochs(backend, false).await? {
        metrics.limit_hit("history_lost");
        tracing::warn!(env = %r.name, revision = r.revision, old_epoch = %r.old, new_epoch = %r.new,
            "the data directory has no commit marks (restored, or accepted short): a new epoch; every subscriber resynchronises with a snapshot");
    }
    Ok(())
}

/// Warns, loudly, for every gRPC listener that is reachable from other
/// hosts without TLS: SDK keys and admin tokens would cross the network in
/// clear.
fn warn_if_plaintext(cfg: &Config, running: &Running) {
    if !cfg.metrics_tls && !running.metrics.ip().is_loopback() {
        tracing::warn!(addr = %running.metrics, remote_tokens = cfg.status_page_remote_plaintext, "serving metrics and the status page WITHOUT TLS on a non-loopback address: the status page takes a token only from this host unless status-page-remote-plaintext is set; set metrics-tls (docs/SECURITY.md)");
    }
    if cfg.tls.is_some() {
        return;
    }
    let mut exposed = vec![("grpc", running.grpc)];
    if cfg.admin_listen.is_some() {
        exposed.push(("admin", running.admin));
    }
    for (what, addr) in exposed {
        if !addr.ip().is_loopback() {
            tracing::warn!(listener = what, %addr, "serving gRPC WITHOUT TLS on a non-loopback address: SDK keys and admin tokens cross the network in clear; set tls-cert and tls-key (docs/SECURITY.md)");
        }
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM: draining"),
                    _ = int.recv() => tracing::info!("SIGINT: draining"),
                }
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(error = %e, "cannot listen for signals; stop with SIGKILL");
                std::future::pending::<()>().await;
            }
        }
    }
    #[cfg(not(unix))]
    if let Err(e) = tokio::signal::ctrl_c().await {
        tracing::error!(error = %e, "cannot listen for ctrl-c");
        std::future::pending::<()>().await;
    }
}

/// Runs a relay until `stop` fires; `started` is told the bound addresses.
pub(crate) async fn serve(
    cfg: Config,
    stop: CancellationToken,
    demo: Option<Duration>,
    started: impl FnOnce(&Running) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    crate::permission::create_private_dir(&cfg.data_dir)?;
    let metrics = Metrics::new();
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter.set_not_serving::<SyncRoute>().await;
    health_reporter.set_service_status("", tonic_health::ServingStatus::NotServing).await;

    let retention = Retention {
        revisions: cfg.changelog_revisions,
        bytes: cfg.changelog_bytes,
        audit_revisions: cfg.audit_revisions,
    };
    let mut marks_missing = false;
    let (backend, postgres): (Arc<dyn Backend>, _) = match &cfg.store {
        StoreUrl::Sled => {
            let sled = SledBackend::open_with_cache(&cfg.data_dir.join("db"), cfg.sled_cache_bytes)?;
            marks_missing = sled.marks_missing();
            (Arc::new(sled), None)
        }
        StoreUrl::Postgres(url) => {
            let pg = PostgresBackend::connect(url.expose(), metrics.clone()).await.map_err(|e| {
                anyhow::anyhow!("the PostgreSQL store: {}", flagstream::follow::error_chain(&e))
            })?;
            (Arc::new(pg.clone()), Some(pg))
        }
    };
    let source = match (&cfg.upstream, &postgres) {
        (Some(u), _) => StoreSource::Replica { upstream: u.urls.join(",") },
        (None, Some(_)) => StoreSource::Shared,
        (None, None) => StoreSource::Primary,
    };
    check_role(backend.as_ref(), &source, &cfg.data_dir).await?;
    if marks_missing && matches!(source, StoreSource::Primary) {
        restored_epochs(backend.as_ref(), &metrics).await?;
    }
    let store = Store::open(backend.clone(), Limits::default(), retention, metrics.clone(), source).await?;
    let read_only = cfg.upstream.as_ref().map(|u| {
        format!("this relay is a replica (it follows {}); manage tokens at the primary", u.urls.join(","))
    });
    let (tokens, new_token) = Tokens::open(backend, &cfg.data_dir, read_only).await?;
    let tokens = Arc::new(tokens);
    if cfg.upstream.is_none() {
        store.set_primary(cfg.advertise_url.clone());
    }
    if let Some(path) = &new_token {
        tracing::info!(path = %path.display(), "created the admin token `bootstrap` (role admin, all environments; shown once in this file, mode 0600)");
    }
    // The demo is seeded on the very first start only (when the admin token
    // is created), never again after its environments were deleted.
    if cfg.demo && cfg.upstream.is_none() && new_token.is_some() && store.envs().is_empty() {
        let key = crate::demo::seed(&store).await?;
        let path = cfg.data_dir.join("demo-sdk-key");
        secret::write_private(&path, &key)?;
        tracing::info!(path = %path.display(), "seeded the demo environment; its SDK key is in this file");
    }

    let opts = SocketOptions {
        backlog: cfg.backlog,
        tcp_user_timeout: cfg.tcp_user_timeout,
        keepalive_idle: cfg.keepalive_interval,
        keepalive_interval: Duration::from_secs(5),
        keepalive_retries: 3,
    };
    let listener = transport::bind(cfg.listen, &opts)?;
    let admin_listener = cfg.admin_listen.map(|a| transport::bind(a, &opts)).transpose()?;
    let metrics_listener = crate::scrape::bind(cfg.metrics_listen).await?;
    let running = Running {
        grpc: listener.local_addr()?,
        metrics: metrics_listener.local_addr()?,
        admin: match &admin_listener {
            Some(l) => l.local_addr()?,
            None => listener.local_addr()?,
        },
    };
    warn_if_plaintext(&cfg, &running);

    let hub = Hub::new(
        HubLimits {
            max_subscribers: cfg.max_subscribers,
            max_subscribers_per_env: cfg.max_subscribers_per_env,
            max_replica_streams_per_env: cfg.max_replica_streams_per_env,
            snapshot_concurrency: cfg.snapshot_concurrency,
            send_deadline: cfg.send_deadline,
            behind_deadline: cfg.behind_deadline,
            behind_progress_rate: cfg.behind_progress_rate,
            heartbeat: cfg.heartbeat,
        },
        metrics.clone(),
    );
    // A replica keeps its SDKs' usage for its upstream too, a relay of a
    // shared database for the other relays.
    let passes_usage = cfg.upstream.is_some() || postgres.is_some();
    let hub = Arc::new(if passes_usage { hub.forwarding_usage() } else { hub });
    store.set_env_gone(hub.clone());
    hub.node.set_name(cfg.advertise_url.clone().unwrap_or_else(|| running.grpc.to_string()));
    let quotas = Arc::new(Quotas::new(cfg.quotas, metrics.clone()));
    store.set_size_quota(cfg.quotas.sizes());
    let sync = SyncService::new(
        store.clone(),
        hub.clone(),
        quotas.clone(),
        tokens.clone(),
        StreamConfig {
            hello_timeout: cfg.hello_timeout,
            heartbeat: cfg.heartbeat,
            max_stream_age: cfg.max_stream_age,
            chunk_bytes: cfg.chunk_bytes,
            delta_cache_bytes: cfg.delta_cache_bytes,
            ahead_hold: cfg.ahead_hold,
            drain_spread: cfg.drain_spread,
        },
    );
    // A primary is ready once it serves; a replica once it holds data.
    let (ready_tx, ready) = tokio::sync::watch::channel(cfg.upstream.is_none());
    let admin = AdminService::new(
        store.clone(),
        hub.clone(),
        tokens.clone(),
        quotas.clone(),
        ready.clone(),
        cfg.stale_after,
        crate::admin::Watches::new(cfg.max_watches_per_token, cfg.max_watches, metrics.clone()),
    );
    tokio::spawn(reload_on_sighup(cfg.source.clone(), store.clone(), quotas.clone(), hub.clone()));
    let background = CancellationToken::new();
    let pages = crate::status_page::StatusPage::new(
        store.clone(),
        hub.clone(),
        tokens.clone(),
        metrics.clone(),
        cfg.status_page_remote_plaintext,
    );
    let metrics_tls = match (&cfg.tls, cfg.metrics_tls) {
        (Some(tls), true) => Some(crate::scrape::tls_acceptor(&tls.cert, &tls.key)?),
        _ => None,
    };
    tokio::spawn(crate::scrape::serve(
        metrics_listener,
        metrics.clone(),
        Some(Arc::new(pages)),
        metrics_tls,
        background.clone(),
    ));
    tokio::spawn(hub.clone().reap(background.clone()));
    tokio::spawn(expire_keys(store.clone(), hub.clone(), background.clone()));
    tokio::spawn(prune_quotas(quotas.clone(), background.clone()));

    let admin = tonic::service::interceptor::InterceptedService::new(
        AdminServer::new(admin)
            .max_decoding_message_size(MAX_ADMIN_REQUEST)
            .max_encoding_message_size(MAX_RESPONSE),
        AdminAuth { tokens: tokens.clone() },
    );
    let server_stop = CancellationToken::new();
    let refusals = RefusalLayer::new(metrics.clone());
    // One configuration for both gRPC listeners.
    let grpc_server = || -> anyhow::Result<_> {
        let mut builder = Server::builder();
        if let Some(tls) = &cfg.tls {
            let mut t = tonic::transport::ServerTlsConfig::new()
                .identity(tonic::transport::Identity::from_pem(&tls.cert, &tls.key));
            if let Some(ca) = &tls.client_ca {
                t = t.client_ca_root(tonic::transport::Certificate::from_pem(ca));
            }
            builder = builder.tls_config(t).map_err(|e| anyhow::anyhow!("TLS configuration: {e}"))?;
        }
        Ok(builder
            .layer(refusals.clone())
            .http2_keepalive_interval(Some(cfg.keepalive_interval))
            .http2_keepalive_timeout(Some(cfg.keepalive_timeout))
            .max_concurrent_streams(Some(cfg.max_concurrent_streams))
            .tcp_nodelay(true))
    };
    let replication = tonic::service::interceptor::InterceptedService::new(
        ReplicationServer::new(ReplicationService::new(store.clone(), tokens.clone()))
            .max_encoding_message_size(MAX_CATALOG),
        AdminAuth { tokens: tokens.clone() },
    );
    let main = grpc_server()?
        .add_service(health_service.clone())
        .add_service(SyncRoute::new(sync, crate::subscribe::MAX_HELLO_BYTES))
        .add_service(replication);
    let mut servers = Vec::new();
    let admission = |name| {
        transport::Admission::new(
            cfg.connections,
            cfg.connection_idle_timeout,
            name,
            cfg.tls.is_none(),
            metrics.clone(),
        )
    };
    match admin_listener {
        None => servers.push(tokio::spawn(main.add_service(admin).serve_with_incoming_shutdown(
            transport::incoming(listener, opts, admission("grpc")),
            server_stop.clone().cancelled_owned(),
        ))),
        Some(admin_listener) => {
            servers.push(tokio::spawn(main.serve_with_incoming_shutdown(
                transport::incoming(listener, opts, admission("grpc")),
                server_stop.clone().cancelled_owned(),
            )));
            servers.push(tokio::spawn(
                grpc_server()?.add_service(health_service).add_service(admin).serve_with_incoming_shutdown(
                    transport::incoming(admin_listener, opts, admission("admin")),
                    server_stop.clone().cancelled_owned(),
                ),
            ));
        }
    }

    if let Some(pg) = postgres {
        let node = crate::process::persistent_id(&cfg.data_dir).map_err(|e| {
            anyhow::anyhow!("reading or making {}: {e}", cfg.data_dir.join("relay-id").display())
        })?;
        let feed = Arc::new(crate::feed::Feed::new(
            store.clone(),
            tokens.clone(),
            hub.clone(),
            pg,
            crate::feed::UsageSharing { every: cfg.usage_share_interval, node },
        ));
        tokio::spawn(feed.run(background.clone()));
    }
    if let Some(upstream) = cfg.upstream.clone() {
        let replica =
            crate::replica::Replica::new(store.clone(), tokens.clone(), hub.clone(), upstream, ready_tx);
        health_reporter
            .set_service_status(crate::replica::UPSTREAM_HEALTH, tonic_health::ServingStatus::NotServing)
            .await;
        tokio::spawn(replica.run(background.clone(), health_reporter.clone()));
    }
    // The listeners are bound; the relay is ready once it holds data (at
    // once on a primary, whose store is loaded).
    tokio::spawn(serve_when_ready(ready.clone(), health_reporter.clone(), hub.clone()));
    started(&running)?;
    tracing::info!(grpc = %running.grpc, metrics = %running.metrics, data_dir = %cfg.data_dir.display(), lifo_slot = crate::LIFO_SLOT, "relay serving");

    if let Some(period) = demo {
        tokio::spawn(crate::demo::live(
            store.clone(),
            running.grpc,
            cfg.data_dir.join("demo-sdk-key"),
            period,
            background.clone(),
        ));
    }

    stop.cancelled().await;
    // Drain: stop being ready, ask every subscriber to reconnect elsewhere
    // (each with its own random delay), and wait for them to leave.
    health_reporter.set_not_serving::<SyncRoute>().await;
    health_reporter.set_service_status("", tonic_health::ServingStatus::NotServing).await;
    hub.start_drain();
    let deadline = tokio::time::Instant::now() + cfg.drain_grace;
    while hub.total() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let left = hub.total();
    if left > 0 {
        tracing::warn!(subscribers = left, "drain grace period over; closing remaining streams");
    } else {
        tracing::info!("all subscribers left");
    }
    server_stop.cancel();
    for server in servers {
        match tokio::time::timeout(Duration::from_secs(5), server).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "gRPC server ended with an error"),
            Ok(Err(e)) => tracing::warn!(error = %e, "gRPC server task failed"),
            Err(_) => tracing::warn!("gRPC server did not stop within 5s; exiting anyway"),
        }
    }
    background.cancel();
    if let Err(e) = store.persist_freshness().await {
        tracing::error!(error = %e, "storing how current each environment is failed; after the restart its age counts from its last revision");
    }
    store.flush().await?;
    tracing::info!("relay stopped");
    Ok(())
}
