//! The `Subscribe` stream (server side).
//!
//! Each subscriber's outgoing stream is pull-based: the next message (the
//! rest of a snapshot, one delta from its cursor to head, a heartbeat, a
//! reconnect request) is worked out only when the transport asks for one.
//! Lag therefore coalesces by itself and there is no per-subscriber queue;
//! snapshot chunks and deltas are shared, pre-encoded bytes. Acks arrive on
//! the request stream and are read by a small task per subscriber.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use flagstream_proto::v1 as pb;
use futures_util::Stream;
use rand::Rng;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Interval};
use tonic::Status;

use crate::access::Tokens;
use crate::encoded::{self, Encoded, SnapshotChunks};
use crate::error::{self, Refusal};
use crate::hub::{Hub, Rejection, Subscriber};
use crate::inbound::Inbound;
use crate::metrics::SentKind;
use crate::quota::Quotas;
use crate::secret;
use crate::store::state::{Bounds, Catchup, EnvState};
use crate::store::{Env, Store, now_ms};
use crate::transport::ConnInfo;

/// Largest Hello, bytes: read before the caller is authenticated, so an
/// unauthenticated stream buffers at most this (PROTOCOL.md §2.1).
pub(crate) const MAX_HELLO_BYTES: usize = 4 << 10;

/// Largest later request message (acks and a replica's reports), bytes.
const MAX_REQUEST_BYTES: usize = 1 << 20;

/// Longest `sdk_name` and `sdk_version` kept per stream, bytes each (longer
/// ones are cut on a character boundary): what a stream pins in memory
/// does not depend on what its client sends.
const MAX_SDK_FIELD: usize = 64;

/// `s` cut to at most `max` bytes on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Stream timing and size settings.
#[derive(Debug, Clone)]
pub(crate) struct StreamConfig {
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
}

/// The Sync service.
#[derive(Debug, Clone)]
pub(crate) struct SyncService {
    store: Store,
    hub: Arc<Hub>,
    quotas: Arc<Quotas>,
    tokens: Arc<Tokens>,
    cfg: Arc<StreamConfig>,
}

impl SyncService {
    /// The relay's metrics.
    pub(crate) fn metrics(&self) -> &crate::metrics::Metrics {
        self.store.metrics()
    }

    /// A service over `store`, registering subscribers in `hub`, new
    /// subscriptions limited by `quotas`, replica relays authenticated by
    /// `tokens`.
    pub(crate) fn new(
        store: Store,
        hub: Arc<Hub>,
        quotas: Arc<Quotas>,
        tokens: Arc<Tokens>,
        cfg: StreamConfig,
    ) -> SyncService {
        SyncService { store, hub, quotas, tokens, cfg: Arc::new(cfg) }
    }

    /// Who a Hello is from: the environment and the SDK key id, or for a
    /// replica relay (`subscriber_kind` RELAY) the environment it names
    /// and its token's name; the token needs the replicate scope.
    fn authenticate(&self, hello: &pb::Hello) -> Result<(Arc<Env>, String, bool), (&'static str, Status)> {
        if hello.subscriber_kind == pb::SubscriberKind::Relay as i32 {
            let Some(p) = self.tokens.authenticate(&hello.sdk_key) else {
                return Err(("unknown_token", Refusal::Unauthenticated("unknown token").into()));
            };
            if !p.0.replicate {
                return Err((
                    "not_replicate",
                    Refusal::NotPermitted(format!(
                        "token {:?} may not follow environments as a replica relay: that needs the replicate scope",
                        p.name()
                    ))
                    .into(),
                ));
            }
            if hello.environment.is_empty() {
                return Err((
                    "bad_hello",
                    error::invalid("hello.environment", "a replica relay must name the environment"),
                ));
            }
            let env =
                self.store.env(&hello.environment).map_err(|e| ("unknown_environment", Status::from(e)))?;
            return Ok((env, p.name().to_owned(), true));
        }
        // Refusals are logged (rate-limited) and counted by the refusal
        // layer, and counted by reason here: a key-guessing flood cannot
        // fill the disk.
        let Some((env, key_id)) = self.store.env_by_key_hash(&secret::hash_secret(&hello.sdk_key)) else {
            return Err(("unknown_sdk_key", Refusal::Unauthenticated("unknown SDK key").into()));
        };
        let env_name = env.meta.load().name.clone();
        if !hello.environment.is_empty() && hello.environment != env_name {
            return Err((
                "environment_mismatch",
                error::invalid(
                    "hello.environment",
                    format!("{:?} is not the SDK key's environment", hello.environment),
                ),
            ));
        }
        Ok((env, key_id, false))
    }
}

