//! One stream, from connecting to its end: the Hello, the watchdog, chunk
//! checks as chunks arrive (order, one snapshot, size limit), applying off
//! the runtime, acks (coalesced: `ack.rs`) and reports towards the relay, and a heartbeat that
//! names the sink's cursor with another checksum (a restored upstream).

use std::sync::Arc;
use std::time::Duration;

use flagstream_proto::v1 as pb;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use super::ack::{ACK_INTERVAL, Acks};
use super::config::FollowConfig;
use super::end::{End, ended, reconnect_delay, silent_break};
use super::sink::{Event, Sink};
use super::transport::connect;
use crate::error::ApplyError;
use crate::raw::{RawChunk, RawKind, RawResponse};

/// Requests queued towards the relay before the newest replaces the rest
/// (acks are cumulative and reports replace each other, so nothing is lost
/// by keeping only the newest).
const REQUEST_QUEUE: usize = 4;

/// Until a first usage summary with counts was sent (for at most
/// [`QUICK_USAGE_TICKS`] ticks), counts are looked at this often instead
/// of every usage interval: a process that evaluates and ends within a
/// minute (a cron job, a CLI, a serverless handler) is seen.
const QUICK_USAGE: Duration = Duration::from_secs(1);
const QUICK_USAGE_TICKS: u32 = 10;

/// Longest a closing stream waits to send its last requests and for the
/// relay to end it (whatever its owner waits: `Client::close` bounds its
/// own wait, and a relay that predates the Goodbye never ends the stream).
const GOODBYE_WAIT: Duration = Duration::from_secs(30);

/// What one stream achieved before it ended.
#[derive(Debug, Default)]
pub(super) struct Progress {
    /// Messages received.
    pub(super) messages: u64,
    /// Snapshots and deltas applied.
    pub(super) applied: u64,
}

/// State kept across streams.
pub(super) struct Follower<S> {
    pub(super) sink: Arc<S>,
    pub(super) cfg: FollowConfig,
    /// Checksum mismatches seen by this follower (sent in every Hello).
    pub(super) mismatches: u64,
}

/// Resolves once `closing` is true or its sender is gone.
pub(super) async fn closed(closing: &mut watch::Receiver<bool>) {
    // Either answer means "close"; the value's guard is not held.
    let _closed = closing.wait_for(|c| *c).await.is_ok();
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

/// `ack` as a request.
fn ack_request(ack: pb::Ack) -> pb::SubscribeRequest {
    pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Ack(ack)) }
}

/// Moves usage summaries from `backlog` (sent from its end) into free room
/// of the request queue, always leaving one slot for acks and reports: a
/// relay slow to read requests delays usage, never the stream, and the
/// receive loop never waits for it. What does not fit waits in `backlog`
/// (at most one interval's summaries: it is refilled only when empty).
fn offer_usage(
    tx: &mpsc::Sender<pb::SubscribeRequest>,
    backlog: &mut Vec<pb::UsageSummary>,
) -> Result<(), End> {
    while tx.capacity() > 1 {
        let Some(summary) = backlog.pop() else { break };
        let msg = pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Usage(summary)) };
        match tx.try_send(msg) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(msg)) => {
                if let Some(pb::subscribe_request::Kind::Usage(summary)) = msg.kind {
                    backlog.push(summary);
                }
                break;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return Err(End::Broken("request stream closed".into()));
            }
        }
    }
    Ok(())
}

impl<S: Sink> Follower<S> {
    /// The stream's last requests: the queued request, every usage summary
    /// not yet sent and the counts since the last one, then a Goodbye; then
    /// waits for the relay to end the stream, which it does once it has read
    /// them all (PROTOCOL.md §4.1). At most [`GOODBYE_WAIT`] (a relay that
    /// predates the Goodbye never ends the stream for it); the owner may
    /// wait less (`Client::close`'s timeout).
    async fn goodbye(
        &self,
        tx: &mpsc::Sender<pb::SubscribeRequest>,
        pending: Vec<pb::SubscribeRequest>,
        backlog: &mut Vec<pb::UsageSummary>,
        stream: &mut tonic::Streaming<RawResponse>,
    ) -> End {
        match tokio::time::timeout(GOODBYE_WAIT, self.goodbye_unbounded(tx, pending, backlog, stream)).await {
            Ok(end) => end,
            Err(_) => {
                tracing::warn!(wait = ?GOODBYE_WAIT, "closing: the relay did not end the stream after the Goodbye");
                End::Closed(false)
            }
        }
    }

