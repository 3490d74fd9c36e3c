//! Following one environment over the Subscribe stream: the machinery the
//! SDK client and replica relays share (DESIGN: "replica relays reuse the
//! SDK's sync machinery rather than a second copy").
//!
//! [`run`] keeps one stream open to one of the configured endpoints and
//! hands what arrives to a [`Sink`]: complete snapshots (chunks assembled
//! and checked as they arrive, within the snapshot size limit), deltas, and
//! [`Event`]s (connected, heartbeat, applied, ended, stale). It owns
//! everything about staying connected, built against the transport facts
//! the product rests on: every attempt builds a new `Channel` (tonic would
//! otherwise reuse a dead connection); HTTP/2 keepalive and
//! `TCP_USER_TIMEOUT` are set on the client; a watchdog tears the stream
//! down when no message arrives within `watchdog_misses` heartbeat
//! intervals (sized from the interval the relay states); failures back off
//! with full jitter and rotate through the endpoints; a relay's
//! retry-after hint is honoured with jitter; data that cannot be applied
//! makes the next Hello ask for a snapshot. What the data *means* (compiled
//! flags for an SDK, a persisted store for a relay) is the sink's business.

use std::sync::Arc;
use std::time::Duration;

use flagstream_proto::v1 as pb;
use hyper_util::client::legacy::connect::HttpConnector;
use rand::Rng;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use crate::backoff::Backoff;
pub use crate::raw::{RawChunk, RawDelta};
use crate::raw::{RawKind, RawResponse};
use crate::replica::ApplyError;

/// Requests queued towards the relay before the newest replaces the rest
/// (acks are cumulative and reports replace each other, so nothing is lost
/// by keeping only the newest).
const REQUEST_QUEUE: usize = 4;

/// The longest retry-after hint honoured: a relay cannot park clients.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Refusals with a hint in a row that are retried at the hint alone; the
/// next ones also wait the backoff.
const REFUSALS_BEFORE_BACKOFF: u32 = 3;

/// The shortest wait after a refusal with a hint: a tiny hint cannot make
/// a client spin.
pub const MIN_RETRY_AFTER: Duration = Duration::from_millis(100);

/// TLS settings for `https://` endpoints.
#[derive(Clone, Default)]
pub struct Tls {
    /// PEM CA bundle to trust instead of the public web roots.
    pub ca: Option<Vec<u8>>,
    /// PEM client certificate and key (mutual TLS).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Tls {
    /// Never prints key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("custom_ca", &self.ca.is_some())
            .field("client_identity", &self.identity.is_some())
            .finish()
    }
}

