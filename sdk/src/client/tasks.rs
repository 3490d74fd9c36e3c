//! The background tasks a client owns, stopped when it is closed or its
//! last handle goes: the sync task and, with the `cache` feature and a
//! cache directory, the debounced cache writer and the final cache write.
//!
//! Closing ([`Tasks::close`], `Client::close`) asks the sync task to send
//! the usage counted since the last summary and a Goodbye, and waits for
//! the relay to confirm, a bounded time. Dropping the last handle without a
//! close does the same without waiting: the sync task goes on alone for at
//! most [`DROP_FLUSH`] on the client's runtime (while that runtime runs).

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

#[cfg(feature = "cache")]
pub(super) use with_cache::{FinalWrite, cache_writer};

/// How long the sync task of a client dropped without `close()` may go on
/// sending its final usage summary.
pub(super) const DROP_FLUSH: Duration = Duration::from_secs(2);

/// Owns the background tasks; they stop when the client is closed or the
/// last client handle goes.
#[derive(Debug)]
pub(super) struct Tasks {
    /// The sync task: `true` when the relay confirmed the final summary.
    pub(super) sync: Mutex<Option<JoinHandle<bool>>>,
    /// Tells the sync task to close.
    pub(super) closing: Option<watch::Sender<bool>>,
    /// Other tasks (the cache writer), aborted at close.
    pub(super) handles: Mutex<Vec<JoinHandle<()>>>,
    /// Where the sync task runs (the drop's bounded flush waits there).
    pub(super) runtime: Option<tokio::runtime::Handle>,
    /// The cache and the newest held state, for the final write.
    #[cfg(feature = "cache")]
    pub(super) cache: Mutex<Option<FinalWrite>>,
}

impl Tasks {
    pub(super) fn none() -> Tasks {
        Tasks {
            sync: Mutex::new(None),
            closing: None,
            handles: Mutex::new(Vec::new()),
            runtime: None,
            #[cfg(feature = "cache")]
            cache: Mutex::new(None),
        }
    }

    /// Closes: the sync task sends its final usage and a Goodbye, waited
    /// for at most `timeout`; then every task stops and the cache is
    /// written once more (on the blocking pool). `true` when the relay
    /// confirmed it had read the final summary. A second close returns
    /// `false` at once.
    pub(super) async fn close(&self, timeout: Duration) -> bool {
        let sync = self.sync.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut sync) = sync else { return false };
        // A caller that stops waiting (drops this future) stops the sync
        // task too, rather than leaving it to flush with no bound; once the
        // task has ended this is a no-op.
        let _stop = AbortOnDrop(sync.abort_handle());
        if let Some(c) = &self.closing {
            c.send_replace(true);
        }
        let confirmed = match tokio::time::timeout(timeout, &mut sync).await {
            Ok(Ok(confirmed)) => confirmed,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the sync task failed while closing");
                false
            }
            Err(_) => {
                tracing::warn!(
                    ?timeout,
                    "closing: the relay did not confirm the final usage summary in time"
                );
                sync.abort();
                false
            }
        };
        for t in self.handles.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            t.abort();
        }
        #[cfg(feature = "cache")]
        {
            let last = self.cache.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(f) = last
                && let Err(e) = tokio::task::spawn_blocking(move || f.write()).await
            {
                tracing::warn!(error = %e, "the final cache write failed");
            }
        }
        confirmed
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Drop for Tasks {
    /// Without a close: the sync task is told to close and may go on for
    /// [`DROP_FLUSH`] sending its final usage (aborted then); the other
    /// tasks stop; the newest applied revision is written to the cache if
    /// the debounced writer had not yet (a few milliseconds of blocking I/O,
    /// once, when the last clone goes).
    fn drop(&mut self) {
        if let Some(c) = &self.closing {
            c.send_replace(true);
        }
        let sync = self.sync.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(sync) = sync {
            match &self.runtime {
                Some(rt) => {
                    let bounded = async move {
                        let abort = sync.abort_handle();
                        if tokio::time::timeout(DROP_FLUSH, sync).await.is_err() {
                            abort.abort();
                        }
                    };
                    drop(rt.spawn(bounded));
                }
                None => sync.abort(),
            }
        }
        for t in self.handles.get_mut().unwrap_or_else(|p| p.into_inner()).drain(..) {
            t.abort();
        }
        #[cfg(feature = "cache")]
        if let Some(f) = self.cache.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            f.write();
        }
    }
}

#[cfg(feature = "cache")]
mod with_cache {
    use std::sync::{Arc, Weak};
    use std::time::Duration;

    use tokio::sync::watch;

    use crate::cache::Cache;
    use crate::held::Held;
    use crate::shared::Shared;
    use crate::stats::bump;

    /// What the final write at drop needs.
    #[derive(Debug)]
    pub(in crate::client) struct FinalWrite {
        pub(in crate::client) shared: Arc<Shared>,
        /// The one long-lived handle: dropping it closes sled.
        pub(in crate::client) cache: Arc<Cache>,
        pub(in crate::client) latest: watch::Receiver<Option<Arc<Held>>>,
        pub(in crate::client) key_fingerprint: u64,
    }

    impl FinalWrite {
        /// Writes the newest held state unless it is stored already, and
        /// closes the cache.
        pub(in crate::client) fn write(self) {
            let latest = self.latest.borrow().clone();
            match self.cache.close(latest.as_ref(), self.key_fingerprint) {
                Ok(true) => bump(&self.shared.counters.cache_writes),
                Ok(false) => {}
                Err(e) => {
                    bump(&self.shared.counters.cache_errors);
                    tracing::warn!(error = %e, "writing the flag cache at shutdown failed");
                }
            }
        }
    }

    /// Writes the latest held state to the cache at most once per `interval`.
    pub(in crate::client) async fn cache_writer(
        shared: Arc<Shared>,
        cache: Weak<Cache>,
        mut rx: watch::Receiver<Option<Arc<Held>>>,
        interval: Duration,
        key_fingerprint: u64,
    ) {
        while rx.changed().await.is_ok() {
            tokio::time::sleep(interval).await; // debounce: coalesce bursts
            let Some(held) = rx.borrow_and_update().clone() else { continue };
            // Held only while writing: the client's drop closes the cache (and
            // releases its directory lock) at once, not when this task goes.
            let Some(cache) = cache.upgrade() else { return };
            match tokio::task::spawn_blocking(move || cache.store(&held, key_fingerprint)).await {
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
}
