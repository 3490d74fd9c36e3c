//! The replica role: follow an upstream relay's catalog (environments, SDK
//! keys, tokens) by long poll, and each environment's Subscribe stream with
//! the SDK's follow engine (endpoint failover, watchdog, backoff, resume by
//! cursor, checksum verification, retry hints), persisting every revision
//! to this relay's own store (`store/received.rs`) and serving it on.
//!
//! A replica serves what it holds while its upstream is down and says how
//! old it is: each environment's [`Freshness`](crate::store::Freshness)
//! feeds the heartbeats' `staleness_ms`, a gauge, `Status`, and the health
//! service `flagstream.v1.Upstream` (SERVING while every followed stream is
//! live). It is ready (health SERVING) once it holds a catalog and data
//! for every environment in it, and stays ready after that.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flagstream::follow::{self, EndKind, Event, FollowConfig, RawChunk, RawDelta, Sink};
use flagstream::{ApplyError, Secret};
use flagstream_proto::v1 as pb;
use flagstream_proto::v1::replication_client::ReplicationClient;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::access::Tokens;
use crate::cluster::catalog;
use crate::config::Upstream;
use crate::store::Store;
use crate::stream::hub::Hub;

/// How long a catalog poll is held by the upstream.
const CATALOG_WAIT: Duration = Duration::from_secs(20);
/// The store setting holding the version of the catalog last applied.
const CATALOG_SETTING: &str = "catalog_version";
/// How often freshness gauges and the upstream health status are updated.
const FRESHNESS_TICK: Duration = Duration::from_secs(1);

/// The health service name that tells whether the upstream is live.
pub(crate) const UPSTREAM_HEALTH: &str = "flagstream.v1.Upstream";

/// What a replica runs with.
#[derive(Clone)]
pub(crate) struct Replica {
    store: Store,
    tokens: Arc<Tokens>,
    hub: Arc<Hub>,
    upstream: Upstream,
    /// Template for every environment's follower.
    follow: FollowConfig,
    /// Set once ready; never unset.
    ready: watch::Sender<bool>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica").field("upstream", &self.upstream.urls).finish_non_exhaustive()
    }
}

/// One environment's follower: its sink and task.
struct Follower {
    sink: Arc<EnvSink>,
    task: JoinHandle<()>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
        self.sink.set_live(false);
    }
}

impl Replica {
    /// A replica of `upstream` over `store`, `tokens` and `hub`.
    pub(crate) fn new(
        store: Store,
        tokens: Arc<Tokens>,
        hub: Arc<Hub>,
        upstream: Upstream,
        ready: watch::Sender<bool>,
    ) -> Replica {
        let follow = FollowConfig {
            endpoints: upstream.urls.clone(),
            credential: upstream.token.clone(),
            subscriber_kind: pb::SubscriberKind::Relay,
            sdk_name: "flagstream-relay".into(),
            max_snapshot_bytes: store.limits().max_snapshot_bytes,
            tls: follow::Tls { ca: upstream.ca.clone(), identity: upstream.identity.clone() },
            keepalive_interval: upstream.keepalive_interval,
            keepalive_timeout: upstream.keepalive_timeout,
            usage_interval: upstream.usage_interval,
            ..FollowConfig::default()
        };
        Replica { store, tokens, hub, upstream, follow, ready }
    }

