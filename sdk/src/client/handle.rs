//! The client handle: what an application holds and reads (the snapshot,
//! status, data age, counters, change listeners, flag watches). Cheap to
//! clone; the state behind it is `shared.rs`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::Value as Json;
use tokio::sync::{broadcast, watch};

use crate::clock::now_ms;
use crate::shared::{Change, Shared};
use crate::stats::Stats;
use crate::status::Status;
use flagstream_core::{Context, Snapshot};

use super::tasks::Tasks;

/// A flagstream client. Cheap to clone; all clones share one snapshot and
/// one sync task.
#[derive(Debug, Clone)]
pub struct Client {
    pub(super) shared: Arc<Shared>,
    pub(super) _tasks: Arc<Tasks>,
}

impl Client {
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

    /// Closes the client (every clone): sends the usage counted since the
    /// last summary to the relay, with a Goodbye, and waits at most
    /// `timeout` for the relay to confirm it read them; then stops the sync
    /// and writes the cache once more. Evaluations go on serving the last
    /// data, and never wait for this. Returns `true` when the relay
    /// confirmed; `false` for an offline or test-data client, a client
    /// without an open stream, a relay that does not know the Goodbye (it
    /// then waits the whole `timeout`), or a second close.
    ///
    /// A short-lived process (a cron job, a CLI, a serverless handler)
    /// should call it before it exits, so that the flags it used are not
    /// reported unused. Dropping the last handle without it starts the same
    /// flush without waiting (at most 2 s, while the runtime runs).
    pub async fn close(&self, timeout: Duration) -> bool {
        self._tasks.close(timeout).await
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