/// A subscriber's outgoing messages; an error ends the stream with that status.
pub(crate) type Outgoing = Pin<Box<dyn Stream<Item = Result<Encoded, Status>> + Send>>;

impl SyncService {
    /// Serves one Subscribe call: reads the Hello, admits the subscriber,
    /// and returns its pull-based outgoing stream (see `crate::grpc` for
    /// the wire side).
    pub(crate) async fn subscribe(
        &self,
        extensions: &http::Extensions,
        mut inbound: Inbound,
    ) -> Result<Outgoing, Status> {
        // Plain TCP: our ConnInfo; over TLS, tonic wraps it.
        let conn = extensions.get::<ConnInfo>().cloned().or_else(|| {
            extensions
                .get::<tonic::transport::server::TlsConnectInfo<ConnInfo>>()
                .map(|t| t.get_ref().clone())
        });
        let refused = |reason: &str| {
            let labels = vec![("result", "rejected".to_owned()), ("reason", reason.to_owned())];
            self.store.metrics().subscribes.get_or_create(&labels).inc();
        };
        let first = match tokio::time::timeout(self.cfg.hello_timeout, inbound.message()).await {
            Ok(Ok(m)) => m,
            Ok(Err(status)) => {
                refused("bad_request");
                if status.code() == tonic::Code::OutOfRange {
                    self.store.metrics().limit_hit("hello_bytes");
                    return Err(error::out_of_range(
                        "hello",
                        format!("{} (the Hello size limit, {} bytes)", status.message(), inbound.limit()),
                    ));
                }
                return Err(status);
            }
            Err(_) => {
                refused("no_hello");
                return Err(Refusal::TooSlow("no Hello within the hello timeout").into());
            }
        };
        let hello = match first.and_then(|m| m.kind) {
            Some(pb::subscribe_request::Kind::Hello(h)) => h,
            _ => {
                refused("bad_hello");
                return Err(Refusal::Protocol("the first message of Subscribe must be a Hello".into()).into());
            }
        };
        let (env, key_id, relay) = match self.authenticate(&hello) {
            Ok(who) => who,
            Err((reason, status)) => {
                refused(reason);
                return Err(status);
            }
        };
        let env_name = env.meta.load().name.clone();
        if !env.has_data() {
            // A replica that has not received this environment yet.
            refused("no_data");
            return Err(Refusal::NotHere(format!(
                "this relay holds no data for environment {env_name:?} yet; try another relay"
            ))
            .into());
        }
        if !relay && let Err(status) = self.quotas.check_subscribe(&env_name) {
            refused("subscribe_rate");
            return Err(status);
        }
        let sdk =
            format!("{}/{}", cut(&hello.sdk_name, MAX_SDK_FIELD), cut(&hello.sdk_version, MAX_SDK_FIELD));
        // No cursor means "no data yet" (PROTOCOL.md §2.2): the empty cursor.
        let cursor = hello.cursor.clone().unwrap_or_default();
        let head = env.state.load();
        let applied = if cursor.epoch == head.epoch { cursor.revision.min(head.revision) } else { 0 };
        drop(head);
        let sub = self.hub.admit(&env_name, &key_id, conn, sdk, applied, relay).map_err(|r| {
            let (msg, delay) = match r {
                Rejection::RelayFull => ("relay subscriber limit reached", 5_000),
                Rejection::EnvFull => {
                    ("environment subscriber quota reached (max-subscribers-per-env)", 5_000)
                }
                Rejection::ReplicasFull => {
                    ("environment replica stream limit reached (max-replica-streams-per-env)", 5_000)
                }
                Rejection::Draining => ("relay is draining", 1_000),
            };
            error::retry_later(msg, rand::rng().random_range(delay / 2..=delay))
        })?;
        // A revocation between the lookup above and the admission would
        // miss this stream (revocation ends admitted streams only): look
        // again now that it is admitted.
        let still_valid = if relay {
            self.tokens.authenticate(&hello.sdk_key).is_some()
        } else {
            let now = now_ms();
            env.meta.load().sdk_keys.iter().any(|k| k.id == key_id && k.valid_at(now))
        };
        if !still_valid {
            self.hub.leave(&sub, "credential_revoked");
            refused("credential_revoked");
            return Err(Refusal::Revoked("the credential was revoked while the stream opened".into()).into());
        }
        tracing::debug!(env = %env_name, subscriber = sub.id, sdk = %sub.sdk, cursor.epoch = %cursor.epoch, cursor.revision = cursor.revision, "subscribed");
        // What the reaper compares the stream's progress with. A new
        // subscriber's cell is empty: this `set` cannot fail.
        let _ = sub.head.set(env.head.subscribe());

        inbound.set_limit(MAX_REQUEST_BYTES);
        let instance = match cut(&hello.instance_id, MAX_SDK_FIELD) {
            "" => format!("subscriber-{}", sub.id),
            id => id.to_owned(),
        };
        tokio::spawn(read_acks(
            inbound,
            env.clone(),
            self.store.clone(),
            self.hub.clone(),
            sub.clone(),
            instance,
        ));

        let jitter = rand::rng().random_range(0.9..=1.1);
        let heartbeat_phase = rand::rng().random_range(Duration::ZERO..=self.cfg.heartbeat);
        let age_deadline = Instant::now() + self.cfg.max_stream_age.mul_f64(jitter);
        let out = Outbound {
            store: self.store.clone(),
            hub: self.hub.clone(),
            cfg: self.cfg.clone(),
            head: env.head.subscribe(),
            env,
            cursor: (cursor.epoch, cursor.revision),
            pending: None,
            heartbeat: {
                let mut i = tokio::time::interval_at(Instant::now() + heartbeat_phase, self.cfg.heartbeat);
                // After a long send, one heartbeat, not a burst of overdue ones.
                i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                i
            },
            age_deadline,
            age: Box::pin(tokio::time::sleep_until(age_deadline)),
            ahead_until: None,
            first: true,
            guard: Leave { hub: self.hub.clone(), sub, reason: "client_gone" },
            done: false,
        };
        let stream = futures_util::stream::unfold(out, |mut o| async move {
            let item = o.next().await?;
            if let Ok(msg) = &item {
                let sub = &o.guard.sub;
                sub.last_progress_ms.store(o.hub.mono_ms(), Ordering::Relaxed);
                sub.sent_bytes.fetch_add(msg.len() as u64, Ordering::Relaxed);
                o.hub_sent(msg);
            }
            Some((item, o))
        });
        Ok(Box::pin(stream))
    }
}