impl Tls {
    /// The tonic TLS configuration.
    pub fn config(&self) -> tonic::transport::ClientTlsConfig {
        let mut c = tonic::transport::ClientTlsConfig::new();
        c = match &self.ca {
            Some(ca) => c.ca_certificate(tonic::transport::Certificate::from_pem(ca)),
            None => c.with_webpki_roots(),
        };
        if let Some((cert, key)) = &self.identity {
            c = c.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        c
    }
}

/// How to follow: endpoints, credential, and every timing of the
/// connection's life. [`FollowConfig::default`] holds the SDK's defaults
/// (PROTOCOL.md §2.8).
#[derive(Debug, Clone)]
pub struct FollowConfig {
    /// Relay URLs, tried in this order from the first (rotating on failure).
    pub endpoints: Vec<String>,
    /// `Hello.sdk_key`: an SDK key, or for a replica relay its token with
    /// the replicate scope.
    pub credential: crate::Secret,
    /// `Hello.environment`: empty for SDKs (the key selects it); a relay
    /// follower names the environment its token is to follow.
    pub environment: String,
    /// `Hello.subscriber_kind`.
    pub subscriber_kind: pb::SubscriberKind,
    /// `Hello.sdk_name` (e.g. `flagstream-rust`, `flagstream-relay`).
    pub sdk_name: String,
    /// `Hello.instance_id`: one per process, kept across reconnects.
    pub instance_id: String,
    /// Connect timeout per attempt.
    pub connect_timeout: Duration,
    /// HTTP/2 keepalive ping interval (also while idle).
    pub keepalive_interval: Duration,
    /// HTTP/2 keepalive ping timeout.
    pub keepalive_timeout: Duration,
    /// `TCP_USER_TIMEOUT` of the connection.
    pub tcp_user_timeout: Duration,
    /// Time allowed for a stream's first message.
    pub first_message_timeout: Duration,
    /// Heartbeat interval assumed until the relay states its own.
    pub heartbeat_default: Duration,
    /// Missed heartbeat intervals before the stream counts as stalled.
    pub watchdog_misses: u32,
    /// First backoff ceiling.
    pub backoff_base: Duration,
    /// Largest backoff ceiling.
    pub backoff_cap: Duration,
    /// A stream up this long resets the backoff.
    pub healthy_after: Duration,
    /// Random delay (up to) before resubscribing after a stall.
    pub stall_jitter: Duration,
    /// Without a stream for this long, [`Event::Stale`] is raised.
    pub stale_after: Duration,
    /// Largest message accepted (`max_decoding_message_size`).
    pub max_message_bytes: usize,
    /// Largest snapshot accepted, summed item bytes (memory stays bounded
    /// even if a relay never sends the last chunk).
    pub max_snapshot_bytes: usize,
    /// How often a relay follower offers its propagation report upstream.
    pub report_interval: Duration,
    /// TLS for `https://` endpoints.
    pub tls: Tls,
}

impl Default for FollowConfig {
    fn default() -> Self {
        FollowConfig {
            endpoints: Vec::new(),
            credential: crate::Secret::default(),
            environment: String::new(),
            subscriber_kind: pb::SubscriberKind::Sdk,
            sdk_name: "flagstream-rust".into(),
            instance_id: format!("{:016x}", rand::random::<u64>()),
            connect_timeout: Duration::from_secs(3),
            keepalive_interval: Duration::from_secs(3),
            keepalive_timeout: Duration::from_secs(2),
            tcp_user_timeout: Duration::from_secs(20),
            first_message_timeout: Duration::from_secs(10),
            heartbeat_default: Duration::from_secs(15),
            watchdog_misses: 3,
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(30),
            healthy_after: Duration::from_secs(60),
            stall_jitter: Duration::from_secs(2),
            stale_after: Duration::from_secs(5),
            max_message_bytes: 16 << 20,
            max_snapshot_bytes: crate::Limits::default().max_snapshot_bytes,
            report_interval: Duration::from_secs(1),
            tls: Tls::default(),
        }
    }
}

/// How a stream ended (for counters and status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndKind {
    /// Connecting or subscribing failed.
    Connect,
    /// The relay refused or ended the stream with a retry-after hint.
    RetryAfter,
    /// No message within the watchdog interval, or the connection broke
    /// under a stream silent past the HTTP/2 keepalive interval plus
    /// timeout (the keepalive ping went unanswered).
    Stalled,
    /// The stream failed or closed.
    Broken,
    /// The relay asked the client to reconnect.
    Reconnect,
    /// Received data could not be applied; a snapshot is requested.
    Resync,
}

