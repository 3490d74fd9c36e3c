//! Pre-resolved flag handles: resolve a key once, then evaluate without the
//! hash lookup for as long as the snapshot is the same one. For a flag whose
//! answer does not depend on the context (off, or a fixed fallthrough), the
//! bool form skips even loading the snapshot: it checks the cell's
//! generation and returns the cached value.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::cell::SnapshotCell;
use crate::context::Context;
use crate::error::ErrorKind;
use crate::eval::{Detail, Reason};
use crate::snapshot::Snapshot;
use crate::value::{FromValue, Value};

/// Marks "not resolved for any snapshot" in [`FlagHandle`]'s cache.
const UNRESOLVED: u64 = u64::MAX;

/// A flag key with a cached position in the last snapshot it saw.
///
/// The cache is one atomic word (snapshot generation in the high 40 bits,
/// flag index + 1 in the low 24, 0 meaning "not in that snapshot"), so a
/// handle can be shared by any number of threads without a lock. When a new
/// snapshot arrives the next evaluation re-resolves the key once.
#[derive(Debug)]
pub struct FlagHandle {
    key: Box<str>,
    cache: AtomicU64,
    /// For [`FlagHandle::bool`]: `generation << 2 | value << 1 | 1` when the
    /// flag was a constant bool in that generation's snapshot, else 0.
    constant_bool: AtomicU64,
}

/// Generations as stored in `constant_bool` (62 bits).
const GENERATION_MASK: u64 = u64::MAX >> 2;

const INDEX_BITS: u32 = 24;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

impl FlagHandle {
    /// A handle for this flag key.
    pub fn new(key: impl Into<Box<str>>) -> FlagHandle {
        FlagHandle { key: key.into(), cache: AtomicU64::new(UNRESOLVED), constant_bool: AtomicU64::new(0) }
    }

    /// The flag key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The flag's index in `snap`, from the cache when it is for `snap`.
    #[inline]
    fn resolve(&self, snap: &Snapshot) -> Option<u32> {
        // The generation is truncated to the bits the cache has room for; a
        // collision needs 2^40 snapshots in between two uses of one handle.
        let gen_tag = snap.generation() << INDEX_BITS;
        let cached = self.cache.load(Ordering::Relaxed);
        if cached != UNRESOLVED && cached & !INDEX_MASK == gen_tag {
            return match cached & INDEX_MASK {
                0 => None,
                i => Some((i - 1) as u32),
            };
        }
        let found = snap.index.get(&*self.key).map(|slot| slot.index);
        let slot = match found {
            Some(i) if u64::from(i) < INDEX_MASK => u64::from(i) + 1,
            Some(_) => return found, // too many flags to cache: always look up
            None => 0,
        };
        self.cache.store(gen_tag | slot, Ordering::Relaxed);
        found
    }

    /// Evaluates the flag as type `T` in `snap`; see [`Snapshot::detail`].
    #[inline]
    pub fn detail<'s, T: FromValue<'s>>(
        &self,
        snap: &'s Snapshot,
        ctx: &Context<'_>,
        default: T,
    ) -> Detail<'s, T> {
        match self.resolve(snap) {
            Some(i) => snap.detail_index(i, ctx, default, &crate::schedule::Clock::system()),
            None => Detail {
                value: default,
                variation: None,
                reason: Reason::Error(ErrorKind::FlagNotFound),
                flag_version: 0,
                revision: snap.revision(),
                stale: false,
            },
        }
    }

    /// [`FlagHandle::detail`], counted in the flag's usage counters like
    /// [`Snapshot::detail_counted`] (a flag not in `snap` is not counted:
    /// the caller counts that fallback).
    #[inline]
    pub fn detail_counted<'s, T: FromValue<'s>>(
        &self,
        snap: &'s Snapshot,
        ctx: &Context<'_>,
        default: T,
    ) -> Detail<'s, T> {
        match self.resolve(snap) {
            Some(i) => snap.detail_index_counted(i, ctx, default),
            None => Detail {
                value: default,
                variation: None,
                reason: Reason::Error(ErrorKind::FlagNotFound),
                flag_version: 0,
                revision: snap.revision(),
                stale: false,
            },
        }
    }

    /// A bool flag's value in the cell's current snapshot, or `default`.
    ///
    /// When the flag's answer did not depend on the context the last time,
    /// and the cell still holds that snapshot, this is two atomic loads.
    #[inline]
    pub fn bool(&self, cell: &SnapshotCell, ctx: &Context<'_>, default: bool) -> bool {
        self.bool_checked(cell, ctx, default).0
    }

    /// [`FlagHandle::bool`], also saying why when `default` was returned
    /// (for callers that count fallbacks, as the SDK's client does).
    #[inline]
    pub fn bool_checked(
        &self,
        cell: &SnapshotCell,
        ctx: &Context<'_>,
        default: bool,
    ) -> (bool, Option<ErrorKind>) {
        let fast = self.constant_bool.load(Ordering::Relaxed);
        if fast & 1 == 1 && fast >> 2 == cell.generation() & GENERATION_MASK {
            return (fast & 2 != 0, None);
        }
        let snap = cell.load();
        let d = self.detail(&snap, ctx, default);
        let constant = self
            .resolve(&snap)
            .and_then(|i| snap.flags[i as usize].get().constant.as_ref())
            .is_some_and(|c| matches!(c.value, Value::Bool(_)));
        if constant {
            let word = (snap.generation() & GENERATION_MASK) << 2 | u64::from(d.value) << 1 | 1;
            self.constant_bool.store(word, Ordering::Relaxed);
        }
        let error = match d.reason {
            Reason::Error(kind) => Some(kind),
            _ => None,
        };
        (d.value, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Limits;
    use crate::model::{Flag, FlagSet, FlagType, Serve};
    use std::sync::Arc;

    fn set(keys: &[&str]) -> Snapshot {
        let flags = keys
            .iter()
            .map(|k| Flag {
                key: (*k).into(),
                flag_type: FlagType::Bool,
                variations: vec![true.into(), false.into()],
                on: *k == "b",
                off_variation: 1,
                targets: vec![],
                rules: vec![],
                fallthrough: Serve::variation(0),
                prerequisites: vec![],
                salt: String::new(),
                version: 1,
                revision: 1,
                description: String::new(),
                tags: vec![],
                owner: String::new(),
            })
            .collect();
        Snapshot::compile(&FlagSet { flags, segments: vec![] }, &Limits::default()).unwrap()
    }

    /// A handle follows the flag across snapshots where its index moves,
    /// appears and disappears.
    #[test]
    fn follows_snapshots() {
        let h = FlagHandle::new("b");
        let ctx = Context::new("u");
        let one = Arc::new(set(&["a", "b"]));
        let cell = SnapshotCell::new(set(&[]));
        assert!(!h.bool(&cell, &ctx, false), "not in the first snapshot");
        cell.store(one.clone());
        assert!(h.bool(&cell, &ctx, false));
        assert!(h.bool(&cell, &ctx, false), "cached answer");
        cell.store(Arc::new(set(&["b"])));
        assert!(h.bool(&cell, &ctx, false));
        cell.store(Arc::new(set(&["a"])));
        assert!(h.bool(&cell, &ctx, true), "gone: the default, not the cached value");
        assert!(!h.bool(&cell, &ctx, false));
        let current = cell.load();
        let d = h.detail(&current, &ctx, false);
        assert_eq!(d.reason, Reason::Error(ErrorKind::FlagNotFound));
        // Back to an older snapshot: still right.
        assert_eq!(h.detail(&one, &ctx, false).variation, Some(0));
    }
}
