//! The relay's options as they are written: the command line (commands and
//! flags, each with its `FLAGSTREAM_*` variable) and the TOML file, one
//! struct for both. Turning them into a checked [`Config`](super::Config)
//! is `config.rs`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde::{Deserialize, Serialize};

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
    /// Serve the metrics listener (metrics and the status page) over TLS
    /// with `tls-cert` and `tls-key` [default: false].
    #[arg(long, env = "FLAGSTREAM_METRICS_TLS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_tls: Option<bool>,
    /// On a metrics listener without TLS, accept a status page token from
    /// clients that are not on this host (the token then crosses the
    /// network in clear) [default: false: loopback clients only].
    #[arg(long, env = "FLAGSTREAM_STATUS_PAGE_REMOTE_PLAINTEXT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_page_remote_plaintext: Option<bool>,
    /// Serve OFREP (the OpenFeature Remote Evaluation Protocol) on this
    /// address, over TLS when `tls-cert` and `tls-key` are set [default:
    /// off].
    #[arg(long, env = "FLAGSTREAM_OFREP_LISTEN")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ofrep_listen: Option<SocketAddr>,
    /// OFREP requests a second one server-side SDK key may make (more get
    /// 429) [default: 200].
    #[arg(long, env = "FLAGSTREAM_OFREP_REQUESTS_PER_SEC_PER_KEY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ofrep_requests_per_sec_per_key: Option<u32>,
    /// OFREP requests a second one client-side key may make, from all the
    /// browsers and apps that share it (more get 429) [default: 20000].
    #[arg(long, env = "FLAGSTREAM_OFREP_REQUESTS_PER_SEC_PER_CLIENT_KEY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ofrep_requests_per_sec_per_client_key: Option<u32>,
    /// OFREP requests a second from one client address (more get 429)
    /// [default: 50].
    #[arg(long, env = "FLAGSTREAM_OFREP_REQUESTS_PER_SEC_PER_ADDRESS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ofrep_requests_per_sec_per_address: Option<u32>,
    /// Largest OFREP request body, bytes [default: 65536].
    #[arg(long, env = "FLAGSTREAM_OFREP_MAX_BODY_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ofrep_max_body_bytes: Option<usize>,
    /// Most OFREP connections open at once (64 per client address)
    /// [default: 4096].
    #[arg(long, env = "FLAGSTREAM_OFREP_MAX_CONNECTIONS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ofrep_max_connections: Option<usize>,
    /// Most OFREP connections open at once from one client address
    /// [default: 64, at most ofrep-max-connections].
    #[arg(long, env = "FLAGSTREAM_OFREP_MAX_CONNECTIONS_PER_ADDRESS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ofrep_max_connections_per_address: Option<usize>,
    /// Most OFREP change streams open at once (each holds a connection)
    /// [default: half of ofrep-max-connections].
    #[arg(long, env = "FLAGSTREAM_OFREP_MAX_EVENT_STREAMS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ofrep_max_event_streams: Option<usize>,
    /// After a write, each OFREP change stream waits a random time below
    /// this before its event, so clients' re-fetches spread out
    /// [default: 500ms].
    #[arg(long, env = "FLAGSTREAM_OFREP_EVENT_SPREAD")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ofrep_event_spread: Option<Dur>,
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
    /// How often a replica forwards its SDKs' merged usage summaries to its
    /// upstream [default: 60s].
    #[arg(long, env = "FLAGSTREAM_UPSTREAM_USAGE_INTERVAL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_usage_interval: Option<Dur>,
    /// How often a relay on a PostgreSQL store passes its subscribers'
    /// usage summaries to the other relays of the database [default: 60s].
    #[arg(long, env = "FLAGSTREAM_USAGE_SHARE_INTERVAL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_share_interval: Option<Dur>,
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
    /// Bytes of sled's page cache (sled store). The relay reads sled only
    /// at start; the cache speeds up commits [default: 16777216].
    #[arg(long, env = "FLAGSTREAM_SLED_CACHE_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sled_cache_bytes: Option<u64>,
    /// Resident memory, bytes, the relay keeps within: a write that grows an
    /// environment is refused when the relay's memory plus three times the
    /// environment's new size would pass it [default: 0, no budget].
    #[arg(long, env = "FLAGSTREAM_MEMORY_BUDGET")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_budget: Option<u64>,
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
    /// Usage reads (GetUsage pages) per second by one admin token, bursts
    /// of twice that [default: 20].
    #[arg(long, env = "FLAGSTREAM_QUOTA_USAGE_READS_PER_SEC")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_usage_reads_per_sec: Option<u32>,
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
    /// Most replica relay streams per environment (one per replica
    /// following it; a replicate token is trusted, a bug in a replica must
    /// still not open streams without bound) [default: 256].
    #[arg(long, env = "FLAGSTREAM_MAX_REPLICA_STREAMS_PER_ENV")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_replica_streams_per_env: Option<usize>,
    /// Most subscribers receiving a full snapshot at once [default: 64].
    #[arg(long, env = "FLAGSTREAM_SNAPSHOT_CONCURRENCY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_concurrency: Option<usize>,
    /// A subscriber whose transport pulls nothing for a heartbeat plus this
    /// is cut off [default: 30s].
    #[arg(long, env = "FLAGSTREAM_SEND_DEADLINE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_deadline: Option<Dur>,
    /// A subscriber that stays behind the head this long (not handed a
    /// revision committed that long ago), less its progress credit, is cut
    /// off [default: 60s].
    #[arg(long, env = "FLAGSTREAM_BEHIND_DEADLINE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub behind_deadline: Option<Dur>,
    /// Progress credit of a stream that is behind: every byte handed to it
    /// meanwhile extends its behind deadline by 1/this seconds, so a large
    /// snapshot still arriving at this rate or faster is not cut, bytes/s
    /// [default: 16384].
    #[arg(long, env = "FLAGSTREAM_BEHIND_PROGRESS_RATE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub behind_progress_rate: Option<u64>,
    /// On SIGTERM, how long to wait for subscribers to leave [default: 30s].
    #[arg(long, env = "FLAGSTREAM_DRAIN_GRACE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_grace: Option<Dur>,
    /// Reconnect delays on drain are spread over 0..this [default: 5s].
    #[arg(long, env = "FLAGSTREAM_DRAIN_SPREAD")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_spread: Option<Dur>,
    /// HTTP/2 keepalive PING interval on accepted connections; also the
    /// TCP keepalive idle time [default: no PINGs (0s), TCP keepalive
    /// after 20s: each stream's heartbeat finds a dead peer].
    #[arg(long, env = "FLAGSTREAM_KEEPALIVE_INTERVAL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_interval: Option<Dur>,
    /// HTTP/2 keepalive PING answer deadline, when PINGs are on [default: 10s].
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
    /// Send tracing spans (a write from the call to its commit, each
    /// stream's life, replica and change-feed steps) to this OpenTelemetry
    /// collector over OTLP/gRPC, e.g. `http://127.0.0.1:4317` [default:
    /// off].
    #[arg(long, env = "FLAGSTREAM_OTLP_ENDPOINT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
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
