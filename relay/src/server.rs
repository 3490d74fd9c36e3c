//! Starting and stopping a relay: open the store, seed the demo, bind the
//! listeners, serve gRPC (Sync, Admin, health) and metrics, then on SIGTERM
//! or SIGINT drain: NOT_SERVING, ask subscribers to reconnect elsewhere with
//! jitter, wait up to the grace period, flush, exit.
//!
//! The top of the relay: it builds every part and owns the surfaces that
//! read them all ([`scrape`]: the metrics listener; [`status_page`]; the
//! [`probe`] command; the README's [`demo`]).

mod background;
pub(crate) mod demo;
mod listen;
mod open;
pub(crate) mod probe;
pub mod scrape;
pub(crate) mod status_page;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use flagstream_proto::v1::admin_server::AdminServer;
use flagstream_proto::v1::replication_server::ReplicationServer;
use tokio_util::sync::CancellationToken;

use crate::admin::AdminService;
use crate::admin::auth::AdminAuth;
use crate::cluster::replication::ReplicationService;
use crate::config::Config;
use crate::ops::metrics::Metrics;
use crate::stream::grpc::SyncRoute;
use crate::stream::hub::Hub;
use crate::stream::quota::Quotas;
use crate::stream::refusal::RefusalLayer;
use crate::stream::subscribe::SyncService;
use crate::stream::transport;
use background::Background;
pub(crate) use listen::Running;
use listen::{Listeners, Servers};
use open::Opened;

/// Whether this build's runtime runs a woken task next (tokio's "LIFO
/// slot"). Built with `--cfg tokio_unstable` (the workspace's
/// `.cargo/config.toml` sets it) the relay turns it off.
pub const LIFO_SLOT: bool = !cfg!(tokio_unstable);

/// The relay's multi-threaded runtime.
///
/// Without the LIFO slot, a connection task woken by a stream that queued
/// a message runs after the other woken streams rather than right away, so
/// one write carries many streams' messages: for a revision fanned out to
/// 10,000 subscribers, hundreds of socket writes instead of one per
/// subscriber (docs/BENCHMARKS.md).
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    #[cfg(tokio_unstable)]
    builder.disable_lifo_slot();
    builder.build()
}

/// Largest admin request (must exceed the 3 MiB segment limit).
const MAX_ADMIN_REQUEST: usize = 8 << 20;
/// Largest message the relay sends: a chunk bound or one large item.
const MAX_RESPONSE: usize = 8 << 20;
/// Largest catalog sent (every environment's key hashes and every token):
/// ~100 bytes a key or token, so hundreds of thousands fit.
const MAX_CATALOG: usize = 64 << 20;

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
        // Without an OFREP listener the line has no `ofrep=` field.
        let ofrep = match r.ofrep {
            Some(a) => format!(" ofrep={a}"),
            None => String::new(),
        };
        println!("flagstream-relay listening grpc={} metrics={} admin={}{ofrep}", r.grpc, r.metrics, r.admin);
        // Tests and scripts read this line; make sure it is out.
        std::io::stdout().flush()
    })
    .await
}

