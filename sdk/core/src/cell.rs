//! The current snapshot, published lock-free.
//!
//! A [`SnapshotCell`] is the one place a process keeps "the flags now": an
//! `ArcSwap<Snapshot>` plus the generation number of the snapshot it holds.
//! Readers load it without locks or waiting; a single writer (the SDK's sync
//! task, the relay's store) replaces it. The separate generation word lets a
//! [`crate::FlagHandle`] confirm that its cached answer is still current with
//! one relaxed atomic load, cheaper than loading the snapshot itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::{ArcSwap, Guard};

use crate::snapshot::Snapshot;

/// Holder of the current [`Snapshot`].
#[derive(Debug)]
pub struct SnapshotCell {
    current: ArcSwap<Snapshot>,
    /// `current.generation()`, readable without loading `current`.
    generation: AtomicU64,
}

impl SnapshotCell {
    /// A cell holding `snapshot`.
    pub fn new(snapshot: Snapshot) -> SnapshotCell {
        let generation = AtomicU64::new(snapshot.generation());
        SnapshotCell { current: ArcSwap::from_pointee(snapshot), generation }
    }

    /// The current snapshot. Lock-free; hold the guard only briefly.
    #[inline]
    pub fn load(&self) -> Guard<Arc<Snapshot>> {
        self.current.load()
    }

    /// The current snapshot as an owned `Arc`, for holding across awaits.
    pub fn load_full(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Replaces the current snapshot.
    pub fn store(&self, snapshot: Arc<Snapshot>) {
        let generation = snapshot.generation();
        self.current.store(snapshot);
        // Published after the swap: a reader that sees the new generation
        // finds the new snapshot (or a newer one) behind `load()`.
        self.generation.store(generation, Ordering::Release);
    }

    /// The generation of the current snapshot.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}