/// Reads acks (and reports, usage summaries) until the client goes away;
/// then ends the outgoing stream too. `instance`: the client's
/// `Hello.instance_id`, what its usage is counted under.
async fn read_acks(
    mut inbound: Inbound,
    env: Arc<Env>,
    store: Store,
    hub: Arc<Hub>,
    sub: Arc<Subscriber>,
    instance: String,
) {
    let mut refusals_logged = false;
    // Usage summaries in the current minute (a per-stream rate bound).
    let (mut usage_window, mut usage_count) = (tokio::time::Instant::now(), 0u32);
    loop {
        // No select on the cancel token (polling it takes a lock): when the
        // response stream ends, the request stream ends with it.
        let msg = inbound.message().await;
        if sub.is_stopped() {
            return;
        }
        match msg {
            Ok(Some(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Ack(ack)) })) => {
                hub.ack(&env, &sub, &ack.epoch, ack.revision);
            }
            Ok(Some(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Report(report)) })) => {
                hub.report(&sub, &report);
            }
            Ok(Some(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Usage(summary)) })) => {
                if usage_window.elapsed() >= Duration::from_secs(60) {
                    (usage_window, usage_count) = (tokio::time::Instant::now(), 0);
                }
                usage_count += 1;
                let checked = match usage_count > crate::usage::MAX_SUMMARIES_PER_MINUTE {
                    true => Err(crate::usage::OverBound {
                        field: "usage.rate",
                        message: format!(
                            "more than {} summaries in a minute on one stream",
                            crate::usage::MAX_SUMMARIES_PER_MINUTE
                        ),
                    }),
                    false => crate::usage::check(&summary),
                };
                match checked {
                    // A deleted environment's usage is gone (its stream ends).
                    Ok(()) if env.deleted.load(Ordering::Acquire) => {}
                    // On the blocking pool: it takes the environment's usage
                    // lock, which a `GetUsage` page may hold a while. Awaited,
                    // so a stream's messages still count in order (a Goodbye
                    // after it sees it counted).
                    Ok(()) => {
                        let (hub, name, instance) = (hub.clone(), sub.env.clone(), instance.clone());
                        let (relay, snap) = (sub.relay, env.state.load().snapshot.clone());
                        let counted = tokio::task::spawn_blocking(move || {
                            hub.usage.ingest(&name, &instance, relay, &snap, summary)
                        })
                        .await;
                        if let Err(e) = counted {
                            tracing::warn!(env = %sub.env, subscriber = sub.id, error = %e, "counting a usage summary failed");
                        }
                    }
                    // Dropped whole, counted, logged (the first per stream
                    // at warn); the stream goes on: usage is diagnostic and
                    // the flags it serves are not at stake.
                    Err(over) => {
                        hub.usage.refused(over.field);
                        if std::mem::replace(&mut refusals_logged, true) {
                            tracing::debug!(env = %sub.env, subscriber = sub.id, field = over.field, "usage summary refused: {}", over.message);
                        } else {
                            tracing::warn!(env = %sub.env, subscriber = sub.id, sdk = %sub.sdk, field = over.field, "usage summary refused (dropped; the stream goes on): {}: {}", over.field, over.message);
                        }
                    }
                }
            }
            Ok(Some(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(_)) })) => {
                tracing::info!(env = %sub.env, subscriber = sub.id, "second Hello: ending the stream");
                sub.fail(
                    Refusal::Protocol("a second Hello on one stream (open a new stream instead)".into())
                        .into(),
                );
                return;
            }
            // The client is closing: everything it sent before was read
            // (usage counted above); ending the stream (OK) tells it so.
            Ok(Some(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Goodbye(_)) })) => {
                tracing::debug!(env = %sub.env, subscriber = sub.id, "goodbye: ending the stream");
                sub.stop();
                return;
            }
            // Unknown kinds: ignored (forward compatibility, PROTOCOL.md §8).
            Ok(Some(_)) => {}
            Ok(None) => return, // client half-closed; keep sending
            Err(status) => {
                match status.code() {
                    tonic::Code::OutOfRange => store.metrics().limit_hit("subscribe_request_bytes"),
                    tonic::Code::DeadlineExceeded => {
                        store.metrics().limit_hit("subscribe_request_slow");
                        tracing::warn!(env = %sub.env, subscriber = sub.id, sdk = %sub.sdk, error = %status, "subscriber stream ended: a large request message was not completed in time");
                    }
                    _ => {}
                }
                tracing::debug!(env = %sub.env, subscriber = sub.id, error = %status, "subscriber request stream failed");
                sub.fail(status);
                return;
            }
        }
    }
}