/// Runs a relay until `stop` fires; `started` is told the bound addresses.
/// The steps, in order: open the store, bind the listeners, build the
/// services, spawn the background work, serve, and on `stop` drain and
/// finish (background work and store operations awaited, then flushed).
pub(crate) async fn serve(
    cfg: Config,
    stop: CancellationToken,
    demo: Option<Duration>,
    started: impl FnOnce(&Running) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    crate::ops::permission::create_private_dir(&cfg.data_dir)?;
    let metrics = Metrics::new();
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, tonic_health::ServingStatus::NotServing).await;

    let opened = open::open(&cfg, &metrics).await?;
    let listeners = Listeners::bind(&cfg).await?;
    let running = listeners.running.clone();
    let services = Services::build(&cfg, &opened, &running, &metrics);
    let background = Background::default();
    spawn_background(&cfg, &opened, &services, &background, listeners.metrics, &metrics)?;
    if let (Some(settings), Some(listener)) = (&cfg.ofrep, listeners.ofrep) {
        spawn_ofrep(&cfg, settings, &opened, services.hub.clone(), &background, listener, &metrics)?;
    }
    let servers = serve_grpc(
        &cfg,
        &opened,
        &services,
        listeners.grpc,
        listeners.admin,
        listeners.options,
        health_service,
        &metrics,
    )?;
    spawn_cluster(&cfg, &opened, services.hub.clone(), services.ready_tx, &background, &health).await?;
    // The listeners are bound; the relay is ready once it holds data (at
    // once on a primary, whose store is loaded).
    background.spawn(background::serve_when_ready(
        services.ready,
        health.clone(),
        services.hub.clone(),
        background.stop.clone(),
    ));
    started(&running)?;
    tracing::info!(grpc = %running.grpc, metrics = %running.metrics, data_dir = %cfg.data_dir.display(), lifo_slot = LIFO_SLOT, "relay serving");
    if let Some(period) = demo {
        let key_file = cfg.data_dir.join("demo-sdk-key");
        background.spawn(demo::live(
            opened.store.clone(),
            running.grpc,
            key_file,
            period,
            background.stop.clone(),
        ));
    }

    stop.cancelled().await;
    drain(&cfg, &health, &services.hub).await;
    servers.stop().await;
    background.finish(&opened.store).await;
    if let Err(e) = opened.store.persist_freshness().await {
        tracing::error!(error = %e, "storing how current each environment is failed; after the restart its age counts from its last revision");
    }
    opened.store.flush().await?;
    tracing::info!("relay stopped");
    Ok(())
}

/// Both health names (the Sync service and the server as a whole).
async fn set_health(health: &tonic_health::server::HealthReporter, status: tonic_health::ServingStatus) {
    match status {
        tonic_health::ServingStatus::Serving => health.set_serving::<SyncRoute>().await,
        _ => health.set_not_serving::<SyncRoute>().await,
    }
    health.set_service_status("", status).await;
}

/// The services the listeners serve and what they share.
struct Services {
    hub: Arc<Hub>,
    quotas: Arc<Quotas>,
    sync: SyncService,
    admin: AdminService,
    /// Told when a replica holds data (a primary is ready from the start).
    ready_tx: tokio::sync::watch::Sender<bool>,
    ready: tokio::sync::watch::Receiver<bool>,
}

impl Services {
    /// Each part built from its own settings.
    fn build(cfg: &Config, opened: &Opened, running: &Running, metrics: &Metrics) -> Services {
        let store = &opened.store;
        let hub = Hub::new(cfg.hub.clone(), metrics.clone());
        // A replica keeps its SDKs' usage for its upstream too, a relay of a
        // shared database for the other relays.
        let passes_usage = cfg.cluster.upstream.is_some() || opened.postgres.is_some();
        let hub = Arc::new(if passes_usage { hub.forwarding_usage() } else { hub });
        store.set_env_gone(hub.clone());
        hub.node.set_name(cfg.cluster.advertise_url.clone().unwrap_or_else(|| running.grpc.to_string()));
        let quotas = Arc::new(Quotas::new(cfg.quotas, metrics.clone()));
        store.set_size_quota(cfg.quotas.sizes());
        let stream = cfg.stream.clone();
        let sync =
            SyncService::new(store.clone(), hub.clone(), quotas.clone(), opened.tokens.clone(), stream);
        // A primary is ready once it serves; a replica once it holds data.
        let (ready_tx, ready) = tokio::sync::watch::channel(cfg.cluster.upstream.is_none());
        let admin = AdminService::new(
            store.clone(),
            hub.clone(),
            opened.tokens.clone(),
            quotas.clone(),
            ready.clone(),
            cfg.cluster.stale_after,
            crate::admin::Watches::new(cfg.watches.per_token, cfg.watches.total, metrics.clone()),
        );
        Services { hub, quotas, sync, admin, ready_tx, ready }
    }
}

