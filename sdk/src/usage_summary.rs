//! Usage summaries (PROTOCOL.md "Usage summaries"): what this client
//! evaluated, sent to its relay every usage interval.
//!
//! Where it is counted: evaluations of flags in the snapshot in the flag's
//! cell (`flagstream_core::FlagUsage`, lock-free, no allocation); fallbacks
//! for keys not in the snapshot (missing, not ready) here, under a lock, in
//! a table of at most [`MAX_KEYS`] keys (further keys counted as
//! untracked). When a revision replaces a flag's cell, its counts move here
//! before the new snapshot is published, so a change loses nothing but the
//! evaluations racing with the swap itself. `handle_bool`'s constant
//! shortcut reads no flag cell: it counts in the handle
//! (`flagstream_core::HandleUsage`), which this client adopts on the
//! handle's first counted evaluation (at most [`MAX_HANDLES`]) and gathers
//! like the cells.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, TryLockError};

use flagstream_core::usage::{MAX_DEFAULTS, MAX_FLAGS_PER_SUMMARY, MAX_KEY_BYTES};
use flagstream_core::{ErrorKind, FlagHandle, FromValue, HandleUsage, Snapshot, UsageCounts};
use flagstream_proto::v1 as pb;
use prost::Message;

use crate::clock::now_ms;

/// Keys absent from the data (missing-flag and not-ready fallbacks) tracked
/// per key in one interval; evaluations of further keys are counted in
/// `UsageSummary.untracked_evaluations`.
pub(crate) const MAX_KEYS: usize = 1024;

/// Flag handles whose constant-shortcut counts a client gathers; calls on
/// further handles count through the snapshot (slower, as exact).
pub(crate) const MAX_HANDLES: usize = 1024;

/// Client ids for handle adoption (0: none).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Largest summary message sent, bytes of its flags' encodings (the
/// relay's request limit is 1 MiB).
const MAX_SUMMARY_BYTES: usize = 512 << 10;

/// A flag's counts gathered off the flag cells: from replaced cells and
/// from fallbacks for keys not in the data.
#[derive(Debug, Default)]
struct Acc {
    variations: Vec<u64>,
    /// missing, wrong type, malformed, not ready
    fallbacks: [u64; 4],
    defaults: Vec<String>,
    /// Hashes of the defaults noted by `Usage::absent` (so a repeated
    /// default costs no JSON text).
    hashes: Vec<u64>,
    other_defaults: u64,
}

impl Acc {
    fn add(&mut self, c: UsageCounts) {
        if self.variations.len() < c.variations.len() {
            self.variations.resize(c.variations.len(), 0);
        }
        for (a, b) in self.variations.iter_mut().zip(&c.variations) {
            *a = a.saturating_add(*b);
        }
        self.fallbacks[1] = self.fallbacks[1].saturating_add(c.wrong_type);
        self.fallbacks[2] = self.fallbacks[2].saturating_add(c.malformed);
        for d in c.defaults {
            self.add_default(d, 1);
        }
        self.other_defaults = self.other_defaults.saturating_add(c.other_defaults);
    }

    /// Lists `d` if there is room, else counts `n` evaluations as "other".
    fn add_default(&mut self, d: String, n: u64) {
        if self.defaults.contains(&d) {
            return;
        }
        if self.defaults.len() < MAX_DEFAULTS {
            self.defaults.push(d);
        } else {
            self.other_defaults = self.other_defaults.saturating_add(n);
        }
    }

