//! Relay configuration: command line, `FLAGSTREAM_*` environment variables
//! and an optional TOML file, in that order of precedence, then defaults.
//! Everything is validated before any port is bound; a bad value is one
//! clear line and exit code 64.
//!
//! May use `store` (its URL parser and defaults) and `ops` (the limits
//! each part is given).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

mod options;

pub use options::{Action, Cli, Command, DemoArgs, Dur, Options, ProbeArgs, PromoteArgs, Sensitive};

/// Exit code for bad configuration (`EX_USAGE`).
pub const EXIT_CONFIG: i32 = 64;

/// A replica's upstream settings.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// Relay URLs, in order.
    pub urls: Vec<String>,
    /// The replicate-scope token (read from the token file).
    pub token: flagstream::Secret,
    /// PEM CA for `https://` upstreams.
    pub ca: Option<Vec<u8>>,
    /// PEM client certificate and key (mutual TLS to the upstream).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// Environments to follow; empty: all.
    pub environments: Vec<String>,
    /// HTTP/2 keepalive PING interval on the upstream link.
    pub keepalive_interval: Duration,
    /// PING answer deadline on the upstream link.
    pub keepalive_timeout: Duration,
    /// How often the merged usage summaries go upstream.
    pub usage_interval: Duration,
}

/// Where the flags live.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// The embedded sled store in the data directory.
    Sled,
    /// A PostgreSQL database shared by every relay of the deployment.
    Postgres(flagstream::Secret),
}

impl std::fmt::Debug for StoreUrl {
    /// Never prints a password in the URL.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreUrl::Sled => f.write_str("Sled"),
            StoreUrl::Postgres(_) => f.write_str("Postgres(<url redacted>)"),
        }
    }
}

/// Validated configuration with every default filled in.
#[derive(Debug, Clone)]
pub struct Config {
    /// The flag store.
    pub store: StoreUrl,
    /// `None` on the primary; a replica's upstream.
    pub upstream: Option<Upstream>,
    /// The primary's advertised URL.
    pub advertise_url: Option<String>,
    /// Staleness threshold.
    pub stale_after: Duration,
    /// gRPC listen address.
    pub listen: SocketAddr,
    /// Metrics listen address.
    pub metrics_listen: SocketAddr,
    /// Serve the metrics listener over TLS (with `tls`).
    pub metrics_tls: bool,
    /// Accept a status page token over plaintext from non-loopback clients.
    pub status_page_remote_plaintext: bool,
    /// Admin API address, if separate from `listen`.
    pub admin_listen: Option<SocketAddr>,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Seed the demo environment on first start.
    pub demo: bool,
    /// Heartbeat interval.
    pub heartbeat: Duration,
    /// Hello timeout.
    pub hello_timeout: Duration,
    /// How often a relay on a PostgreSQL store passes usage to the others.
    pub usage_share_interval: Duration,
    /// sled's page cache bound, bytes.
    pub sled_cache_bytes: u64,
    /// Maximum stream age.
    pub max_stream_age: Duration,
    /// Snapshot chunk bound.
    pub chunk_bytes: usize,
    /// Delta cache bound per environment revision, bytes.
    pub delta_cache_bytes: usize,
    /// Per-environment quotas and admission rates.
    pub quotas: crate::ops::limit::QuotaConfig,
    /// The options this was resolved from (to reload on SIGHUP).
    pub source: Option<Options>,
    /// Hold for a cursor ahead of the head.
    pub ahead_hold: Duration,
    /// Change-log revisions.
    pub changelog_revisions: usize,
    /// Change-log bytes.
    pub changelog_bytes: usize,
    /// Revisions whose audit records are kept.
    pub audit_revisions: usize,
    /// Relay subscriber limit.
    pub max_subscribers: usize,
    /// Per-environment subscriber limit.
    pub max_subscribers_per_env: usize,
    /// Per-environment replica relay stream limit.
    pub max_replica_streams_per_env: usize,
    /// Concurrent snapshot sends.
    pub snapshot_concurrency: usize,
    /// Send deadline.
    pub send_deadline: Duration,
    /// Behind deadline (before progress credit).
    pub behind_deadline: Duration,
    /// Progress credit rate of a stream behind the head, bytes/s.
    pub behind_progress_rate: u64,
    /// Drain grace period.
    pub drain_grace: Duration,
    /// Drain reconnect spread.
    pub drain_spread: Duration,
    /// HTTP/2 keepalive interval.
    pub keepalive_interval: Duration,
    /// HTTP/2 keepalive timeout.
    pub keepalive_timeout: Duration,
    /// TCP_USER_TIMEOUT.
    pub tcp_user_timeout: Duration,
    /// Listen backlog.
    pub backlog: u32,
    /// HTTP/2 streams per connection.
    pub max_concurrent_streams: u32,
    /// Connection caps of each gRPC listener.
    pub connections: crate::ops::limit::ConnCaps,
    /// A connection with no request for this long is closed.
    pub connection_idle_timeout: Duration,
    /// JSON logs?
    pub log_json: bool,
    /// The OTLP/gRPC collector spans are sent to, if any.
    pub otlp_endpoint: Option<String>,
    /// TLS material, read and checked at startup.
    pub tls: Option<Tls>,
    /// Open `WatchPropagation` streams per admin token.
    pub max_watches_per_token: usize,
    /// Open `WatchPropagation` streams on the relay.
    pub max_watches: usize,
}

