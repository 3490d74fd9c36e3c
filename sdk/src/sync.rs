//! The SDK's side of following a relay: the [`Sink`] that turns what the
//! follow engine (`follow.rs`) receives into compiled snapshots in the
//! client's cell (`shared.rs`), its status and counters, and hands each
//! applied state to the cache writer when there is one.
//!
//! This is the only writer of the snapshot cell: evaluation never waits on
//! anything here.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flagstream_proto::v1 as pb;

use crate::clock::now_ms;
use crate::error::ApplyError;
use crate::follow::{EndKind, Event, RawChunk, RawDelta, Sink};
use crate::held::{CachedHeld, Held};
use crate::shared::Shared;
use crate::stats::bump;
use crate::status::{Attempt, MAX_ATTEMPTS, Source, Status};
use flagstream_core::{Limits, Snapshot};

/// The client's sink: the received state and where applied data goes.
pub(crate) struct ClientSink {
    shared: Arc<Shared>,
    limits: Limits,
    /// A relay heartbeat stating data older than this marks the client
    /// stale (the relay's own upstream is unreachable).
    stale_after: Duration,
    /// What the client holds as received (raw items, cursor, checksum).
    /// Only the follow task touches it, one call at a time.
    held: Mutex<HeldSlot>,
    /// Recent failed attempts while no data is served.
    attempts: Mutex<Vec<Attempt>>,
}

/// The held state, or (after a cold start from the cache) the cached form
/// whose key maps are built on first use, off the cold start.
enum HeldSlot {
    None,
    Cached(CachedHeld),
    Ready(Held),
}

impl HeldSlot {
    fn get(&mut self) -> Option<&mut Held> {
        if let HeldSlot::Cached(_) = self
            && let HeldSlot::Cached(c) = std::mem::replace(self, HeldSlot::None)
        {
            *self = HeldSlot::Ready(c.into_held());
        }
        match self {
            HeldSlot::Ready(r) => Some(r),
            _ => None,
        }
    }
}