/// Something the sink may want to know.
#[derive(Debug)]
pub enum Event<'a> {
    /// A stream is open at `endpoint` (its first message arrived).
    Connected {
        /// The endpoint.
        endpoint: &'a str,
    },
    /// A heartbeat arrived.
    Heartbeat(&'a pb::Heartbeat),
    /// A snapshot (`snapshot: true`) or delta was applied.
    Applied {
        /// Whether it was a full snapshot.
        snapshot: bool,
    },
    /// Received data could not be applied; the next Hello asks for a
    /// snapshot.
    Resync(&'a ApplyError),
    /// The stream ended; the next attempt starts after `retry_in`.
    Ended {
        /// The endpoint.
        endpoint: &'a str,
        /// Why, in one line.
        reason: &'a str,
        /// The kind of end.
        kind: EndKind,
        /// The wait before the next attempt.
        retry_in: Duration,
        /// Whether the next attempt goes to another endpoint.
        switched: bool,
    },
    /// No stream has delivered anything for `stale_after`: the data the
    /// sink holds may be out of date. Raised once per outage.
    Stale {
        /// The last stream end's reason.
        reason: &'a str,
    },
}

/// Where a follower puts what it receives. Called from the follow task,
/// one call at a time, in stream order; `apply_*` run on tokio's blocking
/// pool (decoding and compiling thousands of items takes milliseconds and
/// must not hold a runtime worker).
pub trait Sink: Send + Sync + 'static {
    /// The cursor to resume from (`None`: no data yet).
    fn cursor(&self) -> Option<pb::Cursor>;
    /// The checksum (PROTOCOL.md §3.1) of the state [`Sink::cursor`] names
    /// (`None` with it). A heartbeat naming that cursor as the head with
    /// another checksum ends the stream with a resync.
    fn checksum(&self) -> Option<u64>;
    /// Applies a complete snapshot (chunks in order, `chunk_index` 0..n).
    /// Verifies the checksum; on success the data is served.
    fn apply_snapshot(&self, chunks: Vec<RawChunk>) -> Result<pb::Cursor, ApplyError>;
    /// Applies a delta and verifies the checksum.
    fn apply_delta(&self, delta: RawDelta) -> Result<pb::Cursor, ApplyError>;
    /// After a failed apply: the next Hello asks for a full snapshot, while
    /// the data held keeps being served.
    fn forget_cursor(&self);
    /// Something happened (status, counters, logs).
    fn event(&self, event: Event<'_>);
    /// A relay follower's propagation report for its upstream, offered
    /// every `report_interval`; `None`: nothing new to report.
    fn report(&self) -> Option<pb::PropagationReport> {
        None
    }
}

/// Why a stream ended.
#[derive(Debug)]
enum End {
    Connect(String),
    /// Refused or ended with a retry-after hint (PROTOCOL.md §6).
    RetryAfter(String, Duration),
    /// No message for this long; the transport's error, if it reported one.
    Stalled(Duration, Option<String>),
    Broken(String),
    /// The relay asked us to go elsewhere after `delay`.
    Reconnect(Duration, String),
    Resync(ApplyError),
}

/// What one stream achieved before it ended.
#[derive(Debug, Default)]
struct Progress {
    /// Messages received.
    messages: u64,
    /// Snapshots and deltas applied.
    applied: u64,
}

/// State kept across streams.
struct Follower<S> {
    sink: Arc<S>,
    cfg: FollowConfig,
    /// Checksum mismatches seen by this follower (sent in every Hello).
    mismatches: u64,
}

/// Follows until the task is aborted (or the returned future dropped).
pub async fn run<S: Sink>(sink: Arc<S>, cfg: FollowConfig) {
    if cfg.endpoints.is_empty() {
        tracing::error!("follow: no endpoints configured");
        return std::future::pending().await;
    }
    let mut f = Follower { sink, cfg, mismatches: 0 };
    let mut backoff = Backoff::new(f.cfg.backoff_base, f.cfg.backoff_cap);
    let mut idx = 0usize;
    let mut down_since = Instant::now();
    // Resyncs since the last successful apply: the second in a row backs
    // off and moves on, so data this client cannot apply never becomes a
    // fleet-wide snapshot storm.
    let mut resyncs_in_row = 0u32;
    // Refusals with a retry hint since the last stream that delivered a
    // message: past `REFUSALS_BEFORE_BACKOFF` they wait the backoff too.
    let mut refusals_in_row = 0u32;
    let mut stale_raised = false;
    loop {
        let endpoint = f.cfg.endpoints[idx % f.cfg.endpoints.len()].clone();
        let started = Instant::now();
        let mut progress = Progress::default();
        let end = f.stream_once(&endpoint, &mut progress).await;
        if started.elapsed() >= f.cfg.healthy_after {
            backoff.reset();
        }
        if progress.applied > 0 {
            resyncs_in_row = 0;
        }
        if progress.messages > 0 {
            refusals_in_row = 0;
        }
        // The outage starts when a stream that worked (delivered at least
        // one message) ends, not at each failed attempt to get one back.
        if progress.messages > 0 {
            down_since = Instant::now();
            stale_raised = false;
        }
        if let End::Resync(e) = &end {
            if matches!(e, ApplyError::Checksum { .. } | ApplyError::Diverged { .. }) {
                f.mismatches += 1;
            }
            tracing::warn!(error = %e, endpoint = %endpoint, "could not apply received data; requesting a full snapshot");
            f.sink.event(Event::Resync(e));
            // Keep serving what we have; ask for everything again.
            f.sink.forget_cursor();
            resyncs_in_row += 1;
        }
        if matches!(end, End::RetryAfter(..)) {
            refusals_in_row += 1;
        }
        let Plan { kind, delay, switch, reason } =
            plan(end, &endpoint, &mut backoff, (resyncs_in_row, refusals_in_row), f.cfg.stall_jitter);
        tracing::info!(endpoint = %endpoint, reason = %reason, retry_in = ?delay, "relay stream ended");
        let switched = switch && f.cfg.endpoints.len() > 1;
        f.sink.event(Event::Ended { endpoint: &endpoint, reason: &reason, kind, retry_in: delay, switched });
        if switched {
            idx += 1;
        }
        // Wait, raising `Stale` once the outage passes the threshold.
        let wake = Instant::now() + delay;
        loop {
            let stale_at = down_since + f.cfg.stale_after;
            if !stale_raised && Instant::now() >= stale_at {
                stale_raised = true;
                f.sink.event(Event::Stale { reason: &reason });
            }
            let next = if stale_raised { wake } else { wake.min(stale_at) };
            tokio::time::sleep_until(next).await;
            if Instant::now() >= wake {
                break;
            }
        }
    }
}

/// What to do after a stream ended: how it is counted, how long to wait,
/// whether to move to the next endpoint, and why (for the log and the
/// status).
#[derive(Debug)]
struct Plan {
    kind: EndKind,
    delay: Duration,
    switch: bool,
    reason: String,
}

/// The retry decision for `end` (pure but for the jitter): failures back
/// off with full jitter and move on; a retry-after hint is honoured with
/// up to a quarter more of jitter (at least 100 ms); a stall reconnects elsewhere after a
/// short jitter; a relay's reconnect request waits what it suggests; the
/// first resync in a row retries at once on the same endpoint, the next
/// ones back off and move on, so data this client cannot apply never
/// becomes a snapshot storm.
fn plan(
    end: End,
    endpoint: &str,
    backoff: &mut Backoff,
    (resyncs_in_row, refusals_in_row): (u32, u32),
    stall_jitter: Duration,
) -> Plan {
    let (kind, delay, switch, reason) = match end {
        End::Connect(e) => (EndKind::Connect, backoff.fail(), true, format!("{endpoint}: {e}")),
        End::RetryAfter(e, hint) => {
            // The relay says when (a subscription refusal is the caller's
            // turn in its queue): come then, spread by up to a quarter
            // more, never sooner than 100 ms. From the fourth refusal in a
            // row (a full quota, not a passing storm, where a turn is
            // rarely missed more than once) it also waits the backoff.
            let base = hint.max(MIN_RETRY_AFTER);
            let turn = base + jitter_up_to(base / 4);
            let backoff = backoff.fail();
            let delay = if refusals_in_row > REFUSALS_BEFORE_BACKOFF { turn.max(backoff) } else { turn };
            let reason = format!("{endpoint}: {e} (relay asks to retry after {hint:?})");
            (EndKind::RetryAfter, delay, true, reason)
        }
        End::Broken(e) => (EndKind::Broken, backoff.fail(), true, format!("{endpoint}: {e}")),
        End::Stalled(after, cause) => {
            // A watchdog stall has no transport error: no suffix then.
            let cause = cause.map(|c| format!(": {c}")).unwrap_or_default();
            let reason = format!("{endpoint}: no message for {after:?} (stalled connection dropped){cause}");
            // The first stall after a healthy stream moves on within the
            // jitter; stalls in a row back off like any failure.
            let delay = if backoff.is_fresh() {
                backoff.fail();
                jitter_up_to(stall_jitter)
            } else {
                backoff.fail().max(jitter_up_to(stall_jitter))
            };
            (EndKind::Stalled, delay, true, reason)
        }
        End::Reconnect(delay, why) => (
            EndKind::Reconnect,
            delay + jitter_up_to(Duration::from_secs(1)),
            true,
            format!("{endpoint}: relay asked to reconnect: {why}"),
        ),
        End::Resync(e) => {
            let reason = format!("{endpoint}: resync after: {e}");
            if resyncs_in_row > 1 {
                (EndKind::Resync, backoff.fail(), true, reason)
            } else {
                (EndKind::Resync, jitter_up_to(Duration::from_millis(200)), false, reason)
            }
        }
    };
    Plan { kind, delay, switch, reason }
}

/// Whether a stream error is the keepalive's signature: a transport error
/// (no status from the relay) ending a connection broken from under the
/// stream, after a silence longer than the keepalive interval plus half its
/// timeout (hyper's timer starts at the last frame read, a little before
/// the last message; the margin keeps a real timeout from reading as
/// "broken").
fn silent_break(status: &tonic::Status, silent_for: Duration, cfg: &FollowConfig) -> bool {
    let Some(cause) = std::error::Error::source(status) else { return false };
    let broken_pipe = std::iter::successors(Some(cause), |e| e.source()).any(|e| {
        e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    }) || error_chain(cause).contains("broken pipe");
    broken_pipe && silent_for >= cfg.keepalive_interval + cfg.keepalive_timeout / 2
}

/// How a failed call or stream ends: with the relay's retry-after hint
/// (`flagstream-retry-after-ms`, PROTOCOL.md §6) when it sent one.
fn ended(what: &str, status: &tonic::Status) -> End {
    let mut error = format!("{what}: {} {}", status.code(), status.message());
    if let Some(cause) = std::error::Error::source(status) {
        error.push_str(": ");
        error.push_str(&error_chain(cause));
    }
    match retry_after(status) {
        Some(hint) => End::RetryAfter(error, hint),
        None => End::Broken(error),
    }
}

/// The `flagstream-retry-after-ms` hint of a status, capped at
/// [`MAX_RETRY_AFTER`].
pub fn retry_after(status: &tonic::Status) -> Option<Duration> {
    status
        .metadata()
        .get("flagstream-retry-after-ms")
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .map(|ms| Duration::from_millis(ms).min(MAX_RETRY_AFTER))
}

/// The wait a relay's `reconnect` asks for (`suggested_delay_ms +
/// jitter_ms`), capped at [`MAX_RETRY_AFTER`] like a retry-after hint: a
/// misbehaving or hostile relay cannot park its clients for 49 days.
fn reconnect_delay(r: &pb::Reconnect) -> Duration {
    Duration::from_millis(u64::from(r.suggested_delay_ms) + u64::from(r.jitter_ms)).min(MAX_RETRY_AFTER)
}

/// Uniformly random in `[0, max)`.
pub fn jitter_up_to(max: Duration) -> Duration {
    let ms = max.as_millis() as u64;
    Duration::from_millis(if ms == 0 { 0 } else { rand::rng().random_range(0..ms) })
}

/// A new channel to `endpoint` with the transport settings of `cfg`
/// (never a reused one: PROTOCOL.md §2.8 step 7).
pub async fn connect(cfg: &FollowConfig, endpoint: &str) -> Result<Channel, String> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(cfg.connect_timeout));
    http.set_keepalive(Some(cfg.keepalive_interval));
    http.set_tcp_user_timeout(Some(cfg.tcp_user_timeout));
    let mut ep = Endpoint::from_shared(endpoint.to_owned())
        .map_err(|e| format!("invalid endpoint: {e}"))?
        .connect_timeout(cfg.connect_timeout)
        .http2_keep_alive_interval(cfg.keepalive_interval)
        .keep_alive_timeout(cfg.keepalive_timeout)
        .keep_alive_while_idle(true);
    if endpoint.starts_with("https://") {
        ep =
            ep.tls_config(cfg.tls.config()).map_err(|e| format!("TLS configuration: {}", error_chain(&e)))?;
    }
    match tokio::time::timeout(cfg.connect_timeout, ep.connect_with_connector(http)).await {
        Ok(Ok(ch)) => Ok(ch),
        Ok(Err(e)) => Err(format!("connect failed: {}", error_chain(&e))),
        Err(_) => Err(format!("connect timed out after {:?}", cfg.connect_timeout)),
    }
}

