//! Prometheus metrics: the registry, every metric the relay exports, and
//! the HTTP listener on its own port serving `/metrics` and whatever
//! [`Pages`] adds (the status page). docs/OPERATIONS.md lists the metrics
//! with suggested alerts.

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
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Label set: `(name, value)` pairs.
pub type Labels = Vec<(&'static str, String)>;

/// Every metric of the relay. Cheap to clone (all handles are `Arc`s).
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Arc<Registry>,
    /// Connected subscribers per environment.
    pub subscribers: Family<Labels, Gauge>,
    /// Subscribe attempts by result (`accepted`, `rejected`) and reason.
    pub subscribes: Family<Labels, Counter>,
    /// Messages sent by kind (`snapshot_chunk`, `delta`, `heartbeat`, `reconnect`).
    pub sent_messages: Family<Labels, Counter>,
    /// Bytes sent by message kind.
    pub sent_bytes: Family<Labels, Counter>,
    /// Full snapshots sent instead of deltas, by cause.
    pub resyncs: Family<Labels, Counter>,
    /// Encodings made, by kind: one per revision (snapshot) or per cursor (delta).
    pub encodes: Family<Labels, Counter>,
    /// Commit → acknowledgement latency, seconds.
    pub ack_latency: Histogram,
    /// Audit records dropped by the `audit-revisions` retention.
    pub audit_trimmed: Counter,
    /// How long the store took to make a write durable, seconds.
    pub commit_latency: Histogram,
    /// Shared database: another relay's commit → this relay serving it, seconds.
    pub feed_lag: Histogram,
    /// Shared database: `pg_notification_queue_usage()` (0–1), read by the
    /// change feed every second.
    pub notification_queue_usage: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Head revision per environment.
    pub head_revision: Family<Labels, Gauge>,
    /// Admin writes by result.
    pub admin_writes: Family<Labels, Counter>,
    /// Age of streams when they ended, seconds.
    pub stream_age: Histogram,
    /// Items stored per environment.
    pub store_items: Family<Labels, Gauge>,
    /// Bytes of item encodings per environment.
    pub store_bytes: Family<Labels, Gauge>,
    /// Limits that triggered, by limit name.
    pub limit_hits: Family<Labels, Counter>,
    /// Subscribers sending a snapshot right now.
    pub snapshot_sends: Gauge,
    /// Bytes held by the request buffers of open Subscribe streams
    /// (`inbound.rs`: at most 16 KiB each between messages).
    pub stream_buffer_bytes: Gauge,
    /// Streams ended, by reason.
    pub stream_ends: Family<Labels, Counter>,
    /// Deltas evicted from the per-revision delta cache (its byte bound).
    pub delta_cache_evictions: Counter,
    /// Every non-OK status answered, by service, method and code.
    pub refusals: Family<Labels, Counter>,
    /// Requests whose body was not a well-formed message (answered
    /// `INVALID_ARGUMENT`), by service and method.
    pub undecodable_requests: Family<Labels, Counter>,
    /// Requests refused by a quota, by environment and quota.
    pub quota_refusals: Family<Labels, Counter>,
    /// Replicas: upstream streams ended, by environment and how
    /// (`stalled`, `broken`, `connect`, `retry_after`, `reconnect`,
    /// `resync`).
    pub upstream_ends: Family<Labels, Counter>,
    /// Replicas: 1 while the environment's upstream stream is open and
    /// current, else 0.
    pub upstream_live: Family<Labels, Gauge>,
    /// How long ago the environment's data was last confirmed current,
    /// seconds (0 on the primary; heartbeats' `staleness_ms`).
    pub staleness_seconds: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// Pre-resolved `(messages, bytes)` counters per sent message kind, so
    /// the per-message path neither allocates labels nor locks the family.
    pub sent: Arc<[(Counter, Counter); 4]>,
    /// Open connections per listener (`grpc`, `admin`).
    pub connections: Family<Labels, Gauge>,
    /// PostgreSQL store: connections opened, by the URL's `sslmode` and
    /// whether TLS is in use (`on`, `off`, `local_socket`).
    pub postgres_connections: Family<Labels, Counter>,
    /// Usage summaries received, by result (`accepted`, `refused`) and,
    /// for a refusal, the field over its bound.
    pub usage_summaries: Family<Labels, Counter>,
    /// Fallbacks to callers' defaults the SDKs reported, by environment and
    /// cause (missing, wrong_type, malformed, not_ready).
    pub usage_fallbacks: Family<Labels, Counter>,
    /// Flag entries in usage summaries listing a default that differs from
    /// the value the flag serves most, by environment.
    pub usage_default_mismatches: Family<Labels, Counter>,
    /// Flag keys held in the usage table (all environments).
    pub usage_keys: Gauge,
    /// Fallbacks SDKs reported per environment and flag (flags of the
    /// environment only; past 100 flags per environment, `flag="_other"`).
    pub usage_flag_fallbacks: Family<Labels, Counter>,
    /// Per environment: this relay's head revision minus the oldest
    /// revision any relay of its tree holds (at the same epoch); set when
    /// scraped.
    pub revision_drift: Family<Labels, Gauge>,
    /// Status page requests by result (`ok`, `unauthenticated`,
    /// `forbidden`, `not_found`).
    pub status_page_requests: Family<Labels, Counter>,
}