/// TLS settings, as PEM bytes.
#[derive(Clone)]
pub struct Tls {
    /// Certificate chain.
    pub cert: Vec<u8>,
    /// Private key.
    pub key: Vec<u8>,
    /// Client CA (mutual TLS) if set.
    pub client_ca: Option<Vec<u8>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("Tls").field("mutual", &self.client_ca.is_some()).finish_non_exhaustive()
    }
}

/// A configuration problem: one line for the operator.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl Options {
    /// Fills unset options from the `--config` file, then defaults, and
    /// validates the result.
    pub fn resolve(self) -> Result<Config, ConfigError> {
        let source = self.clone();
        let merged = match &self.config {
            None => self,
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| ConfigError(format!("config file {}: {e}", path.display())))?;
                let file: Options = toml::from_str(&text)
                    .map_err(|e| ConfigError(format!("config file {}: {}", path.display(), e.message())))?;
                self.or(file)?
            }
        };
        let mut c = merged.finish()?;
        c.source = Some(source);
        Ok(c)
    }

    /// `self`'s set options, else `other`'s.
    fn or(self, other: Options) -> Result<Options, ConfigError> {
        // Through serde: the set fields of `self` overwrite those of `other`.
        let fail = |e: serde_json::Error| ConfigError(format!("merging configuration: {e}"));
        let mut base = serde_json::to_value(&other).map_err(fail)?;
        let top = serde_json::to_value(&self).map_err(fail)?;
        if let (Some(b), serde_json::Value::Object(top)) = (base.as_object_mut(), top) {
            b.extend(top);
        }
        let mut out: Options = serde_json::from_value(base).map_err(fail)?;
        out.config = self.config;
        Ok(out)
    }

    fn finish(self) -> Result<Config, ConfigError> {
        let d = |v: Option<Dur>, default: u64| v.map_or(Duration::from_secs(default), |d| d.0);
        let read = |opt: &str, p: &PathBuf| {
            std::fs::read(p).map_err(|e| ConfigError(format!("{opt}: {}: {e}", p.display())))
        };
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
        let list = |v: &Option<String>| -> Vec<String> {
            v.iter()
                .flat_map(|s| s.split(','))
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        };
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
                    if set {
                        return Err(ConfigError(format!("{name}: only for --role replica")));
                    }
                }
                None
            }
            Some("replica") => {
                let urls = list(&self.upstream);
                if urls.is_empty() {
                    return Err(ConfigError("upstream: a replica needs at least one upstream URL".into()));
                }
                if let Some(bad) =
                    urls.iter().find(|u| !u.starts_with("http://") && !u.starts_with("https://"))
                {
                    return Err(ConfigError(format!("upstream: {bad:?} is not an http:// or https:// URL")));
                }
                let Some(path) = &self.upstream_token_file else {
                    return Err(ConfigError(
                        "upstream-token-file: a replica needs its upstream credential (a token with the replicate scope)".into(),
                    ));
                };
                let token = std::fs::read_to_string(path)
                    .map_err(|e| ConfigError(format!("upstream-token-file: {}: {e}", path.display())))?
                    .trim()
                    .to_owned();
                if token.is_empty() {
                    return Err(ConfigError(format!("upstream-token-file: {} is empty", path.display())));
                }
                if self.demo == Some(true) {
                    return Err(ConfigError("demo: a replica serves its upstream's environments".into()));
                }
                let identity = match (&self.upstream_client_cert, &self.upstream_client_key) {
                    (Some(c), Some(k)) => {
                        Some((read("upstream-client-cert", c)?, read("upstream-client-key", k)?))
                    }
                    (None, None) => None,
                    _ => {
                        return Err(ConfigError(
                            "upstream-client-cert and upstream-client-key: set both or neither".into(),
                        ));
                    }
                };
                let keepalive_interval =
                    self.upstream_keepalive_interval.map_or(Duration::from_secs(3), |d| d.0);
                let keepalive_timeout =
                    self.upstream_keepalive_timeout.map_or(Duration::from_secs(2), |d| d.0);
                if keepalive_timeout >= keepalive_interval || keepalive_timeout.is_zero() {
                    return Err(ConfigError(
                        "upstream-keepalive-timeout: must be non-zero and shorter than upstream-keepalive-interval"
                            .into(),
                    ));
                }
                Some(Upstream {
                    urls,
                    token: flagstream::Secret::new(token),
                    ca: self.upstream_ca.as_ref().map(|p| read("upstream-ca", p)).transpose()?,
                    identity,
                    environments: list(&self.environments),
                    keepalive_interval,
                    keepalive_timeout,
                    usage_interval: self
                        .upstream_usage_interval
                        .map_or(Duration::from_secs(60), |d| d.0)
                        .max(Duration::from_millis(100)),
                })
            }
            Some(other) => return Err(ConfigError(format!("role: {other:?} is not `primary` or `replica`"))),
        };
        let store = match self.store.as_ref().map(|s| s.0.as_str()) {
            None | Some("sled") => StoreUrl::Sled,
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                if let Err(e) = crate::store::postgres::tls::parse(url) {
                    return Err(ConfigError(e.to_string()));
                }
                if upstream.is_some() {
                    return Err(ConfigError(
                        "store: a replica keeps its own sled copy; a PostgreSQL store is for writers".into(),
                    ));
                }
                StoreUrl::Postgres(flagstream::Secret::new(url))
            }
            Some(_) => {
                return Err(ConfigError("store: `sled` or a postgres://USER@HOST:PORT/DB URL".into()));
            }
        };
        if upstream.is_some() && self.advertise_url.is_some() {
            return Err(ConfigError(
                "advertise-url: only for the primary (replicas pass the primary's on)".into(),
            ));
        }
        let c = Config {
            store,
            upstream,
            advertise_url: self.advertise_url.clone(),
            stale_after: d(self.stale_after, 5),
            listen: self.listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 7070))),
            metrics_listen: self.metrics_listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9090))),
            metrics_tls: self.metrics_tls.unwrap_or(false),
            status_page_remote_plaintext: self.status_page_remote_plaintext.unwrap_or(false),
            admin_listen: self.admin_listen,
            data_dir: self.data_dir.unwrap_or_else(|| PathBuf::from("./flagstream-data")),
            demo: self.demo.unwrap_or(false),
            heartbeat: d(self.heartbeat, 15),
            hello_timeout: d(self.hello_timeout, 10),
            sled_cache_bytes: self.sled_cache_bytes.unwrap_or(crate::store::sled::SLED_CACHE_BYTES),
            usage_share_interval: self
                .usage_share_interval
                .map_or(Duration::from_secs(60), |d| d.0)
                .max(Duration::from_millis(100)),
            max_stream_age: d(self.max_stream_age, 30 * 60),
            chunk_bytes: self.chunk_bytes.unwrap_or(1 << 20),
            delta_cache_bytes: self.delta_cache_bytes.unwrap_or(8 << 20),
            quotas: {
                let q = crate::ops::limit::QuotaConfig::default();
                crate::ops::limit::QuotaConfig {
                    flags: self.quota_flags.unwrap_or(q.flags),
                    segments: self.quota_segments.unwrap_or(q.segments),
                    snapshot_bytes: self.quota_snapshot_bytes.unwrap_or(q.snapshot_bytes),
                    writes_per_sec: self.quota_writes_per_sec.unwrap_or(q.writes_per_sec),
                    token_writes_per_sec: self.quota_token_writes_per_sec.unwrap_or(q.token_writes_per_sec),
                    subscribes_per_sec: self.quota_subscribes_per_sec.unwrap_or(q.subscribes_per_sec),
                    relay_subscribes_per_sec: self
                        .max_subscribes_per_sec
                        .unwrap_or(q.relay_subscribes_per_sec),
                    subscribers: self.max_subscribers_per_env.unwrap_or(q.subscribers),
                    token_evaluates_per_sec: self
                        .quota_token_evaluates_per_sec
                        .unwrap_or(q.token_evaluates_per_sec),
                    sdk_keys_per_env: self.quota_sdk_keys_per_env.unwrap_or(q.sdk_keys_per_env),
                    tokens: self.quota_tokens.unwrap_or(q.tokens),
                    audit_reads_per_sec: self.quota_audit_reads_per_sec.unwrap_or(q.audit_reads_per_sec),
                    usage_reads_per_sec: self.quota_usage_reads_per_sec.unwrap_or(q.usage_reads_per_sec),
                    memory_budget: self.memory_budget.unwrap_or(q.memory_budget),
                }
            },
            source: None,
            ahead_hold: d(self.ahead_hold, 30),
            changelog_revisions: self.changelog_revisions.unwrap_or(1024),
            changelog_bytes: self.changelog_bytes.unwrap_or(8 << 20),
            audit_revisions: self.audit_revisions.unwrap_or(100_000),
            max_subscribers: self.max_subscribers.unwrap_or(50_000),
            max_subscribers_per_env: self
                .max_subscribers_per_env
                .unwrap_or(crate::ops::limit::QuotaConfig::default().subscribers),
            max_replica_streams_per_env: self.max_replica_streams_per_env.unwrap_or(256),
            snapshot_concurrency: self.snapshot_concurrency.unwrap_or(64),
            send_deadline: d(self.send_deadline, 30),
            behind_deadline: d(self.behind_deadline, 60),
            behind_progress_rate: self.behind_progress_rate.unwrap_or(16 << 10),
            drain_grace: d(self.drain_grace, 30),
            drain_spread: d(self.drain_spread, 5),
            keepalive_interval: d(self.keepalive_interval, 20),
            keepalive_timeout: d(self.keepalive_timeout, 10),
            tcp_user_timeout: d(self.tcp_user_timeout, 30),
            backlog: self.backlog.unwrap_or(4096),
            max_concurrent_streams: self.max_concurrent_streams.unwrap_or(256),
            connection_idle_timeout: d(self.connection_idle_timeout, 30),
            connections: crate::ops::limit::ConnCaps {
                total: self.max_connections.unwrap_or(60_000),
                per_address: self.max_connections_per_address.unwrap_or(4_096),
            },
            log_json: match self.log_format.as_deref() {
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
            tls,
            max_watches_per_token: self.max_watches_per_token.unwrap_or(8),
            max_watches: self.max_watches.unwrap_or(256),
        };
        let check = |ok: bool, msg: String| if ok { Ok(()) } else { Err(ConfigError(msg)) };
        check(
            (16 << 10..=4 << 20).contains(&c.chunk_bytes),
            format!("chunk-bytes: {} is outside 16384..=4194304", c.chunk_bytes),
        )?;
        check(c.heartbeat >= Duration::from_millis(100), "heartbeat: must be at least 100ms".into())?;
        check(
            c.delta_cache_bytes >= c.chunk_bytes,
            format!("delta-cache-bytes: {} is below chunk-bytes ({})", c.delta_cache_bytes, c.chunk_bytes),
        )?;
        check(c.ahead_hold <= Duration::from_secs(86_400), "ahead-hold: at most 1 day".into())?;
        let q = &c.quotas;
        for (name, v) in [
            ("quota-flags", q.flags),
            ("quota-segments", q.segments),
            ("quota-snapshot-bytes", q.snapshot_bytes),
            ("quota-writes-per-sec", q.writes_per_sec as usize),
            ("quota-token-writes-per-sec", q.token_writes_per_sec as usize),
            ("quota-subscribes-per-sec", q.subscribes_per_sec as usize),
            ("max-subscribes-per-sec", q.relay_subscribes_per_sec as usize),
            ("quota-token-evaluates-per-sec", q.token_evaluates_per_sec as usize),
            ("max-watches-per-token", c.max_watches_per_token),
            ("max-watches", c.max_watches),
            ("quota-sdk-keys-per-env", q.sdk_keys_per_env),
            ("quota-tokens", q.tokens),
            ("quota-audit-reads-per-sec", q.audit_reads_per_sec as usize),
            ("quota-usage-reads-per-sec", q.usage_reads_per_sec as usize),
        ] {
            check(v >= 1, format!("{name}: must be at least 1"))?;
        }
        check(c.hello_timeout >= Duration::from_millis(100), "hello-timeout: must be at least 100ms".into())?;
        check(
            !c.metrics_tls || c.tls.is_some(),
            "metrics-tls: needs tls-cert and tls-key (the metrics listener serves the relay's certificate)"
                .into(),
        )?;
        check(
            c.sled_cache_bytes >= 1 << 20,
            format!("sled-cache-bytes: {} is below the least, 1048576 (1 MiB)", c.sled_cache_bytes),
        )?;
        check(c.max_stream_age >= Duration::from_secs(1), "max-stream-age: must be at least 1s".into())?;
        check(c.send_deadline >= Duration::from_millis(100), "send-deadline: must be at least 100ms".into())?;
        check(c.behind_deadline >= Duration::from_secs(1), "behind-deadline: must be at least 1s".into())?;
        check(c.behind_progress_rate >= 1, "behind-progress-rate: must be at least 1".into())?;
        check(c.changelog_revisions >= 1, "changelog-revisions: must be at least 1".into())?;
        check(c.audit_revisions >= 1, "audit-revisions: must be at least 1".into())?;
        check(c.max_subscribers >= 1, "max-subscribers: must be at least 1".into())?;
        check(c.max_subscribers_per_env >= 1, "max-subscribers-per-env: must be at least 1".into())?;
        check(c.max_replica_streams_per_env >= 1, "max-replica-streams-per-env: must be at least 1".into())?;
        check(c.snapshot_concurrency >= 1, "snapshot-concurrency: must be at least 1".into())?;
        check(c.backlog >= 1, "backlog: must be at least 1".into())?;
        check(c.max_concurrent_streams >= 1, "max-concurrent-streams: must be at least 1".into())?;
        check(c.connections.total >= 1, "max-connections: must be at least 1".into())?;
        check(
            c.connections.total >= c.max_subscribers,
            format!(
                "max-connections: {} is below max-subscribers ({}): every SDK holds a connection; raise max-connections",
                c.connections.total, c.max_subscribers
            ),
        )?;
        check(
            c.connection_idle_timeout >= Duration::from_secs(1),
            "connection-idle-timeout: must be at least 1s".into(),
        )?;
        check(c.connections.per_address >= 1, "max-connections-per-address: must be at least 1".into())?;
        check(
            c.keepalive_timeout < c.keepalive_interval,
            "keepalive-timeout: must be shorter than keepalive-interval".into(),
        )?;
        check(
            c.listen != c.metrics_listen || c.listen.port() == 0,
            "metrics-listen: must differ from listen".into(),
        )?;
        check(
            c.admin_listen.is_none_or(|a| a.port() == 0 || (a != c.listen && a != c.metrics_listen)),
            "admin-listen: must differ from listen and metrics-listen".into(),
        )?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn parse(args: &[&str]) -> Result<Config, ConfigError> {
        Cli::try_parse_from(args).expect("parses").options().resolve()
    }

    /// Options work without the `serve` word too.
    #[test]
    fn serve_is_the_default_command() {
        let c = parse(&["flagstream-relay", "--heartbeat", "2s"]).unwrap();
        assert_eq!(c.heartbeat, Duration::from_secs(2));
    }

    /// No arguments: the documented defaults.
    #[test]
    fn defaults() {
        let c = parse(&["flagstream-relay"]).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:7070");
        assert_eq!(c.heartbeat, Duration::from_secs(15));
        assert_eq!(c.chunk_bytes, 1 << 20);
        // Safe default: nothing is seeded unless asked for.
        assert!(!c.demo);
        let demo =
            Cli::try_parse_from(["flagstream-relay", "demo"]).expect("parses").options().resolve().unwrap();
        assert!(demo.demo, "the demo command seeds the demo environment");
    }

    /// Bad values name the option and the allowed range.
    #[test]
    fn bad_values_name_the_option() {
        let e = parse(&["flagstream-relay", "serve", "--chunk-bytes", "10"]).unwrap_err();
        assert_eq!(e.to_string(), "chunk-bytes: 10 is outside 16384..=4194304");
        let e = parse(&["flagstream-relay", "serve", "--log-format", "xml"]).unwrap_err();
        assert!(e.to_string().starts_with("log-format:"), "{e}");
        let e = parse(&["flagstream-relay", "serve", "--audit-revisions", "0"]).unwrap_err();
        assert_eq!(e.to_string(), "audit-revisions: must be at least 1");
    }

    /// The file fills what the command line leaves unset; unknown keys are
    /// errors.
    #[test]
    fn file_layering() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.toml");
        std::fs::write(&path, "heartbeat = \"2s\"\nchunk-bytes = 65536\n").unwrap();
        let p = path.to_str().unwrap();
        let c = parse(&["flagstream-relay", "serve", "--config", p, "--chunk-bytes", "32768"]).unwrap();
        assert_eq!((c.heartbeat, c.chunk_bytes), (Duration::from_secs(2), 32768));
        std::fs::write(&path, "heartbeet = \"2s\"\n").unwrap();
        let e = parse(&["flagstream-relay", "serve", "--config", p]).unwrap_err();
        assert!(e.to_string().contains("heartbeet"), "{e}");
    }
}
