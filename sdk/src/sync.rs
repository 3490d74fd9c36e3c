//! The background sync task: keeps one Subscribe stream open to one of the
//! configured relays and publishes each applied revision.
//!
//! Built against TRANSPORT-NOTES.md: every connection attempt builds a new
//! `Channel` (tonic would otherwise reuse a dead connection); HTTP/2
//! keepalive and `TCP_USER_TIMEOUT` are set on the client; a watchdog tears
//! the stream down when no message arrives within `watchdog_misses`
//! heartbeat intervals; failures back off with full jitter and rotate
//! through the endpoints. Evaluation never waits on any of this: this task
//! is the only writer of the snapshot cell, and readers never block.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use flagstream_proto::v1 as pb;
use hyper_util::client::legacy::connect::HttpConnector;
use rand::Rng;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use crate::Limits;
use crate::backoff::Backoff;
use crate::client::{Change, Shared};
use crate::raw::{RawChunk, RawKind, RawResponse};
use crate::replica::{ApplyError, CachedReplica, Replica};
use crate::stats::bump;
use crate::status::{Attempt, MAX_ATTEMPTS, Source, Status};

/// Acks queued towards the relay before newer ones replace them (acks are
/// cumulative, so dropping an older one loses nothing).
const ACK_QUEUE: usize = 4;

/// Settings of the sync task (filled by the client builder).
#[derive(Debug, Clone)]
pub(crate) struct SyncConfig {
    pub(crate) endpoints: Vec<String>,
    pub(crate) sdk_key: crate::Secret,
    pub(crate) sdk_name: String,
    pub(crate) instance_id: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) keepalive_interval: Duration,
    pub(crate) keepalive_timeout: Duration,
    pub(crate) tcp_user_timeout: Duration,
    pub(crate) first_message_timeout: Duration,
    pub(crate) heartbeat_default: Duration,
    pub(crate) watchdog_misses: u32,
    pub(crate) backoff_base: Duration,
    pub(crate) backoff_cap: Duration,
    pub(crate) healthy_after: Duration,
    pub(crate) stall_jitter: Duration,
    pub(crate) stale_after: Duration,
    pub(crate) max_message_bytes: usize,
    pub(crate) limits: Limits,
    pub(crate) tls: ClientTls,
}

/// The fingerprint that ties a cache to its SDK key (not a secret: a
/// 64-bit hash, so a cache file does not reveal the key).
pub(crate) fn key_fingerprint(sdk_key: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(sdk_key.as_bytes())
}

/// TLS settings for `https://` endpoints.
#[derive(Clone, Default)]
pub(crate) struct ClientTls {
    /// PEM CA bundle to trust instead of the public web roots.
    pub(crate) ca: Option<Vec<u8>>,
    /// PEM client certificate and key (mutual TLS).
    pub(crate) identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("custom_ca", &self.ca.is_some())
            .field("client_identity", &self.identity.is_some())
            .finish()
    }
}

