//! Prometheus metrics: the registry and every metric the relay exports
//! (the listener that serves them is `scrape.rs`). docs/OPERATIONS.md
//! lists the metrics with suggested alerts.

use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

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
    /// Store operations running on tasks of their own (writes, key and
    /// environment changes): what shutdown waits for before its flush.
    pub store_operations: Gauge,
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
    /// OFREP requests answered, by endpoint (`single`, `bulk`, `events`)
    /// and HTTP status.
    pub ofrep_requests: Family<Labels, Counter>,
    /// OFREP change streams (server-sent events) open now.
    pub ofrep_event_streams: Gauge,
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
            store_operations: Gauge::default(),
            stream_ends: Family::default(),
            delta_cache_evictions: Counter::default(),
            refusals: Family::default(),
            undecodable_requests: Family::default(),
            quota_refusals: Family::default(),
            ofrep_requests: Family::default(),
            ofrep_event_streams: Gauge::default(),
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
            "Commit to a subscriber applying the revision (an ack's arrival less its held time)",
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
        r.register(
            "store_operations",
            "Store operations (writes, key and environment changes) running now",
            m.store_operations.clone(),
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
            "ofrep_requests",
            "OFREP requests answered, by endpoint and HTTP status",
            m.ofrep_requests.clone(),
        );
        r.register("ofrep_event_streams", "OFREP change streams open now", m.ofrep_event_streams.clone());
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
        for result in ["ok", "unauthenticated", "forbidden", "not_found", "plaintext_remote"] {
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
            "ofrep_rate_per_key",
            "ofrep_rate_per_address",
            "ofrep_unauthenticated",
            "ofrep_body",
            "ofrep_context",
            "ofrep_event_streams",
            "ofrep_origin",
            "ofrep_connections",
            "ofrep_connections_per_address",
            "ofrep_accept_error",
            "ofrep_tls_handshake",
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
            "subscribe_request_slow",
            "hello_bytes",
            "delta_cache_bytes",
            "cursor_ahead",
            "metrics_connections",
            "metrics_connections_per_address",
            "metrics_accept_error",
            "metrics_tls_handshake",
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
            "status_message_bytes",
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

    /// Counts one OFREP answer.
    pub fn ofrep_request(&self, endpoint: &str, status: u16) {
        self.ofrep_requests
            .get_or_create(&vec![("endpoint", endpoint.to_owned()), ("status", status.to_string())])
            .inc();
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
