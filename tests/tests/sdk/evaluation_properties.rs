//! Property tests of the evaluator: no input makes it panic, rollouts are
//! deterministic, their shares match the weights, raising a rollout only
//! moves contexts into the raised variation, and a schedule's buckets only
//! grow as its steps pass.

use flagstream::model::{
    Clause, Operator, Prerequisite, Rollout, Rule, Schedule, Serve, Step, Target, WeightedVariation,
};
use flagstream::{Context, Flag, FlagSet, FlagType, Limits, Reason, Segment, Snapshot};
use proptest::prelude::*;
use serde_json::Value as Json;

fn base_flag(key: &str, variations: Vec<Json>, flag_type: FlagType) -> Flag {
    Flag {
        key: key.into(),
        flag_type,
        variations,
        on: true,
        off_variation: 0,
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
    }
}

fn json_scalar() -> impl Strategy<Value = Json> {
    prop_oneof![
        "[a-zA-Z0-9@._-]{0,12}".prop_map(Json::from),
        (-1000i64..1000).prop_map(Json::from),
        any::<bool>().prop_map(Json::from),
        Just(Json::from("2026-01-01T00:00:00Z")),
        Just(Json::from("1.2.3")),
        Just(Json::from("^a.*")),
        Just(Json::from("(unclosed")),
    ]
}

fn clause() -> impl Strategy<Value = Clause> {
    (
        prop_oneof![Just("key"), Just("kind"), Just("a"), Just("b"), Just("")],
        prop::sample::select(Operator::ALL.to_vec()),
        prop::collection::vec(json_scalar(), 0..4),
        any::<bool>(),
    )
        .prop_map(|(attr, op, values, negate)| Clause {
            context_kind: String::new(),
            attribute: attr.into(),
            op,
            values,
            negate,
        })
}

fn serve(n: u32) -> impl Strategy<Value = Serve> {
    prop_oneof![
        (0..n + 2).prop_map(Serve::variation),
        prop::collection::vec((0..n + 1, 0u32..60_000), 0..4).prop_map(|ws| Serve::rollout(Rollout {
            bucket_by: "a".into(),
            seed: None,
            variations: ws
                .into_iter()
                .map(|(variation, weight)| WeightedVariation { variation, weight })
                .collect(),
            ..Default::default()
        })),
    ]
}

/// Arbitrary, mostly invalid flags: random indices, operators with values of
/// the wrong kind, bad regexes, prerequisite cycles.
fn any_flag(key: String) -> impl Strategy<Value = Flag> {
    (
        any::<bool>(),
        0u32..4,
        prop::collection::vec((prop::collection::vec(clause(), 0..3), serve(2)), 0..4),
        serve(2),
        prop::collection::vec((prop::sample::select(vec!["f0", "f1", "f2", "nope"]), 0u32..3), 0..3),
        prop::collection::vec((0u32..3, "[a-c]{1,2}"), 0..3),
    )
        .prop_map(move |(on, off, rules, fallthrough, pres, targets)| {
            let mut f = base_flag(&key, vec![Json::Bool(true), Json::Bool(false)], FlagType::Bool);
            f.on = on;
            f.off_variation = off;
            f.rules = rules
                .into_iter()
                .map(|(clauses, serve)| Rule { id: String::new(), clauses, serve })
                .collect();
            f.fallthrough = fallthrough;
            f.prerequisites =
                pres.into_iter().map(|(k, v)| Prerequisite { key: k.into(), variation: v }).collect();
            f.targets = targets
                .into_iter()
                .map(|(v, k)| Target { variation: v, values: vec![k], ..Default::default() })
                .collect();
            f
        })
}

