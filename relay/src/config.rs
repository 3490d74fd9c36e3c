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
mod resolve;

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

/// Validated configuration with every default filled in, one struct per
/// part of the relay: each part is given its own settings and no other.
#[derive(Debug, Clone)]
pub struct Config {
    /// Data directory.
    pub data_dir: PathBuf,
    /// Seed the demo environment on first start.
    pub demo: bool,
    /// The options this was resolved from (to reload on SIGHUP).
    pub source: Option<Options>,
    /// The store.
    pub store: StoreSettings,
    /// This relay's place in a deployment.
    pub cluster: ClusterSettings,
    /// The listeners and their connections.
    pub listen: ListenSettings,
    /// Each Subscribe stream.
    pub stream: StreamConfig,
    /// The subscriber registry's admission and deadlines.
    pub hub: HubLimits,
    /// Per-environment quotas and admission rates (reloaded on SIGHUP).
    pub quotas: crate::ops::limit::QuotaConfig,
    /// `WatchPropagation` bounds.
    pub watches: WatchLimits,
    /// Logs and spans.
    pub log: LogSettings,
    /// The OFREP listener (`None`: off).
    pub ofrep: Option<OfrepSettings>,
}

/// The OFREP listener's address and limits (docs/OPERATIONS.md, "OFREP").
#[derive(Debug, Clone)]
pub struct OfrepSettings {
    /// Where it listens (`ofrep-listen`).
    pub listen: SocketAddr,
    /// Requests a second one server-side SDK key may make
    /// (`ofrep-requests-per-sec-per-key`).
    pub requests_per_sec_per_key: u32,
    /// Requests a second one client-side key may make, from every browser
    /// that shares it (`ofrep-requests-per-sec-per-client-key`).
    pub requests_per_sec_per_client_key: u32,
    /// Requests a second from one client address (`ofrep-requests-per-sec-per-address`).
    pub requests_per_sec_per_address: u32,
    /// Largest request body, bytes (`ofrep-max-body-bytes`).
    pub max_body_bytes: usize,
    /// Most connections open at once (`ofrep-max-connections`).
    pub max_connections: usize,
    /// Most connections open at once from one address.
    pub max_connections_per_address: usize,
    /// A change stream's event waits a random time below this after a
    /// write (`ofrep-event-spread`).
    pub event_spread: std::time::Duration,
    /// Most change streams open at once (`ofrep-max-event-streams`).
    pub max_event_streams: usize,
}

/// The store's settings.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// Where the flags live.
    pub url: StoreUrl,
    /// sled's page cache bound, bytes.
    pub sled_cache_bytes: u64,
    /// Change-log revisions kept.
    pub changelog_revisions: usize,
    /// Change-log bytes kept.
    pub changelog_bytes: usize,
    /// Revisions whose audit records are kept.
    pub audit_revisions: usize,
}

/// This relay's place in a deployment.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// `None` on the primary; a replica's upstream.
    pub upstream: Option<Upstream>,
    /// The primary's advertised URL.
    pub advertise_url: Option<String>,
    /// Staleness threshold (`Status`, the status page).
    pub stale_after: Duration,
    /// How often a relay on a PostgreSQL store passes usage to the others.
    pub usage_share_interval: Duration,
}

/// The listeners and their connections.
#[derive(Debug, Clone)]
pub struct ListenSettings {
    /// gRPC listen address.
    pub grpc: SocketAddr,
    /// Admin API address, if separate from `grpc`.
    pub admin: Option<SocketAddr>,
    /// Metrics listen address.
    pub metrics: SocketAddr,
    /// Serve the metrics listener over TLS (with `tls`).
    pub metrics_tls: bool,
    /// Accept a status page token over plaintext from non-loopback clients.
    pub status_page_remote_plaintext: bool,
    /// TLS material, read and checked at startup.
    pub tls: Option<Tls>,
    /// Listen backlog.
    pub backlog: u32,
    /// TCP_USER_TIMEOUT.
    pub tcp_user_timeout: Duration,
    /// HTTP/2 keepalive interval; `None`: no PINGs (each stream's
    /// heartbeat with `TCP_USER_TIMEOUT`, and TCP keepalive, find a dead
    /// peer).
    pub keepalive_interval: Option<Duration>,
    /// HTTP/2 keepalive timeout.
    pub keepalive_timeout: Duration,
    /// TCP keepalive idle time of accepted sockets.
    pub tcp_keepalive_idle: Duration,
    /// HTTP/2 streams per connection.
    pub max_concurrent_streams: u32,
    /// Connection caps of each gRPC listener.
    pub connections: crate::ops::limit::ConnCaps,
    /// A connection with no request for this long is closed.
    pub connection_idle_timeout: Duration,
}

/// Stream timing and size settings.
#[derive(Debug, Clone)]
pub struct StreamConfig {
    /// How long a client has to send its Hello.
    pub hello_timeout: Duration,
    /// Heartbeat interval (each stream starts at a random phase).
    pub heartbeat: Duration,
    /// Streams older than this (± 10 %) are asked to reconnect elsewhere.
    pub max_stream_age: Duration,
    /// Snapshot chunk bound, bytes.
    pub chunk_bytes: usize,
    /// Delta cache bound per environment revision, bytes.
    pub delta_cache_bytes: usize,
    /// How long a cursor ahead of the head is held with heartbeats before
    /// the stream is asked to reconnect elsewhere.
    pub ahead_hold: Duration,
    /// Reconnect delays on drain are spread over 0..this.
    pub drain_spread: Duration,
    /// How long a drain waits for the subscribers to leave.
    pub drain_grace: Duration,
}