/// Removes the subscriber from the hub when the stream is dropped.
struct Leave {
    hub: Arc<Hub>,
    sub: Arc<Subscriber>,
    reason: &'static str,
}

impl Drop for Leave {
    fn drop(&mut self) {
        self.sub.stop();
        self.hub.leave(&self.sub, self.reason);
    }
}

/// A snapshot being sent: the shared chunks, the next index, and the
/// permit that counts it against the snapshot budget.
struct Pending {
    chunks: Arc<SnapshotChunks>,
    next: usize,
    _permit: OwnedSemaphorePermit,
    /// `snapshot_sends`, decremented when the send ends or is abandoned.
    gauge: prometheus_client::metrics::gauge::Gauge,
}

/// One subscriber's outgoing side.
struct Outbound {
    store: Store,
    hub: Arc<Hub>,
    cfg: Arc<StreamConfig>,
    env: Arc<Env>,
    head: tokio::sync::watch::Receiver<u64>,
    cursor: (String, u64),
    pending: Option<Pending>,
    heartbeat: Interval,
    age_deadline: Instant,
    /// Fires at `age_deadline`; kept across waits so the timer is
    /// registered once per stream, not once per wait.
    age: Pin<Box<tokio::time::Sleep>>,
    /// Set when the cursor was first seen ahead of the head: the stream
    /// is held with heartbeats until then, then asked to go elsewhere.
    ahead_until: Option<Instant>,
    first: bool,
    guard: Leave,
    done: bool,
}

