//! Rollout bucketing: which of 100,000 buckets a context falls into.
//!
//! The algorithm is specified in `docs/EVALUATION.md` ("Rollouts and
//! bucketing") so any SDK can reproduce it, and pinned by the golden vectors
//! in `sdk/core/testdata/bucket_vectors.tsv`. XXH3-64 is used because it is fast on
//! short keys (a few ns), seedable, and implemented in every major language.
//! The per-flag seed is derived once at compile time, so evaluation hashes
//! only the context value: no concatenation, no allocation.
//!
//! Imported rollouts keep their source system's bucketing ([`Mode`]):
//! LaunchDarkly's SHA-1 fraction and Unleash's normalised MurmurHash3,
//! reproduced exactly (docs/EVALUATION.md, "Imported bucketing"; vectors
//! in `sdk/core/testdata/launchdarkly_buckets.tsv` and
//! `unleash_buckets.tsv`).

use sha1::{Digest, Sha1};
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

/// How a compiled rollout (or segment rule weight) finds a context's
/// bucket.
#[derive(Debug)]
pub(crate) enum Mode {
    /// flagstream's own: XXH3-64 with this seed, modulo 100,000.
    Flagstream(u64),
    /// LaunchDarkly's, with the hash input's prefix and its `.`.
    LaunchDarkly(Box<[u8]>),
    /// Unleash's, with the hash input's `"<group>:"`.
    Unleash {
        /// `"<group>:"`.
        prefix: Box<[u8]>,
        seed: u32,
        modulus: u32,
        /// `100000 / modulus`: a bucket's width in units of 1/100,000.
        scale: u32,
    },
}

impl Mode {
    /// The mode of an imported bucketing, or flagstream's with `seed`;
    /// `None` for an Unleash modulus that does not divide 100,000 (data
    /// that bypassed validation: malformed, never a guess).
    pub(crate) fn of(b: Option<&crate::model::Bucketing>, seed: u64) -> Option<Mode> {
        use crate::model::Bucketing as B;
        Some(match b {
            None => Mode::Flagstream(seed),
            Some(B::Launchdarkly { prefix }) => Mode::LaunchDarkly(format!("{prefix}.").into_bytes().into()),
            Some(B::Unleash { group, seed, modulus }) => {
                if *modulus == 0 || !WEIGHT_TOTAL.is_multiple_of(*modulus) {
                    return None;
                }
                Mode::Unleash {
                    prefix: format!("{group}:").into_bytes().into(),
                    seed: *seed,
                    modulus: *modulus,
                    scale: WEIGHT_TOTAL / *modulus,
                }
            }
        })
    }
}

/// Largest integral magnitude an imported bucketing hashes in decimal (its
/// sources bucket any 64-bit integer).
const MAX_I64_F64: f64 = 9_223_372_036_854_775_807.0;

/// The bytes a context is bucketed by in an imported mode: a string as it
/// is, an integral number in decimal (in `buf`); `None` for anything
/// else, or a missing kind or attribute.
#[inline]
fn bucketable<'a>(
    ctx: &'a Context<'_>,
    kind: &KindSel,
    attr: &Attr,
    buf: &'a mut itoa::Buffer,
) -> Option<&'a [u8]> {
    match ctx.lookup(kind, attr)?.single()? {
        ScalarRef::Str(s) => Some(s.as_bytes()),
        ScalarRef::Num(n) if n.fract() == 0.0 && n.abs() < MAX_I64_F64 => {
            Some(buf.format(n as i64).as_bytes())
        }
        _ => None,
    }
}

/// LaunchDarkly's bucket of `value` under `prefix` (which ends in `.`):
/// the first 15 hex digits of SHA-1 as a single-precision fraction of
/// `0xFFFFFFFFFFFFFFF`, as its SDKs compute it.
pub fn launchdarkly_fraction(prefix: &[u8], value: &[u8]) -> f32 {
    let digest = Sha1::new().chain_update(prefix).chain_update(value).finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let sixty_bits = u64::from_be_bytes(first) >> 4;
    // Both in single precision, as LaunchDarkly's Go, Rust and Java SDKs.
    sixty_bits as f32 / 0x0FFF_FFFF_FFFF_FFFF_u64 as f32
}

/// MurmurHash3, x86 32-bit, of `data` with `seed`.
pub fn murmur3_32(data: &[u8], seed: u32) -> u32 {
    murmur3_32_parts(&[data], seed)
}

