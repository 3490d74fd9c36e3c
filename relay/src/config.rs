//! Relay configuration: command line, `FLAGSTREAM_*` environment variables
//! and an optional TOML file, in that order of precedence, then defaults.
//! Everything is validated before any port is bound; a bad value is one
//! clear line and exit code 64.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde::{Deserialize, Serialize};

/// Exit code for bad configuration (`EX_USAGE`).
pub const EXIT_CONFIG: i32 = 64;

/// A duration written like `15s`, `500ms` or `30m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl FromStr for Dur {
    type Err = humantime::DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        humantime::parse_duration(s).map(Dur)
    }
}

impl Serialize for Dur {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// flagstream relay: holds feature flags and streams them to SDKs.
#[derive(Debug, Parser)]
#[command(name = "flagstream-relay", version, about, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// What to do (default: serve).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Options of the default command (`serve`).
    #[command(flatten)]
    pub serve: Options,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the relay (the default).
    Serve(Options),
    /// Run the relay with a live demo: an in-process SDK client prints the
    /// demo flags as they change, and a writer changes them every few
    /// seconds.
    Demo(DemoArgs),
    /// Check the configuration (command line, environment, file) the way
    /// `serve` would, then exit: 0 if it is valid, else 64 with one line
    /// saying what is wrong. Binds nothing, opens no store.
    Check(Options),
    /// Turn a stopped replica's data directory into a primary's: every
    /// environment gets a new epoch (subscribers resynchronise with a full
    /// snapshot; no cursor from before can mix with new revisions), the
    /// replicated admin tokens keep working, the audit log starts empty.
    /// Then start the relay with `--role primary` on the directory.
    Promote(PromoteArgs),
    /// gRPC health check for container probes: exits 0 when the relay at
    /// `--addr` answers SERVING, 1 otherwise (a minimal image has no curl).
    Probe(ProbeArgs),
}

/// `promote` options.
#[derive(Debug, Clone, Args)]
pub struct PromoteArgs {
    /// The replica's data directory (the relay must be stopped).
    #[arg(long, env = "FLAGSTREAM_DATA_DIR", default_value = "./flagstream-data")]
    pub data_dir: PathBuf,
}

/// `probe` options.
#[derive(Debug, Clone, Args)]
pub struct ProbeArgs {
    /// The relay's gRPC URL.
    #[arg(long, env = "FLAGSTREAM_PROBE_ADDR", default_value = "http://127.0.0.1:7070")]
    pub addr: String,
    /// Health service to check: empty for the relay's readiness,
    /// `flagstream.v1.Upstream` for a replica's upstream link.
    #[arg(long, default_value = "")]
    pub service: String,
    /// How long to wait for the answer.
    #[arg(long, default_value = "2s")]
    pub timeout: Dur,
    /// PEM CA bundle for an `https://` relay.
    #[arg(long, env = "FLAGSTREAM_PROBE_CA")]
    pub ca: Option<PathBuf>,
    /// PEM client certificate, for a relay that requires mutual TLS (with
    /// `--client-key`).
    #[arg(long, env = "FLAGSTREAM_PROBE_CLIENT_CERT", requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// PEM key of `--client-cert`.
    #[arg(long, env = "FLAGSTREAM_PROBE_CLIENT_KEY", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
    /// Liveness: exit 0 whenever the relay answers, ready or not (a relay
    /// that is draining or waiting for its upstream is alive and must not be
    /// restarted; one still loading its store does not answer yet: give it
    /// a startup probe).
    #[arg(long)]
    pub live: bool,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Action {
    /// Run the relay; with the demo writer's period under `demo`.
    Serve(Options, Option<Duration>),
    /// Validate the configuration.
    Check(Options),
    /// Promote a replica's data directory.
    Promote(PromoteArgs),
    /// Health-check a relay.
    Probe(ProbeArgs),
}

/// `demo` options.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// How often the demo writer changes a flag.
    #[arg(long, default_value = "3s", env = "FLAGSTREAM_DEMO_CHURN")]
    pub churn: Dur,
    /// Relay options.
    #[command(flatten)]
    pub options: Options,
}

