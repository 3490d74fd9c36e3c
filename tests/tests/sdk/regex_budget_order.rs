//! Whether an environment fits its regular-expression budget never depends
//! on the order its flags and segments are looked at: for sets generated
//! near `max_regex_env_compiled`, the relay's verdict on a change (a
//! snapshot of some items, then the rest applied as a change, segments in
//! any order) equals a fresh whole-set validation of the would-be set in
//! every order tried, and a fresh SDK (compiling the whole set, as from a
//! snapshot) loads whatever the relay accepted.

use flagstream::{Flag, FlagSet, Limits, Segment, Snapshot};
use proptest::prelude::*;

/// Patterns of different compiled sizes.
const PATTERNS: &[&str] = &[
    "^a$",
    "^[a-z]+@example\\.com$",
    "^(beta|gamma|delta)-[0-9]{2,4}$",
    "\\w{3,12}\\.(io|dev|com)$",
    "^user-[0-9a-f]{8}$",
];

fn clause_yaml(patterns: &[usize]) -> String {
    let values: Vec<String> = patterns.iter().map(|&i| format!("'{}'", PATTERNS[i])).collect();
    format!("{{attribute: email, op: matches, values: [{}]}}", values.join(", "))
}

fn flag(key: &str, patterns: &[usize]) -> Flag {
    let rules = if patterns.is_empty() {
        String::new()
    } else {
        format!("rules: [{{id: r, clauses: [{}], serve: {{variation: 0}}}}], ", clause_yaml(patterns))
    };
    serde_yaml_ng::from_str(&format!(
        "{{key: {key}, type: bool, variations: [true, false], on: true, off_variation: 1, {rules}fallthrough: {{variation: 1}}}}"
    ))
    .unwrap()
}

fn segment(key: &str, patterns: &[usize]) -> Segment {
    let rules = if patterns.is_empty() {
        String::new()
    } else {
        format!(", rules: [{{clauses: [{}]}}]", clause_yaml(patterns))
    };
    serde_yaml_ng::from_str(&format!("{{key: {key}{rules}}}")).unwrap()
}

/// What one pattern is charged: the smallest environment budget a flag
/// with it alone fits (found once per pattern).
fn pattern_charge(i: usize) -> usize {
    static CHARGES: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    CHARGES.get_or_init(|| {
        (0..PATTERNS.len())
            .map(|i| {
                let fits = |limit: usize| {
                    let l = Limits { max_regex_env_compiled: limit, ..Limits::default() };
                    Snapshot::compile(&FlagSet { flags: vec![flag("x", &[i])], segments: vec![] }, &l).is_ok()
                };
                let (mut lo, mut hi) = (0usize, 1 << 24);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if fits(mid) { hi = mid } else { lo = mid + 1 }
                }
                lo
            })
            .collect()
    })[i]
}

/// What an item's patterns are charged: each pattern's heap size.
fn charge(patterns: &[usize]) -> usize {
    patterns.iter().map(|&i| pattern_charge(i)).sum()
}

fn verdict(r: &Result<Snapshot, flagstream::ValidationErrors>) -> Result<(), String> {
    r.as_ref().map(drop).map_err(ToString::to_string)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_verdict_does_not_depend_on_order(
        flags in prop::collection::vec(prop::collection::vec(0..PATTERNS.len(), 0..3), 1..6),
        segments in prop::collection::vec(prop::collection::vec(0..PATTERNS.len(), 0..3), 0..3),
        split in any::<prop::sample::Index>(),
        seg_split in any::<prop::sample::Index>(),
        slack in -2i64..=2,
        shuffle in any::<u64>(),
    ) {
        // A budget within a couple of patterns of what the whole set takes.
        let total: usize = flags.iter().chain(&segments).map(|p| charge(p)).sum();
        let step = charge(&[1]) as i64;
        let budget = (total as i64 + slack * step / 2).max(0) as usize;
        let limits = Limits { max_regex_env_compiled: budget, ..Limits::default() };
        let all_flags: Vec<Flag> = flags.iter().enumerate().map(|(i, p)| flag(&format!("f{i}"), p)).collect();
        let all_segments: Vec<Segment> =
            segments.iter().enumerate().map(|(i, p)| segment(&format!("s{i}"), p)).collect();
        let whole = FlagSet { flags: all_flags.clone(), segments: all_segments.clone() };
        let want = verdict(&Snapshot::compile(&whole, &limits)).is_ok();
        prop_assert_eq!(want, total <= budget, "fits exactly when the charges sum within the budget");

        // Every order of the whole set: the same verdict.
        let mut rng = shuffle;
        let mut next = || { rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); rng >> 33 };
        for _ in 0..4 {
            let mut f = all_flags.clone();
            let mut s = all_segments.clone();
            for i in (1..f.len()).rev() { f.swap(i, next() as usize % (i + 1)); }
            for i in (1..s.len()).rev() { s.swap(i, next() as usize % (i + 1)); }
            let got = verdict(&Snapshot::compile(&FlagSet { flags: f, segments: s }, &limits));
            prop_assert_eq!(got.is_ok(), want, "{:?}", got);
        }

        // The relay's write path: a base of some items (itself within an
        // unlimited budget), the rest applied as one change.
        let cut = split.index(all_flags.len() + 1);
        let seg_cut = seg_split.index(all_segments.len() + 1);
        let roomy = Limits { max_regex_env_compiled: usize::MAX, ..Limits::default() };
        let base_set = FlagSet { flags: all_flags[..cut].to_vec(), segments: all_segments[..seg_cut].to_vec() };
        let base = Snapshot::compile(&base_set, &roomy).unwrap();
        let mut change = FlagSet { flags: all_flags[cut..].to_vec(), segments: all_segments[seg_cut..].to_vec() };
        change.flags.reverse();
        change.segments.reverse();
        let applied = base.apply(&change, &[], &[], &limits);
        prop_assert_eq!(verdict(&applied).is_ok(), want, "{:?}", verdict(&applied));
        // And the refusal names the same item as the whole set's.
        if let (Err(a), Err(w)) = (verdict(&applied), verdict(&Snapshot::compile(&whole, &limits))) {
            prop_assert_eq!(a, w);
        }
        // A fresh SDK loads what the relay accepted.
        if let Ok(snap) = applied {
            let fresh = Snapshot::compile(&snap.to_flag_set(), &limits);
            prop_assert!(fresh.is_ok(), "{:?}", verdict(&fresh));
        }
    }
}
