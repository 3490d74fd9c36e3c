//! The state the client handles share with the sync task ([`Shared`]): the
//! snapshot cell, readiness and staleness, the status, the counters, the
//! change listeners; and the transitions between statuses (ready, stale,
//! a new snapshot published). The sync task (`sync.rs`) and the offline
//! sources drive it; the client (`client.rs`) reads it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::SystemTime;

use tokio::sync::{broadcast, watch};

#[cfg(feature = "cache")]
use crate::held::Held;
use crate::stats::Counters;
use crate::status::{Source, Status};
use flagstream_core::{Snapshot, SnapshotCell};

/// One applied revision and the flag keys it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The new revision.
    pub revision: u64,
    /// Flags added, changed or removed (all flags for a full snapshot).
    pub flags: Arc<[String]>,
}

/// State shared by the client handles and the sync task.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) cell: SnapshotCell,
    /// Set once any data has been published.
    pub(crate) ready: AtomicBool,
    /// Whether the served data is stale (read on every detail call).
    pub(crate) stale: AtomicBool,
    /// The relay's `staleness_ms` in its latest heartbeat: how old its own
    /// data was (0 on a primary; a replica cut off from its upstream says
    /// how long). Part of [`Client::data_age`](crate::Client::data_age).
    pub(crate) relay_staleness_ms: AtomicU64,
    /// When the served data was last confirmed current (Unix ms; 0: never).
    pub(crate) confirmed_unix_ms: AtomicU64,
    pub(crate) status: watch::Sender<Status>,
    pub(crate) counters: Counters,
    /// Usage counted off the flag cells, for usage summaries.
    pub(crate) usage: crate::usage_summary::Usage,
    pub(crate) changes: broadcast::Sender<Change>,
    /// Where the cache writer (`client/tasks.rs`) learns of each newly
    /// applied state; `None` without a cache.
    #[cfg(feature = "cache")]
    pub(crate) cache_tx: Option<watch::Sender<Option<Arc<Held>>>>,
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
        snapshot: Arc<Snapshot>,
        source: Source,
        changed: Vec<String>,
        stale: Option<&str>,
    ) {
        let revision = snapshot.revision();
        // The replaced cells' usage counts move to the aggregator first.
        self.usage.retire(&self.cell.load(), &changed);
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

    /// Hands a newly applied state to the cache writer, if there is one.
    #[cfg(feature = "cache")]
    pub(crate) fn cache_dirty(&self, held: Option<&Held>) {
        if let (Some(tx), Some(r)) = (&self.cache_tx, held) {
            tx.send_replace(Some(Arc::new(r.clone())));
        }
    }
}