fn any_context() -> impl Strategy<Value = Context<'static>> {
    ("[a-c]{0,2}", prop::collection::vec((prop_oneof![Just("a"), Just("b")], json_scalar()), 0..3)).prop_map(
        |(key, attrs)| {
            let mut ctx = Context::new(key);
            for (name, v) in attrs {
                if let Some(a) = flagstream::AttrValue::from_json(&v) {
                    ctx.set(name, a);
                }
            }
            ctx
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the flags (valid or not, validated or not), evaluation
    /// returns a result and never panics; invalid sets are rejected by
    /// validation, valid ones never report MALFORMED_FLAG.
    #[test]
    fn arbitrary_flags_never_panic(
        f0 in any_flag("f0".into()), f1 in any_flag("f1".into()), f2 in any_flag("f2".into()),
        ctx in any_context(),
    ) {
        let set = FlagSet { flags: vec![f0, f1, f2], segments: vec![Segment { key: "s".into(), included: vec!["a".into()], ..Segment::default() }] };
        let limits = Limits::default();
        let unvalidated = Snapshot::compile_unvalidated(&set, &limits);
        for key in ["f0", "f1", "f2", "nope"] {
            let d = unvalidated.detail(key, &ctx, false);
            prop_assert_eq!(d.variation.is_none(), matches!(d.reason, Reason::Error(_)));
            let s = unvalidated.detail(key, &ctx, "s");
            prop_assert_eq!(s.variation.is_none(), matches!(s.reason, Reason::Error(_)));
        }
        if let Ok(valid) = Snapshot::compile(&set, &limits) {
            for key in ["f0", "f1", "f2"] {
                let d = valid.detail(key, &ctx, false);
                prop_assert!(d.variation.is_some(), "valid flag {} errored: {:?}", key, d.reason);
            }
        }
    }

    /// The same context always gets the same variation, from independently
    /// compiled snapshots.
    #[test]
    fn rollouts_are_deterministic(key in ".{0,40}", w in 0u32..=100_000, seed in proptest::option::of(any::<u64>())) {
        let make = || {
            let mut f = base_flag("r", vec![Json::Bool(true), Json::Bool(false)], FlagType::Bool);
            f.fallthrough = Serve::rollout(Rollout { bucket_by: String::new(), seed, variations: vec![
                WeightedVariation { variation: 0, weight: w },
                WeightedVariation { variation: 1, weight: 100_000 - w },
            ], ..Default::default()});
            Snapshot::compile(&FlagSet { flags: vec![f], segments: vec![] }, &Limits::default()).unwrap()
        };
        let (a, b) = (make(), make());
        let ctx = Context::new(key.as_str());
        prop_assert_eq!(a.detail("r", &ctx, false).variation, b.detail("r", &ctx, false).variation);
    }
}

fn rollout_snapshot(weights: &[u32], salt: &str) -> Snapshot {
    let n = weights.len();
    let mut f = base_flag("split", (0..n).map(|i| Json::from(i as i64)).collect(), FlagType::Int);
    f.salt = salt.into();
    f.fallthrough = Serve::rollout(Rollout {
        bucket_by: String::new(),
        seed: None,
        variations: weights
            .iter()
            .enumerate()
            .map(|(i, &w)| WeightedVariation { variation: i as u32, weight: w })
            .collect(),
        ..Default::default()
    });
    Snapshot::compile(&FlagSet { flags: vec![f], segments: vec![] }, &Limits::default()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Over 100,000 keys each variation's share is within ±0.75 points of
    /// its weight: about 5 standard deviations at worst (σ ≤ 0.16 points),
    /// so a correct hash fails with odds near one in a million per check,
    /// while a biased one (a modulo bias, a skewed slice) fails at once.
    #[test]
    fn shares_match_weights(cuts in prop::collection::vec(0u32..=100_000, 1..4), salt in "[a-z]{1,8}") {
        let mut cuts = cuts;
        cuts.sort_unstable();
        let mut weights = Vec::new();
        let mut prev = 0;
        for c in cuts.iter().chain(std::iter::once(&100_000)) {
            weights.push(c - prev);
            prev = *c;
        }
        let snap = rollout_snapshot(&weights, &salt);
        let mut counts = vec![0u32; weights.len()];
        const N: u32 = 100_000;
        for i in 0..N {
            let v = snap.int("split", &Context::new(format!("user-{i}")), -1);
            counts[v as usize] += 1;
        }
        for (i, (&count, &weight)) in counts.iter().zip(&weights).enumerate() {
            let share = f64::from(count) / f64::from(N) * 100.0;
            let want = f64::from(weight) / 1000.0;
            prop_assert!((share - want).abs() <= 0.75, "variation {}: {:.3}% vs weight {:.3}%", i, share, want);
        }
    }

    /// Raising the first variation of a rollout from 10% to 20% only moves
    /// contexts into it, never out.
    #[test]
    fn raising_a_rollout_only_adds(salt in "[a-z]{1,8}", low in 0u32..=50_000, extra in 0u32..=50_000) {
        let before = rollout_snapshot(&[low, 100_000 - low], &salt);
        let after = rollout_snapshot(&[low + extra, 100_000 - low - extra], &salt);
        for i in 0..5_000 {
            let ctx = Context::new(format!("user-{i}"));
            if before.int("split", &ctx, -1) == 0 {
                prop_assert_eq!(after.int("split", &ctx, -1), 0, "user-{} left the raised variation", i);
            }
        }
    }
}

/// The concrete 10% → 20% case from the spec, over 100,000 users: nobody
/// leaves, and about 10% more arrive.
#[test]
fn ten_to_twenty_percent() {
    let before = rollout_snapshot(&[10_000, 90_000], "launch");
    let after = rollout_snapshot(&[20_000, 80_000], "launch");
    let (mut was, mut now) = (0, 0);
    for i in 0..100_000 {
        let ctx = Context::new(format!("user-{i}"));
        let (b, a) = (before.int("split", &ctx, -1), after.int("split", &ctx, -1));
        assert!(!(b == 0 && a != 0), "user-{i} moved out");
        was += i32::from(b == 0);
        now += i32::from(a == 0);
    }
    assert!((9_500..=10_500).contains(&was), "{was}");
    assert!((19_500..=20_500).contains(&now), "{now}");
}

/// A flag whose fallthrough ramps variation 1 over `weights` (made
/// monotonic), one step every hour from `t0`.
fn schedule_snapshot(weights: &[u32], salt: &str, t0: i64) -> Snapshot {
    let mut f = base_flag("ramp", vec![Json::from(0), Json::from(1)], FlagType::Int);
    f.salt = salt.into();
    let mut w = 0;
    let steps = weights
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            w = (w + x).min(100_000);
            Step { start_unix_ms: t0 + i as i64 * 3_600_000, weight: w }
        })
        .collect();
    f.fallthrough = Serve::schedule(Schedule {
        variation: 1,
        otherwise: 0,
        bucket_by: String::new(),
        context_kind: String::new(),
        seed: None,
        steps,
    });
    Snapshot::compile(&FlagSet { flags: vec![f], segments: vec![] }, &Limits::default()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Buckets only grow: a context that got the ramped variation at some
    /// time keeps it at every later time, and the share served matches the
    /// current step (within 4 points over 4,000 contexts: 5 standard deviations).
    #[test]
    fn a_schedule_only_moves_contexts_into_its_variation(
        salt in "[a-z]{1,8}",
        increments in prop::collection::vec(0u32..=40_000, 1..6),
        probes in prop::collection::vec(0i64..(8 * 3_600_000), 2..6),
    ) {
        let t0 = 1_800_000_000_000i64;
        let snap = schedule_snapshot(&increments, &salt, t0);
        let mut times: Vec<i64> = probes.iter().map(|p| t0 - 3_600_000 + p).collect();
        times.sort_unstable();
        let n = 4_000;
        let mut had = vec![false; n];
        for &t in &times {
            let mut served = 0;
            for (i, had) in had.iter_mut().enumerate() {
                let ctx = Context::new(format!("user-{i}"));
                let e = snap.evaluate_at("ramp", &ctx, t);
                let v = e.served.map(|(v, _)| v);
                if *had {
                    prop_assert_eq!(v, Some(1), "user-{} left the ramped variation at {}", i, t);
                }
                if v == Some(1) {
                    *had = true;
                    served += 1;
                }
            }
            // The share of the step in force at `t` (0 before the first).
            let step = (t - t0).div_euclid(3_600_000);
            let want = if step < 0 {
                0
            } else {
                increments.iter().take(step as usize + 1).fold(0u32, |w, x| (w + x).min(100_000))
            };
            let got = served as f64 / n as f64 * 100_000.0;
            prop_assert!((got - f64::from(want)).abs() <= 4_000.0, "at {}: {} served, step weight {}", t, got, want);
        }
    }
}