/// An option value that may hold a credential (a database URL with its
/// password): `Debug` never prints it; `--help` does not show it from the
/// environment.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Sensitive(pub String);

impl std::fmt::Debug for Sensitive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<redacted {} bytes>", self.0.len())
    }
}

impl std::str::FromStr for Sensitive {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Sensitive, Self::Err> {
        Ok(Sensitive(s.to_owned()))
    }
}

/// Every relay option. Each is also an environment variable and a
/// kebab-case key of the TOML file given by `--config`.
#[derive(Debug, Clone, Default, Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Options {
    /// TOML file with any of these options (command line and environment win).
    #[arg(long, env = "FLAGSTREAM_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// gRPC listen address [default: 127.0.0.1:7070].
    #[arg(long, env = "FLAGSTREAM_LISTEN")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// Serve the Admin API on this address only (not on `listen`), so it
    /// can be fenced off from the SDK-facing port [default: on `listen`].
    #[arg(long, env = "FLAGSTREAM_ADMIN_LISTEN")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_listen: Option<SocketAddr>,
    /// Prometheus /metrics listen address [default: 127.0.0.1:9090].
    #[arg(long, env = "FLAGSTREAM_METRICS_LISTEN")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<SocketAddr>,
    /// `primary` (owns the flag store and takes writes) or `replica`
    /// (follows `upstream`, serves reads and SDKs, takes no writes)
    /// [default: primary].
    #[arg(long, env = "FLAGSTREAM_ROLE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// A replica's upstream relay URLs, comma-separated (`http://` or
    /// `https://`); it follows one at a time and fails over between them.
    #[arg(long, env = "FLAGSTREAM_UPSTREAM")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// File holding a replica's upstream credential: an admin token with
    /// the replicate scope (`flagctl token create NAME --role read
    /// --replicate`).
    #[arg(long, env = "FLAGSTREAM_UPSTREAM_TOKEN_FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_token_file: Option<PathBuf>,
    /// PEM CA bundle that verifies an `https://` upstream [default: the
    /// public web roots].
    #[arg(long, env = "FLAGSTREAM_UPSTREAM_CA")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_ca: Option<PathBuf>,
    /// PEM client certificate a replica presents to an upstream that
    /// requires mutual TLS (with `upstream-client-key`).
    #[arg(long, env = "FLAGSTREAM_UPSTREAM_CLIENT_CERT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_client_cert: Option<PathBuf>,
    /// PEM key of `upstream-client-cert`.
    #[arg(long, env = "FLAGSTREAM_UPSTREAM_CLIENT_KEY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_client_key: Option<PathBuf>,
    /// A replica's HTTP/2 keepalive PING interval on its upstream link
    /// (sent after this long without a frame) [default: 3s].
    #[arg(long, env = "FLAGSTREAM_UPSTREAM_KEEPALIVE_INTERVAL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_keepalive_interval: Option<Dur>,
    /// How long a replica waits for the upstream's PING answer before it
    /// drops the link as stalled [default: 2s].
    #[arg(long, env = "FLAGSTREAM_UPSTREAM_KEEPALIVE_TIMEOUT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_keepalive_timeout: Option<Dur>,
    /// The environments a replica follows, comma-separated [default: all].
    #[arg(long, env = "FLAGSTREAM_ENVIRONMENTS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environments: Option<String>,
    /// The URL operators reach the primary at, announced to replicas so
    /// their refusals of writes can name it (e.g. `https://flags.example:7070`).
    #[arg(long, env = "FLAGSTREAM_ADVERTISE_URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertise_url: Option<String>,
    /// Data last confirmed current longer ago than this is stale (a
    /// replica cut off from its upstream): `Evaluate` says so [default: 5s].
    #[arg(long, env = "FLAGSTREAM_STALE_AFTER")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_after: Option<Dur>,
    /// Where the flags live: `sled` (the embedded store in `data-dir`) or
    /// a PostgreSQL URL, `postgres://USER[:PASSWORD]@HOST:PORT/DB`: then
    /// every relay on that database accepts writes and follows its change
    /// feed [default: sled].
    #[arg(long, env = "FLAGSTREAM_STORE", hide_env_values = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<Sensitive>,
    /// Data directory (sled store, admin token) [default: ./flagstream-data].
    #[arg(long, env = "FLAGSTREAM_DATA_DIR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// Seed a `demo` environment on first start [default: false; true
    /// under the `demo` command].
    #[arg(long, env = "FLAGSTREAM_DEMO")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub demo: Option<bool>,
    /// Heartbeat interval on idle streams [default: 15s].
    #[arg(long, env = "FLAGSTREAM_HEARTBEAT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<Dur>,
    /// Time a client has to send its Hello [default: 10s].
    #[arg(long, env = "FLAGSTREAM_HELLO_TIMEOUT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hello_timeout: Option<Dur>,
    /// Streams older than this (±10 %) are asked to reconnect [default: 30m].
    #[arg(long, env = "FLAGSTREAM_MAX_STREAM_AGE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_stream_age: Option<Dur>,
    /// Snapshot chunk size bound in bytes, 16 KiB..=4 MiB [default: 1048576].
    #[arg(long, env = "FLAGSTREAM_CHUNK_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk_bytes: Option<usize>,
    /// Bytes of encoded deltas cached per environment revision, for
    /// subscribers at older cursors [default: 8388608].
    #[arg(long, env = "FLAGSTREAM_DELTA_CACHE_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta_cache_bytes: Option<usize>,
    /// How long a stream whose cursor is ahead of this relay's head is held
    /// with heartbeats before it is asked to reconnect elsewhere [default: 30s].
    #[arg(long, env = "FLAGSTREAM_AHEAD_HOLD")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ahead_hold: Option<Dur>,
    /// Most flags in one environment [default: 20000].
    #[arg(long, env = "FLAGSTREAM_QUOTA_FLAGS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_flags: Option<usize>,
    /// Most segments in one environment [default: 2000].
    #[arg(long, env = "FLAGSTREAM_QUOTA_SEGMENTS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_segments: Option<usize>,
    /// Most bytes of flags and segments (≈ snapshot size) in one
    /// environment [default: 67108864].
    #[arg(long, env = "FLAGSTREAM_QUOTA_SNAPSHOT_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_snapshot_bytes: Option<usize>,
    /// Admin writes per second to one environment, bursts of twice that
    /// [default: 100].
    #[arg(long, env = "FLAGSTREAM_QUOTA_WRITES_PER_SEC")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_writes_per_sec: Option<u32>,
    /// Admin writes per second by one admin token, bursts of twice that
    /// [default: 100].
    #[arg(long, env = "FLAGSTREAM_QUOTA_TOKEN_WRITES_PER_SEC")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_token_writes_per_sec: Option<u32>,
    /// New subscriptions per second to one environment, bursts of twice
    /// that [default: 1000].
    #[arg(long, env = "FLAGSTREAM_QUOTA_SUBSCRIBES_PER_SEC")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_subscribes_per_sec: Option<u32>,
    /// New subscriptions per second to the whole relay, bursts of twice
    /// that: the reconnect-storm guard [default: 5000].
    #[arg(long, env = "FLAGSTREAM_MAX_SUBSCRIBES_PER_SEC")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_subscribes_per_sec: Option<u32>,
    /// Most SDK keys of one environment, keys in a rotation's grace period
    /// included [default: 100].
    #[arg(long, env = "FLAGSTREAM_QUOTA_SDK_KEYS_PER_ENV")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_sdk_keys_per_env: Option<usize>,
    /// Most admin tokens of the relay (with PostgreSQL: of the database)
    /// [default: 1000].
    #[arg(long, env = "FLAGSTREAM_QUOTA_TOKENS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_tokens: Option<usize>,
    /// Audit reads (ListAudit pages, VerifyAudit calls) per second by one
    /// admin token, bursts of twice that [default: 10].
    #[arg(long, env = "FLAGSTREAM_QUOTA_AUDIT_READS_PER_SEC")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_audit_reads_per_sec: Option<u32>,
    /// Change-log revisions kept for deltas [default: 1024].
    #[arg(long, env = "FLAGSTREAM_CHANGELOG_REVISIONS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changelog_revisions: Option<usize>,
    /// Change-log bytes kept for deltas [default: 8388608].
    #[arg(long, env = "FLAGSTREAM_CHANGELOG_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changelog_bytes: Option<usize>,
    /// Revisions whose audit records are kept [default: 100000].
    #[arg(long, env = "FLAGSTREAM_AUDIT_REVISIONS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_revisions: Option<usize>,
    /// Most subscribers on this relay [default: 50000].
    #[arg(long, env = "FLAGSTREAM_MAX_SUBSCRIBERS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_subscribers: Option<usize>,
    /// Most SDK subscribers per environment, a quota: reloaded on SIGHUP
    /// [default: 20000].
    #[arg(long, env = "FLAGSTREAM_MAX_SUBSCRIBERS_PER_ENV")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_subscribers_per_env: Option<usize>,
    /// Most subscribers receiving a full snapshot at once [default: 64].
    #[arg(long, env = "FLAGSTREAM_SNAPSHOT_CONCURRENCY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_concurrency: Option<usize>,
    /// A subscriber whose transport pulls nothing for a heartbeat plus this
    /// is cut off [default: 30s].
    #[arg(long, env = "FLAGSTREAM_SEND_DEADLINE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_deadline: Option<Dur>,
    /// On SIGTERM, how long to wait for subscribers to leave [default: 30s].
    #[arg(long, env = "FLAGSTREAM_DRAIN_GRACE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_grace: Option<Dur>,
    /// Reconnect delays on drain are spread over 0..this [default: 5s].
    #[arg(long, env = "FLAGSTREAM_DRAIN_SPREAD")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_spread: Option<Dur>,
    /// HTTP/2 keepalive ping interval [default: 20s].
    #[arg(long, env = "FLAGSTREAM_KEEPALIVE_INTERVAL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_interval: Option<Dur>,
    /// HTTP/2 keepalive ping timeout [default: 10s].
    #[arg(long, env = "FLAGSTREAM_KEEPALIVE_TIMEOUT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_timeout: Option<Dur>,
    /// TCP_USER_TIMEOUT on accepted sockets [default: 30s].
    #[arg(long, env = "FLAGSTREAM_TCP_USER_TIMEOUT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_user_timeout: Option<Dur>,
    /// Listen backlog [default: 4096].
    #[arg(long, env = "FLAGSTREAM_BACKLOG")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backlog: Option<u32>,
    /// HTTP/2 streams per connection [default: 256].
    #[arg(long, env = "FLAGSTREAM_MAX_CONCURRENT_STREAMS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent_streams: Option<u32>,
    /// A gRPC connection that carries no request for this long (from its
    /// accept, or since its last request ended) is closed [default: 30s].
    #[arg(long, env = "FLAGSTREAM_CONNECTION_IDLE_TIMEOUT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_idle_timeout: Option<Dur>,
    /// Most open connections per gRPC listener; more are refused before
    /// any authentication [default: 60000].
    #[arg(long, env = "FLAGSTREAM_MAX_CONNECTIONS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// Most open connections from one client IP address per gRPC listener
    /// (raise it for SDKs behind one NAT or proxy address) [default: 4096].
    #[arg(long, env = "FLAGSTREAM_MAX_CONNECTIONS_PER_ADDRESS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections_per_address: Option<usize>,
    /// PEM certificate chain: serve gRPC over TLS (with --tls-key).
    #[arg(long, env = "FLAGSTREAM_TLS_CERT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "FLAGSTREAM_TLS_KEY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle: require client certificates signed by it (mutual TLS).
    #[arg(long, env = "FLAGSTREAM_TLS_CLIENT_CA")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_client_ca: Option<PathBuf>,
    /// Server-side evaluations (Admin `Evaluate`) per second by one admin
    /// token, bursts of twice that; reloaded on SIGHUP [default: 200].
    #[arg(long, env = "FLAGSTREAM_QUOTA_TOKEN_EVALUATES_PER_SEC")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_token_evaluates_per_sec: Option<u32>,
    /// Open `WatchPropagation` streams per admin token [default: 8].
    #[arg(long, env = "FLAGSTREAM_MAX_WATCHES_PER_TOKEN")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_watches_per_token: Option<usize>,
    /// Open `WatchPropagation` streams on this relay [default: 256].
    #[arg(long, env = "FLAGSTREAM_MAX_WATCHES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_watches: Option<usize>,
    /// Log format: `text` or `json` [default: text].
    #[arg(long, env = "FLAGSTREAM_LOG_FORMAT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<String>,
}

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
    /// Maximum stream age.
    pub max_stream_age: Duration,
    /// Snapshot chunk bound.
    pub chunk_bytes: usize,
    /// Delta cache bound per environment revision, bytes.
    pub delta_cache_bytes: usize,
    /// Per-environment quotas and admission rates.
    pub quotas: crate::limit::QuotaConfig,
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
    /// Concurrent snapshot sends.
    pub snapshot_concurrency: usize,
    /// Send deadline.
    pub send_deadline: Duration,
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
    pub connections: crate::limit::ConnCaps,
    /// A connection with no request for this long is closed.
    pub connection_idle_timeout: Duration,
    /// JSON logs?
    pub log_json: bool,
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
            admin_listen: self.admin_listen,
            data_dir: self.data_dir.unwrap_or_else(|| PathBuf::from("./flagstream-data")),
            demo: self.demo.unwrap_or(false),
            heartbeat: d(self.heartbeat, 15),
            hello_timeout: d(self.hello_timeout, 10),
            max_stream_age: d(self.max_stream_age, 30 * 60),
            chunk_bytes: self.chunk_bytes.unwrap_or(1 << 20),
            delta_cache_bytes: self.delta_cache_bytes.unwrap_or(8 << 20),
            quotas: {
                let q = crate::limit::QuotaConfig::default();
                crate::limit::QuotaConfig {
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
                .unwrap_or(crate::limit::QuotaConfig::default().subscribers),
            snapshot_concurrency: self.snapshot_concurrency.unwrap_or(64),
            send_deadline: d(self.send_deadline, 30),
            drain_grace: d(self.drain_grace, 30),
            drain_spread: d(self.drain_spread, 5),
            keepalive_interval: d(self.keepalive_interval, 20),
            keepalive_timeout: d(self.keepalive_timeout, 10),
            tcp_user_timeout: d(self.tcp_user_timeout, 30),
            backlog: self.backlog.unwrap_or(4096),
            max_concurrent_streams: self.max_concurrent_streams.unwrap_or(256),
            connection_idle_timeout: d(self.connection_idle_timeout, 30),
            connections: crate::limit::ConnCaps {
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
        ] {
            check(v >= 1, format!("{name}: must be at least 1"))?;
        }
        check(c.hello_timeout >= Duration::from_millis(100), "hello-timeout: must be at least 100ms".into())?;
        check(c.max_stream_age >= Duration::from_secs(1), "max-stream-age: must be at least 1s".into())?;
        check(c.send_deadline >= Duration::from_millis(100), "send-deadline: must be at least 100ms".into())?;
        check(c.changelog_revisions >= 1, "changelog-revisions: must be at least 1".into())?;
        check(c.audit_revisions >= 1, "audit-revisions: must be at least 1".into())?;
        check(c.max_subscribers >= 1, "max-subscribers: must be at least 1".into())?;
        check(c.max_subscribers_per_env >= 1, "max-subscribers-per-env: must be at least 1".into())?;
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

impl Cli {
    /// The relay options of `serve`, `demo` or `check` (defaults for the
    /// other commands).
    pub fn options(self) -> Options {
        match self.action() {
            Action::Serve(o, _) | Action::Check(o) => o,
            Action::Promote(_) | Action::Probe(_) => Options::default(),
        }
    }

    /// What to do.
    pub fn action(self) -> Action {
        match self.command {
            Some(Command::Serve(o)) => Action::Serve(o, None),
            Some(Command::Demo(d)) => {
                let mut o = d.options;
                o.demo.get_or_insert(true);
                Action::Serve(o, Some(d.churn.0))
            }
            Some(Command::Check(o)) => Action::Check(o),
            Some(Command::Promote(p)) => Action::Promote(p),
            Some(Command::Probe(p)) => Action::Probe(p),
            None => Action::Serve(self.serve, None),
        }
    }
}

#[cfg(test)]
mod tests {
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
