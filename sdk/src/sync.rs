//! The SDK's side of following a relay: the [`Sink`] that turns what the
//! follow engine (`follow.rs`) receives into compiled snapshots in the
//! client's cell, its status and counters, and the debounced cache writer.
//!
//! This is the only writer of the snapshot cell: evaluation never waits on
//! anything here.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use flagstream_proto::v1 as pb;
use tokio::sync::watch;

use crate::Limits;
use crate::client::{Change, Shared};
use crate::follow::{EndKind, Event, RawChunk, RawDelta, Sink};
use crate::replica::{ApplyError, CachedReplica, Replica};
use crate::stats::bump;
use crate::status::{Attempt, MAX_ATTEMPTS, Source, Status};

/// The fingerprint that ties a cache to its SDK key (not a secret: a
/// 64-bit hash, so a cache file does not reveal the key).
pub(crate) fn key_fingerprint(sdk_key: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(sdk_key.as_bytes())
}

/// The client's sink: the received state and where applied data goes.
pub(crate) struct ClientSink {
    shared: Arc<Shared>,
    limits: Limits,
    /// A relay heartbeat stating data older than this marks the client
    /// stale (the relay's own upstream is unreachable).
    stale_after: Duration,
    /// What the client holds as received (raw items, cursor, checksum).
    /// Only the follow task touches it, one call at a time.
    replica: Mutex<ReplicaSlot>,
    /// Recent failed attempts while no data is served.
    attempts: Mutex<Vec<Attempt>>,
}

/// The replica, or (after a cold start from the cache) the cached form
/// whose key maps are built on first use, off the cold start.
enum ReplicaSlot {
    None,
    Cached(CachedReplica),
    Ready(Replica),
}

impl ReplicaSlot {
    fn get(&mut self) -> Option<&mut Replica> {
        if let ReplicaSlot::Cached(_) = self
            && let ReplicaSlot::Cached(c) = std::mem::replace(self, ReplicaSlot::None)
        {
            *self = ReplicaSlot::Ready(c.into_replica());
        }
        match self {
            ReplicaSlot::Ready(r) => Some(r),
            _ => None,
        }
    }
}

impl ClientSink {
    pub(crate) fn new(
        shared: Arc<Shared>,
        limits: Limits,
        stale_after: Duration,
        cached: Option<CachedReplica>,
    ) -> ClientSink {
        ClientSink {
            shared,
            limits,
            stale_after,
            replica: Mutex::new(cached.map_or(ReplicaSlot::None, ReplicaSlot::Cached)),
            attempts: Mutex::new(Vec::new()),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, ReplicaSlot> {
        // Only the follow task locks it; a panic inside an apply (caught by
        // the engine as a resync) leaves the previous replica in place.
        self.replica.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes an applied revision: swap, status, listeners, cache.
    fn publish(&self, replica: Replica, snapshot: crate::Snapshot, changed: Vec<String>) -> pb::Cursor {
        let cursor = replica.cursor();
        // Data from a relay whose own data is old is served, but never as
        // fresh (PROTOCOL.md §2.6: staleness travels down the tree).
        let relay_age = Duration::from_millis(self.shared.relay_staleness_ms.load(Ordering::Relaxed));
        let stale = (relay_age > self.stale_after).then(|| relay_stale_reason(relay_age));
        self.shared.confirmed_unix_ms.store(crate::client::now_ms(), Ordering::Relaxed);
        // Hand the replica to the cache writer before anyone can see the
        // data: a client dropped as soon as it is ready must still write it.
        self.shared.cache_dirty(Some(&replica));
        self.shared.publish(Arc::new(snapshot), Source::Stream, changed, stale.as_deref());
        *self.slot() = ReplicaSlot::Ready(replica);
        cursor
    }
}

impl Sink for ClientSink {
    fn cursor(&self) -> Option<pb::Cursor> {
        match &*self.slot() {
            ReplicaSlot::None => None,
            ReplicaSlot::Cached(c) => Some(pb::Cursor { epoch: c.epoch.clone(), revision: c.revision }),
            ReplicaSlot::Ready(r) => Some(r.cursor()),
        }
    }

    fn checksum(&self) -> Option<u64> {
        match &*self.slot() {
            ReplicaSlot::None => None,
            ReplicaSlot::Cached(c) => Some(c.checksum),
            ReplicaSlot::Ready(r) => (!r.epoch.is_empty()).then_some(r.checksum),
        }
    }

    fn apply_snapshot(&self, chunks: Vec<RawChunk>) -> Result<pb::Cursor, ApplyError> {
        let applied = {
            let mut slot = self.slot();
            Replica::from_chunks(chunks, slot.get().map(|r| &*r), &self.limits)?
        };
        // Counted before it is served, so a reader that sees the data sees
        // the count.
        bump(&self.shared.counters.snapshots_applied);
        Ok(self.publish(applied.replica, applied.snapshot, applied.changed_flags))
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
        Ok(self.publish(applied.replica, applied.snapshot, applied.changed_flags))
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
            ReplicaSlot::None => false,
            ReplicaSlot::Cached(c) => c.epoch == h.epoch && c.revision == h.head_revision,
            ReplicaSlot::Ready(r) => r.epoch == h.epoch && r.revision == h.head_revision,
        };
        let age = Duration::from_millis(h.staleness_ms);
        self.shared.relay_staleness_ms.store(h.staleness_ms, Ordering::Relaxed);
        if at_head {
            self.shared.confirmed_unix_ms.store(crate::client::now_ms(), Ordering::Relaxed);
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

impl Shared {
    /// Whether any data is being served.
    pub(crate) fn has_data(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub(crate) fn set_status(&self, s: Status) {
        self.status.send_replace(s);
    }

    pub(crate) fn mark_ready(&self, source: Source, revision: u64) {
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
        let (source, revision) = match &*self.status.borrow() {
            Status::Ready { source, revision, .. } | Status::Stale { source, revision, .. } => {
                (*source, *revision)
            }
            _ => (Source::Stream, 0),
        };
        self.mark_stale_at(source, revision, reason);
    }

    fn mark_stale_at(&self, source: Source, revision: u64, reason: &str) {
        if self.stale.swap(true, Ordering::Relaxed) {
            // Already stale: keep the period's start, follow the revision.
            self.status.send_if_modified(|s| match s {
                Status::Stale { revision: r, .. } if *r != revision => {
                    *r = revision;
                    true
                }
                _ => false,
            });
            return;
        }
        tracing::warn!(reason = %reason, revision, "flag data is stale");
        self.set_status(Status::Stale {
            source,
            revision,
            since: SystemTime::now(),
            reason: reason.to_owned(),
        });
    }

    /// Publishes a new snapshot: swap, status (ready, or stale for
    /// `stale`'s reason), listeners.
    pub(crate) fn publish(
        &self,
        snapshot: Arc<crate::Snapshot>,
        source: Source,
        changed: Vec<String>,
        stale: Option<&str>,
    ) {
        let revision = snapshot.revision();
        self.cell.store(snapshot);
        self.ready.store(true, Ordering::Release);
        // Listeners hear the change before the status moves on, so one that
        // subscribes after `wait_ready` sees only later revisions. No
        // receivers is fine: listeners are optional.
        if self.changes.send(Change { revision, flags: changed.into() }).is_err() {
            tracing::trace!("no change listeners");
        }
        match stale {
            None => self.mark_ready(source, revision),
            Some(reason) => self.mark_stale_at(source, revision, reason),
        }
    }

    pub(crate) fn cache_dirty(&self, replica: Option<&Replica>) {
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
