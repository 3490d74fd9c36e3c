//! The background tasks a client owns, stopped when its last handle goes:
//! the sync task and, with the `cache` feature and a cache directory, the
//! debounced cache writer and the final cache write at drop.

use tokio::task::JoinHandle;

#[cfg(feature = "cache")]
pub(super) use with_cache::{FinalWrite, cache_writer};

/// Owns the background tasks; they stop when the last client handle goes.
#[derive(Debug)]
pub(super) struct Tasks {
    pub(super) handles: Vec<JoinHandle<()>>,
    /// The cache and the newest held state, for the final write at drop.
    #[cfg(feature = "cache")]
    pub(super) cache: Option<FinalWrite>,
}

impl Tasks {
    pub(super) fn none() -> Tasks {
        Tasks {
            handles: Vec::new(),
            #[cfg(feature = "cache")]
            cache: None,
        }
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
        #[cfg(feature = "cache")]
        if let Some(f) = self.cache.take() {
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