/// Admission and stream limits of the subscriber registry.
#[derive(Debug, Clone)]
pub struct HubLimits {
    /// Most subscribers on this relay.
    pub max_subscribers: usize,
    /// Most subscribers of one environment.
    pub max_subscribers_per_env: usize,
    /// Most replica relay streams of one environment.
    pub max_replica_streams_per_env: usize,
    /// Most subscribers receiving a full snapshot at once.
    pub snapshot_concurrency: usize,
    /// How long a stream may go without its transport pulling a message
    /// (beyond one heartbeat interval) before its connection is cut.
    pub send_deadline: Duration,
    /// Heartbeat interval (the reaper allows one on top of the deadline).
    pub heartbeat: Duration,
    /// How long an SDK subscriber may stay behind the head (not handed a
    /// revision the reaper saw committed that long ago), plus its progress
    /// credit, before its connection is cut.
    pub behind_deadline: Duration,
    /// Progress credit, bytes/s: each byte handed to a stream while it is
    /// behind extends its behind deadline by 1/this seconds.
    pub behind_progress_rate: u64,
}

/// `WatchPropagation` bounds.
#[derive(Debug, Clone, Copy)]
pub struct WatchLimits {
    /// Open watches per admin token.
    pub per_token: usize,
    /// Open watches on the relay.
    pub total: usize,
}

/// Logs and spans.
#[derive(Debug, Clone)]
pub struct LogSettings {
    /// JSON logs?
    pub json: bool,
    /// The OTLP/gRPC collector spans are sent to, if any.
    pub otlp_endpoint: Option<String>,
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

    /// Every part's settings, each resolved and checked by its own step
    /// (`config/resolve.rs`), then the checks that span parts.
    fn finish(self) -> Result<Config, ConfigError> {
        let cluster = self.cluster()?;
        let store = self.store_settings(cluster.upstream.is_some())?;
        if cluster.upstream.is_some() && self.demo == Some(true) {
            return Err(ConfigError("demo: a replica serves its upstream's environments".into()));
        }
        let stream = self.stream()?;
        let hub = self.hub(stream.heartbeat)?;
        let listen = self.listen()?;
        let check = |ok: bool, msg: String| if ok { Ok(()) } else { Err(ConfigError(msg)) };
        check(
            listen.connections.total >= hub.max_subscribers,
            format!(
                "max-connections: {} is below max-subscribers ({}): every SDK holds a connection; raise max-connections",
                listen.connections.total, hub.max_subscribers
            ),
        )?;
        Ok(Config {
            data_dir: self.data_dir.clone().unwrap_or_else(|| PathBuf::from("./flagstream-data")),
            demo: self.demo.unwrap_or(false),
            source: None,
            quotas: self.quotas()?,
            watches: self.watches()?,
            log: self.log()?,
            ofrep: self.ofrep()?,
            store,
            cluster,
            listen,
            stream,
            hub,
        })
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
        assert_eq!(c.stream.heartbeat, Duration::from_secs(2));
    }

    /// No arguments: the documented defaults.
    #[test]
    fn defaults() {
        let c = parse(&["flagstream-relay"]).unwrap();
        assert_eq!(c.listen.grpc.to_string(), "127.0.0.1:7070");
        assert_eq!(c.stream.heartbeat, Duration::from_secs(15));
        assert_eq!(c.stream.chunk_bytes, 1 << 20);
        // Safe default: nothing is seeded unless asked for.
        assert!(!c.demo);
        let demo =
            Cli::try_parse_from(["flagstream-relay", "demo"]).expect("parses").options().resolve().unwrap();
        assert!(demo.demo, "the demo command seeds the demo environment");
    }

    /// The relay sends no HTTP/2 PINGs unless told (each stream's
    /// heartbeat finds a dead peer); set, they are checked against the
    /// timeout, and they set the TCP keepalive idle time too.
    #[test]
    fn keepalive_pings_are_off_unless_set() {
        let c = parse(&["flagstream-relay"]).unwrap();
        assert_eq!(c.listen.keepalive_interval, None);
        assert_eq!(c.listen.tcp_keepalive_idle, Duration::from_secs(20));
        let c = parse(&["flagstream-relay", "--keepalive-interval", "0s"]).unwrap();
        assert_eq!(c.listen.keepalive_interval, None);
        let c = parse(&["flagstream-relay", "--keepalive-interval", "30s"]).unwrap();
        assert_eq!(c.listen.keepalive_interval, Some(Duration::from_secs(30)));
        assert_eq!(c.listen.tcp_keepalive_idle, Duration::from_secs(30));
        let e = parse(&["flagstream-relay", "--keepalive-interval", "5s"]).unwrap_err();
        assert_eq!(e.to_string(), "keepalive-timeout: must be shorter than keepalive-interval");
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
        assert_eq!((c.stream.heartbeat, c.stream.chunk_bytes), (Duration::from_secs(2), 32768));
        std::fs::write(&path, "heartbeet = \"2s\"\n").unwrap();
        let e = parse(&["flagstream-relay", "serve", "--config", p]).unwrap_err();
        assert!(e.to_string().contains("heartbeet"), "{e}");
    }
}