impl ClientTls {
    /// The tonic TLS configuration.
    pub(crate) fn config(&self) -> tonic::transport::ClientTlsConfig {
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

/// Why a stream ended.
#[derive(Debug)]
enum End {
    /// Connecting or subscribing failed.
    Connect(String),
    /// The relay refused or ended the stream with a retry-after hint: the
    /// next attempt waits the hint plus up to as much again (PROTOCOL.md §6).
    RetryAfter(String, Duration),
    /// No message within the watchdog interval.
    Stalled(Duration),
    /// The stream failed or closed.
    Broken(String),
    /// The relay asked us to go elsewhere after `delay`.
    Reconnect(Duration, String),
    /// Received data could not be applied: resubscribe for a snapshot.
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

/// The sync task. Runs until aborted (the client is dropped).
pub(crate) async fn run(shared: Arc<Shared>, cfg: SyncConfig, cached: Option<CachedReplica>) {
    let mut replica = cached.map(CachedReplica::into_replica);
    let mut backoff = Backoff::new(cfg.backoff_base, cfg.backoff_cap);
    let mut idx = 0usize;
    let mut down_since = Instant::now();
    let mut attempts: Vec<Attempt> = Vec::new();
    // Resyncs since the last successful apply: the second in a row backs
    // off and moves on, so data this SDK cannot apply never becomes a
    // fleet-wide snapshot storm.
    let mut resyncs_in_row = 0u32;
    loop {
        let endpoint = cfg.endpoints[idx % cfg.endpoints.len()].clone();
        let started = Instant::now();
        let mut progress = Progress::default();
        let end = stream_once(&shared, &cfg, &endpoint, &mut replica, &mut progress).await;
        let healthy = started.elapsed() >= cfg.healthy_after;
        if healthy {
            backoff.reset();
        }
        if progress.applied > 0 {
            resyncs_in_row = 0;
        }
        // The outage starts when a stream that worked (delivered at least
        // one message) ends, not at each failed attempt to get one back.
        if progress.messages > 0 {
            down_since = Instant::now();
        }
        bump(&shared.counters.reconnects);
        let (delay, switch, reason) = match end {
            End::Connect(e) => (backoff.fail(), true, format!("{endpoint}: {e}")),
            End::RetryAfter(e, hint) => {
                bump(&shared.counters.retry_hints);
                let delay = backoff.fail().max(hint + jitter_up_to(hint));
                (delay, true, format!("{endpoint}: {e} (relay asks to retry after {hint:?})"))
            }
            End::Broken(e) => (backoff.fail(), true, format!("{endpoint}: {e}")),
            End::Stalled(after) => {
                bump(&shared.counters.stalls);
                let jitter = jitter_up_to(cfg.stall_jitter);
                (jitter, true, format!("{endpoint}: no message for {after:?} (stalled connection dropped)"))
            }
            End::Reconnect(delay, why) => (
                delay + jitter_up_to(Duration::from_secs(1)),
                true,
                format!("{endpoint}: relay asked to reconnect: {why}"),
            ),
            End::Resync(e) => {
                bump(&shared.counters.resyncs);
                if matches!(e, ApplyError::Checksum { .. }) {
                    bump(&shared.counters.checksum_mismatches);
                }
                tracing::warn!(error = %e, endpoint = %endpoint, "could not apply received data; requesting a full snapshot");
                // Keep serving what we have; ask for everything again.
                if let Some(r) = &mut replica {
                    r.epoch.clear();
                }
                resyncs_in_row += 1;
                let reason = format!("{endpoint}: resync after: {e}");
                if resyncs_in_row > 1 {
                    (backoff.fail(), true, reason)
                } else {
                    (jitter_up_to(Duration::from_millis(200)), false, reason)
                }
            }
        };
        tracing::info!(endpoint = %endpoint, reason = %reason, retry_in = ?delay, "relay stream ended");
        if !shared.has_data() {
            attempts.push(Attempt { endpoint: endpoint.clone(), error: reason.clone() });
            if attempts.len() > MAX_ATTEMPTS {
                attempts.remove(0);
            }
            shared.set_status(Status::Initializing { attempts: attempts.clone() });
        }
        if switch && cfg.endpoints.len() > 1 {
            idx += 1;
            bump(&shared.counters.endpoint_switches);
        }
        // Wait, marking the data stale once the outage passes the threshold.
        let wake = Instant::now() + delay;
        loop {
            let stale_at = down_since + cfg.stale_after;
            if shared.has_data() && Instant::now() >= stale_at {
                shared.mark_stale(&reason);
            }
            let next = if shared.has_data() && !shared.is_stale() { wake.min(stale_at) } else { wake };
            tokio::time::sleep_until(next).await;
            if Instant::now() >= wake {
                break;
            }
        }
    }
}

/// The longest retry-after hint honoured: a relay cannot park clients.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How a failed call or stream ends: with the relay's retry-after hint
/// (`flagstream-retry-after-ms`, PROTOCOL.md §6) when it sent one.
fn ended(what: &str, status: &tonic::Status) -> End {
    let error = format!("{what}: {} {}", status.code(), status.message());
    let hint = status
        .metadata()
        .get("flagstream-retry-after-ms")
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .map(|ms| Duration::from_millis(ms).min(MAX_RETRY_AFTER));
    match hint {
        Some(hint) => End::RetryAfter(error, hint),
        None => End::Broken(error),
    }
}

/// Runs apply work (decoding, validating and compiling up to thousands of
/// flags: tens of milliseconds) on the blocking pool, so the sync task never
/// holds one of the application's runtime workers that long. The closure
/// hands back the replica it was given, whatever the outcome.
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> (Option<Replica>, Result<T, ApplyError>) + Send + 'static,
) -> (Option<Replica>, Result<T, ApplyError>) {
    match tokio::task::spawn_blocking(f).await {
        Ok(out) => out,
        // Only a panic in the engine gets here: keep serving, resync.
        Err(e) => (None, Err(ApplyError::Protocol(format!("applying the received data failed: {e}")))),
    }
}

fn jitter_up_to(max: Duration) -> Duration {
    let ms = max.as_millis() as u64;
    Duration::from_millis(if ms == 0 { 0 } else { rand::rng().random_range(0..ms) })
}

/// A new channel with the transport settings (never a reused one).
async fn connect(cfg: &SyncConfig, endpoint: &str) -> Result<Channel, String> {
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

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// One connection and stream, until it ends.
async fn stream_once(
    shared: &Arc<Shared>,
    cfg: &SyncConfig,
    endpoint: &str,
    replica: &mut Option<Replica>,
    progress: &mut Progress,
) -> End {
    let channel = match connect(cfg, endpoint).await {
        Ok(c) => c,
        Err(e) => return End::Connect(e),
    };
    let (tx, rx) = mpsc::channel(ACK_QUEUE);
    let hello = pb::Hello {
        sdk_key: cfg.sdk_key.expose().to_owned(),
        cursor: replica.as_ref().map(Replica::cursor),
        sdk_name: cfg.sdk_name.clone(),
        sdk_version: env!("CARGO_PKG_VERSION").to_owned(),
        instance_id: cfg.instance_id.clone(),
        subscriber_kind: pb::SubscriberKind::Sdk as i32,
        checksum_mismatches: shared.counters.checksum_mismatches.load(Ordering::Relaxed),
        ..Default::default()
    };
    if tx.try_send(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(hello)) }).is_err() {
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
        Err(_) => return End::Stalled(cfg.first_message_timeout),
    };
    bump(&shared.counters.connects);
    let mut watchdog = cfg.first_message_timeout;
    let mut chunks: Vec<RawChunk> = Vec::new();
    let mut chunk_bytes = 0usize;
    let mut pending_ack: Option<pb::SubscribeRequest> = None;
    loop {
        // An ack that found the queue full is retried here, so the newest
        // applied revision always reaches the relay eventually.
        if let Some(ack) = pending_ack.take() {
            match tx.try_send(ack) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(ack)) => pending_ack = Some(ack),
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    return End::Broken("request stream closed".into());
                }
            }
        }
        let msg = match tokio::time::timeout(watchdog, stream.message()).await {
            Err(_) => return End::Stalled(watchdog),
            Ok(Err(status)) => return ended("stream failed", &status),
            Ok(Ok(None)) => return End::Broken("stream closed by the relay".into()),
            Ok(Ok(Some(m))) => m,
        };
        progress.messages += 1;
        if progress.messages == 1 {
            tracing::info!(endpoint = %endpoint, "relay stream open");
            watchdog = cfg.heartbeat_default.saturating_mul(cfg.watchdog_misses);
        }
        let applied = match msg.kind {
            Some(RawKind::SnapshotChunk(c)) => {
                if c.chunk_index == 0 {
                    chunks.clear();
                    chunk_bytes = 0;
                }
                // Check each chunk as it arrives: in order, of one snapshot,
                // and within the snapshot size limit (memory stays bounded
                // even if a relay never sends the last chunk).
                let consistent =
                    chunks.first().is_none_or(|first| first.epoch == c.epoch && first.revision == c.revision);
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
                if chunk_bytes > cfg.limits.max_snapshot_bytes {
                    return End::Resync(ApplyError::TooLarge {
                        bytes: chunk_bytes,
                        limit: cfg.limits.max_snapshot_bytes,
                    });
                }
                let last = c.last_chunk;
                chunks.push(c);
                if !last {
                    continue;
                }
                let all = std::mem::take(&mut chunks);
                let (previous, limits) = (replica.take(), cfg.limits.clone());
                let (previous, result) = off_runtime(move || {
                    let result = Replica::from_chunks(all, previous.as_ref(), &limits);
                    (previous, result)
                })
                .await;
                *replica = previous;
                match result {
                    Ok(a) => {
                        bump(&shared.counters.snapshots_applied);
                        progress.applied += 1;
                        Some(a)
                    }
                    Err(e) => return End::Resync(e),
                }
            }
            Some(RawKind::Delta(d)) => {
                chunks.clear();
                let Some(current) = replica.take() else {
                    return End::Resync(ApplyError::Gap {
                        from: d.from_revision,
                        to: d.to_revision,
                        ours: 0,
                        epoch_ok: false,
                    });
                };
                let (snap, limits) = (shared.cell.load_full(), cfg.limits.clone());
                let (current, result) = off_runtime(move || {
                    let result = current.apply_delta(&snap, d, &limits);
                    (Some(current), result)
                })
                .await;
                *replica = current;
                match result {
                    Ok(a) => {
                        bump(&shared.counters.deltas_applied);
                        progress.applied += 1;
                        Some(a)
                    }
                    Err(e) => return End::Resync(e),
                }
            }
            Some(RawKind::Heartbeat(h)) => {
                if h.interval_ms > 0 {
                    let interval = Duration::from_millis(u64::from(h.interval_ms))
                        .clamp(Duration::from_millis(100), Duration::from_secs(600));
                    watchdog = interval.saturating_mul(cfg.watchdog_misses);
                }
                if let Some(r) = replica.as_ref()
                    && r.epoch == h.epoch
                    && r.revision == h.head_revision
                {
                    shared.mark_ready(Source::Stream, r.revision);
                }
                None
            }
            Some(RawKind::Reconnect(r)) => {
                let delay = Duration::from_millis(u64::from(r.suggested_delay_ms) + u64::from(r.jitter_ms));
                return End::Reconnect(delay, r.message);
            }
            // A kind this SDK does not know: ignore (PROTOCOL.md §8).
            None => None,
        };
        if let Some(a) = applied {
            let revision = a.replica.revision;
            let epoch = a.replica.epoch.clone();
            shared.publish(Arc::new(a.snapshot), Source::Stream, a.changed_flags);
            *replica = Some(a.replica);
            shared.cache_dirty(replica.as_ref());
            let ack = pb::Ack { epoch, revision, apply_duration_us: 0 };
            // Acks are cumulative: a newer one replaces one still waiting.
            let ack = pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Ack(ack)) };
            match tx.try_send(ack) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(ack)) => pending_ack = Some(ack),
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    return End::Broken("request stream closed".into());
                }
            }
        }
    }
}