    /// Runs until `stop`: the catalog follower, one follower per
    /// environment, and the freshness reporter.
    pub(crate) async fn run(
        self,
        tasks: tokio_util::task::TaskTracker,
        stop: CancellationToken,
        health: tonic_health::server::HealthReporter,
    ) {
        let followers: Arc<Mutex<HashMap<String, Follower>>> = Arc::default();
        let link = Arc::new(Link::default());
        // Serve and follow what is stored at once, upstream or not.
        self.sync_followers(&followers);
        // The stored version stands for the chosen environments it was
        // applied with: another choice (a changed --environments) fetches
        // the catalog again.
        let chosen = self.upstream.environments.join(",");
        let mut known = match self.store.backend().setting(CATALOG_SETTING).await {
            Ok(Some(v)) => match v.split_once(' ') {
                Some((version, with)) if with == chosen => version.to_owned(),
                None if chosen.is_empty() => v,
                _ => String::new(),
            },
            Ok(None) => String::new(),
            Err(e) => {
                tracing::error!(error = %e, "reading the stored catalog version failed; fetching it again");
                String::new()
            }
        };
        link.catalog_known.store(!known.is_empty(), Ordering::Relaxed);
        self.check_ready(&link);
        tasks.spawn(self.clone().report_freshness(followers.clone(), link.clone(), health, stop.clone()));
        let mut backoff = Backoff::new();
        let mut idx = 0usize;
        loop {
            let endpoint = self.upstream.urls[idx % self.upstream.urls.len()].clone();
            let result = tokio::select! {
                _ = stop.cancelled() => return,
                r = self.poll_catalog(&endpoint, &known) => r,
            };
            link.catalog_ok.store(result.is_ok(), Ordering::Relaxed);
            match result {
                Ok(c) if c.unchanged => backoff.reset(),
                Ok(c) => match catalog::apply(
                    &self.store,
                    &self.tokens,
                    &self.hub,
                    &c,
                    &self.upstream.environments,
                )
                .await
                {
                    Ok(applied) => {
                        backoff.reset();
                        let stored = if chosen.is_empty() {
                            c.version.clone()
                        } else {
                            format!("{} {chosen}", c.version)
                        };
                        if let Err(e) = self.store.backend().put_setting(CATALOG_SETTING, stored).await {
                            tracing::error!(error = %e, "storing the catalog version failed");
                        }
                        known = c.version;
                        if !applied.created.is_empty() || !applied.deleted.is_empty() {
                            tracing::info!(created = ?applied.created, deleted = ?applied.deleted, "catalog applied");
                        }
                        self.sync_followers(&followers);
                        link.catalog_known.store(true, Ordering::Relaxed);
                        self.check_ready(&link);
                    }
                    Err(e) => {
                        self.store.metrics().limit_hit("catalog_apply_failed");
                        tracing::error!(error = %follow::error_chain(&e), "applying the upstream's catalog failed; retrying");
                        self.wait(&stop, backoff.fail()).await;
                    }
                },
                Err((e, hint)) => {
                    tracing::warn!(endpoint = %endpoint, error = %e, "catalog poll failed");
                    self.store.metrics().limit_hit("catalog_poll_failed");
                    idx += 1;
                    let delay = match hint {
                        Some(h) => backoff.fail().max(h + follow::jitter_up_to(h)),
                        None => backoff.fail(),
                    };
                    self.wait(&stop, delay).await;
                }
            }
        }
    }

