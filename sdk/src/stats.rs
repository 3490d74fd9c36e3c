//! Client counters. Each is a relaxed atomic bumped only on rare paths (a
//! fallback to the caller's default, a reconnect), so the hot path of a
//! successful evaluation touches none of them.

use std::sync::atomic::{AtomicU64, Ordering};

use flagstream_core::ErrorKind;

/// The counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) default_not_found: AtomicU64,
    pub(crate) default_not_ready: AtomicU64,
    pub(crate) default_wrong_type: AtomicU64,
    pub(crate) default_malformed: AtomicU64,
    pub(crate) connects: AtomicU64,
    pub(crate) reconnects: AtomicU64,
    pub(crate) endpoint_switches: AtomicU64,
    pub(crate) stalls: AtomicU64,
    pub(crate) resyncs: AtomicU64,
    pub(crate) checksum_mismatches: AtomicU64,
    pub(crate) diverged_heads: AtomicU64,
    pub(crate) retry_hints: AtomicU64,
    pub(crate) snapshots_applied: AtomicU64,
    pub(crate) deltas_applied: AtomicU64,
    pub(crate) cache_writes: AtomicU64,
    pub(crate) cache_errors: AtomicU64,
    pub(crate) stale_ms: AtomicU64,
}

/// A point-in-time copy of the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Evaluations that returned the caller's default: flag not found.
    pub default_not_found: u64,
    /// ... because the client had no data yet.
    pub default_not_ready: u64,
    /// ... because the flag has another type.
    pub default_wrong_type: u64,
    /// ... because the flag was malformed.
    pub default_malformed: u64,
    /// Streams opened.
    pub connects: u64,
    /// Streams that ended and were reopened.
    pub reconnects: u64,
    /// Moves to another endpoint.
    pub endpoint_switches: u64,
    /// Streams found stalled: torn down by the watchdog (no message in
    /// time) or by an unanswered HTTP/2 keepalive ping.
    pub stalls: u64,
    /// Full snapshots requested after a failed apply.
    pub resyncs: u64,
    /// Checksum mismatches detected (after applying a snapshot or delta,
    /// and the heads counted in `diverged_heads`).
    pub checksum_mismatches: u64,
    /// Heartbeats that named the client's own epoch and revision as the
    /// relay's head with another checksum (the relay holds other content
    /// under that revision: a restored or replaced store); each was
    /// followed by a resync with a full snapshot.
    pub diverged_heads: u64,
    /// Refusals or stream ends that carried the relay's retry-after hint
    /// (the next attempt at that relay waited at least that long).
    pub retry_hints: u64,
    /// Snapshots applied.
    pub snapshots_applied: u64,
    /// Deltas applied.
    pub deltas_applied: u64,
    /// Cache writes (always 0 without a cache, e.g. without the `cache`
    /// feature).
    pub cache_writes: u64,
    /// Cache read/write problems (corrupt, locked, I/O; always 0 without a
    /// cache).
    pub cache_errors: u64,
    /// Milliseconds spent stale (counted when a stale period ends).
    pub stale_ms: u64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    /// Counts a fallback to the caller's default.
    #[cold]
    pub(crate) fn fallback(&self, kind: ErrorKind) {
        bump(match kind {
            ErrorKind::FlagNotFound => &self.default_not_found,
            ErrorKind::NotReady => &self.default_not_ready,
            ErrorKind::WrongType => &self.default_wrong_type,
            ErrorKind::MalformedFlag => &self.default_malformed,
        });
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            default_not_found: g(&self.default_not_found),
            default_not_ready: g(&self.default_not_ready),
            default_wrong_type: g(&self.default_wrong_type),
            default_malformed: g(&self.default_malformed),
            connects: g(&self.connects),
            reconnects: g(&self.reconnects),
            endpoint_switches: g(&self.endpoint_switches),
            stalls: g(&self.stalls),
            resyncs: g(&self.resyncs),
            checksum_mismatches: g(&self.checksum_mismatches),
            diverged_heads: g(&self.diverged_heads),
            retry_hints: g(&self.retry_hints),
            snapshots_applied: g(&self.snapshots_applied),
            deltas_applied: g(&self.deltas_applied),
            cache_writes: g(&self.cache_writes),
            cache_errors: g(&self.cache_errors),
            stale_ms: g(&self.stale_ms),
        }
    }
}