    /// Adds a handle's shortcut counts: per variation, and whether callers
    /// passed `false` / `true` as the default.
    fn add_handle(&mut self, variations: Vec<u64>, defaults: [bool; 2]) {
        let evaluations = variations.iter().sum::<u64>().max(1);
        self.add(UsageCounts { variations, ..UsageCounts::default() });
        for (passed, text) in defaults.into_iter().zip(["false", "true"]) {
            if passed {
                self.add_default(text.to_owned(), evaluations);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.variations.is_empty()
            && self.fallbacks == [0; 4]
            && self.defaults.is_empty()
            && self.other_defaults == 0
    }
}

/// What was gathered since the last summary.
#[derive(Debug, Default)]
struct Pending {
    flags: HashMap<Box<str>, Acc>,
    untracked: u64,
    since_ms: u64,
}

/// The client's usage aggregator.
#[derive(Debug)]
pub(crate) struct Usage {
    /// Whether evaluations are counted and summaries sent.
    pub(crate) enabled: AtomicBool,
    pending: Mutex<Pending>,
    /// Fallbacks for absent keys that found the table locked by another
    /// thread: counted here, without their key, rather than waiting (a
    /// missing flag evaluated on a hot path by many threads must not
    /// serialise them).
    contended: AtomicU64,
    /// This client's id, which the handles it adopted count for.
    id: u64,
    /// The adopted handles' counts, by key (at most [`MAX_HANDLES`]);
    /// dropped once their handle is gone and taken.
    handles: Mutex<Vec<(Box<str>, Arc<HandleUsage>)>>,
    /// `handles.len()`, read without the lock.
    adopted: AtomicUsize,
}

impl Drop for Usage {
    /// The handles this client adopted can be adopted by the next client
    /// (a static handle outlives a rebuilt client).
    fn drop(&mut self) {
        let handles = self.handles.get_mut().unwrap_or_else(|p| p.into_inner());
        for (_, u) in handles.iter() {
            // This client's last counts go with it, not to the next one.
            let _discarded = u.take();
            u.release(self.id);
        }
    }
}

impl Usage {
    pub(crate) fn new(enabled: bool) -> Usage {
        Usage {
            enabled: AtomicBool::new(enabled),
            pending: Mutex::new(Pending { since_ms: now_ms(), ..Pending::default() }),
            contended: AtomicU64::new(0),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            handles: Mutex::new(Vec::new()),
            adopted: AtomicUsize::new(0),
        }
    }

    /// The id handles adopted by this client count for.
    #[inline(always)]
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Adopts `h`'s shortcut counts (unless another client did, or
    /// [`MAX_HANDLES`] are adopted): from now on its constant shortcut
    /// answers this client's calls, counted.
    #[cold]
    pub(crate) fn adopt(&self, h: &FlagHandle) {
        if self.adopted.load(Ordering::Relaxed) >= MAX_HANDLES {
            return;
        }
        let mut handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        if handles.len() >= MAX_HANDLES || h.usage_adopted() {
            return;
        }
        if let Some(u) = h.adopt_usage(self.id) {
            handles.push((Box::from(h.key()), u));
            self.adopted.store(handles.len(), Ordering::Relaxed);
        }
    }

    /// Moves the adopted handles' counts into `flags` (only those of keys
    /// `only` accepts), and forgets handles that were dropped.
    fn take_handles(&self, flags: &mut HashMap<Box<str>, Acc>, only: impl Fn(&str) -> bool) {
        let mut handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        for (key, u) in handles.iter().filter(|(k, _)| only(k)) {
            let (variations, defaults) = u.take();
            if !variations.is_empty() || defaults.contains(&true) {
                flags.entry(key.clone()).or_default().add_handle(variations, defaults);
            }
        }
        // Only this table holds the counts of a dropped handle: taken above.
        handles.retain(|(k, u)| !only(k) || Arc::strong_count(u) > 1);
        self.adopted.store(handles.len(), Ordering::Relaxed);
    }

    /// Whether evaluations are counted.
    #[inline(always)]
    pub(crate) fn on(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        // Plain counters: a panic elsewhere while it was held leaves them
        // usable.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a fallback for a key that has no counters in the snapshot
    /// (`FLAG_NOT_FOUND`, `NOT_READY`), with the caller's default.
    #[cold]
    pub(crate) fn absent<'s, T: FromValue<'s>>(&self, key: &str, kind: ErrorKind, default: &T) {
        let i = match kind {
            ErrorKind::FlagNotFound => 0,
            ErrorKind::NotReady => 3,
            ErrorKind::WrongType => 1,
            ErrorKind::MalformedFlag => 2,
        };
        let mut p = match self.pending.try_lock() {
            Ok(p) => p,
            // Plain counters: usable after a panic elsewhere.
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.contended.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        if key.len() > MAX_KEY_BYTES || (p.flags.len() >= MAX_KEYS && !p.flags.contains_key(key)) {
            p.untracked = p.untracked.saturating_add(1);
            return;
        }
        // Allocates only for a key's first fallback in an interval.
        let acc = match p.flags.get_mut(key) {
            Some(acc) => acc,
            None => p.flags.entry(Box::from(key)).or_default(),
        };
        acc.fallbacks[i] = acc.fallbacks[i].saturating_add(1);
        let h = default.default_hash() | 1;
        if acc.hashes.contains(&h) {
            return;
        }
        if acc.defaults.len() >= MAX_DEFAULTS {
            acc.other_defaults = acc.other_defaults.saturating_add(1);
            return;
        }
        match default.default_json().map(|j| j.to_string()) {
            Some(d) if d.len() <= flagstream_core::usage::MAX_DEFAULT_BYTES => {
                acc.hashes.push(h);
                acc.add_default(d, 1);
            }
            _ => acc.other_defaults = acc.other_defaults.saturating_add(1),
        }
    }

    /// Moves the counts of the flags `changed` names out of `old` (the
    /// snapshot about to be replaced), so they survive their cells.
    pub(crate) fn retire(&self, old: &Snapshot, changed: &[String]) {
        if !self.on() {
            return;
        }
        let mut p = self.lock();
        for key in changed {
            let Some(u) = old.flag_usage(key) else { continue };
            let c = u.take();
            if !c.is_empty() {
                p.flags.entry(Box::from(key.as_str())).or_default().add(c);
            }
        }
        // The shortcut's counts are by the old variations too.
        if self.adopted.load(Ordering::Relaxed) > 0 {
            self.take_handles(&mut p.flags, |k| changed.iter().any(|c| c == k));
        }
    }

    /// The summaries for everything counted since the last call (each at
    /// most [`MAX_FLAGS_PER_SUMMARY`] flags); empty when nothing was.
    pub(crate) fn summaries(&self, current: &Snapshot) -> Vec<pb::UsageSummary> {
        if !self.on() {
            return Vec::new();
        }
        let now = now_ms();
        let (mut flags, untracked, since) = {
            let mut p = self.lock();
            let taken = std::mem::take(&mut *p);
            p.since_ms = now;
            let contended = self.contended.swap(0, Ordering::Relaxed);
            (taken.flags, taken.untracked.saturating_add(contended), taken.since_ms)
        };
        for (key, u) in current.usage() {
            let c = u.take();
            if !c.is_empty() {
                flags.entry(Box::from(key)).or_default().add(c);
            }
        }
        self.take_handles(&mut flags, |_| true);
        let entries: Vec<pb::FlagUsage> = flags
            .into_iter()
            .filter(|(_, a)| !a.is_empty())
            .map(|(key, a)| pb::FlagUsage {
                key: key.into(),
                last_evaluated_unix_ms: now,
                variations: a.variations,
                fallback_missing: a.fallbacks[0],
                fallback_wrong_type: a.fallbacks[1],
                fallback_malformed: a.fallbacks[2],
                fallback_not_ready: a.fallbacks[3],
                defaults: a.defaults,
                other_defaults: a.other_defaults,
                instances: 0,
            })
            .collect();
        if entries.is_empty() && untracked == 0 {
            return Vec::new();
        }
        // At most MAX_FLAGS_PER_SUMMARY flags and MAX_SUMMARY_BYTES per
        // message (PROTOCOL.md 4.1: under the relay's 1 MiB request limit).
        let mut out: Vec<pb::UsageSummary> = Vec::new();
        let mut bytes = 0usize;
        for e in entries {
            let len = e.encoded_len() + 4;
            let full = out
                .last()
                .is_none_or(|s| s.flags.len() >= MAX_FLAGS_PER_SUMMARY || bytes + len > MAX_SUMMARY_BYTES);
            if full {
                out.push(pb::UsageSummary {
                    start_unix_ms: since,
                    end_unix_ms: now,
                    flags: Vec::new(),
                    untracked_evaluations: 0,
                });
                bytes = 0;
            }
            bytes += len;
            if let Some(s) = out.last_mut() {
                s.flags.push(e);
            }
        }
        match out.first_mut() {
            Some(first) => first.untracked_evaluations = untracked,
            None => out.push(pb::UsageSummary {
                start_unix_ms: since,
                end_unix_ms: now,
                flags: Vec::new(),
                untracked_evaluations: untracked,
            }),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flagstream_core::{Context, FlagSet, Limits};

    #[test]
    fn counts_flags_fallbacks_and_survive_a_replaced_cell() {
        let set: FlagSet = serde_json::from_str(
            r#"{"flags":[{"key":"a","type":"bool","variations":[true,false],"on":true,"off_variation":1,"fallthrough":{"variation":0}}]}"#,
        )
        .unwrap();
        let snap = Snapshot::compile(&set, &Limits::default()).unwrap();
        let usage = Usage::new(true);
        let ctx = Context::new("u");
        for _ in 0..3 {
            assert!(snap.detail_counted("a", &ctx, false).value);
        }
        assert_eq!(snap.detail_counted::<i64>("a", &ctx, 5).value, 5);
        usage.absent("gone", ErrorKind::FlagNotFound, &true);
        usage.retire(&snap, &["a".to_owned()]);
        let s = usage.summaries(&snap);
        assert_eq!(s.len(), 1);
        let mut flags = s[0].flags.clone();
        flags.sort_by(|x, y| x.key.cmp(&y.key));
        assert_eq!(flags[0].key, "a");
        assert_eq!(flags[0].variations, vec![3]);
        assert_eq!(flags[0].fallback_wrong_type, 1);
        assert_eq!(flags[0].defaults, vec!["false", "5"]);
        assert_eq!((flags[1].key.as_str(), flags[1].fallback_missing), ("gone", 1));
        assert!(usage.summaries(&snap).is_empty(), "a summary is a delta");
    }

    /// The constant shortcut of an adopted handle counts in the handle:
    /// gathered into the summary with the defaults passed, moved out when
    /// the flag changes, and a dropped handle is forgotten once taken.
    #[test]
    fn handle_shortcut_counts_reach_the_summary() {
        let set: FlagSet = serde_json::from_str(
            r#"{"flags":[{"key":"off","type":"bool","variations":[true,false],"on":false,"off_variation":1,"fallthrough":{"variation":0}}]}"#,
        )
        .unwrap();
        let cell = flagstream_core::SnapshotCell::new(Snapshot::compile(&set, &Limits::default()).unwrap());
        let usage = Usage::new(true);
        let ctx = Context::new("u");
        let h = FlagHandle::new("off");
        assert_eq!(h.bool_shortcut_counted(&cell, usage.id(), true), None, "nothing cached yet");
        let snap = cell.load();
        let d = h.detail_counted(&snap, &ctx, true);
        h.remember_constant(&snap, &d);
        usage.adopt(&h);
        for default in [true, true, false] {
            assert_eq!(h.bool_shortcut_counted(&cell, usage.id(), default), Some(false));
        }
        let other = Usage::new(true);
        other.adopt(&h);
        assert_eq!(h.bool_shortcut_counted(&cell, other.id(), true), None, "adopted by the first client");
        let s = usage.summaries(&snap);
        assert_eq!(s[0].flags.len(), 1);
        let f = &s[0].flags[0];
        assert_eq!(f.variations, vec![0, 4], "one through the cell, three through the handle");
        let mut defaults = f.defaults.clone();
        defaults.sort();
        assert_eq!(defaults, ["false", "true"]);
        // A change of the flag takes the handle's counts with the cell's.
        h.bool_shortcut_counted(&cell, usage.id(), true);
        usage.retire(&snap, &["off".to_owned()]);
        drop(h);
        assert_eq!(usage.summaries(&snap)[0].flags[0].variations, vec![0, 1]);
        assert_eq!(usage.adopted.load(Ordering::Relaxed), 0, "the dropped handle is forgotten");
        // A client going away lets the next one adopt its handles.
        let h = FlagHandle::new("off");
        h.remember_constant(&snap, &d);
        usage.adopt(&h);
        assert_eq!(h.bool_shortcut_counted(&cell, other.id(), true), None);
        drop(usage);
        other.adopt(&h);
        assert_eq!(h.bool_shortcut_counted(&cell, other.id(), true), Some(false));
    }

    #[test]
    fn absent_keys_are_bounded() {
        let usage = Usage::new(true);
        for i in 0..MAX_KEYS + 10 {
            usage.absent(&format!("k{i}"), ErrorKind::NotReady, &1i64);
        }
        let s = usage.summaries(&Snapshot::empty());
        let n: usize = s.iter().map(|s| s.flags.len()).sum();
        assert_eq!(n, MAX_KEYS);
        assert!(s.iter().all(|s| s.flags.len() <= MAX_FLAGS_PER_SUMMARY));
        assert_eq!(s[0].untracked_evaluations, 10);
    }

    #[test]
    fn summaries_stay_under_the_byte_bound() {
        let usage = Usage::new(true);
        for i in 0..1000 {
            for d in 0..4 {
                let default = format!("{d}{}", "x".repeat(240));
                usage.absent(&format!("key-{i}"), ErrorKind::FlagNotFound, &default.as_str());
            }
        }
        let s = usage.summaries(&Snapshot::empty());
        assert!(s.len() >= 2, "about 1 MB of entries is split");
        for m in &s {
            assert!(m.encoded_len() <= MAX_SUMMARY_BYTES + 64, "{} bytes", m.encoded_len());
        }
        assert_eq!(s.iter().map(|m| m.flags.len()).sum::<usize>(), 1000);
        assert!(s.iter().flat_map(|m| &m.flags).all(|f| f.defaults.len() == 4 && f.fallback_missing == 4));
    }

    /// Issue 23's bound check (not timed): 10,000 flags each evaluated
    /// with many contexts and 6 defaults give summaries within the bounds;
    /// prints the sizes (BENCHMARKS.md "Usage counting").
    #[test]
    fn ten_thousand_flags_stay_within_the_summary_bounds() {
        let flags: Vec<String> = (0..10_000)
            .map(|i| {
                format!(
                    r#"{{"key":"flag-with-a-longish-key-{i:05}","type":"string","variations":["a","b","c","d","e","f"],"on":true,"off_variation":0,"fallthrough":{{"rollout":{{"variations":[{{"variation":0,"weight":20000}},{{"variation":1,"weight":20000}},{{"variation":2,"weight":20000}},{{"variation":3,"weight":20000}},{{"variation":4,"weight":10000}},{{"variation":5,"weight":10000}}]}}}}}}"#
                )
            })
            .collect();
        let set: FlagSet = serde_json::from_str(&format!(r#"{{"flags":[{}]}}"#, flags.join(","))).unwrap();
        let snap = Snapshot::compile(&set, &Limits::default()).unwrap();
        let usage = Usage::new(true);
        for c in 0..50 {
            let ctx = Context::new(format!("user-{c}"));
            for f in &set.flags {
                let default = ["x", "y", "z", "w", "v", "u"][c % 6];
                snap.detail_counted(&f.key, &ctx, default);
            }
        }
        let s = usage.summaries(&snap);
        let sizes: Vec<usize> = s.iter().map(|m| m.encoded_len()).collect();
        println!("10,000 flags × 50 contexts × 6 defaults: {} summaries, bytes {sizes:?}", s.len());
        assert_eq!(s.iter().map(|m| m.flags.len()).sum::<usize>(), 10_000);
        for m in &s {
            assert!(m.flags.len() <= MAX_FLAGS_PER_SUMMARY);
            assert!(m.encoded_len() <= MAX_SUMMARY_BYTES + 64);
            assert!(m.flags.iter().all(|f| f.defaults.len() == 4 && f.other_defaults == 16));
        }
    }
}
