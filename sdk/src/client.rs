//! The client services link: the handle, the state it shares with the sync
//! task, status, counters and change listeners. The sync task (`sync.rs`)
//! feeds it; a flag file or in-code test data can instead. Building a
//! client is `builder.rs`; typed evaluation and its owned results are
//! `evaluate.rs`.
//!
//! Evaluation is a synchronous function: one atomic load of the snapshot,
//! one hash lookup, the rules; no I/O, no await, no lock. It is safe inside
//! a database transaction.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value as Json;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use crate::cache::Cache;
use crate::replica::Replica;
use crate::stats::{Counters, Stats};
use crate::status::Status;
use crate::{Context, Snapshot, SnapshotCell};

/// Applied revisions kept for slow change listeners before they lag.
const CHANGE_BUFFER: usize = 64;

/// Unix time in ms.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

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
    /// how long). Part of [`Client::data_age`].
    pub(crate) relay_staleness_ms: std::sync::atomic::AtomicU64,
    /// When the served data was last confirmed current (Unix ms; 0: never).
    pub(crate) confirmed_unix_ms: std::sync::atomic::AtomicU64,
    pub(crate) status: watch::Sender<Status>,
    pub(crate) counters: Counters,
    pub(crate) changes: broadcast::Sender<Change>,
    pub(crate) cache_tx: Option<watch::Sender<Option<Arc<Replica>>>>,
}

/// Owns the background tasks; they stop when the last client handle goes.
#[derive(Debug)]
struct Tasks {
    handles: Vec<JoinHandle<()>>,
    /// The cache and the newest replica, for the final write at drop.
    cache: Option<FinalWrite>,
}

#[derive(Debug)]
struct FinalWrite {
    shared: Arc<Shared>,
    /// The one long-lived handle: dropping it closes sled.
    cache: Arc<Cache>,
    latest: watch::Receiver<Option<Arc<Replica>>>,
    key_fingerprint: u64,
}

impl Tasks {
    fn none() -> Tasks {
        Tasks { handles: Vec::new(), cache: None }
    }
}

impl Drop for Tasks {
    /// Stops the sync and cache tasks, then writes the newest applied
    /// revision to the cache if the debounced writer had not yet (a few
    /// milliseconds of blocking I/O, once, when the last clone goes).
    fn drop(&mut self) {
        for t in &self.handles {
            t.abort();
        }
        if let Some(f) = self.cache.take() {
            let latest = f.latest.borrow().clone();
            match f.cache.close(latest.as_ref(), f.key_fingerprint) {
                Ok(true) => crate::stats::bump(&f.shared.counters.cache_writes),
                Ok(false) => {}
                Err(e) => {
                    crate::stats::bump(&f.shared.counters.cache_errors);
                    tracing::warn!(error = %e, "writing the flag cache at shutdown failed");
                }
            }
        }
    }
}

/// A flagstream client. Cheap to clone; all clones share one snapshot and
/// one sync task.
#[derive(Debug, Clone)]
pub struct Client {
    shared: Arc<Shared>,
    _tasks: Arc<Tasks>,
}

mod builder;
mod evaluate;

pub use builder::{BuildError, Builder, read_flag_file};
pub use evaluate::EvaluationDetail;

impl Client {
    /// A builder with production defaults.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The current snapshot, for many evaluations against one revision.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.cell.load_full()
    }
    /// Current status.
    pub fn status(&self) -> Status {
        self.shared.status.borrow().clone()
    }

    /// A receiver that sees every status change.
    pub fn status_watch(&self) -> watch::Receiver<Status> {
        self.shared.status.subscribe()
    }

    /// Waits until data is served (from the stream, cache or a file), up to
    /// `timeout`; returns the status either way.
    pub async fn wait_ready(&self, timeout: Duration) -> Status {
        let mut rx = self.status_watch();
        // A timeout just returns the status as it is.
        let waited = tokio::time::timeout(timeout, rx.wait_for(Status::has_data)).await;
        if waited.is_err() {
            tracing::debug!(?timeout, "wait_ready timed out");
        }
        self.status()
    }

    /// How old the served data may be: the time since a relay last
    /// confirmed it current, plus how old that relay said its own data was
    /// then (a replica relay cut off from its upstream reports its age in
    /// every heartbeat, PROTOCOL.md §2.6). `None` until a relay confirmed
    /// anything (data from the cache, a file or test data).
    pub fn data_age(&self) -> Option<Duration> {
        let confirmed = self.shared.confirmed_unix_ms.load(Ordering::Relaxed);
        if confirmed == 0 {
            return None;
        }
        let relay = self.shared.relay_staleness_ms.load(Ordering::Relaxed);
        Some(Duration::from_millis(now_ms().saturating_sub(confirmed) + relay))
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// A stream of applied revisions with the flag keys they changed.
    /// Bounded: a listener that falls more than 64 revisions behind gets
    /// `Lagged` and should re-read what it needs.
    pub fn changes(&self) -> broadcast::Receiver<Change> {
        self.shared.changes.subscribe()
    }

    /// Watches one flag's value for one context: the receiver holds the
    /// current value and changes whenever an applied revision changes it.
    pub fn watch_flag(&self, key: &str, ctx: Context<'static>) -> watch::Receiver<Json> {
        let current = self.json(key, &ctx, Json::Null);
        let (tx, rx) = watch::channel(current);
        let mut changes = self.changes();
        let client = self.clone();
        let key = key.to_owned();
        tokio::spawn(async move {
            loop {
                // Any change may move this flag (its segments and
                // prerequisites change too); re-evaluate and compare.
                let change = tokio::select! {
                    _ = tx.closed() => return,
                    c = changes.recv() => c,
                };
                match change {
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        let v = client.json(&key, &ctx, Json::Null);
                        tx.send_if_modified(|old| {
                            if *old == v {
                                false
                            } else {
                                *old = v;
                                true
                            }
                        });
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        rx
    }
}
