//! The `Subscribe` stream (server side).
//!
//! Each subscriber's outgoing stream is pull-based: the next message (the
//! rest of a snapshot, one delta from its cursor to head, a heartbeat, a
//! reconnect request) is worked out only when the transport asks for one.
//! Lag therefore coalesces by itself and there is no per-subscriber queue;
//! snapshot chunks and deltas are shared, pre-encoded bytes. Acks arrive on
//! the request stream and are read on the stream's own task, each time the
//! transport asks for the next message or a request wakes it
//! ([`Subscription`]).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use flagstream_proto::v1 as pb;
use futures_util::Stream;
use rand::Rng;
use tonic::Status;

use crate::access::Tokens;
pub(crate) use crate::config::StreamConfig;
use crate::error::{self, Refusal};
use crate::ops::secret;
use crate::store::encoded::Encoded;
use crate::store::{Env, Store, now_ms};
use crate::stream::hub::{Hub, Rejection, Subscriber};
use crate::stream::inbound::Inbound;
use crate::stream::quota::Quotas;
use crate::stream::transport::ConnInfo;

mod outbound;

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
    pub(crate) fn metrics(&self) -> &crate::ops::metrics::Metrics {
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
        let Some(found) = self.store.env_by_key_hash(&secret::hash_secret(&hello.sdk_key)) else {
            return Err(("unknown_sdk_key", Refusal::Unauthenticated("unknown SDK key").into()));
        };
        if found.client {
            return Err((
                "client_key",
                Refusal::NotPermitted(format!(
                    "key {} is a client-side key: it may only call OFREP (server-side SDKs need an SDK key)",
                    found.id
                ))
                .into(),
            ));
        }
        let (env, key_id) = (found.env, found.id);
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
    /// and returns its pull-based outgoing stream (see `crate::stream::grpc` for
    /// the wire side).
    pub(crate) async fn subscribe(
        &self,
        extensions: &http::Extensions,
        mut inbound: Inbound,
    ) -> Result<Subscription, Status> {
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
        if let Some(feature) = env.state.load().missing_feature(&hello.features) {
            refused("missing_feature");
            return Err(Refusal::MissingFeature { env: env_name, feature }.into());
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
        // The stream's span: its environment, subscriber and SDK on every
        // line logged for it (acks, usage, delivered revisions, its end),
        // and the reason it ended (`end`, the `stream_ends` reasons).
        let span = tracing::info_span!(
            "subscribe",
            env = %env_name,
            subscriber = sub.id,
            sdk = %sub.sdk,
            relay = sub.relay,
            cursor = cursor.revision,
            end = tracing::field::Empty,
        );
        let requests = Box::pin(tracing::Instrument::instrument(
            read_requests(inbound, env.clone(), self.store.clone(), self.hub.clone(), sub.clone(), instance),
            span.clone(),
        ));

        let start = outbound::Start { cursor, features: hello.features };
        let outgoing =
            outbound::stream(self.store.clone(), self.hub.clone(), self.cfg.clone(), env, start, sub, span);
        Ok(Subscription::new(outgoing, requests))
    }
}

/// An admitted subscriber's two halves, driven by one task (the response
/// body's: `crate::stream::grpc`): its outgoing messages and the reader of
/// its requests. Reading requests on the stream's own task instead of a
/// second one saves a task wake-up per ack and a task per stream; the
/// reader is polled only when a request (or the end of the request
/// stream) woke it, so working out the next outgoing message does not
/// touch the connection's receive side. While hyper waits for the
/// stream's send capacity it does not poll the body, and requests wait
/// unread: until the client takes data again, or until the hub cuts the
/// stream for taking nothing for heartbeat + send deadline.
pub(crate) struct Subscription {
    /// The messages to send; an error ends the stream with that status.
    outgoing: Outgoing,
    /// Reads acks, reports, usage summaries and the Goodbye until the
    /// client half-closes or goes; `None` once it has.
    requests: Option<Requests>,
    /// Set when the request reader was woken; wakes the task.
    woken: Arc<RequestsWoken>,
}

/// The request reader of a [`Subscription`].
type Requests = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// The request reader's waker: marks it woken, then wakes the stream's task.
#[derive(Default)]
struct RequestsWoken {
    woken: std::sync::atomic::AtomicBool,
    task: futures_util::task::AtomicWaker,
}

impl std::task::Wake for RequestsWoken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl Subscription {
    fn new(outgoing: Outgoing, requests: Requests) -> Subscription {
        let woken = Arc::new(RequestsWoken::default());
        // Polled once at the start, to register its waker.
        woken.woken.store(true, Ordering::Relaxed);
        Subscription { outgoing, requests: Some(requests), woken }
    }

    /// Reads whatever requests have arrived (if any woke the reader: a
    /// ready request is handled before the next outgoing message is worked
    /// out), then polls for the next outgoing message; both wake the
    /// calling task.
    pub(crate) fn poll_next(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Encoded, Status>>> {
        if let Some(requests) = &mut self.requests
            && self.woken.woken.swap(false, Ordering::AcqRel)
        {
            {
                // The body is polled by its one task: the waker is
                // registered when the reader is polled, not on every poll.
                self.woken.task.register(cx.waker());
                let waker = std::task::Waker::from(self.woken.clone());
                if requests.as_mut().poll(&mut std::task::Context::from_waker(&waker)).is_ready() {
                    self.requests = None;
                }
            }
        }
        self.outgoing.as_mut().poll_next(cx)
    }
}

/// Reads acks (and reports, usage summaries, the Goodbye) until the client
/// half-closes or goes away (a failed request stream, a second Hello or a
/// Goodbye also ends the outgoing one). `instance`: the client's
/// `Hello.instance_id`, what its usage is counted under.
async fn read_requests(
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
                hub.ack(&env, &sub, &ack.epoch, ack.revision, ack.held_us / 1_000);
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
                        let (relay, snap, env) = (sub.relay, env.state.load().snapshot.clone(), env.clone());
                        let counted = tokio::task::spawn_blocking(move || {
                            hub.usage.ingest(&env.deleted, &name, &instance, relay, &snap, summary)
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
