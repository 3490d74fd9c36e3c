//! One subscriber's outgoing side of `Subscribe`: the next message (the
//! rest of a snapshot, one delta from its cursor to the head, a heartbeat,
//! a reconnect request) worked out when the transport asks for one, the
//! stream's age, its cursor held while ahead of the head, and the guard
//! that removes the subscriber from the hub when the stream goes.
//!
//! A hand-written `poll_next`, its state in one allocation: a stream
//! waiting for the next revision is woken through the environment's
//! [`Waiters`](crate::store::waiter::Waiters) (registered once, not per
//! revision), its stop or the relay's drain through the subscriber's
//! waker (registered once too: either ends the stream), and its one timer.
//! With 50,000 streams on a relay each wake-up touches memory no cache
//! holds, so what one delivery touches is kept to the state itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use flagstream_proto::v1 as pb;
use futures_util::Stream;
use rand::Rng;
use tokio::sync::{OwnedSemaphorePermit, TryAcquireError};
use tokio::time::Instant;
use tokio_util::sync::PollSemaphore;
use tonic::Status;

use crate::error::Refusal;
use crate::ops::metrics::SentKind;
use crate::store::encoded::{self, Encoded, SnapshotChunks};
use crate::store::state::{Bounds, Catchup, EnvState};
use crate::store::waiter::Registration;
use crate::store::{Env, Store, now_ms};
use crate::stream::hub::{Hub, Subscriber};

use super::{Outgoing, StreamConfig};

/// Where a stream starts and what its client implements.
pub(super) struct Start {
    /// The client's cursor.
    pub cursor: pb::Cursor,
    /// The evaluation features it announced.
    pub features: Vec<String>,
}

/// The outgoing stream of subscriber `sub` of `env`, from `start`'s cursor
/// (pull-based: see the module docs of `subscribe.rs`); dropping it
/// removes the subscriber from the hub.
pub(super) fn stream(
    store: Store,
    hub: Arc<Hub>,
    cfg: Arc<StreamConfig>,
    env: Arc<Env>,
    start: Start,
    sub: Arc<Subscriber>,
    span: tracing::Span,
) -> Outgoing {
    let Start { cursor, features } = start;
    let jitter = rand::rng().random_range(0.9..=1.1);
    let heartbeat_phase = rand::rng().random_range(Duration::ZERO..=cfg.heartbeat);
    let age_deadline = Instant::now() + cfg.max_stream_age.mul_f64(jitter);
    let out = Outbound {
        store,
        hub: hub.clone(),
        cfg: cfg.clone(),
        env,
        waiting: None,
        woken_by: None,
        permit_wait: None,
        cursor: (cursor.epoch, cursor.revision),
        // A subscriber with every feature this relay knows lacks none.
        features: (!flagstream::feature::IMPLEMENTED.iter().all(|f| features.iter().any(|h| h == f)))
            .then_some(features),
        pending: None,
        next_heartbeat: Instant::now() + heartbeat_phase,
        age_deadline,
        timer: Box::pin(tokio::time::sleep_until(Instant::now() + heartbeat_phase)),
        ahead_until: None,
        first: true,
        guard: Leave { hub: hub.clone(), sub, reason: "client_gone", span: span.clone() },
        done: false,
        span,
    };
    Box::pin(out)
}

/// When the heartbeat after one due at `due` and sent at `now` is due: on
/// schedule (sent within 5 ms), a whole interval after `due`; later (a
/// long snapshot send, a transport that did not pull), a whole interval
/// after `now`, so never two in quick succession (tokio's
/// `MissedTickBehavior::Delay`, which the stream's `Interval` used).
fn next_beat(due: Instant, now: Instant, every: Duration) -> Instant {
    if now > due + Duration::from_millis(5) { now + every } else { due + every }
}

/// Sets a stream's timer to the earlier of `at` (its next heartbeat or its
/// age deadline) and `hold` (the end of an ahead hold); the timer entry is
/// touched only when that moves.
fn arm(timer: &mut Pin<Box<tokio::time::Sleep>>, at: Instant, hold: Option<Instant>) {
    let at = hold.map_or(at, |hold| at.min(hold));
    if timer.deadline() != at {
        timer.as_mut().reset(at);
    }
}

/// Removes the subscriber from the hub when the stream is dropped.
struct Leave {
    hub: Arc<Hub>,
    sub: Arc<Subscriber>,
    reason: &'static str,
    /// The stream's span, given its `end` reason here.
    span: tracing::Span,
}