/// An error and its causes, on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Runs apply work on the blocking pool; a panic in it becomes a resync.
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApplyError> + Send + 'static,
) -> Result<T, ApplyError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(out) => out,
        Err(e) => Err(ApplyError::Protocol(format!("applying the received data failed: {e}"))),
    }
}

/// Queues `msg` towards the relay; when the queue is full it waits in
/// `pending` (replacing an older one: acks are cumulative, reports
/// replace each other). `Err` when the request stream is gone.
fn offer(
    tx: &mpsc::Sender<pb::SubscribeRequest>,
    pending: &mut Option<pb::SubscribeRequest>,
    msg: pb::SubscribeRequest,
) -> Result<(), End> {
    match tx.try_send(msg) {
        Ok(()) => Ok(()),
        Err(mpsc::error::TrySendError::Full(msg)) => {
            *pending = Some(msg);
            Ok(())
        }
        Err(mpsc::error::TrySendError::Closed(_)) => Err(End::Broken("request stream closed".into())),
    }
}

impl<S: Sink> Follower<S> {
    /// A heartbeat names our cursor as the relay's head but carries another
    /// checksum (PROTOCOL.md §2.6): the relay holds other content under our
    /// revision. A relay that sends no checksum (an older version) is not
    /// checked.
    fn diverged(&self, h: &pb::Heartbeat) -> Option<ApplyError> {
        let theirs = h.checksum?;
        let cursor = self.sink.cursor()?;
        if cursor.epoch.is_empty() || cursor.epoch != h.epoch || cursor.revision != h.head_revision {
            return None;
        }
        let ours = self.sink.checksum()?;
        (ours != theirs).then_some(ApplyError::Diverged { revision: cursor.revision, ours, theirs })
    }

