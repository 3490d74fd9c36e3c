//! One step per part: each reads only the options of its part, fills the
//! defaults and checks them, naming the option in every error.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{
    ClusterSettings, ConfigError, Dur, HubLimits, ListenSettings, LogSettings, OfrepSettings, Options,
    StoreSettings, StoreUrl, StreamConfig, Tls, Upstream, WatchLimits,
};
use crate::ops::limit::{ConnCaps, QuotaConfig};

/// `default` seconds unless set.
fn secs(v: Option<Dur>, default: u64) -> Duration {
    v.map_or(Duration::from_secs(default), |d| d.0)
}

/// Fails with `msg` unless `ok`.
fn check(ok: bool, msg: impl Into<String>) -> Result<(), ConfigError> {
    if ok { Ok(()) } else { Err(ConfigError(msg.into())) }
}

/// A file an option names, read.
fn read(opt: &str, p: &PathBuf) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(p).map_err(|e| ConfigError(format!("{opt}: {}: {e}", p.display())))
}

/// A comma-separated list option.
fn list(v: &Option<String>) -> Vec<String> {
    v.iter().flat_map(|s| s.split(',')).map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect()
}

impl Options {
    /// The role (`primary`, `replica`), the upstream, the advertised URL.
    pub(super) fn cluster(&self) -> Result<ClusterSettings, ConfigError> {
        let upstream = match self.role.as_deref() {
            None | Some("primary") => {
                for (set, name) in [
                    (self.upstream.is_some(), "upstream"),
                    (self.upstream_token_file.is_some(), "upstream-token-file"),
                    (self.upstream_ca.is_some(), "upstream-ca"),
                    (self.upstream_client_cert.is_some(), "upstream-client-cert"),
                    (self.upstream_client_key.is_some(), "upstream-client-key"),
                    (self.environments.is_some(), "environments"),
                ] {
                    check(!set, format!("{name}: only for --role replica"))?;
                }
                None
            }
            Some("replica") => Some(self.upstream_settings()?),
            Some(other) => return Err(ConfigError(format!("role: {other:?} is not `primary` or `replica`"))),
        };
        check(
            upstream.is_none() || self.advertise_url.is_none(),
            "advertise-url: only for the primary (replicas pass the primary's on)",
        )?;
        Ok(ClusterSettings {
            upstream,
            advertise_url: self.advertise_url.clone(),
            stale_after: secs(self.stale_after, 5),
            usage_share_interval: secs(self.usage_share_interval, 60).max(Duration::from_millis(100)),
        })
    }