    async fn wait(&self, stop: &CancellationToken, delay: Duration) {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(delay) => {}
        }
    }

    /// One long poll of the upstream's catalog.
    async fn poll_catalog(
        &self,
        endpoint: &str,
        known: &str,
    ) -> Result<pb::Catalog, (String, Option<Duration>)> {
        let channel = follow::connect(&self.follow, endpoint).await.map_err(|e| (e, None))?;
        let mut client = ReplicationClient::with_interceptor(channel, Bearer(self.upstream.token.clone()))
            .max_decoding_message_size(64 << 20);
        let mut req = tonic::Request::new(pb::GetCatalogRequest {
            known_version: known.to_owned(),
            wait_ms: CATALOG_WAIT.as_millis() as u32,
            client_keys: true,
        });
        req.set_timeout(CATALOG_WAIT + Duration::from_secs(10));
        match client.get_catalog(req).await {
            Ok(r) => Ok(r.into_inner()),
            Err(s) => Err((format!("{}: {}", s.code(), s.message()), follow::retry_after(&s))),
        }
    }

    /// Starts a follower for every environment of the store that has none,
    /// and stops those of environments that are gone.
    fn sync_followers(&self, followers: &Mutex<HashMap<String, Follower>>) {
        let names: Vec<String> = self.store.envs().iter().map(|e| e.meta.load().name.clone()).collect();
        let mut followers = followers.lock().unwrap_or_else(|p| p.into_inner());
        followers.retain(|name, _| names.contains(name));
        for name in names {
            followers.entry(name.clone()).or_insert_with(|| {
                let sink = Arc::new(EnvSink {
                    store: self.store.clone(),
                    hub: self.hub.clone(),
                    env: name.clone(),
                    resync: AtomicBool::new(false),
                    upstream_staleness: AtomicU64::new(0),
                    last_report: std::sync::Mutex::new(None),
                });
                let cfg = FollowConfig { environment: name, ..self.follow.clone() };
                let task = tokio::spawn(follow::run(sink.clone(), cfg));
                Follower { sink, task }
            });
        }
    }

    /// Every second, until `stop`: the freshness gauges, the upstream
    /// health service (SERVING while the catalog poll works and every
    /// followed stream is live and current), and readiness. A task of its
    /// own, so a catalog poll in backoff never freezes them.
    async fn report_freshness(
        self,
        followers: Arc<Mutex<HashMap<String, Follower>>>,
        link: Arc<Link>,
        health: tonic_health::server::HealthReporter,
        stop: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(FRESHNESS_TICK);
        let mut reported = None;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let m = self.store.metrics();
            let mut all_live = link.catalog_ok.load(Ordering::Relaxed);
            let followed: Vec<String> =
                followers.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
            for env in self.store.envs() {
                let name = env.meta.load().name.clone();
                let live = followed.contains(&name) && env.freshness.is_live();
                all_live &= live;
                let labels = vec![("env", name)];
                m.upstream_live.get_or_create(&labels).set(i64::from(live));
                m.staleness_seconds.get_or_create(&labels).set(self.store.staleness_ms(&env) as f64 / 1000.0);
            }
            if reported != Some(all_live) {
                reported = Some(all_live);
                let status = if all_live {
                    tonic_health::ServingStatus::Serving
                } else {
                    tonic_health::ServingStatus::NotServing
                };
                health.set_service_status(UPSTREAM_HEALTH, status).await;
            }
            self.check_ready(&link);
        }
    }

    /// Ready once a catalog is held and every environment in it has data.
    fn check_ready(&self, link: &Link) {
        if *self.ready.borrow() || !link.catalog_known.load(Ordering::Relaxed) {
            return;
        }
        if self.store.envs().iter().all(|e| e.has_data()) {
            tracing::info!("replica ready: it holds data for every environment");
            self.ready.send_replace(true);
        }
    }
}

/// The state of the link to the upstream, shared with the freshness task.
#[derive(Debug, Default)]
struct Link {
    /// The last catalog poll succeeded.
    catalog_ok: AtomicBool,
    /// A catalog is held (fetched, or stored by an earlier run).
    catalog_known: AtomicBool,
}

/// Adds the upstream token to every call.
#[derive(Clone)]
struct Bearer(Secret);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let v = tonic::metadata::MetadataValue::try_from(format!("Bearer {}", self.0.expose()))
            .map_err(|_| crate::error::invalid("upstream token", "not valid metadata"))?;
        req.metadata_mut().insert("authorization", v);
        Ok(req)
    }
}

/// Full-jitter backoff for the catalog poll (1 s → 30 s).
struct Backoff(u32);

impl Backoff {
    fn new() -> Backoff {
        Backoff(0)
    }

    fn fail(&mut self) -> Duration {
        let ceiling = Duration::from_secs(1).saturating_mul(1 << self.0.min(5)).min(Duration::from_secs(30));
        self.0 = self.0.saturating_add(1);
        follow::jitter_up_to(ceiling)
    }

    fn reset(&mut self) {
        self.0 = 0;
    }
}

/// Where one environment's follower puts what it receives.
struct EnvSink {
    store: Store,
    hub: Arc<Hub>,
    env: String,
    /// Set after a failed apply: the next Hello asks for a snapshot.
    resync: AtomicBool,
    /// The upstream's `staleness_ms` in its latest heartbeat.
    upstream_staleness: AtomicU64,
    /// The last report sent upstream (sent again only when it changed).
    last_report: std::sync::Mutex<Option<pb::PropagationReport>>,
}

impl EnvSink {
    /// One catch-up step from the upstream as a span: the environment, a
    /// snapshot or a delta from `from`, and (once applied) the revision.
    fn span(&self, kind: &'static str, from: u64) -> tracing::Span {
        tracing::info_span!("replica_apply", env = %self.env, kind, from, revision = tracing::field::Empty)
    }

    fn applied(&self, span: &tracing::Span, c: &pb::Cursor) {
        span.record("revision", c.revision);
        span.in_scope(|| tracing::debug!("applied from the upstream"));
    }

