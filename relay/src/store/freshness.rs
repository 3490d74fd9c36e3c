//! How current a replica's copy of each environment is (the `staleness_ms`
//! its heartbeats state).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// How current a replica's copy of an environment is: what its heartbeats
/// state as `staleness_ms` (PROTOCOL.md §2.6). A primary's is always 0.
///
/// Wall-clock time, because it must survive restarts: a replica restarted
/// with its upstream down serves data whose age it learns from its store
/// (`EnvMeta::confirmed_unix_ms`), never as fresh. (Liveness deadlines use
/// the monotonic clock; this is a reported age, not a deadline.)
#[derive(Debug, Default)]
pub(crate) struct Freshness {
    /// Whether the upstream stream is open and delivering.
    live: AtomicBool,
    /// When the upstream last confirmed the data, Unix ms (0: never).
    confirmed_ms: AtomicU64,
    /// The upstream's own staleness at that moment.
    upstream_ms: AtomicU64,
}

impl Freshness {
    /// Records that the upstream confirmed the data at `now_ms` (Unix ms),
    /// itself `upstream_ms` stale.
    pub(crate) fn confirm(&self, now_ms: u64, upstream_ms: u64) {
        self.confirmed_ms.store(now_ms.max(1), Ordering::Relaxed);
        self.upstream_ms.store(upstream_ms, Ordering::Relaxed);
    }

    /// Marks the upstream stream open (`true`) or down.
    pub(crate) fn set_live(&self, live: bool) {
        self.live.store(live, Ordering::Relaxed);
    }

    /// When the upstream last confirmed the data, Unix ms, less its own
    /// staleness then (what is persisted across restarts); 0: never.
    pub(crate) fn confirmed_unix_ms(&self) -> u64 {
        let c = self.confirmed_ms.load(Ordering::Relaxed);
        if c == 0 { 0 } else { c.saturating_sub(self.upstream_ms.load(Ordering::Relaxed)).max(1) }
    }

    /// Whether the upstream stream is open.
    pub(crate) fn is_live(&self) -> bool {
        self.live.load(Ordering::Relaxed)
    }

    /// How old the data is, ms: the upstream's staleness while its stream
    /// is open; once it is down, the time since it last confirmed the data
    /// plus its staleness then. `None`: never confirmed.
    pub(crate) fn staleness_ms(&self, now_ms: u64) -> Option<u64> {
        let confirmed = self.confirmed_ms.load(Ordering::Relaxed);
        if confirmed == 0 {
            return None;
        }
        let upstream = self.upstream_ms.load(Ordering::Relaxed);
        Some(if self.is_live() { upstream } else { now_ms.saturating_sub(confirmed) + upstream })
    }
}