    /// A replica's upstream: URLs, credential, TLS, keepalive.
    fn upstream_settings(&self) -> Result<Upstream, ConfigError> {
        let urls = list(&self.upstream);
        check(!urls.is_empty(), "upstream: a replica needs at least one upstream URL")?;
        if let Some(bad) = urls.iter().find(|u| !u.starts_with("http://") && !u.starts_with("https://")) {
            return Err(ConfigError(format!("upstream: {bad:?} is not an http:// or https:// URL")));
        }
        let Some(path) = &self.upstream_token_file else {
            return Err(ConfigError(
                "upstream-token-file: a replica needs its upstream credential (a token with the replicate scope)"
                    .into(),
            ));
        };
        let token = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("upstream-token-file: {}: {e}", path.display())))?
            .trim()
            .to_owned();
        check(!token.is_empty(), format!("upstream-token-file: {} is empty", path.display()))?;
        let identity = match (&self.upstream_client_cert, &self.upstream_client_key) {
            (Some(c), Some(k)) => Some((read("upstream-client-cert", c)?, read("upstream-client-key", k)?)),
            (None, None) => None,
            _ => {
                return Err(ConfigError(
                    "upstream-client-cert and upstream-client-key: set both or neither".into(),
                ));
            }
        };
        let keepalive_interval = self.upstream_keepalive_interval.map_or(Duration::from_secs(3), |d| d.0);
        let keepalive_timeout = self.upstream_keepalive_timeout.map_or(Duration::from_secs(2), |d| d.0);
        check(
            keepalive_timeout < keepalive_interval && !keepalive_timeout.is_zero(),
            "upstream-keepalive-timeout: must be non-zero and shorter than upstream-keepalive-interval",
        )?;
        Ok(Upstream {
            urls,
            token: flagstream::Secret::new(token),
            ca: self.upstream_ca.as_ref().map(|p| read("upstream-ca", p)).transpose()?,
            identity,
            environments: list(&self.environments),
            keepalive_interval,
            keepalive_timeout,
            usage_interval: secs(self.upstream_usage_interval, 60).max(Duration::from_millis(100)),
        })
    }

    /// The store: sled or a PostgreSQL URL, the cache, retention.
    pub(super) fn store_settings(&self, replica: bool) -> Result<StoreSettings, ConfigError> {
        let url = match self.store.as_ref().map(|s| s.0.as_str()) {
            None | Some("sled") => StoreUrl::Sled,
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                if let Err(e) = crate::store::postgres::tls::parse(url) {
                    return Err(ConfigError(e.to_string()));
                }
                check(
                    !replica,
                    "store: a replica keeps its own sled copy; a PostgreSQL store is for writers",
                )?;
                StoreUrl::Postgres(flagstream::Secret::new(url))
            }
            Some(_) => return Err(ConfigError("store: `sled` or a postgres://USER@HOST:PORT/DB URL".into())),
        };
        let s = StoreSettings {
            url,
            sled_cache_bytes: self.sled_cache_bytes.unwrap_or(crate::store::sled::SLED_CACHE_BYTES),
            changelog_revisions: self.changelog_revisions.unwrap_or(1024),
            changelog_bytes: self.changelog_bytes.unwrap_or(8 << 20),
            audit_revisions: self.audit_revisions.unwrap_or(100_000),
        };
        check(
            s.sled_cache_bytes >= 1 << 20,
            format!("sled-cache-bytes: {} is below the least, 1048576 (1 MiB)", s.sled_cache_bytes),
        )?;
        check(s.changelog_revisions >= 1, "changelog-revisions: must be at least 1")?;
        check(s.audit_revisions >= 1, "audit-revisions: must be at least 1")?;
        Ok(s)
    }

    /// Each Subscribe stream: Hello, heartbeats, age, chunks, holds, drain.
    pub(super) fn stream(&self) -> Result<StreamConfig, ConfigError> {
        let s = StreamConfig {
            hello_timeout: secs(self.hello_timeout, 10),
            heartbeat: secs(self.heartbeat, 15),
            max_stream_age: secs(self.max_stream_age, 30 * 60),
            chunk_bytes: self.chunk_bytes.unwrap_or(1 << 20),
            delta_cache_bytes: self.delta_cache_bytes.unwrap_or(8 << 20),
            ahead_hold: secs(self.ahead_hold, 30),
            drain_spread: secs(self.drain_spread, 5),
            drain_grace: secs(self.drain_grace, 30),
        };
        check(
            (16 << 10..=4 << 20).contains(&s.chunk_bytes),
            format!("chunk-bytes: {} is outside 16384..=4194304", s.chunk_bytes),
        )?;
        check(s.heartbeat >= Duration::from_millis(100), "heartbeat: must be at least 100ms")?;
        check(
            s.delta_cache_bytes >= s.chunk_bytes,
            format!("delta-cache-bytes: {} is below chunk-bytes ({})", s.delta_cache_bytes, s.chunk_bytes),
        )?;
        check(s.ahead_hold <= Duration::from_secs(86_400), "ahead-hold: at most 1 day")?;
        check(s.hello_timeout >= Duration::from_millis(100), "hello-timeout: must be at least 100ms")?;
        check(s.max_stream_age >= Duration::from_secs(1), "max-stream-age: must be at least 1s")?;
        Ok(s)
    }

    /// The subscriber registry: admission and the deadlines its reaper keeps.
    pub(super) fn hub(&self, heartbeat: Duration) -> Result<HubLimits, ConfigError> {
        let h = HubLimits {
            max_subscribers: self.max_subscribers.unwrap_or(50_000),
            max_subscribers_per_env: self
                .max_subscribers_per_env
                .unwrap_or(QuotaConfig::default().subscribers),
            max_replica_streams_per_env: self.max_replica_streams_per_env.unwrap_or(256),
            snapshot_concurrency: self.snapshot_concurrency.unwrap_or(64),
            send_deadline: secs(self.send_deadline, 30),
            heartbeat,
            behind_deadline: secs(self.behind_deadline, 60),
            behind_progress_rate: self.behind_progress_rate.unwrap_or(16 << 10),
        };
        check(h.send_deadline >= Duration::from_millis(100), "send-deadline: must be at least 100ms")?;
        check(h.behind_deadline >= Duration::from_secs(1), "behind-deadline: must be at least 1s")?;
        check(h.behind_progress_rate >= 1, "behind-progress-rate: must be at least 1")?;
        check(h.max_subscribers >= 1, "max-subscribers: must be at least 1")?;
        check(h.max_subscribers_per_env >= 1, "max-subscribers-per-env: must be at least 1")?;
        check(h.max_replica_streams_per_env >= 1, "max-replica-streams-per-env: must be at least 1")?;
        check(h.snapshot_concurrency >= 1, "snapshot-concurrency: must be at least 1")?;
        Ok(h)
    }

    /// The listeners: addresses, TLS, socket and HTTP/2 settings, caps.
    pub(super) fn listen(&self) -> Result<ListenSettings, ConfigError> {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => Some(Tls {
                cert: read("tls-cert", c)?,
                key: read("tls-key", k)?,
                client_ca: self.tls_client_ca.as_ref().map(|p| read("tls-client-ca", p)).transpose()?,
            }),
            (None, None) if self.tls_client_ca.is_some() => {
                return Err(ConfigError("tls-client-ca: needs tls-cert and tls-key".into()));
            }
            (None, None) => None,
            _ => return Err(ConfigError("tls-cert and tls-key: set both or neither".into())),
        };
        // `0s` or unset: no HTTP/2 PINGs.
        let pings = self.keepalive_interval.map(|d| d.0).filter(|d| !d.is_zero());
        let l = ListenSettings {
            grpc: self.listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 7070))),
            admin: self.admin_listen,
            metrics: self.metrics_listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9090))),
            metrics_tls: self.metrics_tls.unwrap_or(false),
            status_page_remote_plaintext: self.status_page_remote_plaintext.unwrap_or(false),
            tls,
            backlog: self.backlog.unwrap_or(4096),
            tcp_user_timeout: secs(self.tcp_user_timeout, 30),
            keepalive_interval: pings,
            keepalive_timeout: secs(self.keepalive_timeout, 10),
            tcp_keepalive_idle: pings.unwrap_or(Duration::from_secs(20)),
            max_concurrent_streams: self.max_concurrent_streams.unwrap_or(256),
            connections: ConnCaps {
                total: self.max_connections.unwrap_or(60_000),
                per_address: self.max_connections_per_address.unwrap_or(4_096),
            },
            connection_idle_timeout: secs(self.connection_idle_timeout, 30),
        };
        check(
            !l.metrics_tls || l.tls.is_some(),
            "metrics-tls: needs tls-cert and tls-key (the metrics listener serves the relay's certificate)",
        )?;
        check(l.backlog >= 1, "backlog: must be at least 1")?;
        check(l.max_concurrent_streams >= 1, "max-concurrent-streams: must be at least 1")?;
        check(l.connections.total >= 1, "max-connections: must be at least 1")?;
        check(
            l.connection_idle_timeout >= Duration::from_secs(1),
            "connection-idle-timeout: must be at least 1s",
        )?;
        check(l.connections.per_address >= 1, "max-connections-per-address: must be at least 1")?;
        check(
            l.keepalive_interval.is_none_or(|i| l.keepalive_timeout < i),
            "keepalive-timeout: must be shorter than keepalive-interval",
        )?;
        check(l.grpc != l.metrics || l.grpc.port() == 0, "metrics-listen: must differ from listen")?;
        check(
            l.admin.is_none_or(|a| a.port() == 0 || (a != l.grpc && a != l.metrics)),
            "admin-listen: must differ from listen and metrics-listen",
        )?;
        Ok(l)
    }

    /// Per-environment quotas and rates (what SIGHUP reloads).
    pub(super) fn quotas(&self) -> Result<QuotaConfig, ConfigError> {
        let d = QuotaConfig::default();
        let q = QuotaConfig {
            flags: self.quota_flags.unwrap_or(d.flags),
            segments: self.quota_segments.unwrap_or(d.segments),
            snapshot_bytes: self.quota_snapshot_bytes.unwrap_or(d.snapshot_bytes),
            writes_per_sec: self.quota_writes_per_sec.unwrap_or(d.writes_per_sec),
            token_writes_per_sec: self.quota_token_writes_per_sec.unwrap_or(d.token_writes_per_sec),
            subscribes_per_sec: self.quota_subscribes_per_sec.unwrap_or(d.subscribes_per_sec),
            relay_subscribes_per_sec: self.max_subscribes_per_sec.unwrap_or(d.relay_subscribes_per_sec),
            subscribers: self.max_subscribers_per_env.unwrap_or(d.subscribers),
            token_evaluates_per_sec: self.quota_token_evaluates_per_sec.unwrap_or(d.token_evaluates_per_sec),
            sdk_keys_per_env: self.quota_sdk_keys_per_env.unwrap_or(d.sdk_keys_per_env),
            tokens: self.quota_tokens.unwrap_or(d.tokens),
            audit_reads_per_sec: self.quota_audit_reads_per_sec.unwrap_or(d.audit_reads_per_sec),
            usage_reads_per_sec: self.quota_usage_reads_per_sec.unwrap_or(d.usage_reads_per_sec),
            memory_budget: self.memory_budget.unwrap_or(d.memory_budget),
        };
        for (name, v) in [
            ("quota-flags", q.flags),
            ("quota-segments", q.segments),
            ("quota-snapshot-bytes", q.snapshot_bytes),
            ("quota-writes-per-sec", q.writes_per_sec as usize),
            ("quota-token-writes-per-sec", q.token_writes_per_sec as usize),
            ("quota-subscribes-per-sec", q.subscribes_per_sec as usize),
            ("max-subscribes-per-sec", q.relay_subscribes_per_sec as usize),
            ("quota-token-evaluates-per-sec", q.token_evaluates_per_sec as usize),
            ("quota-sdk-keys-per-env", q.sdk_keys_per_env),
            ("quota-tokens", q.tokens),
            ("quota-audit-reads-per-sec", q.audit_reads_per_sec as usize),
            ("quota-usage-reads-per-sec", q.usage_reads_per_sec as usize),
        ] {
            check(v >= 1, format!("{name}: must be at least 1"))?;
        }
        Ok(q)
    }

    /// `WatchPropagation` bounds.
    pub(super) fn watches(&self) -> Result<WatchLimits, ConfigError> {
        let w = WatchLimits {
            per_token: self.max_watches_per_token.unwrap_or(8),
            total: self.max_watches.unwrap_or(256),
        };
        check(w.per_token >= 1, "max-watches-per-token: must be at least 1")?;
        check(w.total >= 1, "max-watches: must be at least 1")?;
        Ok(w)
    }

    /// The OFREP listener, when `ofrep-listen` is set.
    pub(super) fn ofrep(&self) -> Result<Option<OfrepSettings>, ConfigError> {
        let Some(listen) = self.ofrep_listen else {
            let set = self.ofrep_requests_per_sec_per_key.is_some()
                || self.ofrep_requests_per_sec_per_client_key.is_some()
                || self.ofrep_requests_per_sec_per_address.is_some()
                || self.ofrep_max_body_bytes.is_some()
                || self.ofrep_max_connections.is_some()
                || self.ofrep_event_spread.is_some()
                || self.ofrep_max_connections_per_address.is_some()
                || self.ofrep_max_event_streams.is_some();
            check(!set, "ofrep-*: the OFREP limits need ofrep-listen (the listener is off without it)")?;
            return Ok(None);
        };
        let max_connections = self.ofrep_max_connections.unwrap_or(4096);
        let o = OfrepSettings {
            listen,
            requests_per_sec_per_key: self.ofrep_requests_per_sec_per_key.unwrap_or(200),
            requests_per_sec_per_client_key: self.ofrep_requests_per_sec_per_client_key.unwrap_or(20_000),
            requests_per_sec_per_address: self.ofrep_requests_per_sec_per_address.unwrap_or(50),
            max_body_bytes: self.ofrep_max_body_bytes.unwrap_or(64 * 1024),
            max_connections,
            max_connections_per_address: self
                .ofrep_max_connections_per_address
                .unwrap_or(64)
                .min(max_connections),
            event_spread: self.ofrep_event_spread.map_or(Duration::from_millis(500), |d| d.0),
            max_event_streams: self.ofrep_max_event_streams.unwrap_or(max_connections / 2),
        };
        check(o.max_connections_per_address >= 1, "ofrep-max-connections-per-address: must be at least 1")?;
        check(
            o.max_event_streams < max_connections,
            "ofrep-max-event-streams: must be below ofrep-max-connections (evaluations need connections too)",
        )?;
        check(o.event_spread <= Duration::from_secs(60), "ofrep-event-spread: at most 60s")?;
        check(o.requests_per_sec_per_key >= 1, "ofrep-requests-per-sec-per-key: must be at least 1")?;
        check(
            o.requests_per_sec_per_client_key >= 1,
            "ofrep-requests-per-sec-per-client-key: must be at least 1",
        )?;
        check(o.requests_per_sec_per_address >= 1, "ofrep-requests-per-sec-per-address: must be at least 1")?;
        check(
            (1024..=16 << 20).contains(&o.max_body_bytes),
            "ofrep-max-body-bytes: must be between 1024 and 16777216",
        )?;
        check(o.max_connections >= 1, "ofrep-max-connections: must be at least 1")?;
        Ok(Some(o))
    }

    /// Log format and the optional OTLP collector.
    pub(super) fn log(&self) -> Result<LogSettings, ConfigError> {
        Ok(LogSettings {
            json: match self.log_format.as_deref() {
                None | Some("text") => false,
                Some("json") => true,
                Some(other) => {
                    return Err(ConfigError(format!("log-format: {other:?} is not `text` or `json`")));
                }
            },
            otlp_endpoint: match self.otlp_endpoint.as_deref() {
                None | Some("") => None,
                Some(u) if u.starts_with("http://") || u.starts_with("https://") => Some(u.to_owned()),
                Some(other) => {
                    return Err(ConfigError(format!(
                        "otlp-endpoint: {other:?} is not an http:// or https:// URL (e.g. http://127.0.0.1:4317)"
                    )));
                }
            },
        })
    }
}
