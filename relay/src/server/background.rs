//! The relay's background work, every task of it tracked: the periodic
//! jobs (key expiry, quota pruning, the hub's reaper), the configuration
//! reload on SIGHUP, readiness, the metrics listener, the change feed or
//! the replica follower, and the live demo. Shutdown stops them and waits
//! for them, with a deadline, before the store's last flush.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::store::Store;
use crate::stream::grpc::SyncRoute;
use crate::stream::hub::Hub;
use crate::stream::quota::Quotas;

/// How long shutdown waits for the background work and the store's own
/// operations (a write in flight, a last usage turn) before its flush.
pub(super) const FINISH_DEADLINE: Duration = Duration::from_secs(10);

/// The background tasks and their stop switch.
#[derive(Debug, Default)]
pub(super) struct Background {
    pub tasks: TaskTracker,
    pub stop: CancellationToken,
}

impl Background {
    /// Spawns `work`, tracked.
    pub(super) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(work);
    }

    /// Stops the background work and waits, up to [`FINISH_DEADLINE`],
    /// for it and for the store's operations in flight, the two at once
    /// (neither waits out the other's deadline). What is still running
    /// then is logged (the flush follows anyway).
    pub(super) async fn finish(self, store: &Store) {
        self.stop.cancel();
        self.tasks.close();
        let operations = store.operations();
        if operations > 0 {
            tracing::info!(
                store_operations = operations,
                "shutdown: waiting for the store's operations in progress"
            );
        }
        let (waited, left) = tokio::join!(
            tokio::time::timeout(FINISH_DEADLINE, self.tasks.wait()),
            store.settle(FINISH_DEADLINE)
        );
        match (waited, left) {
            (Ok(()), 0) => tracing::info!("background work and store operations finished"),
            (waited, left) => tracing::warn!(
                background_tasks = if waited.is_ok() { 0 } else { self.tasks.len() },
                store_operations = left,
                deadline = ?FINISH_DEADLINE,
                "shutdown: work still running at the deadline; flushing what is committed"
            ),
        }
    }
}

/// Once a second: SDK keys whose rotation grace period is over are removed
/// and their open streams end with UNAUTHENTICATED (new Subscribe calls
/// are refused from the moment of expiry).
pub(super) async fn expire_keys(store: Store, hub: Arc<Hub>, stop: CancellationToken) {
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
pub(super) async fn prune_quotas(quotas: Arc<Quotas>, stop: CancellationToken) {
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
pub(super) async fn reload_on_sighup(
    source: Option<crate::config::Options>,
    store: Store,
    quotas: Arc<Quotas>,
    hub: Arc<Hub>,
    stop: CancellationToken,
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
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                got = hup.recv() => if got.is_none() { return },
            }
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
    // No SIGHUP off unix: the arguments are unused there, nothing is lost.
    #[cfg(not(unix))]
    let _ = (source, store, quotas, hub, stop);
}

/// Sets health SERVING once `ready` (unless the relay is draining by then,
/// or stops first).
pub(super) async fn serve_when_ready(
    mut ready: tokio::sync::watch::Receiver<bool>,
    health: tonic_health::server::HealthReporter,
    hub: Arc<Hub>,
    stop: CancellationToken,
) {
    let became_ready = tokio::select! {
        _ = stop.cancelled() => return,
        r = ready.wait_for(|r| *r) => r.is_ok(),
    };
    if !became_ready || hub.is_draining() {
        return;
    }
    health.set_serving::<SyncRoute>().await;
    health.set_service_status("", tonic_health::ServingStatus::Serving).await;
    tracing::info!("ready: health SERVING");
}