impl Drop for Leave {
    fn drop(&mut self) {
        tracing::debug!(env = %self.sub.env, subscriber = self.sub.id, reason = self.reason, "stream ended");
        self.sub.stop();
        self.hub.leave(&self.sub, self.reason);
        if let Some(reason) = self.sub.ended.get() {
            self.span.record("end", reason.as_str());
        }
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
    /// This stream's place among the environment's waiters (woken on every
    /// publish and on deletion); `None` until first polled.
    waiting: Option<Registration>,
    /// The waker registered for the subscriber's stop and the relay's
    /// drain (either ends the stream, so once is enough while it is the
    /// same).
    woken_by: Option<Waker>,
    /// Waiting for a snapshot-send permit (made when one was refused).
    permit_wait: Option<PollSemaphore>,
    cursor: (String, u64),
    /// The evaluation features the subscriber announced; `None` when it
    /// has every one this relay implements (nothing to check per message).
    features: Option<Vec<String>>,
    pending: Option<Pending>,
    /// When the next heartbeat is due (a stream opens with one; then every
    /// `cfg.heartbeat` after a random phase, whatever else was sent).
    next_heartbeat: Instant,
    age_deadline: Instant,
    /// The stream's one timer: set to the earliest of the next heartbeat,
    /// the age deadline and the end of an ahead hold, and kept across waits
    /// (one timer entry per stream, reset only when its deadline moves).
    timer: Pin<Box<tokio::time::Sleep>>,
    /// Set when the cursor was first seen ahead of the head: the stream
    /// is held with heartbeats until then, then asked to go elsewhere.
    ahead_until: Option<Instant>,
    first: bool,
    guard: Leave,
    done: bool,
    /// The stream's `subscribe` span (entered only to log in it).
    span: tracing::Span,
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
        // A revision handed to the stream whole: what an operator follows
        // from a write's commit (`admin_write{revision}`) to its streams.
        let whole = match kind {
            SentKind::Delta => true,
            SentKind::SnapshotChunk => self.pending.is_none(),
            _ => false,
        };
        // Entered only when the line is logged: nothing on the delivery
        // path at the default level.
        if whole && tracing::enabled!(tracing::Level::DEBUG) {
            self.span.in_scope(|| {
                tracing::debug!(
                    revision = self.cursor.1,
                    snapshot = matches!(kind, SentKind::SnapshotChunk),
                    "delivered"
                )
            });
        }
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
            checksum: Some(state.checksum()),
        }))
    }

    fn reconnect(
        &mut self,
        reason: pb::ReconnectReason,
        delay: Duration,
        why: &'static str,
        message: &str,
    ) -> Encoded {
        self.finish();
        self.guard.reason = why;
        encoded::message(pb::subscribe_response::Kind::Reconnect(pb::Reconnect {
            reason: reason as i32,
            suggested_delay_ms: delay.as_millis() as u32,
            jitter_ms: 0,
            alternative_endpoint: String::new(),
            message: message.to_owned(),
        }))
    }

    /// Registers the task to be woken by the next publish, by a stop and
    /// by the drain: before anything is read, so none of them is missed
    /// between the reading and the wait. Cheap when the waker is the same
    /// (a pointer comparison each).
    #[inline]
    fn register(&mut self, cx: &Context<'_>) {
        self.env.waiters.register(&mut self.waiting, cx.waker());
        if !self.woken_by.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            self.guard.sub.wake.register(cx.waker());
            self.woken_by = Some(cx.waker().clone());
        }
    }

    /// Waits on the timer (the next heartbeat, the age, the end of an ahead
    /// hold: whichever is first); publishes, stops and the drain wake the
    /// task through [`Outbound::register`]. `Ready(Some)`: a heartbeat to
    /// send; `Ready(None)`: the timer fired with nothing due, look again.
    fn wait(&mut self, cx: &mut Context<'_>, hold: Option<Instant>) -> Poll<Option<Encoded>> {
        arm(&mut self.timer, self.next_heartbeat.min(self.age_deadline), hold);
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(self.heartbeat_due()),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The stream has sent (or is sending) its last message: it waits for
    /// nothing more, so it leaves the environment's waiters (no wake-up on
    /// every publish while its last message waits for the transport) and
    /// the permit queue (a permit freed meanwhile goes to a stream that
    /// will use it).
    fn finish(&mut self) {
        self.done = true;
        self.forget_permit_wait();
        if let Some(reg) = self.waiting.take() {
            self.env.waiters.remove(reg);
        }
    }

    /// Stops waiting for a snapshot-send permit (the stream no longer needs
    /// one, or has it).
    fn forget_permit_wait(&mut self) {
        if self.permit_wait.take().is_some() {
            self.guard.sub.waiting_permit.store(false, Ordering::Relaxed);
        }
    }

    /// The next message, computed now; `Ready(None)` ends the stream.
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Encoded, Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        self.register(cx);
        if let Some(p) = &mut self.pending {
            let chunk = p.chunks.chunk(p.next, || self.store.metrics().chunk_assembled());
            p.next += 1;
            if p.next == p.chunks.len() {
                self.pending = None;
                // The snapshot's last chunk: the stream has its revision.
                self.guard.sub.sent_revision.store(self.cursor.1, Ordering::Relaxed);
                self.guard.sub.snapshot_revision.store(0, Ordering::Relaxed);
            }
            return Poll::Ready(Some(Ok(chunk)));
        }
        loop {
            if self.hub.is_draining() {
                let spread = self.cfg.drain_spread.as_millis().max(1) as u64;
                let delay = Duration::from_millis(rand::rng().random_range(0..spread));
                return Poll::Ready(Some(Ok(self.reconnect(
                    pb::ReconnectReason::Drain,
                    delay,
                    "drain",
                    "relay is shutting down",
                ))));
            }
            if self.guard.sub.is_stopped() {
                self.finish();
                return Poll::Ready(self.guard.sub.take_failure().map(Err));
            }
            if Instant::now() >= self.age_deadline {
                let delay = Duration::from_millis(rand::rng().random_range(0..1_000));
                return Poll::Ready(Some(Ok(self.reconnect(
                    pb::ReconnectReason::MaxStreamAge,
                    delay,
                    "max_stream_age",
                    "stream reached its maximum age; reconnect (possibly elsewhere)",
                ))));
            }
            // `Store::forget_env` sets this, then wakes every waiter.
            if self.env.deleted.load(Ordering::Acquire) {
                return Poll::Ready(Some(Err(self.deleted())));
            }
            // A guard, not an `Arc` clone: no shared reference count touched
            // per delivery. Never held across a wait (reloaded after).
            let state = self.env.state.load();
            // Data the subscriber would misread (a write after it
            // subscribed started using a feature it lacks): ended, not sent.
            if let Some(features) = &self.features
                && let Some(feature) = state.missing_feature(features)
            {
                self.finish();
                let env = state.name.clone();
                return Poll::Ready(Some(Err(Refusal::MissingFeature { env, feature }.into())));
            }
            if std::mem::take(&mut self.first) {
                // Every stream opens with a heartbeat: the client learns the
                // interval (to size its watchdog) and the head revision
                // before any data, and its first-message deadline holds
                // even while a snapshot waits for a send permit.
                return Poll::Ready(Some(Ok(self.heartbeat_msg(&state))));
            }
            let bounds =
                Bounds { chunk_bytes: self.cfg.chunk_bytes, delta_cache_bytes: self.cfg.delta_cache_bytes };
            let catchup = state.catchup(&self.cursor.0, self.cursor.1, bounds, self.store.metrics());
            if !matches!(catchup, Catchup::Snapshot(..)) {
                self.forget_permit_wait();
            }
            match catchup {
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
                        return Poll::Ready(Some(Ok(self.heartbeat_msg(&state))));
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
                        return Poll::Ready(Some(Ok(self.cursor_ahead())));
                    }
                    match self.wait(cx, hold) {
                        Poll::Ready(Some(beat)) => return Poll::Ready(Some(Ok(beat))),
                        // The age or the hold is over: seen above.
                        Poll::Ready(None) => continue,
                        Poll::Pending => return Poll::Pending,
                    }
                }
                Catchup::Delta(delta) => {
                    self.ahead_until = None;
                    // A delta never changes the epoch: no copy of it per send.
                    self.cursor.1 = state.revision;
                    self.guard.sub.sent_revision.store(state.revision, Ordering::Relaxed);
                    return Poll::Ready(Some(Ok(delta)));
                }
                Catchup::Snapshot(chunks, cause) => {
                    let cursor = (state.epoch.clone(), state.revision);
                    drop(state);
                    let permit = match self.permit(cx) {
                        Poll::Ready(Some(p)) => p,
                        // The semaphore closed: shutting down.
                        Poll::Ready(None) => {
                            self.finish();
                            return Poll::Ready(None);
                        }
                        // Kept alive while it waits; the snapshot is worked
                        // out again once a permit (or a new head) wakes it.
                        Poll::Pending => match self.wait(cx, None) {
                            Poll::Ready(Some(beat)) => return Poll::Ready(Some(Ok(beat))),
                            // The age is over: seen above.
                            Poll::Ready(None) => continue,
                            Poll::Pending => return Poll::Pending,
                        },
                    };
                    // Counted when sent, not each time a waiting stream
                    // worked it out again.
                    self.store.metrics().resyncs.get_or_create(&vec![("cause", cause.to_owned())]).inc();
                    // The stream has this snapshot's revision once its last
                    // chunk is handed over.
                    let whole = if chunks.len() > 1 { 0 } else { cursor.1 };
                    self.guard.sub.sent_revision.store(whole, Ordering::Relaxed);
                    let on_its_way = if chunks.len() > 1 { cursor.1 } else { 0 };
                    self.guard.sub.snapshot_revision.store(on_its_way, Ordering::Relaxed);
                    self.cursor = cursor;
                    let metrics = self.store.metrics();
                    let first = chunks.chunk(0, || metrics.chunk_assembled());
                    if chunks.len() > 1 {
                        metrics.snapshot_sends.inc();
                        let gauge = metrics.snapshot_sends.clone();
                        self.pending = Some(Pending { chunks, next: 1, _permit: permit, gauge });
                    }
                    return Poll::Ready(Some(Ok(first)));
                }
            }
        }
    }

    /// A snapshot-send permit: at once if one is free; else the stream
    /// waits in the semaphore's queue (counted once per wait, and not as
    /// behind meanwhile: the relay's own budget holds it back).
    fn permit(&mut self, cx: &mut Context<'_>) -> Poll<Option<OwnedSemaphorePermit>> {
        if self.permit_wait.is_none() {
            match self.hub.snapshot_permits.clone().try_acquire_owned() {
                Ok(p) => return Poll::Ready(Some(p)),
                // Shutting down: no wait, nothing counted.
                Err(TryAcquireError::Closed) => return Poll::Ready(None),
                Err(TryAcquireError::NoPermits) => {
                    self.store.metrics().limit_hit("snapshot_concurrency");
                    self.guard.sub.waiting_permit.store(true, Ordering::Relaxed);
                    self.permit_wait = Some(PollSemaphore::new(self.hub.snapshot_permits.clone()));
                }
            }
        }
        let Some(wait) = &mut self.permit_wait else { unreachable!("set above") };
        let permit = std::task::ready!(wait.poll_acquire(cx));
        self.forget_permit_wait();
        Poll::Ready(permit)
    }

    /// The heartbeat, if one is due now; the next is due a heartbeat
    /// interval later (after a long wait, one heartbeat, not a burst of
    /// overdue ones).
    fn heartbeat_due(&mut self) -> Option<Encoded> {
        let now = Instant::now();
        if now < self.next_heartbeat {
            return None;
        }
        self.next_heartbeat = next_beat(self.next_heartbeat, now, self.cfg.heartbeat);
        Some(self.heartbeat_msg(&self.env.state.load()))
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
        self.finish();
        self.guard.reason = "environment_deleted";
        Refusal::EnvDeleted(self.guard.sub.env.to_string()).into()
    }
}

impl Stream for Outbound {
    type Item = Result<Encoded, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let item = std::task::ready!(this.poll_message(cx));
        if let Some(Ok(msg)) = &item {
            let sub = &this.guard.sub;
            sub.last_progress_ms.store(this.hub.mono_ms(), Ordering::Relaxed);
            sub.sent_bytes.fetch_add(msg.len() as u64, Ordering::Relaxed);
            this.hub_sent(msg);
        }
        Poll::Ready(item)
    }
}

impl Drop for Outbound {
    fn drop(&mut self) {
        if let Some(reg) = self.waiting.take() {
            self.env.waiters.remove(reg);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_heartbeat_is_followed_by_a_whole_interval_not_a_quick_second_one() {
        let t0 = Instant::now();
        let every = Duration::from_secs(15);
        // On time (or within 5 ms): the schedule holds.
        assert_eq!(next_beat(t0, t0, every), t0 + every);
        assert_eq!(next_beat(t0, t0 + Duration::from_millis(5), every), t0 + every);
        // 14.9 s late (a long snapshot send): the next a whole interval
        // after it was sent, not 0.1 s later.
        let late = t0 + Duration::from_millis(14_900);
        assert_eq!(next_beat(t0, late, every), late + every);
    }
}