/// What the metrics listener serves besides `/metrics`: the status page
/// (`crate::status_page`), and gauges computed from state just before a
/// scrape.
pub trait Pages: Send + Sync {
    /// Called before each `/metrics` rendering.
    fn before_scrape(&self);
    /// The response to `GET path` with `authorization` (the header's
    /// value), or `None`: not a page of its (404).
    fn get(&self, path: &str, authorization: Option<&str>) -> Option<Response<Full<Bytes>>>;
}

/// Index into [`Metrics::sent`] by message kind.
#[derive(Debug, Clone, Copy)]
pub enum SentKind {
    /// A snapshot chunk.
    SnapshotChunk = 0,
    /// A delta.
    Delta = 1,
    /// A heartbeat.
    Heartbeat = 2,
    /// A reconnect request.
    Reconnect = 3,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Metrics {
        let mut r = Registry::with_prefix("flagstream");
        let m = Metrics {
            registry: Arc::new(Registry::default()),
            subscribers: Family::default(),
            subscribes: Family::default(),
            sent_messages: Family::default(),
            sent_bytes: Family::default(),
            resyncs: Family::default(),
            encodes: Family::default(),
            ack_latency: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            audit_trimmed: Counter::default(),
            commit_latency: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            feed_lag: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            notification_queue_usage: Gauge::default(),
            head_revision: Family::default(),
            admin_writes: Family::default(),
            stream_age: Histogram::new(exponential_buckets(1.0, 2.0, 16)),
            store_items: Family::default(),
            store_bytes: Family::default(),
            limit_hits: Family::default(),
            snapshot_sends: Gauge::default(),
            stream_buffer_bytes: Gauge::default(),
            stream_ends: Family::default(),
            delta_cache_evictions: Counter::default(),
            refusals: Family::default(),
            undecodable_requests: Family::default(),
            quota_refusals: Family::default(),
            upstream_ends: Family::default(),
            upstream_live: Family::default(),
            staleness_seconds: Family::default(),
            sent: Arc::new(Default::default()),
            connections: Family::default(),
            postgres_connections: Family::default(),
            usage_summaries: Family::default(),
            usage_fallbacks: Family::default(),
            usage_default_mismatches: Family::default(),
            usage_keys: Gauge::default(),
            usage_flag_fallbacks: Family::default(),
            revision_drift: Family::default(),
            status_page_requests: Family::default(),
        };
        r.register("connections", "Open gRPC connections per listener", m.connections.clone());
        r.register(
            "upstream_stream_ends",
            "Replica: upstream streams ended, by environment and kind",
            m.upstream_ends.clone(),
        );
        r.register(
            "upstream_live",
            "Replica: 1 while the environment's upstream stream is open and current",
            m.upstream_live.clone(),
        );
        r.register(
            "staleness_seconds",
            "How long ago the environment's data was last confirmed current (0 on the primary)",
            m.staleness_seconds.clone(),
        );
        r.register("subscribers", "Connected subscribers", m.subscribers.clone());
        r.register("subscribes", "Subscribe attempts by result and reason", m.subscribes.clone());
        r.register("sent_messages", "Stream messages sent by kind", m.sent_messages.clone());
        r.register("sent_bytes", "Stream bytes sent by message kind", m.sent_bytes.clone());
        r.register("resyncs", "Full snapshots sent instead of a delta, by cause", m.resyncs.clone());
        r.register(
            "encodes",
            "Snapshot and delta encodings made (shared by all subscribers)",
            m.encodes.clone(),
        );
        r.register(
            "ack_latency_seconds",
            "Commit to subscriber acknowledgement latency",
            m.ack_latency.clone(),
        );
        r.register(
            "commit_seconds",
            "Time the store took to make one admin write durable (sled flush or PostgreSQL transaction)",
            m.commit_latency.clone(),
        );
        r.register(
            "feed_lag_seconds",
            "PostgreSQL store: another relay's commit to this relay serving it",
            m.feed_lag.clone(),
        );
        r.register(
            "postgres_notification_queue_usage",
            "PostgreSQL store: fraction of the server's NOTIFY queue in use (writes fail at 1)",
            m.notification_queue_usage.clone(),
        );
        r.register("head_revision", "Head revision per environment", m.head_revision.clone());
        r.register(
            "audit_records_trimmed",
            "Audit records dropped by the audit-revisions retention",
            m.audit_trimmed.clone(),
        );
        r.register("admin_writes", "Admin writes by result", m.admin_writes.clone());
        r.register("stream_age_seconds", "Age of streams when they ended", m.stream_age.clone());
        r.register("store_items", "Flags and segments stored per environment", m.store_items.clone());
        r.register("store_bytes", "Bytes of stored item encodings per environment", m.store_bytes.clone());
        r.register("limit_hits", "Limits that triggered, by limit", m.limit_hits.clone());
        r.register("snapshot_sends", "Subscribers currently receiving a snapshot", m.snapshot_sends.clone());
        r.register(
            "stream_buffer_bytes",
            "Bytes held by the request buffers of open Subscribe streams",
            m.stream_buffer_bytes.clone(),
        );
        r.register("stream_ends", "Subscribe streams ended, by reason", m.stream_ends.clone());
        r.register(
            "delta_cache_evictions",
            "Encoded deltas evicted from the delta cache by its byte bound",
            m.delta_cache_evictions.clone(),
        );
        r.register(
            "quota_refusals",
            "Requests refused by a per-environment or relay-wide quota, by environment and quota",
            m.quota_refusals.clone(),
        );
        r.register(
            "grpc_refusals",
            "Every non-OK gRPC status the relay answered, by service, method and code",
            m.refusals.clone(),
        );
        r.register(
            "undecodable_requests",
            "Requests whose body was not a well-formed message (answered INVALID_ARGUMENT), by service and method",
            m.undecodable_requests.clone(),
        );
        r.register(
            "postgres_connections",
            "PostgreSQL store: connections opened, by sslmode and whether TLS is in use (tls=off under sslmode=prefer: the server declined TLS)",
            m.postgres_connections.clone(),
        );
        r.register(
            "usage_summaries",
            "SDK usage summaries received, by result and (refused) the field over its bound",
            m.usage_summaries.clone(),
        );
        r.register(
            "usage_fallbacks",
            "Evaluations that returned the caller's default, reported by SDKs, by environment and cause",
            m.usage_fallbacks.clone(),
        );
        r.register(
            "usage_default_mismatches",
            "Usage summary entries listing a caller default that differs from the flag's most-served value, by environment",
            m.usage_default_mismatches.clone(),
        );
        r.register("usage_keys", "Flag keys held in the relay's usage table", m.usage_keys.clone());
        r.register(
            "usage_flag_fallbacks",
            "Evaluations that returned the caller's default, reported by SDKs, by environment and flag (100 flags per environment, then flag=\"_other\")",
            m.usage_flag_fallbacks.clone(),
        );
        r.register(
            "revision_drift",
            "This relay's head revision minus the oldest revision any relay of its tree holds, by environment",
            m.revision_drift.clone(),
        );
        r.register(
            "status_page_requests",
            "Status page requests on the metrics listener, by result",
            m.status_page_requests.clone(),
        );
        for result in ["ok", "unauthenticated", "forbidden", "not_found"] {
            m.status_page_requests.get_or_create(&vec![("result", result.to_owned())]).inc_by(0);
        }
        for (result, field) in [
            ("accepted", ""),
            ("refused", "usage.flags"),
            ("refused", "usage.flags.key"),
            ("refused", "usage.flags.variations"),
            ("refused", "usage.flags.defaults"),
        ] {
            let labels = vec![("result", result.to_owned()), ("field", field.to_owned())];
            m.usage_summaries.get_or_create(&labels).inc_by(0);
        }
        let sent = ["snapshot_chunk", "delta", "heartbeat", "reconnect"].map(|kind| {
            let labels = vec![("kind", kind.to_owned())];
            (m.sent_messages.get_or_create(&labels).clone(), m.sent_bytes.get_or_create(&labels).clone())
        });
        // Create the known series at zero, so `increase()` sees their
        // first event instead of a series that appears already at 1.
        for limit in [
            "max_subscribers",
            "max_subscribers_per_env",
            "max_replica_streams_per_env",
            "snapshot_concurrency",
            "send_deadline",
            "behind_deadline",
            "batch_ops",
            "comment_bytes",
            "storage_failure",
            "stored_data_invalid",
            "subscribe_request_bytes",
            "hello_bytes",
            "delta_cache_bytes",
            "cursor_ahead",
            "metrics_connections",
            "metrics_connections_per_address",
            "metrics_accept_error",
            "write_behind",
            "feed_session_lost",
            "feed_resync",
            "history_lost",
            "max_watches",
            "max_watches_per_token",
            "max_regex_patterns",
            "max_regex_compiled",
            "max_regex_item_compiled",
            "max_regex_env_compiled",
            "audit_record_failed",
            "connections",
            "connections_per_address",
            "connection_idle",
            "catalog_poll_failed",
            "catalog_apply_failed",
            "feed_step_timeout",
            "feed_silent",
            "memory_budget",
        ] {
            m.limit_hits.get_or_create(&vec![("limit", limit.to_owned())]).inc_by(0);
        }
        for result in ["ok", "invalid", "conflict", "not_found", "poisoned", "abandoned", "quota", "error"] {
            m.admin_writes.get_or_create(&vec![("result", result.to_owned())]).inc_by(0);
        }
        for kind in ["snapshot", "snapshot_chunk", "delta"] {
            m.encodes.get_or_create(&vec![("kind", kind.to_owned())]).inc_by(0);
        }
        for cause in ["empty_cursor", "foreign_epoch", "too_old", "delta_too_large", "inside_diffed_snapshot"]
        {
            m.resyncs.get_or_create(&vec![("cause", cause.to_owned())]).inc_by(0);
        }
        for reason in [
            "client_gone",
            "drain",
            "max_stream_age",
            "send_deadline",
            "behind_deadline",
            "environment_deleted",
            "cursor_ahead",
        ] {
            m.stream_ends.get_or_create(&vec![("reason", reason.to_owned())]).inc_by(0);
        }
        Metrics { registry: Arc::new(r), sent: Arc::new(sent), ..m }
    }