impl Outbound {
    fn hub_sent(&self, msg: &Encoded) {
        // The first byte is the tag of SubscribeResponse's oneof field.
        let kind = match msg.message().first() {
            Some(0x0a) => SentKind::SnapshotChunk,
            Some(0x12) => SentKind::Delta,
            Some(0x1a) => SentKind::Heartbeat,
            _ => SentKind::Reconnect,
        };
        self.store.metrics().sent(kind, msg.len());
    }

    fn heartbeat_msg(&self, state: &EnvState) -> Encoded {
        encoded::message(pb::subscribe_response::Kind::Heartbeat(pb::Heartbeat {
            epoch: state.epoch.clone(),
            head_revision: state.revision,
            server_time_unix_ms: now_ms(),
            interval_ms: self.cfg.heartbeat.as_millis() as u32,
            staleness_ms: self.store.staleness_ms(&self.env),
            // The head's checksum: a client at exactly this (epoch,
            // revision) with other content learns it is not current
            // (a restored store; PROTOCOL.md §2.6).
            checksum: Some(state.checksum),
        }))
    }

    fn reconnect(
        &mut self,
        reason: pb::ReconnectReason,
        delay: Duration,
        why: &'static str,
        message: &str,
    ) -> Encoded {
        self.done = true;
        self.guard.reason = why;
        encoded::message(pb::subscribe_response::Kind::Reconnect(pb::Reconnect {
            reason: reason as i32,
            suggested_delay_ms: delay.as_millis() as u32,
            jitter_ms: 0,
            alternative_endpoint: String::new(),
            message: message.to_owned(),
        }))
    }

