//! Rollout bucketing: which of 100,000 buckets a context falls into.
//!
//! The algorithm is specified in `docs/EVALUATION.md` ("Rollouts and
//! bucketing") so any SDK can reproduce it, and pinned by the golden vectors
//! in `sdk/core/testdata/bucket_vectors.tsv`. XXH3-64 is used because it is fast on
//! short keys (a few ns), seedable, and implemented in every major language.
//! The per-flag seed is derived once at compile time, so evaluation hashes
//! only the context value: no concatenation, no allocation.

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::context::{Context, ScalarRef};
use crate::model::WEIGHT_TOTAL;
use crate::reference::{Attr, KindSel};

/// Largest integer magnitude a number attribute may have to be bucketable:
/// beyond 2^53 an f64 no longer holds every integer exactly.
const MAX_EXACT_INT: f64 = 9_007_199_254_740_992.0;

/// The 64-bit seed of a rollout: its explicit seed, or XXH3-64 of the salt.
pub fn seed_for(explicit: Option<u64>, salt: &str) -> u64 {
    explicit.unwrap_or_else(|| xxh3_64(salt.as_bytes()))
}

/// The bucket in `[0, 100000)` for raw bucketing bytes.
#[inline]
pub fn bucket_bytes(value: &[u8], seed: u64) -> u32 {
    (xxh3_64_with_seed(value, seed) % u64::from(WEIGHT_TOTAL)) as u32
}

/// The bucket of a context for a rollout bucketed by `attr` of the `kind`
/// selected. Values that are not bucketable (a missing kind or attribute, a
/// bool, list, object or fractional number) land in bucket 0.
#[inline]
pub(crate) fn bucket(ctx: &Context<'_>, kind: &KindSel, attr: &Attr, seed: u64) -> u32 {
    bucket_if_any(ctx, kind, attr, seed).unwrap_or(0)
}

/// [`bucket`], but `None` for a context that is not bucketable (schedules
/// and segment weights leave such contexts outside any share below 100%).
#[inline]
pub(crate) fn bucket_if_any(ctx: &Context<'_>, kind: &KindSel, attr: &Attr, seed: u64) -> Option<u32> {
    // `kind` is the selected kind's name, not every kind's.
    let value = ctx.lookup(kind, attr)?.single()?;
    match value {
        ScalarRef::Str(s) => Some(bucket_bytes(s.as_bytes(), seed)),
        ScalarRef::Num(n) if n.fract() == 0.0 && n.abs() <= MAX_EXACT_INT => {
            let mut buf = itoa::Buffer::new();
            Some(bucket_bytes(buf.format(n as i64).as_bytes(), seed))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of the shipped golden-vector file reproduces: the contract
    /// other-language SDKs are held to.
    #[test]
    fn golden_vectors() {
        let text = include_str!("../testdata/bucket_vectors.tsv");
        let mut rows = 0;
        for (n, line) in text.lines().enumerate().skip(1) {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), 4, "line {}: {line:?}", n + 1);
            let seed = match cols[1] {
                "-" => None,
                s => Some(s.parse::<u64>().expect("seed")),
            };
            let want: u32 = cols[3].parse().expect("bucket");
            let got = bucket_bytes(cols[2].as_bytes(), seed_for(seed, cols[0]));
            assert_eq!(got, want, "line {}: salt={:?} seed={:?} value={:?}", n + 1, cols[0], seed, cols[2]);
            rows += 1;
        }
        assert!(rows >= 1_000, "only {rows} golden vectors");
    }

    /// Integral numbers hash as their decimal digits; fractions, bools,
    /// lists and missing attributes land in bucket 0.
    #[test]
    fn number_and_odd_values() {
        let seed = seed_for(None, "f");
        let (by, k) = (Attr::Name("n".into()), KindSel::Default);
        let ctx = Context::new("k").with("n", 42.0);
        assert_eq!(bucket(&ctx, &k, &by, seed), bucket_bytes(b"42", seed));
        let ctx = Context::new("k").with("n", -7);
        assert_eq!(bucket(&ctx, &k, &by, seed), bucket_bytes(b"-7", seed));
        assert_eq!(bucket(&Context::new("k").with("n", 1.5), &k, &by, seed), 0);
        assert_eq!(bucket(&Context::new("k").with("n", true), &k, &by, seed), 0);
        assert_eq!(bucket(&Context::new("k"), &k, &by, seed), 0);
        assert_eq!(bucket(&Context::new("k").with("n", vec!["x"]), &k, &by, seed), 0);
        assert_eq!(bucket_if_any(&Context::new("k"), &k, &by, seed), None);
    }

    /// A multi-kind context buckets by the named kind's key; a missing
    /// kind is not bucketable.
    #[test]
    fn bucketing_by_kind() {
        let seed = seed_for(None, "f");
        let ctx = Context::new("u1").and(Context::new("o1").kind("org"));
        let org = KindSel::Named("org".into());
        assert_eq!(bucket(&ctx, &org, &Attr::Key, seed), bucket_bytes(b"o1", seed));
        assert_eq!(bucket(&ctx, &KindSel::Default, &Attr::Key, seed), bucket_bytes(b"u1", seed));
        let device = KindSel::Named("device".into());
        assert_eq!(bucket_if_any(&ctx, &device, &Attr::Key, seed), None);
        assert_eq!(bucket(&ctx, &org, &Attr::Kind, seed), bucket_bytes(b"org", seed));
    }
}