    /// Counts one sent message of `len` bytes.
    #[inline]
    pub fn sent(&self, kind: SentKind, len: usize) {
        let (messages, bytes) = &self.sent[kind as usize];
        messages.inc();
        bytes.inc_by(len as u64);
    }

    /// Counts one quota refusal (`env` is `*` for relay-wide quotas).
    pub fn quota_refusal(&self, env: &str, quota: &str) {
        self.quota_refusals.get_or_create(&vec![("env", env.to_owned()), ("quota", quota.to_owned())]).inc();
    }

    /// Refusals counted so far for `(env, quota)` (tests).
    pub fn quota_refusals_for(&self, env: &str, quota: &str) -> u64 {
        self.quota_refusals.get_or_create(&vec![("env", env.to_owned()), ("quota", quota.to_owned())]).get()
    }

    /// Counts one snapshot chunk assembled for sending
    /// (`encodes{kind="snapshot_chunk"}`).
    pub fn chunk_assembled(&self) {
        self.encodes.get_or_create(&vec![("kind", "snapshot_chunk".to_owned())]).inc();
    }

    /// Counts one triggered limit.
    pub fn limit_hit(&self, limit: &str) {
        self.limit_hits.get_or_create(&vec![("limit", limit.to_owned())]).inc();
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        if let Err(e) = encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "encoding metrics failed");
        }
        out
    }
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
            Ok(permit) => match AddressSlot::take(&per_address, crate::limit::client_of(peer.ip())) {
                Some(from) => {
                    tokio::spawn(serve_one(stream, peer, metrics.clone(), pages.clone(), (permit, from)));
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
async fn serve_one(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    metrics: Metrics,
    pages: Option<Arc<dyn Pages>>,
    _slots: (tokio::sync::OwnedSemaphorePermit, AddressSlot),
) {
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
                if let Some(resp) = pages.as_ref().and_then(|p| p.get(&path, auth.as_deref())) {
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
    match tokio::time::timeout(METRICS_CONNECTION_LIFETIME, conn).await {
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