/// The OFREP listener (TLS with the relay's certificate when it has one),
/// the hand-over of its evaluations to the usage table every 10 s, and
/// the pruning of its rate buckets once a minute.
fn spawn_ofrep(
    cfg: &Config,
    settings: &crate::config::OfrepSettings,
    opened: &Opened,
    hub: Arc<Hub>,
    background: &Background,
    listener: tokio::net::TcpListener,
    metrics: &Metrics,
) -> anyhow::Result<()> {
    let tls = cfg.listen.tls.as_ref().map(|t| crate::ops::http::tls_acceptor(&t.cert, &t.key)).transpose()?;
    let ofrep = crate::ofrep::Ofrep::new(opened.store.clone(), metrics.clone(), settings.clone());
    let stop = background.stop.clone();
    background.spawn(crate::ops::http::serve(
        listener,
        crate::ofrep::bounds(settings),
        ofrep.clone(),
        metrics.clone(),
        tls,
        stop.clone(),
    ));
    let store = opened.store.clone();
    background.spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(10));
        let (mut ticks, mut since) = (0u64, crate::store::now_ms());
        loop {
            let stopping = tokio::select! {
                _ = stop.cancelled() => true,
                _ = every.tick() => false,
            };
            ticks += 1;
            if ticks % 6 == 0 {
                ofrep.prune();
            }
            // The last counts go in at shutdown too.
            let now = crate::store::now_ms();
            let summaries = ofrep.take_usage(since, now);
            since = now;
            if !summaries.is_empty() {
                let (hub, store) = (hub.clone(), store.clone());
                let counted = tokio::task::spawn_blocking(move || {
                    for (env, key_id, summary) in summaries {
                        // An environment deleted meanwhile: its usage is gone.
                        let Ok(e) = store.env(&env) else { continue };
                        if let Err(over) = crate::usage::check(&summary) {
                            tracing::warn!(%env, field = over.field, "OFREP usage summary over a bound: dropped");
                            hub.usage.refused(over.field);
                            continue;
                        }
                        let snap = e.state.load().snapshot.clone();
                        hub.usage.ingest(&e.deleted, &env, &format!("ofrep:{key_id}"), false, &snap, summary);
                    }
                })
                .await;
                if let Err(e) = counted {
                    tracing::warn!(error = %e, "counting OFREP usage failed");
                }
            }
            if stopping {
                return;
            }
        }
    });
    Ok(())
}

/// The relay's own background work: the metrics listener and status
/// page, the hub's reaper, key expiry, quota pruning, SIGHUP reloads.
fn spawn_background(
    cfg: &Config,
    opened: &Opened,
    services: &Services,
    background: &Background,
    metrics_listener: tokio::net::TcpListener,
    metrics: &Metrics,
) -> anyhow::Result<()> {
    let (store, hub, quotas, stop) = (&opened.store, &services.hub, &services.quotas, &background.stop);
    let pages = status_page::StatusPage::new(
        store.clone(),
        hub.clone(),
        opened.tokens.clone(),
        metrics.clone(),
        cfg.listen.status_page_remote_plaintext,
    );
    let metrics_tls = match (&cfg.listen.tls, cfg.listen.metrics_tls) {
        (Some(tls), true) => Some(scrape::tls_acceptor(&tls.cert, &tls.key)?),
        _ => None,
    };
    background.spawn(scrape::serve(
        metrics_listener,
        metrics.clone(),
        Some(Arc::new(pages)),
        metrics_tls,
        stop.clone(),
    ));
    background.spawn(hub.clone().reap(stop.clone()));
    background.spawn(background::expire_keys(store.clone(), hub.clone(), stop.clone()));
    background.spawn(background::prune_quotas(quotas.clone(), stop.clone()));
    background.spawn(background::reload_on_sighup(
        cfg.source.clone(),
        store.clone(),
        quotas.clone(),
        hub.clone(),
        stop.clone(),
    ));
    Ok(())
}

