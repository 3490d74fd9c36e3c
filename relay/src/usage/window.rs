//! Counts over time: a bucket of counts, and a ring of buckets of a fixed
//! width (the last hour in 12 five-minute buckets, the last day in 24
//! hourly ones); what a summary entry adds to one.

use flagstream_proto::v1 as pb;

/// Counts in one bucket of time.
#[derive(Debug, Default, Clone)]
pub(super) struct Bucket {
    pub(super) period: u64,
    pub(super) variations: Vec<u64>,
    pub(super) fallbacks: [u64; 4],
    pub(super) other_defaults: u64,
}

impl Bucket {
    /// Adds entry `e` (its variation counts already clamped to the flag's
    /// variations, see [`clamp`]).
    pub(super) fn add(&mut self, e: &pb::FlagUsage) {
        if self.variations.len() < e.variations.len() {
            self.variations.resize(e.variations.len(), 0);
        }
        for (a, b) in self.variations.iter_mut().zip(&e.variations) {
            *a = a.saturating_add(*b);
        }
        for (a, b) in self.fallbacks.iter_mut().zip(fallbacks(e)) {
            *a = a.saturating_add(b);
        }
        self.other_defaults = self.other_defaults.saturating_add(e.other_defaults);
    }
}

pub(super) fn fallbacks(e: &pb::FlagUsage) -> [u64; 4] {
    [e.fallback_missing, e.fallback_wrong_type, e.fallback_malformed, e.fallback_not_ready]
}

/// Drops the variation counts of `e` beyond the `n` variations the flag
/// has in the receiver's data (all of them for a key that is no flag):
/// a bucket never grows past the real flag, whatever a sender claims.
pub(super) fn clamp(e: &mut pb::FlagUsage, n: usize) {
    e.variations.truncate(n);
    while e.variations.last() == Some(&0) {
        e.variations.pop();
    }
}

/// Evaluations of entry `e` that passed one of `unlisted`, defaults it
/// lists that the receiver cannot list itself (its own bound of
/// [`MAX_DEFAULTS`]): all of the entry's evaluations not already in
/// `other_defaults` when none of its defaults is listed (exact), else at
/// least one per unlisted default (a lower bound: a summary does not say
/// how many evaluations passed which default).
pub(super) fn unlisted_evaluations(e: &pb::FlagUsage, unlisted: usize) -> u64 {
    if unlisted == 0 {
        return 0;
    }
    if unlisted == e.defaults.len() {
        let all = e.variations.iter().chain(&fallbacks(e)).fold(0u64, |a, n| a.saturating_add(*n));
        return all.saturating_sub(e.other_defaults).max(unlisted as u64);
    }
    unlisted as u64
}

/// A ring of `N` buckets of `width` ms.
#[derive(Debug, Default)]
pub(super) struct Ring {
    buckets: Vec<Bucket>,
}

impl Ring {
    pub(super) fn bucket(&mut self, n: usize, width: u64, now: u64) -> &mut Bucket {
        if self.buckets.is_empty() {
            self.buckets.resize(n, Bucket::default());
        }
        let period = now / width;
        let b = &mut self.buckets[(period % n as u64) as usize];
        if b.period != period {
            *b = Bucket { period, ..Bucket::default() };
        }
        b
    }

    /// The sum over the buckets within the last `n` periods.
    pub(super) fn sum(&self, n: usize, width: u64, now: u64) -> Bucket {
        let current = now / width;
        let mut out = Bucket::default();
        for b in self.buckets.iter().filter(|b| b.period + n as u64 > current && b.period <= current) {
            if out.variations.len() < b.variations.len() {
                out.variations.resize(b.variations.len(), 0);
            }
            for (a, x) in out.variations.iter_mut().zip(&b.variations) {
                *a = a.saturating_add(*x);
            }
            for (a, x) in out.fallbacks.iter_mut().zip(b.fallbacks) {
                *a = a.saturating_add(x);
            }
            out.other_defaults = out.other_defaults.saturating_add(b.other_defaults);
        }
        out
    }
}

pub(super) fn majority(b: &Bucket) -> Option<u32> {
    b.variations.iter().enumerate().filter(|(_, n)| **n > 0).max_by_key(|(_, n)| **n).map(|(i, _)| i as u32)
}

pub(super) fn window(b: &Bucket) -> pb::UsageWindow {
    pb::UsageWindow {
        variations: b.variations.clone(),
        fallback_missing: b.fallbacks[0],
        fallback_wrong_type: b.fallbacks[1],
        fallback_malformed: b.fallbacks[2],
        fallback_not_ready: b.fallbacks[3],
    }
}