    async fn goodbye_unbounded(
        &self,
        tx: &mpsc::Sender<pb::SubscribeRequest>,
        pending: Vec<pb::SubscribeRequest>,
        backlog: &mut Vec<pb::UsageSummary>,
        stream: &mut tonic::Streaming<RawResponse>,
    ) -> End {
        use pb::subscribe_request::Kind;
        let mut last = pending;
        // `backlog` is sent from its end.
        last.extend(backlog.drain(..).rev().map(|u| pb::SubscribeRequest { kind: Some(Kind::Usage(u)) }));
        last.extend(
            self.sink.usage().into_iter().map(|u| pb::SubscribeRequest { kind: Some(Kind::Usage(u)) }),
        );
        last.push(pb::SubscribeRequest { kind: Some(Kind::Goodbye(pb::Goodbye {})) });
        for msg in last {
            if tx.send(msg).await.is_err() {
                tracing::warn!("closing: the request stream ended before the final usage summary was sent");
                return End::Closed(false);
            }
        }
        loop {
            match stream.message().await {
                Ok(None) => return End::Closed(true),
                // Data after the Goodbye is not applied: the client is closing.
                Ok(Some(_)) => {}
                Err(status) => {
                    tracing::warn!(code = ?status.code(), message = status.message(), "closing: the stream failed before the relay confirmed the final usage summary");
                    return End::Closed(false);
                }
            }
        }
    }

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

    /// One connection and stream, until it ends, or until `closing` turns
    /// true (or its sender goes): then [`goodbye`](Self::goodbye).
    pub(super) async fn stream_once(
        &mut self,
        endpoint: &str,
        progress: &mut Progress,
        closing: &mut watch::Receiver<bool>,
    ) -> End {
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
            // What this evaluator implements (a relay following upstream
            // stores and serves the same data, so it announces the same).
            features: flagstream_core::feature::IMPLEMENTED.iter().map(|f| (*f).to_owned()).collect(),
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
        let mut acks = Acks::new(ACK_INTERVAL);
        let mut usage_backlog: Vec<pb::UsageSummary> = Vec::new();
        let relay = cfg.subscriber_kind == pb::SubscriberKind::Relay;
        let mut reports = tokio::time::interval(cfg.report_interval.max(Duration::from_millis(10)));
        reports.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let usage_every = cfg.usage_interval.max(Duration::from_millis(10));
        let mut quick_usage = QUICK_USAGE_TICKS;
        let mut usage_at = Instant::now() + usage_every.min(QUICK_USAGE);
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
            if let Err(end) = offer_usage(&tx, &mut usage_backlog) {
                return end;
            }
            let msg = tokio::select! {
                m = stream.message() => m,
                // A closed sender closes too (the owner is gone).
                () = closed(closing) => {
                    // The queued request, then the newest applied revision.
                    let held = acks.take(Instant::now()).map(ack_request);
                    let last = pending.take().into_iter().chain(held).collect();
                    return self.goodbye(&tx, last, &mut usage_backlog, &mut stream).await;
                }
                _ = tokio::time::sleep_until(acks.due().unwrap_or(deadline)), if acks.due().is_some() => {
                    if let Some(ack) = acks.take(Instant::now())
                        && let Err(end) = offer(&tx, &mut pending, ack_request(ack))
                    {
                        return end;
                    }
                    continue;
                }
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
                _ = tokio::time::sleep_until(usage_at), if progress.messages > 0 => {
                    // New counts only once the last interval's summaries
                    // are all queued: until then they stay in the sink.
                    if usage_backlog.is_empty() {
                        usage_backlog = self.sink.usage();
                        usage_backlog.reverse();
                    }
                    // Quick ticks until counts were first sent.
                    if !usage_backlog.is_empty() || quick_usage == 0 {
                        quick_usage = 0;
                        usage_at = Instant::now() + usage_every;
                    } else {
                        quick_usage -= 1;
                        usage_at = Instant::now() + usage_every.min(QUICK_USAGE);
                    }
                    if let Err(end) = offer_usage(&tx, &mut usage_backlog) {
                        return end;
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
                Some(RawKind::SnapshotChunk(mut c)) => {
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
                    c.compact();
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
                Some(RawKind::Delta(mut d)) => {
                    chunks.clear();
                    d.compact();
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
                    // The stream is still open: the held ack goes first
                    // (best effort: a full queue drops it, as the relay
                    // is about to end the stream anyway).
                    if let Some(ack) = acks.take(Instant::now())
                        && tx.try_send(ack_request(ack)).is_err()
                    {
                        tracing::debug!("the held ack was not sent before reconnecting");
                    }
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
                if let Some(ack) = acks.applied(cursor, Instant::now())
                    && let Err(end) = offer(&tx, &mut pending, ack_request(ack))
                {
                    return end;
                }
            }
        }
    }
}