/// Serves gRPC: Sync, Replication and health on the SDK-facing listener;
/// Admin there too, or on its own listener (with health) when one is set.
#[allow(clippy::too_many_arguments)] // one call, each argument a different part
fn serve_grpc(
    cfg: &Config,
    opened: &Opened,
    services: &Services,
    grpc: tokio::net::TcpListener,
    admin: Option<tokio::net::TcpListener>,
    options: transport::SocketOptions,
    health_service: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
    metrics: &Metrics,
) -> anyhow::Result<Servers> {
    let tokens = &opened.tokens;
    let admin_service = tonic::service::interceptor::InterceptedService::new(
        AdminServer::new(services.admin.clone())
            .max_decoding_message_size(MAX_ADMIN_REQUEST)
            .max_encoding_message_size(MAX_RESPONSE),
        AdminAuth { tokens: tokens.clone() },
    );
    let replication = tonic::service::interceptor::InterceptedService::new(
        ReplicationServer::new(ReplicationService::new(opened.store.clone(), tokens.clone()))
            .max_encoding_message_size(MAX_CATALOG),
        AdminAuth { tokens: tokens.clone() },
    );
    let refusals = RefusalLayer::new(metrics.clone());
    let sync = SyncRoute::new(services.sync.clone(), crate::stream::subscribe::MAX_HELLO_BYTES);
    let main = listen::grpc_server(cfg, &refusals, Some(sync))?
        .add_service(health_service.clone())
        .add_service(replication);
    let stop = CancellationToken::new();
    let incoming =
        |listener, name| transport::incoming(listener, options, listen::admission(cfg, name, metrics));
    let mut tasks = Vec::new();
    match admin {
        None => tasks.push(tokio::spawn(
            main.add_service(admin_service)
                .serve_with_incoming_shutdown(incoming(grpc, "grpc"), stop.clone().cancelled_owned()),
        )),
        Some(admin) => {
            tasks.push(tokio::spawn(
                main.serve_with_incoming_shutdown(incoming(grpc, "grpc"), stop.clone().cancelled_owned()),
            ));
            tasks.push(tokio::spawn(
                listen::grpc_server(cfg, &refusals, None)?
                    .add_service(health_service)
                    .add_service(admin_service)
                    .serve_with_incoming_shutdown(incoming(admin, "admin"), stop.clone().cancelled_owned()),
            ));
        }
    }
    Ok(Servers { tasks, stop })
}

/// The cluster's work, when this relay has any: the change feed of a
/// shared PostgreSQL database, or the follower of an upstream relay.
async fn spawn_cluster(
    cfg: &Config,
    opened: &Opened,
    hub: Arc<Hub>,
    ready_tx: tokio::sync::watch::Sender<bool>,
    background: &Background,
    health: &tonic_health::server::HealthReporter,
) -> anyhow::Result<()> {
    let (store, tokens) = (&opened.store, &opened.tokens);
    if let Some(pg) = opened.postgres.clone() {
        let node = crate::ops::process::persistent_id(&cfg.data_dir).map_err(|e| {
            anyhow::anyhow!("reading or making {}: {e}", cfg.data_dir.join("relay-id").display())
        })?;
        let sharing = crate::cluster::feed::UsageSharing { every: cfg.cluster.usage_share_interval, node };
        let feed = Arc::new(crate::cluster::feed::Feed::new(
            store.clone(),
            tokens.clone(),
            hub.clone(),
            pg,
            sharing,
        ));
        background.spawn(feed.run(background.tasks.clone(), background.stop.clone()));
    }
    if let Some(upstream) = cfg.cluster.upstream.clone() {
        let replica =
            crate::cluster::replica::Replica::new(store.clone(), tokens.clone(), hub, upstream, ready_tx);
        health
            .set_service_status(
                crate::cluster::replica::UPSTREAM_HEALTH,
                tonic_health::ServingStatus::NotServing,
            )
            .await;
        background.spawn(replica.run(background.tasks.clone(), background.stop.clone(), health.clone()));
    }
    Ok(())
}

/// Drains: stops being ready, asks every subscriber to reconnect elsewhere
/// (each with its own random delay), and waits for them to leave, up to
/// the grace period.
async fn drain(cfg: &Config, health: &tonic_health::server::HealthReporter, hub: &Hub) {
    // Draining first: a replica that turns ready now sees it and does not
    // set SERVING after the NOT_SERVING below.
    hub.start_drain();
    set_health(health, tonic_health::ServingStatus::NotServing).await;
    if tokio::time::timeout(cfg.stream.drain_grace, hub.emptied()).await.is_ok() {
        tracing::info!("all subscribers left");
    } else {
        tracing::warn!(subscribers = hub.total(), "drain grace period over; closing remaining streams");
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
