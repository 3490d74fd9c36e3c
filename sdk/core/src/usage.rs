//! Per-flag usage counters, kept in the flag's cell of a snapshot (the
//! allocation the evaluation reads anyway), for usage summaries
//! (PROTOCOL.md "Usage summaries").
//!
//! The hot path of a counted evaluation is one compare of the default's
//! hash with the flag's first remembered default, one relaxed load of the
//! "seen this interval" bits, and one relaxed `fetch_add` on the served
//! variation's counter: no lock, no allocation, no clock read. A new
//! default value, a variation index of 4 or more (first time only) and
//! fallbacks take the cold paths.
//!
//! Only [`Snapshot::detail_counted`](crate::Snapshot::detail_counted) and
//! friends count; [`Snapshot::detail`](crate::Snapshot::detail) does not.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use once_cell::race::OnceBox;
use serde_json::Value as Json;

/// Variations counted inline in a flag's cell; higher indexes are counted
/// in an array allocated on the first such evaluation (once per flag).
pub const INLINE_VARIATIONS: usize = 4;
/// Distinct default values remembered per flag (PROTOCOL.md: at most 4 per
/// flag in a summary).
pub const MAX_DEFAULTS: usize = 4;
/// Flags per usage summary message (PROTOCOL.md: a receiver refuses more;
/// a sender with more sends several summaries).
pub const MAX_FLAGS_PER_SUMMARY: usize = 1000;
/// Longest flag key in a usage summary, bytes (a longer key asked for is
/// counted as untracked: no flag has one).
pub const MAX_KEY_BYTES: usize = 256;
/// Most variation counts per flag in a usage summary (the default
/// `Limits::max_variations`).
pub const MAX_VARIATIONS: usize = 100;
/// Longest default value listed, bytes of compact JSON; a longer one is
/// counted in `other_defaults`.
pub const MAX_DEFAULT_BYTES: usize = 256;

/// A flag's usage counters (one per flag cell; shared by every snapshot
/// that shares the cell).
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub struct FlagUsage {
    /// Evaluations per variation index 0..4.
    counts: [AtomicU64; INLINE_VARIATIONS],
    /// Hashes of the remembered defaults (0: free), in the order first seen.
    hashes: [AtomicU64; MAX_DEFAULTS],
    /// Bit i: default i passed since the last [`FlagUsage::take`].
    seen: AtomicU32,
    /// Bit i: default i is too long to list (counted in `other_defaults`
    /// each time it is passed).
    unlisted: AtomicU32,
    /// Fallbacks: wrong type, malformed.
    wrong_type: AtomicU64,
    malformed: AtomicU64,
    /// Evaluations whose default is none of the remembered ones.
    other_defaults: AtomicU64,
    /// Evaluations per variation index 4.. (allocated on first use).
    more: OnceBox<Box<[AtomicU64]>>,
    /// The remembered defaults' JSON texts, by position in `hashes`
    /// (`None`: too long to list).
    texts: Mutex<[Option<Box<str>>; MAX_DEFAULTS]>,
}

/// What [`FlagUsage::take`] moved out: counts since the previous take.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageCounts {
    /// Evaluations per variation index (trailing zeros left off).
    pub variations: Vec<u64>,
    /// `WRONG_TYPE` fallbacks.
    pub wrong_type: u64,
    /// `MALFORMED_FLAG` fallbacks.
    pub malformed: u64,
    /// Defaults passed (compact JSON), at most [`MAX_DEFAULTS`].
    pub defaults: Vec<String>,
    /// Evaluations with a default not in `defaults`.
    pub other_defaults: u64,
}

impl UsageCounts {
    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.variations.is_empty()
            && self.wrong_type == 0
            && self.malformed == 0
            && self.defaults.is_empty()
            && self.other_defaults == 0
    }
}

impl FlagUsage {
    /// Notes the default a caller passed: one compare when it is the flag's
    /// first remembered default and already noted this interval.
    #[inline(always)]
    pub fn note_default<'s, T: crate::FromValue<'s>>(&self, default: &T) {
        let h = default.default_hash() | 1;
        if self.hashes[0].load(Ordering::Relaxed) == h && self.seen.load(Ordering::Relaxed) & 1 == 1 {
            return;
        }
        self.note_default_cold(h, || default.default_json());
    }