    /// The next message, computed now; `None` ends the stream.
    async fn next(&mut self) -> Option<Result<Encoded, Status>> {
        if self.done {
            return None;
        }
        // Set only while it waits below for a snapshot permit.
        if self.guard.sub.waiting_permit.load(Ordering::Relaxed) {
            self.guard.sub.waiting_permit.store(false, Ordering::Relaxed);
        }
        if let Some(p) = &mut self.pending {
            let chunk = p.chunks.chunk(p.next, || self.store.metrics().chunk_assembled());
            p.next += 1;
            if p.next == p.chunks.len() {
                self.pending = None;
                // The snapshot's last chunk: the stream has its revision.
                self.guard.sub.sent_revision.store(self.cursor.1, Ordering::Relaxed);
                self.guard.sub.snapshot_revision.store(0, Ordering::Relaxed);
            }
            return Some(Ok(chunk));
        }
        loop {
            if self.hub.is_draining() {
                let spread = self.cfg.drain_spread.as_millis().max(1) as u64;
                let delay = Duration::from_millis(rand::rng().random_range(0..spread));
                return Some(Ok(self.reconnect(
                    pb::ReconnectReason::Drain,
                    delay,
                    "drain",
                    "relay is shutting down",
                )));
            }
            if self.guard.sub.is_stopped() {
                self.done = true;
                return self.guard.sub.take_failure().map(Err);
            }
            if Instant::now() >= self.age_deadline {
                let delay = Duration::from_millis(rand::rng().random_range(0..1_000));
                return Some(Ok(self.reconnect(
                    pb::ReconnectReason::MaxStreamAge,
                    delay,
                    "max_stream_age",
                    "stream reached its maximum age; reconnect (possibly elsewhere)",
                )));
            }
            // `Store::delete_env` marks the head as u64::MAX (and a waiting
            // stream learns of it from `changed`); checked here once, for a
            // deletion that raced with this stream's start.
            if self.first && *self.head.borrow() == u64::MAX {
                return Some(Err(self.deleted()));
            }
            // A guard, not an `Arc` clone: no shared reference count touched
            // per delivery. Never held across an await (reloaded after).
            let state = self.env.state.load();
            if std::mem::take(&mut self.first) {
                // Every stream opens with a heartbeat: the client learns the
                // interval (to size its watchdog) and the head revision
                // before any data, and its first-message deadline holds
                // even while a snapshot waits for a send permit.
                return Some(Ok(self.heartbeat_msg(&state)));
            }
            let metrics = self.store.metrics();
            let bounds =
                Bounds { chunk_bytes: self.cfg.chunk_bytes, delta_cache_bytes: self.cfg.delta_cache_bytes };
            match state.catchup(&self.cursor.0, self.cursor.1, bounds, metrics) {
                c @ (Catchup::Current | Catchup::Ahead) => {
                    drop(state);
                    let ahead = matches!(c, Catchup::Ahead);
                    if !ahead && self.ahead_until.take().is_some() {
                        // The head reached the cursor this stream was held
                        // at: the subscriber has that revision (it sends no
                        // ack, as it receives nothing).
                        self.guard.sub.applied.fetch_max(self.cursor.1, Ordering::Relaxed);
                        // A heartbeat now, not at the next tick: its
                        // checksum tells a client holding other content
                        // under this revision (a restored store) at once.
                        let state = self.env.state.load();
                        return Some(Ok(self.heartbeat_msg(&state)));
                    }
                    let hold = match (ahead, self.ahead_until) {
                        (false, _) => None,
                        (true, Some(until)) => Some(until),
                        (true, None) => {
                            self.store.note_cursor_ahead();
                            // It holds the data up to its cursor: while the
                            // head catches up it is not behind.
                            self.guard.sub.sent_revision.store(self.cursor.1, Ordering::Relaxed);
                            Some(*self.ahead_until.insert(Instant::now() + self.cfg.ahead_hold))
                        }
                    };
                    if hold.is_some_and(|until| Instant::now() >= until) {
                        return Some(Ok(self.cursor_ahead()));
                    }
                    let far = self.age_deadline;
                    tokio::select! {
                        // Head first: the common wake-up polls one future.
                        biased;
                        changed = self.head.changed() => {
                            if changed.is_err() || *self.head.borrow() == u64::MAX {
                                return Some(Err(self.deleted()));
                            }
                        }
                        _ = self.heartbeat.tick() => return Some(Ok(self.heartbeat_msg(&self.env.state.load()))),
                        _ = std::future::poll_fn(|cx| self.guard.sub.poll_stop_or_drain(cx, &self.hub)) => {}
                        _ = self.age.as_mut() => {}
                        _ = tokio::time::sleep_until(hold.unwrap_or(far)), if hold.is_some() => {}
                    }
                }
                Catchup::Delta(delta) => {
                    self.ahead_until = None;
                    // A delta never changes the epoch: no copy of it per send.
                    self.cursor.1 = state.revision;
                    self.guard.sub.sent_revision.store(state.revision, Ordering::Relaxed);
                    return Some(Ok(delta));
                }
                Catchup::Snapshot(chunks) => {
                    let cursor = (state.epoch.clone(), state.revision);
                    drop(state);
                    let permit = match self.hub.snapshot_permits.clone().try_acquire_owned() {
                        Ok(p) => p,
                        Err(_) => {
                            metrics.limit_hit("snapshot_concurrency");
                            // Held back by the relay's own budget: not
                            // counted as behind (cleared once it has one).
                            self.guard.sub.waiting_permit.store(true, Ordering::Relaxed);
                            tokio::select! {
                                p = self.hub.snapshot_permits.clone().acquire_owned() => match p {
                                    Ok(p) => p,
                                    Err(_) => return None, // semaphore closed: shutting down
                                },
                                // Keep the stream alive while waiting; the
                                // snapshot is retried on the next pull.
                                _ = self.heartbeat.tick() => return Some(Ok(self.heartbeat_msg(&self.env.state.load()))),
                                // A new head: recompute (a newer snapshot),
                                // or end if the environment was deleted.
                                changed = self.head.changed() => {
                                    if changed.is_err() || *self.head.borrow() == u64::MAX {
                                        return Some(Err(self.deleted()));
                                    }
                                    continue;
                                }
                                _ = std::future::poll_fn(|cx| self.guard.sub.poll_stop_or_drain(cx, &self.hub)) => continue,
                            }
                        }
                    };
                    self.guard.sub.waiting_permit.store(false, Ordering::Relaxed);
                    // The stream has this snapshot's revision once its last
                    // chunk is handed over.
                    let whole = if chunks.len() > 1 { 0 } else { cursor.1 };
                    self.guard.sub.sent_revision.store(whole, Ordering::Relaxed);
                    let on_its_way = if chunks.len() > 1 { cursor.1 } else { 0 };
                    self.guard.sub.snapshot_revision.store(on_its_way, Ordering::Relaxed);
                    self.cursor = cursor;
                    let first = chunks.chunk(0, || metrics.chunk_assembled());
                    if chunks.len() > 1 {
                        metrics.snapshot_sends.inc();
                        let gauge = metrics.snapshot_sends.clone();
                        self.pending = Some(Pending { chunks, next: 1, _permit: permit, gauge });
                    }
                    return Some(Ok(first));
                }
            }
        }
    }

    /// Ends the stream: its cursor stayed ahead of this relay's head for
    /// the whole hold (PROTOCOL.md §2.2); it must not get older data here.
    fn cursor_ahead(&mut self) -> Encoded {
        self.store.metrics().limit_hit("cursor_ahead");
        tracing::info!(env = %self.guard.sub.env, subscriber = self.guard.sub.id, cursor = self.cursor.1, head = self.env.state.load().revision, "cursor ahead of the head for the whole hold: asking the subscriber to reconnect elsewhere");
        let delay = Duration::from_millis(rand::rng().random_range(0..1_000));
        self.reconnect(
            pb::ReconnectReason::Rebalance,
            delay,
            "cursor_ahead",
            "your cursor is ahead of this relay's head; reconnect (possibly elsewhere)",
        )
    }

    /// Ends the stream: the environment was deleted.
    fn deleted(&mut self) -> Status {
        self.done = true;
        self.guard.reason = "environment_deleted";
        Refusal::EnvDeleted(self.guard.sub.env.to_string()).into()
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.gauge.dec();
        if self.next < self.chunks.len() {
            tracing::debug!(sent = self.next, total = self.chunks.len(), "snapshot send abandoned");
        }
    }
}
