//! Pre-resolved flag handles: resolve a key once, then evaluate without the
//! hash lookup for as long as the snapshot is the same one. For a flag whose
//! answer does not depend on the context (off, or a fixed fallthrough), the
//! bool form skips even loading the snapshot: it checks the cell's
//! generation and returns the cached value. A client that counts usage
//! counts those answers in the handle itself ([`HandleUsage`]: there is no
//! flag cell on that path), and gathers them from the handles it adopted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::cell::SnapshotCell;
use crate::context::Context;
use crate::error::ErrorKind;
use crate::result::{Detail, Reason};
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
    /// For [`FlagHandle::bool`]: `generation << 4 | variation << 2 | value
    /// << 1 | 1` when the flag was a constant bool (served variation < 4)
    /// in that generation's snapshot, else 0.
    constant_bool: AtomicU64,
    /// The constant shortcut's usage counts (allocated with the handle).
    usage: Arc<HandleUsage>,
}

/// Generations as stored in `constant_bool` (60 bits).
const GENERATION_MASK: u64 = u64::MAX >> 4;

/// Usage counts of a handle's constant shortcut, for one client (its
/// `owner` id): evaluations per served variation and the defaults passed.
/// The client takes them like a flag cell's (`take`).
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub struct HandleUsage {
    /// The counting client's id; 0 while no client has adopted the handle.
    owner: AtomicU64,
    /// Evaluations per variation index 0..4.
    counts: [AtomicU64; 4],
    /// Bit 0: a caller passed default `false`; bit 1: `true`.
    defaults: AtomicU32,
}

impl HandleUsage {
    /// Lets another client adopt the handle once `owner` (a client going
    /// away) has taken its last counts.
    pub fn release(&self, owner: u64) {
        // Adopted by another client meanwhile, or never by `owner`: kept.
        let _released = self.owner.compare_exchange(owner, 0, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Moves the counts out: per variation index (trailing zeros left
    /// off), and the defaults passed (`false`, `true`).
    pub fn take(&self) -> (Vec<u64>, [bool; 2]) {
        let mut v: Vec<u64> = self.counts.iter().map(|c| c.swap(0, Ordering::Relaxed)).collect();
        while v.last() == Some(&0) {
            v.pop();
        }
        let d = self.defaults.swap(0, Ordering::Relaxed);
        (v, [d & 1 != 0, d & 2 != 0])
    }
}

const INDEX_BITS: u32 = 24;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

impl FlagHandle {
    /// A handle for this flag key.
    pub fn new(key: impl Into<Box<str>>) -> FlagHandle {
        FlagHandle {
            key: key.into(),
            cache: AtomicU64::new(UNRESOLVED),
            constant_bool: AtomicU64::new(0),
            usage: Arc::new(HandleUsage::default()),
        }
    }

    /// Whether a client has adopted this handle's usage counts.
    #[inline]
    pub fn usage_adopted(&self) -> bool {
        self.usage.owner.load(Ordering::Relaxed) != 0
    }

    /// Makes client `owner` (non-zero) the one the constant shortcut counts
    /// for: the counts to gather, or `None` when another client already
    /// did (that client's calls count here; this one's take its counted
    /// path).
    pub fn adopt_usage(&self, owner: u64) -> Option<Arc<HandleUsage>> {
        let won = self.usage.owner.compare_exchange(0, owner, Ordering::Relaxed, Ordering::Relaxed).is_ok();
        won.then(|| self.usage.clone())
    }

    /// The constant shortcut for client `owner`, counted: the cached value
    /// when the flag was a constant bool in the cell's current snapshot and
    /// `owner` adopted this handle (one evaluation of the served variation
    /// and the default counted in the handle), else `None` (evaluate and
    /// count through the snapshot, then [`FlagHandle::remember_constant`]).
    #[inline]
    pub fn bool_shortcut_counted(&self, cell: &SnapshotCell, owner: u64, default: bool) -> Option<bool> {
        let fast = self.constant_bool.load(Ordering::Relaxed);
        if fast & 1 == 0 || fast >> 4 != cell.generation() & GENERATION_MASK {
            return None;
        }
        let u = &*self.usage;
        if u.owner.load(Ordering::Relaxed) != owner {
            return None;
        }
        u.counts[((fast >> 2) & 3) as usize].fetch_add(1, Ordering::Relaxed);
        let bit = 1u32 << u32::from(default);
        if u.defaults.load(Ordering::Relaxed) & bit == 0 {
            u.defaults.fetch_or(bit, Ordering::Relaxed);
        }
        Some(fast & 2 != 0)
    }

    /// After evaluating in `snap` (as `d`): caches the answer for the
    /// constant shortcut if the flag is a constant bool there.
    #[inline]
    pub fn remember_constant(&self, snap: &Snapshot, d: &Detail<'_, bool>) {
        let constant = self
            .resolve(snap)
            .and_then(|i| snap.flags.get(i as usize).get().constant.as_ref())
            .is_some_and(|c| matches!(c.value, Value::Bool(_)));
        match d.variation {
            Some(v) if constant && v < 4 => {
                let word = (snap.generation() & GENERATION_MASK) << 4
                    | u64::from(v) << 2
                    | u64::from(d.value) << 1
                    | 1;
                self.constant_bool.store(word, Ordering::Relaxed);
            }
            _ => {}
        }
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
        let found = snap.index.get(&self.key).map(|slot| slot.index);
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
        if fast & 1 == 1 && fast >> 4 == cell.generation() & GENERATION_MASK {
            return (fast & 2 != 0, None);
        }
        let snap = cell.load();
        let d = self.detail(&snap, ctx, default);
        self.remember_constant(&snap, &d);
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
                client_visible: false,
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