    #[cold]
    #[inline(never)]
    fn note_default_cold(&self, h: u64, json: impl FnOnce() -> Option<Json>) {
        let mut full = true;
        for (i, slot) in self.hashes.iter().enumerate() {
            let cur = slot.load(Ordering::Relaxed);
            if cur == h {
                self.mark(i);
                return;
            }
            full &= cur != 0;
        }
        if full {
            // Slots are never freed: a fifth default is counted without
            // the lock, however often it is passed.
            self.other_defaults.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut texts = self.texts.lock().unwrap_or_else(|p| p.into_inner());
        // Under the lock: the only place `hashes` is written (besides
        // `take`, which does not write them), so a free slot stays free.
        for (i, slot) in self.hashes.iter().enumerate() {
            let cur = slot.load(Ordering::Relaxed);
            if cur == h {
                self.mark(i);
                return;
            }
            if cur == 0 {
                texts[i] =
                    json().map(|j| j.to_string()).filter(|t| t.len() <= MAX_DEFAULT_BYTES).map(Into::into);
                if texts[i].is_none() {
                    self.unlisted.fetch_or(1 << i, Ordering::Relaxed);
                }
                slot.store(h, Ordering::Relaxed);
                self.mark(i);
                return;
            }
        }
        drop(texts);
        self.other_defaults.fetch_add(1, Ordering::Relaxed);
    }

    #[inline]
    fn mark(&self, i: usize) {
        let bit = 1 << i;
        if self.unlisted.load(Ordering::Relaxed) & bit != 0 {
            self.other_defaults.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self.seen.load(Ordering::Relaxed) & bit == 0 {
            self.seen.fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// Counts an evaluation that served `variation`; `variations` (the
    /// flag's number of variations) is asked only the first time an index
    /// of 4 or more is served.
    #[inline(always)]
    pub fn served(&self, variation: u32, variations: impl FnOnce() -> usize) {
        match self.counts.get(variation as usize) {
            Some(c) => {
                c.fetch_add(1, Ordering::Relaxed);
            }
            None => self.served_more(variation as usize, variations()),
        }
    }

    #[cold]
    #[inline(never)]
    fn served_more(&self, variation: usize, variations: usize) {
        let more = self.more.get_or_init(|| {
            let n = variations.max(variation + 1).saturating_sub(INLINE_VARIATIONS);
            Box::new((0..n).map(|_| AtomicU64::new(0)).collect())
        });
        match more.get(variation - INLINE_VARIATIONS) {
            Some(c) => {
                c.fetch_add(1, Ordering::Relaxed);
            }
            // An index past the array made for the flag's variations: the
            // evaluation answers MALFORMED_FLAG before counting, so this is
            // unreachable; counted as malformed rather than lost.
            None => {
                self.malformed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts a fallback to the caller's default for a flag in the data.
    #[cold]
    pub fn fallback(&self, kind: crate::ErrorKind) {
        match kind {
            crate::ErrorKind::WrongType => self.wrong_type.fetch_add(1, Ordering::Relaxed),
            _ => self.malformed.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// Moves the counts out (zeroing them). An evaluation racing with this
    /// is counted in this take or the next, never lost or twice; a default
    /// noted while `seen` is cleared may be listed one interval late.
    pub fn take(&self) -> UsageCounts {
        let mut variations: Vec<u64> = self.counts.iter().map(|c| c.swap(0, Ordering::Relaxed)).collect();
        if let Some(more) = self.more.get() {
            variations.extend(more.iter().map(|c| c.swap(0, Ordering::Relaxed)));
        }
        while variations.last() == Some(&0) {
            variations.pop();
        }
        let seen = self.seen.swap(0, Ordering::Relaxed);
        let mut defaults = Vec::new();
        if seen != 0 {
            let texts = self.texts.lock().unwrap_or_else(|p| p.into_inner());
            let listed = texts.iter().enumerate().filter(|(i, _)| seen & (1 << i) != 0);
            defaults.extend(listed.filter_map(|(_, t)| t.as_deref().map(str::to_owned)));
        }
        UsageCounts {
            variations,
            wrong_type: self.wrong_type.swap(0, Ordering::Relaxed),
            malformed: self.malformed.swap(0, Ordering::Relaxed),
            defaults,
            other_defaults: self.other_defaults.swap(0, Ordering::Relaxed),
        }
    }
}

/// The 64-bit mix of `splitmix64`: spreads a value's bits over the hash.
#[inline(always)]
pub(crate) fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A hash of a string default: its bytes folded eight at a time.
#[inline]
pub(crate) fn hash_str(s: &str) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15 ^ s.len() as u64;
    let mut chunks = s.as_bytes().chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = mix(h ^ u64::from_le_bytes(w));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = mix(h ^ u64::from_le_bytes(w));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_variations_defaults_and_fallbacks_and_take_resets() {
        let u = FlagUsage::default();
        u.note_default(&true);
        u.served(0, || 2);
        u.note_default(&true);
        u.served(1, || 2);
        u.note_default(&false);
        u.served(6, || 8);
        u.fallback(crate::ErrorKind::WrongType);
        let t = u.take();
        assert_eq!(t.variations, vec![1, 1, 0, 0, 0, 0, 1]);
        assert_eq!(t.defaults, vec!["true".to_owned(), "false".to_owned()]);
        assert_eq!((t.wrong_type, t.malformed, t.other_defaults), (1, 0, 0));
        assert!(u.take().is_empty(), "a take moves the counts out");
        u.note_default(&false);
        assert_eq!(u.take().defaults, vec!["false".to_owned()], "defaults are listed per interval");
    }

    #[test]
    fn size_is_three_cache_lines() {
        // ARCHITECTURE.md "Usage reporting" states it.
        assert_eq!(std::mem::size_of::<FlagUsage>(), 192);
    }

    #[test]
    fn defaults_beyond_the_bound_are_counted_not_listed() {
        let u = FlagUsage::default();
        for i in 0..10i64 {
            u.note_default(&i);
        }
        u.note_default(&"x".repeat(MAX_DEFAULT_BYTES + 1).as_str());
        let t = u.take();
        assert_eq!(t.defaults, vec!["0", "1", "2", "3"]);
        assert_eq!(t.other_defaults, 7);
        let u = FlagUsage::default();
        let long = "y".repeat(MAX_DEFAULT_BYTES + 1);
        u.note_default(&long.as_str());
        u.note_default(&long.as_str());
        let t = u.take();
        assert!(t.defaults.is_empty());
        assert_eq!(t.other_defaults, 2, "a default too long to list is counted per evaluation");
    }
}