    /// One connection and stream, until it ends.
    async fn stream_once(&mut self, endpoint: &str, progress: &mut Progress) -> End {
        let cfg = &self.cfg;
        let channel = match connect(cfg, endpoint).await {
            Ok(c) => c,
            Err(e) => return End::Connect(e),
        };
        let (tx, rx) = mpsc::channel(REQUEST_QUEUE);
        let hello = pb::Hello {
            sdk_key: cfg.credential.expose().to_owned(),
            environment: cfg.environment.clone(),
            cursor: self.sink.cursor(),
            sdk_name: cfg.sdk_name.clone(),
            sdk_version: env!("CARGO_PKG_VERSION").to_owned(),
            instance_id: cfg.instance_id.clone(),
            subscriber_kind: cfg.subscriber_kind as i32,
            checksum_mismatches: self.mismatches,
            features: Vec::new(),
        };
        if tx
            .try_send(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(hello)) })
            .is_err()
        {
            return End::Broken("request queue closed".into());
        }
        let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(cfg.max_message_bytes);
        let subscribe = async {
            grpc.ready().await.map_err(|e| End::Connect(format!("not ready: {e}")))?;
            let codec = tonic_prost::ProstCodec::<pb::SubscribeRequest, RawResponse>::default();
            let path = http::uri::PathAndQuery::from_static("/flagstream.v1.Sync/Subscribe");
            grpc.streaming(tonic::Request::new(ReceiverStream::new(rx)), path, codec)
                .await
                .map(tonic::Response::into_inner)
                .map_err(|s| ended("subscribe refused", &s))
        };
        let mut stream = match tokio::time::timeout(cfg.first_message_timeout, subscribe).await {
            Ok(Ok(s)) => s,
            Ok(Err(end)) => return end,
            Err(_) => return End::Stalled(cfg.first_message_timeout, None),
        };
        let mut watchdog = cfg.first_message_timeout;
        let mut chunks: Vec<RawChunk> = Vec::new();
        let mut chunk_bytes = 0usize;
        let mut pending: Option<pb::SubscribeRequest> = None;
        let relay = cfg.subscriber_kind == pb::SubscriberKind::Relay;
        let mut reports = tokio::time::interval(cfg.report_interval.max(Duration::from_millis(10)));
        reports.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut deadline = Instant::now() + watchdog;
        let mut last_message = Instant::now();
        loop {
            // A request that found the queue full is retried here, so the
            // newest ack or report always reaches the relay eventually.
            if let Some(msg) = pending.take()
                && let Err(end) = offer(&tx, &mut pending, msg)
            {
                return end;
            }
            let msg = tokio::select! {
                m = stream.message() => m,
                _ = tokio::time::sleep_until(deadline) => return End::Stalled(watchdog, None),
                _ = reports.tick(), if relay => {
                    if let Some(r) = self.sink.report() {
                        let msg = pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Report(r)) };
                        if let Err(end) = offer(&tx, &mut pending, msg) {
                            return end;
                        }
                    }
                    continue;
                }
            };
            let msg = match msg {
                // The connection broke under a stream silent for longer than
                // the keepalive interval: the HTTP/2 keepalive PING went
                // unanswered (hyper then drops the connection, which the
                // stream sees as a broken pipe, not a status the relay
                // sent). A relay that dies after such a silence looks the
                // same and is counted the same way (PROTOCOL.md §2.8).
                Err(status) if silent_break(&status, last_message.elapsed(), cfg) => {
                    let cause = format!("stream failed: {} {}", status.code(), status.message());
                    return End::Stalled(last_message.elapsed(), Some(cause));
                }
                Err(status) => return ended("stream failed", &status),
                Ok(None) => return End::Broken("stream closed by the relay".into()),
                Ok(Some(m)) => m,
            };
            progress.messages += 1;
            last_message = Instant::now();
            if progress.messages == 1 {
                tracing::info!(endpoint = %endpoint, environment = %self.cfg.environment, "relay stream open");
                watchdog = self.cfg.heartbeat_default.saturating_mul(self.cfg.watchdog_misses);
                self.sink.event(Event::Connected { endpoint });
            }
            let applied = match msg.kind {
                Some(RawKind::SnapshotChunk(c)) => {
                    if c.chunk_index == 0 {
                        chunks.clear();
                        chunk_bytes = 0;
                    }
                    // Check each chunk as it arrives: in order, of one
                    // snapshot, and within the snapshot size limit.
                    let consistent = chunks
                        .first()
                        .is_none_or(|first| first.epoch == c.epoch && first.revision == c.revision);
                    if c.chunk_index as usize != chunks.len()
                        || c.chunk_index >= c.total_chunks.max(1)
                        || !consistent
                    {
                        return End::Resync(ApplyError::ChunkOrder {
                            got: c.chunk_index,
                            want: chunks.len() as u32,
                        });
                    }
                    chunk_bytes += c.flags.iter().chain(&c.segments).map(|b| b.len()).sum::<usize>();
                    if chunk_bytes > self.cfg.max_snapshot_bytes {
                        return End::Resync(ApplyError::TooLarge {
                            bytes: chunk_bytes,
                            limit: self.cfg.max_snapshot_bytes,
                        });
                    }
                    let last = c.last_chunk;
                    chunks.push(c);
                    if last {
                        let (sink, all) = (self.sink.clone(), std::mem::take(&mut chunks));
                        match off_runtime(move || sink.apply_snapshot(all)).await {
                            Ok(cursor) => Some((cursor, true)),
                            Err(e) => return End::Resync(e),
                        }
                    } else {
                        None
                    }
                }
                Some(RawKind::Delta(d)) => {
                    chunks.clear();
                    let sink = self.sink.clone();
                    match off_runtime(move || sink.apply_delta(d)).await {
                        Ok(cursor) => Some((cursor, false)),
                        Err(e) => return End::Resync(e),
                    }
                }
                Some(RawKind::Heartbeat(h)) => {
                    if let Some(e) = self.diverged(&h) {
                        // Not current, whatever the revision says: never
                        // reported to the sink as a confirmation.
                        return End::Resync(e);
                    }
                    if h.interval_ms > 0 {
                        let interval = Duration::from_millis(u64::from(h.interval_ms))
                            .clamp(Duration::from_millis(100), Duration::from_secs(600));
                        watchdog = interval.saturating_mul(self.cfg.watchdog_misses);
                    }
                    self.sink.event(Event::Heartbeat(&h));
                    None
                }
                Some(RawKind::Reconnect(r)) => {
                    return End::Reconnect(reconnect_delay(&r), r.message);
                }
                // A kind this client does not know: ignore (PROTOCOL.md §8);
                // it still resets the watchdog.
                None => None,
            };
            deadline = Instant::now() + watchdog;
            if let Some((cursor, snapshot)) = applied {
                progress.applied += 1;
                self.sink.event(Event::Applied { snapshot });
                let ack = pb::Ack { epoch: cursor.epoch, revision: cursor.revision, apply_duration_us: 0 };
                let msg = pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Ack(ack)) };
                if let Err(end) = offer(&tx, &mut pending, msg) {
                    return end;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resync() -> End {
        End::Resync(ApplyError::ChunkOrder { got: 1, want: 0 })
    }

    /// The first resync in a row retries at once on the same endpoint; the
    /// following ones take the backoff, whose ceiling doubles, and move on.
    #[test]
    fn resyncs_after_the_first_back_off_and_move_on() {
        let mut b = Backoff::new(Duration::from_millis(400), Duration::from_secs(30));
        let first = plan(resync(), "e", &mut b, (1, 0), Duration::ZERO);
        assert!(!first.switch && first.delay < Duration::from_millis(200), "{first:?}");
        assert_eq!(b.ceiling(), Duration::from_millis(400), "the first resync costs no backoff");
        for (n, ceiling) in [(2, 400), (3, 800), (4, 1_600)] {
            let p = plan(resync(), "e", &mut b, (n, 0), Duration::ZERO);
            assert!(p.switch && p.kind == EndKind::Resync, "{p:?}");
            assert!(p.delay < Duration::from_millis(ceiling), "resync {n}: {p:?}");
            assert_eq!(b.ceiling(), Duration::from_millis(ceiling * 2), "resync {n} grew the backoff");
        }
    }

    /// A relay's reconnect request cannot park a client: whatever it
    /// suggests, the wait is at most [`MAX_RETRY_AFTER`] plus the
    /// client's own jitter of up to a second.
    #[test]
    fn a_reconnect_request_is_capped_like_a_retry_hint() {
        let asked = |suggested_delay_ms, jitter_ms| pb::Reconnect {
            suggested_delay_ms,
            jitter_ms,
            ..Default::default()
        };
        assert_eq!(reconnect_delay(&asked(250, 500)), Duration::from_millis(750));
        assert_eq!(reconnect_delay(&asked(u32::MAX, u32::MAX)), MAX_RETRY_AFTER);
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        let end = End::Reconnect(reconnect_delay(&asked(u32::MAX, 0)), "parked".into());
        let p = plan(end, "e", &mut b, (0, 0), Duration::ZERO);
        assert!(p.delay >= MAX_RETRY_AFTER && p.delay < MAX_RETRY_AFTER + Duration::from_secs(1), "{p:?}");
    }

    /// A retry-after hint is a floor: never sooner, at most a quarter
    /// later, whatever the backoff, for the first refusals in a row; past
    /// them it also waits the backoff; a tiny hint still waits 100 ms,
    /// jittered.
    #[test]
    fn a_retry_after_hint_is_never_undercut() {
        let hint = Duration::from_millis(2_500);
        let refused = || End::RetryAfter("refused".into(), hint);
        for _ in 0..200 {
            let mut b = Backoff::new(Duration::from_secs(10), Duration::from_secs(30));
            let p = plan(refused(), "e", &mut b, (0, REFUSALS_BEFORE_BACKOFF), Duration::ZERO);
            assert!(p.delay >= hint && p.delay <= hint + hint / 4, "{p:?}");
            assert!(p.switch && p.kind == EndKind::RetryAfter && p.reason.contains("retry after"), "{p:?}");
        }
        // In a row, with a backoff ceiling of 30 s: the longer of the two.
        let (mut longer, mut b) = (0, Backoff::new(Duration::from_secs(30), Duration::from_secs(30)));
        for _ in 0..200 {
            let p = plan(refused(), "e", &mut b, (0, REFUSALS_BEFORE_BACKOFF + 1), Duration::ZERO);
            assert!(p.delay >= hint, "{p:?}");
            longer += usize::from(p.delay > hint + hint / 4);
        }
        assert!(longer > 100, "repeated refusals did not take the backoff: {longer} of 200");
        let mut b = Backoff::new(Duration::from_millis(1), Duration::from_millis(1));
        let tiny = Duration::from_millis(1);
        let delays: Vec<Duration> = (0..50)
            .map(|_| plan(End::RetryAfter("x".into(), tiny), "e", &mut b, (0, 1), Duration::ZERO).delay)
            .collect();
        assert!(delays.iter().all(|d| *d >= MIN_RETRY_AFTER && *d <= MIN_RETRY_AFTER * 5 / 4), "{delays:?}");
        assert!(delays.iter().any(|d| *d != delays[0]), "tiny hints are still spread: {delays:?}");
    }

    /// The first stall after a healthy period reconnects elsewhere within
    /// the stall jitter; stalls in a row back off; the default budget
    /// (keepalive interval + timeout + stall jitter) stays within 10 s.
    #[test]
    fn a_stall_moves_on_within_the_default_budget_and_repeats_back_off() {
        let cfg = FollowConfig::default();
        for _ in 0..200 {
            let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
            let p = plan(End::Stalled(Duration::from_secs(5), None), "e", &mut b, (0, 0), cfg.stall_jitter);
            assert!(p.switch && p.kind == EndKind::Stalled && p.delay < cfg.stall_jitter, "{p:?}");
            assert_eq!(b.ceiling(), Duration::from_secs(2), "the stall counts as a failure");
        }
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        for _ in 0..5 {
            plan(End::Stalled(Duration::from_secs(5), None), "e", &mut b, (0, 0), cfg.stall_jitter);
        }
        assert_eq!(b.ceiling(), Duration::from_secs(30), "stalls in a row back off");
        let budget = cfg.keepalive_interval + cfg.keepalive_timeout + cfg.stall_jitter;
        assert!(budget <= Duration::from_secs(10), "default stall budget {budget:?}");
    }

    /// Only a broken pipe after a silence past the keepalive is a stall:
    /// not a status the relay sent, not an early break, not a reset.
    #[test]
    fn only_a_broken_pipe_after_the_keepalive_silence_is_a_stall() {
        let cfg = FollowConfig::default();
        let transport = |kind| tonic::Status::from_error(Box::new(std::io::Error::new(kind, "x")));
        let pipe = transport(std::io::ErrorKind::BrokenPipe);
        assert!(silent_break(&pipe, Duration::from_secs(5), &cfg));
        assert!(
            silent_break(&pipe, Duration::from_millis(4_100), &cfg),
            "hyper's timer starts a little earlier"
        );
        assert!(!silent_break(&pipe, Duration::from_secs(2), &cfg), "a break soon after a message");
        assert!(!silent_break(&transport(std::io::ErrorKind::ConnectionReset), Duration::from_secs(9), &cfg));
        assert!(!silent_break(&tonic::Status::unavailable("draining"), Duration::from_secs(9), &cfg));
    }
}