impl Shared {
    /// Whether any data is being served.
    pub(crate) fn has_data(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub(crate) fn is_stale(&self) -> bool {
        self.stale.load(Ordering::Relaxed)
    }

    pub(crate) fn set_status(&self, s: Status) {
        self.status.send_replace(s);
    }

    fn mark_ready(&self, source: Source, revision: u64) {
        if self.stale.swap(false, Ordering::Relaxed) {
            self.end_stale_period();
        }
        let since = SystemTime::now();
        self.status.send_if_modified(|s| match s {
            Status::Ready { source: src, revision: rev, .. } if *src == source && *rev == revision => false,
            _ => {
                *s = Status::Ready { source, revision, since };
                true
            }
        });
    }

    fn end_stale_period(&self) {
        if let Status::Stale { since, .. } = &*self.status.borrow() {
            let ms = since.elapsed().map_or(0, |d| d.as_millis() as u64);
            self.counters.stale_ms.fetch_add(ms, Ordering::Relaxed);
        }
    }

    pub(crate) fn mark_stale(&self, reason: &str) {
        if self.stale.swap(true, Ordering::Relaxed) {
            return;
        }
        let (source, revision) = match &*self.status.borrow() {
            Status::Ready { source, revision, .. } | Status::Stale { source, revision, .. } => {
                (*source, *revision)
            }
            _ => (Source::Stream, 0),
        };
        tracing::warn!(reason = %reason, revision, "flag data is stale");
        self.set_status(Status::Stale {
            source,
            revision,
            since: SystemTime::now(),
            reason: reason.to_owned(),
        });
    }

    /// Publishes a new snapshot: swap, status, listeners.
    pub(crate) fn publish(&self, snapshot: Arc<crate::Snapshot>, source: Source, changed: Vec<String>) {
        let revision = snapshot.revision();
        self.cell.store(snapshot);
        self.ready.store(true, Ordering::Release);
        self.mark_ready(source, revision);
        // No receivers is fine: listeners are optional.
        if self.changes.send(Change { revision, flags: changed.into() }).is_err() {
            tracing::trace!("no change listeners");
        }
    }

    fn cache_dirty(&self, replica: Option<&Replica>) {
        if let (Some(tx), Some(r)) = (&self.cache_tx, replica) {
            tx.send_replace(Some(Arc::new(r.clone())));
        }
    }
}

/// Writes the latest replica to the cache at most once per `interval`.
pub(crate) async fn cache_writer(
    shared: Arc<Shared>,
    cache: std::sync::Weak<crate::cache::Cache>,
    mut rx: watch::Receiver<Option<Arc<Replica>>>,
    interval: Duration,
    key_fingerprint: u64,
) {
    while rx.changed().await.is_ok() {
        tokio::time::sleep(interval).await; // debounce: coalesce bursts
        let Some(replica) = rx.borrow_and_update().clone() else { continue };
        // Held only while writing: the client's drop closes the cache (and
        // releases its directory lock) at once, not when this task goes.
        let Some(cache) = cache.upgrade() else { return };
        match tokio::task::spawn_blocking(move || cache.store(&replica, key_fingerprint)).await {
            Ok(Ok(true)) => bump(&shared.counters.cache_writes),
            Ok(Ok(false)) => {} // already stored, or the client was dropped
            Ok(Err(e)) => {
                bump(&shared.counters.cache_errors);
                tracing::warn!(error = %e, "writing the flag cache failed");
            }
            Err(e) => {
                bump(&shared.counters.cache_errors);
                tracing::warn!(error = %e, "the cache writer task failed");
            }
        }
    }
}