impl ClientSink {
    pub(crate) fn new(
        shared: Arc<Shared>,
        limits: Limits,
        stale_after: Duration,
        cached: Option<CachedHeld>,
    ) -> ClientSink {
        ClientSink {
            shared,
            limits,
            stale_after,
            held: Mutex::new(cached.map_or(HeldSlot::None, HeldSlot::Cached)),
            attempts: Mutex::new(Vec::new()),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, HeldSlot> {
        // Only the follow task locks it; a panic inside an apply (caught by
        // the engine as a resync) leaves the previous state in place.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes an applied revision: swap, status, listeners, cache.
    fn publish(&self, held: Held, snapshot: Snapshot, changed: Vec<String>) -> pb::Cursor {
        let cursor = held.cursor();
        // Data from a relay whose own data is old is served, but never as
        // fresh (PROTOCOL.md §2.6: staleness travels down the tree).
        let relay_age = Duration::from_millis(self.shared.relay_staleness_ms.load(Ordering::Relaxed));
        let stale = (relay_age > self.stale_after).then(|| relay_stale_reason(relay_age));
        self.shared.confirmed_unix_ms.store(now_ms(), Ordering::Relaxed);
        // Hand the held state to the cache writer before anyone can see the
        // data: a client dropped as soon as it is ready must still write it.
        #[cfg(feature = "cache")]
        self.shared.cache_dirty(Some(&held));
        self.shared.publish(Arc::new(snapshot), Source::Stream, changed, stale.as_deref());
        *self.slot() = HeldSlot::Ready(held);
        cursor
    }
}

impl Sink for ClientSink {
    fn usage(&self) -> Vec<pb::UsageSummary> {
        self.shared.usage.summaries(&self.shared.cell.load())
    }

    fn cursor(&self) -> Option<pb::Cursor> {
        match &*self.slot() {
            HeldSlot::None => None,
            HeldSlot::Cached(c) => Some(pb::Cursor { epoch: c.epoch.clone(), revision: c.revision }),
            HeldSlot::Ready(r) => Some(r.cursor()),
        }
    }

    fn checksum(&self) -> Option<u64> {
        match &*self.slot() {
            HeldSlot::None => None,
            HeldSlot::Cached(c) => Some(c.checksum),
            HeldSlot::Ready(r) => (!r.epoch.is_empty()).then_some(r.checksum),
        }
    }

    fn apply_snapshot(&self, chunks: Vec<RawChunk>) -> Result<pb::Cursor, ApplyError> {
        let applied = {
            let mut slot = self.slot();
            Held::from_chunks(chunks, slot.get().map(|r| &*r), &self.limits)?
        };
        // Counted before it is served, so a reader that sees the data sees
        // the count.
        bump(&self.shared.counters.snapshots_applied);
        Ok(self.publish(applied.held, applied.snapshot, applied.changed_flags))
    }

    fn apply_delta(&self, delta: RawDelta) -> Result<pb::Cursor, ApplyError> {
        let applied = {
            let mut slot = self.slot();
            let Some(current) = slot.get() else {
                return Err(ApplyError::Gap {
                    from: delta.from_revision,
                    to: delta.to_revision,
                    ours: 0,
                    epoch_ok: false,
                });
            };
            current.apply_delta(&self.shared.cell.load_full(), delta, &self.limits)?
        };
        bump(&self.shared.counters.deltas_applied);
        Ok(self.publish(applied.held, applied.snapshot, applied.changed_flags))
    }

    fn forget_cursor(&self) {
        if let Some(r) = self.slot().get() {
            r.forget_cursor();
        }
    }

    fn event(&self, event: Event<'_>) {
        let c = &self.shared.counters;
        match event {
            Event::Connected { .. } => bump(&c.connects),
            Event::Heartbeat(h) => self.heartbeat(h),
            // Counted in `apply_*`, before the data is served.
            Event::Applied { .. } => {}
            Event::Resync(e) => {
                bump(&c.resyncs);
                if matches!(e, ApplyError::Checksum { .. } | ApplyError::Diverged { .. }) {
                    bump(&c.checksum_mismatches);
                }
                if matches!(e, ApplyError::Diverged { .. }) {
                    bump(&c.diverged_heads);
                }
            }
            Event::Ended { endpoint, reason, kind, switched, retry_in } => {
                bump(&c.reconnects);
                match kind {
                    EndKind::RetryAfter => bump(&c.retry_hints),
                    EndKind::Stalled => bump(&c.stalls),
                    _ => {}
                }
                if switched {
                    bump(&c.endpoint_switches);
                }
                if !self.shared.has_data() {
                    let mut attempts = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
                    attempts.push(Attempt {
                        endpoint: endpoint.to_owned(),
                        error: reason.to_owned(),
                        retry_in,
                    });
                    if attempts.len() > MAX_ATTEMPTS {
                        attempts.remove(0);
                    }
                    self.shared.set_status(Status::Initializing { attempts: attempts.clone() });
                }
            }
            Event::Stale { reason } => {
                if self.shared.has_data() {
                    self.shared.mark_stale(reason);
                }
            }
        }
    }
}

fn relay_stale_reason(age: Duration) -> String {
    let secs = age.as_secs();
    format!("the relay's data was last confirmed current {secs} s ago (its upstream is unreachable)")
}

impl ClientSink {
    /// A heartbeat confirms the data current when it names our revision as
    /// the head and the relay's own data is fresh (`staleness_ms`, which a
    /// replica relay cut off from its upstream raises: PROTOCOL.md §2.6).
    fn heartbeat(&self, h: &pb::Heartbeat) {
        let at_head = match &*self.slot() {
            HeldSlot::None => false,
            HeldSlot::Cached(c) => c.epoch == h.epoch && c.revision == h.head_revision,
            HeldSlot::Ready(r) => r.epoch == h.epoch && r.revision == h.head_revision,
        };
        let age = Duration::from_millis(h.staleness_ms);
        self.shared.relay_staleness_ms.store(h.staleness_ms, Ordering::Relaxed);
        if at_head {
            self.shared.confirmed_unix_ms.store(now_ms(), Ordering::Relaxed);
        }
        if age > self.stale_after {
            if self.shared.has_data() {
                self.shared.mark_stale(&relay_stale_reason(age));
            }
        } else if at_head {
            self.shared.mark_ready(Source::Stream, h.head_revision);
        }
    }
}