/// MurmurHash3, x86 32-bit, with `seed`, of the concatenation of `parts`
/// (read in place: no buffer, whatever their length).
pub fn murmur3_32_parts(parts: &[&[u8]], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let scramble = |k: u32| k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
    let (mut h, mut block, mut len) = (seed, 0u32, 0usize);
    for part in parts {
        for &b in *part {
            block |= u32::from(b) << (8 * (len % 4));
            len += 1;
            if len % 4 == 0 {
                h ^= scramble(block);
                h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
                block = 0;
            }
        }
    }
    if len % 4 != 0 {
        h ^= scramble(block);
    }
    h ^= len as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// Unleash's bucket, 0-based (its normalised value minus one): MurmurHash3
/// with `seed` over `prefix` (`"<group>:"`) and `value`, modulo `modulus`.
pub fn unleash_bucket(prefix: &[u8], value: &[u8], seed: u32, modulus: u32) -> u32 {
    murmur3_32_parts(&[prefix, value], seed) % modulus.max(1)
}

/// Picks a variation from `thresholds` (`(exclusive end, variation)` in
/// units of 1/100,000) for a context, by `mode`; `None` only for an empty
/// rollout.
#[inline]
pub(crate) fn pick(
    mode: &Mode,
    ctx: &Context<'_>,
    kind: &KindSel,
    attr: &Attr,
    thresholds: &[(u32, u32)],
) -> Option<u32> {
    let last = thresholds.last()?.1;
    match mode {
        Mode::Flagstream(seed) => {
            let b = bucket(ctx, kind, attr, *seed);
            thresholds.iter().find(|(end, _)| b < *end).map(|&(_, v)| v)
        }
        Mode::LaunchDarkly(prefix) => {
            let mut buf = itoa::Buffer::new();
            let b = bucketable(ctx, kind, attr, &mut buf).map_or(0.0, |v| launchdarkly_fraction(prefix, v));
            // The running sum of weight / 100000 in single precision;
            // past it, the last variation.
            let (mut sum, mut start) = (0f32, 0u32);
            for &(end, v) in thresholds {
                sum += (end - start) as f32 / 100_000.0;
                start = end;
                if b < sum {
                    return Some(v);
                }
            }
            Some(last)
        }
        Mode::Unleash { prefix, seed, modulus, scale } => {
            let mut buf = itoa::Buffer::new();
            // Without the value: bucket 0, the first variation with a
            // weight (Unleash's SDKs draw at random there; its
            // WebAssembly engine takes target 1, the same variation).
            let b = bucketable(ctx, kind, attr, &mut buf)
                .map_or(0, |value| unleash_bucket(prefix, value, *seed, *modulus) * scale);
            Some(thresholds.iter().find(|(end, _)| b < *end).map_or(last, |&(_, v)| v))
        }
    }
}

/// Whether a context is inside a segment rule's `weight` (units of
/// 1/100,000), by `mode`.
#[inline]
pub(crate) fn inside(mode: &Mode, ctx: &Context<'_>, kind: &KindSel, attr: &Attr, weight: u32) -> bool {
    match mode {
        // Not bucketable: outside any share below 100%.
        Mode::Flagstream(seed) => match bucket_if_any(ctx, kind, attr, *seed) {
            Some(b) => b < weight,
            None => weight >= WEIGHT_TOTAL,
        },
        Mode::LaunchDarkly(prefix) => {
            // A context without the rule's kind never matches; another
            // unbucketable one is at 0 (LaunchDarkly's rule).
            if ctx.select(kind).is_none() {
                return false;
            }
            let mut buf = itoa::Buffer::new();
            let b = bucketable(ctx, kind, attr, &mut buf).map_or(0.0, |v| launchdarkly_fraction(prefix, v));
            b < weight as f32 / 100_000.0
        }
        // Unleash's strategy rollout: a context without the stickiness
        // value is outside; inside when its normalised value is at most
        // the percentage (bucket × scale below the weight).
        Mode::Unleash { prefix, seed, modulus, scale } => {
            let mut buf = itoa::Buffer::new();
            bucketable(ctx, kind, attr, &mut buf)
                .is_some_and(|value| unleash_bucket(prefix, value, *seed, *modulus) * scale < weight)
        }
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

    /// LaunchDarkly's bucketing reproduces every row of its vector file
    /// (the values its SDKs' own tests publish, and 1,200 more from an
    /// independent implementation, `testdata/imported_buckets.py`), bit
    /// for bit in single precision.
    #[test]
    fn launchdarkly_vectors() {
        let text = include_str!("../testdata/launchdarkly_buckets.tsv");
        let mut rows = 0;
        for (n, line) in text.lines().enumerate().skip(1) {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), 3, "line {}: {line:?}", n + 1);
            let want = u32::from_str_radix(cols[2], 16).expect("bits");
            let got = launchdarkly_fraction(format!("{}.", cols[0]).as_bytes(), cols[1].as_bytes());
            assert_eq!(
                got.to_bits(),
                want,
                "line {}: {:?} {:?}: {got} vs {}",
                n + 1,
                cols[0],
                cols[1],
                f32::from_bits(want)
            );
            rows += 1;
        }
        assert!(rows >= 1_000, "only {rows} vectors");
        // The published anchor, as LaunchDarkly's tests print it.
        let a = launchdarkly_fraction(b"hashKey.saltyA.", b"userKeyA");
        assert!((a - 0.421_575_87).abs() < 1e-7, "{a}");
    }

    /// Unleash's normalised hash reproduces every row of its vector file
    /// (the values its specification and SDK tests publish, and 1,200 more
    /// from the independent implementation).
    #[test]
    fn unleash_vectors() {
        let text = include_str!("../testdata/unleash_buckets.tsv");
        let mut rows = 0;
        for (n, line) in text.lines().enumerate().skip(1) {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), 5, "line {}: {line:?}", n + 1);
            let (seed, modulus, want): (u32, u32, u32) =
                (cols[2].parse().unwrap(), cols[3].parse().unwrap(), cols[4].parse().unwrap());
            let got = unleash_bucket(format!("{}:", cols[0]).as_bytes(), cols[1].as_bytes(), seed, modulus);
            assert_eq!(got, want, "line {}: {line:?}", n + 1);
            rows += 1;
        }
        assert!(rows >= 1_000, "only {rows} vectors");
        assert_eq!(unleash_bucket(b"gr1:", b"123", 0, 100) + 1, 73);
        assert_eq!(unleash_bucket(b"groupX:", b"999", 86_028_157, 100) + 1, 60);
        // In parts or whole, of any length: the same hash.
        for n in [0, 1, 3, 4, 5, 400] {
            let v = "v".repeat(n);
            let whole = murmur3_32(format!("gr:{v}").as_bytes(), 9) % 1000;
            assert_eq!(unleash_bucket(b"gr:", v.as_bytes(), 9, 1000), whole, "{n}");
        }
    }

    /// How each mode picks: LaunchDarkly's last variation past the sum,
    /// an unbucketable context at 0; Unleash's first variation with a
    /// weight for a context without the value, and a strategy's
    /// percentage as a segment rule (the normalised value at most it).
    #[test]
    fn imported_modes_pick_as_their_sources() {
        use crate::model::Bucketing;
        let (key, default) = (Attr::Key, KindSel::Default);
        let ld = Mode::of(Some(&Bucketing::Launchdarkly { prefix: "hashKey.saltyA".into() }), 0).unwrap();
        // userKeyA is at 0.42157587: in the second of 40%/60%.
        let split = [(40_000, 0), (100_000, 1)];
        assert_eq!(pick(&ld, &Context::new("userKeyA"), &default, &key, &split), Some(1));
        assert_eq!(pick(&ld, &Context::new("userKeyC"), &default, &key, &split), Some(0));
        // Weights short of 100%: past the sum, the last variation.
        assert_eq!(
            pick(&ld, &Context::new("userKeyA"), &default, &key, &[(10_000, 0), (20_000, 2)]),
            Some(2)
        );
        // Unbucketable (a bool): at 0, the first variation with weight.
        let by = Attr::Name("flag".into());
        let ctx = Context::new("u").with("flag", true);
        assert_eq!(pick(&ld, &ctx, &default, &by, &[(0, 3), (50_000, 0), (100_000, 1)]), Some(0));
        // A segment rule: a context without the rule's kind never matches.
        let org = KindSel::Named("org".into());
        assert!(!inside(&ld, &Context::new("userKeyA"), &org, &key, 100_000));
        assert!(inside(&ld, &Context::new("userKeyA"), &default, &key, 42_158));
        assert!(!inside(&ld, &Context::new("userKeyA"), &default, &key, 42_157));

        let unleash =
            Mode::of(Some(&Bucketing::Unleash { group: "gr1".into(), seed: 0, modulus: 100 }), 0).unwrap();
        assert!(Mode::of(Some(&Bucketing::Unleash { group: "g".into(), seed: 0, modulus: 7 }), 0).is_none());
        // normalized("gr1", "123") = 73: inside 73%, outside 72%.
        let rollout = |p: u32| [(p * 1_000, 0), (100_000, 1)];
        assert_eq!(pick(&unleash, &Context::new("123"), &default, &key, &rollout(73)), Some(0));
        assert_eq!(pick(&unleash, &Context::new("123"), &default, &key, &rollout(72)), Some(1));
        let missing = Attr::Name("userId".into());
        assert_eq!(
            pick(&unleash, &Context::new("123"), &default, &missing, &[(0, 2), (30_000, 0), (100_000, 1)]),
            Some(0)
        );
        assert!(inside(&unleash, &Context::new("123"), &default, &key, 73_000));
        assert!(!inside(&unleash, &Context::new("123"), &default, &key, 72_000));
        // Without the stickiness value: outside, even at 100%.
        assert!(!inside(&unleash, &Context::new("123"), &default, &missing, 100_000));
    }
}