    fn set_live(&self, live: bool) {
        if let Ok(env) = self.store.env(&self.env) {
            env.freshness.set_live(live);
        }
    }

    fn confirm(&self) {
        if let Ok(env) = self.store.env(&self.env) {
            env.freshness.confirm(crate::store::now_ms(), self.upstream_staleness.load(Ordering::Relaxed));
            env.freshness.set_live(true);
        }
    }
}

impl Sink for EnvSink {
    fn cursor(&self) -> Option<pb::Cursor> {
        let env = self.store.env(&self.env).ok()?;
        let state = env.state.load();
        if state.epoch.is_empty() || self.resync.load(Ordering::Relaxed) {
            return None;
        }
        Some(pb::Cursor { epoch: state.epoch.clone(), revision: state.revision })
    }

    fn checksum(&self) -> Option<u64> {
        let env = self.store.env(&self.env).ok()?;
        let state = env.state.load();
        if state.epoch.is_empty() || self.resync.load(Ordering::Relaxed) {
            return None;
        }
        Some(state.checksum())
    }

    fn apply_snapshot(&self, chunks: Vec<RawChunk>) -> Result<pb::Cursor, ApplyError> {
        let span = self.span("snapshot", 0);
        let c = span.in_scope(|| self.store.apply_snapshot_blocking(&self.env, chunks))?;
        self.applied(&span, &c);
        self.resync.store(false, Ordering::Relaxed);
        self.confirm();
        Ok(c)
    }

    fn apply_delta(&self, delta: RawDelta) -> Result<pb::Cursor, ApplyError> {
        let span = self.span("delta", delta.from_revision);
        let c = span.in_scope(|| self.store.apply_delta_blocking(&self.env, delta))?;
        self.applied(&span, &c);
        self.confirm();
        Ok(c)
    }

    fn forget_cursor(&self) {
        self.resync.store(true, Ordering::Relaxed);
    }

    fn event(&self, event: Event<'_>) {
        match event {
            Event::Heartbeat(h) => {
                self.upstream_staleness.store(h.staleness_ms, Ordering::Relaxed);
                let current = self.store.env(&self.env).is_ok_and(|env| {
                    let s = env.state.load();
                    s.epoch == h.epoch && s.revision == h.head_revision
                });
                if current {
                    self.confirm();
                }
            }
            Event::Ended { kind, .. } => {
                self.set_live(false);
                let kind = match kind {
                    EndKind::Connect => "connect",
                    EndKind::RetryAfter => "retry_after",
                    EndKind::Stalled => "stalled",
                    EndKind::Broken => "broken",
                    EndKind::Reconnect => "reconnect",
                    EndKind::Resync => "resync",
                };
                let labels = vec![("env", self.env.clone()), ("kind", kind.to_owned())];
                self.store.metrics().upstream_ends.get_or_create(&labels).inc();
            }
            // A new stream hears the report again even if unchanged.
            Event::Connected { .. } => *self.last_report.lock().unwrap_or_else(|p| p.into_inner()) = None,
            Event::Applied { .. } | Event::Resync(_) | Event::Stale { .. } => {}
        }
    }

    fn report(&self) -> Option<pb::PropagationReport> {
        let env = self.store.env(&self.env).ok()?;
        let state = env.state.load();
        // The head always (after a snapshot of a new epoch the log is
        // empty), then the newest of the change log.
        let recent: Vec<u64> = std::iter::once(state.revision)
            .chain(
                state
                    .log
                    .iter()
                    .rev()
                    .take(crate::stream::hub::propagation::REPORTED_REVISIONS)
                    .map(|e| e.revision),
            )
            .collect();
        let mut report = self.hub.subtree_report(&self.env, &state.epoch, &recent).to_proto();
        (report.nodes, report.nodes_omitted) =
            crate::cluster::tree::subtree(&self.store, &self.hub, &self.env);
        let mut last = self.last_report.lock().unwrap_or_else(|p| p.into_inner());
        if last.as_ref() == Some(&report) {
            return None;
        }
        *last = Some(report.clone());
        Some(report)
    }

    fn usage(&self) -> Vec<pb::UsageSummary> {
        // What this replica's own SDKs (and replicas) reported since the
        // last call, merged: the upstream sees the whole subtree.
        self.hub.usage.forward(&self.env)
    }
}
