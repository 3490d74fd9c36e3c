//! What a snapshot holds of each flag: the bytes it was handed, its facts
//! and compiled form (now, or on first use in cold cells), and a set built
//! one flag's model at a time judged like the whole set.

use std::collections::HashMap;

use super::*;

/// A snapshot keeps each flag as the bytes it was handed and its compiled
/// form, no model: the bytes are the caller's buffer (not a copy), the model
/// decoded from them is the one written, and what is read without a model
/// (type, version, variations, visibility, references) matches it.
#[test]
fn a_flag_is_kept_as_the_bytes_handed_in_and_its_compiled_form() {
    let set: FlagSet = serde_yaml_ng::from_str(CROSSING).unwrap();
    let limits = Limits::default();
    let raw = encoded(&set);
    let snap = Snapshot::compile_encoded(set.clone(), raw.clone(), &limits).unwrap();
    for (f, r) in set.flags.iter().zip(&raw) {
        assert_eq!(snap.flag_bytes(&f.key).unwrap().as_ptr(), r.as_ptr(), "{}: the caller's buffer", f.key);
        assert_eq!(snap.flag(&f.key).as_ref(), Some(f));
        let info = snap.info(&f.key).unwrap();
        let want = (f.flag_type, f.version, f.variations.len(), f.client_visible);
        assert_eq!((info.flag_type, info.version, info.variations, info.client_visible), want);
        let (prerequisites, segments) = snap.references(&f.key).unwrap();
        let want: Vec<&str> = f.prerequisites.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(prerequisites.collect::<Vec<_>>(), want);
        let want: Vec<&str> = if f.key == "c" { vec!["s"] } else { Vec::new() };
        assert_eq!(segments.collect::<Vec<_>>(), want);
        assert_eq!(snap.variation(&f.key, 1).as_ref(), f.variations.get(1));
        assert_eq!(snap.variation(&f.key, 2), None);
    }
    assert_eq!(snap.flag("nope"), None);
    assert!(snap.info("nope").is_none() && !snap.contains("nope") && snap.contains("a"));

    let mut change = FlagSet { flags: vec![set.flags[0].clone()], segments: Vec::new() };
    change.flags[0].on = false;
    let change_raw = encoded(&change);
    let next = snap.apply_encoded(&change, &change_raw, &[], &[], &limits).unwrap();
    assert_eq!(next.flag_bytes("a").unwrap().as_ptr(), change_raw[0].as_ptr());
    assert_eq!(next.flag("a").as_ref(), Some(&change.flags[0]));
    assert_eq!(next.flag_bytes("b").unwrap().as_ptr(), raw[1].as_ptr(), "an unchanged flag is shared");
    // Without the bytes the snapshot encodes the flag itself.
    let plain = snap.apply(&change, &[], &[], &limits).unwrap();
    assert_eq!(plain.flag_bytes("a"), Some(&change_raw[0]));
    assert_eq!(plain.to_flag_set(), next.to_flag_set());
}

/// A snapshot compiling on use (the relay's) compiles no written flag until
/// it is evaluated, judges changes by the flags' facts exactly as a
/// compiling one does, and answers the same once evaluated.
#[test]
fn a_snapshot_compiling_on_use_compiles_a_flag_when_it_is_first_evaluated() {
    let set: FlagSet = serde_yaml_ng::from_str(CROSSING).unwrap();
    let limits = Limits::default();
    let eager = Snapshot::empty().apply(&set, &[], &[], &limits).unwrap();
    let deferred = Snapshot::empty().compiling_on_use().apply(&set, &[], &[], &limits).unwrap();
    assert!(deferred.flags.iter().all(|f| f.get_now().is_none()), "nothing compiled when written");
    // Without room for a compiled form or counters until evaluated.
    assert!(deferred.flags.iter().all(|f| matches!(f, Cell::Cold(_))));
    assert!(std::mem::size_of::<cell::ColdCell>() * 3 < std::mem::size_of::<cell::FlagCell>());
    // Nor in its index for a head it will never have.
    assert!(matches!(deferred.index, Keys::Bare(_)));
    assert!(std::mem::size_of::<Slot<()>>() * 2 < std::mem::size_of::<Slot<Option<Head>>>());
    assert!(eager.flags.iter().all(|f| f.get_now().is_some()));
    // Flags in wire form (a cache, a fallback build) too.
    let wire = Snapshot::from_encoded(encoded(&set), Vec::new(), &limits).unwrap();
    let wire_cold = Snapshot::from_encoded_on_use(encoded(&set), set.segments.clone(), &limits).unwrap();
    assert!(wire_cold.flags.iter().all(|f| matches!(f, Cell::Cold(_))));
    for f in &set.flags {
        assert_eq!(deferred.info(&f.key), eager.info(&f.key));
        assert_eq!(wire.info(&f.key), eager.info(&f.key));
        assert_eq!(wire_cold.info(&f.key), eager.info(&f.key));
        assert_eq!(
            wire_cold.references(&f.key).map(|(p, s)| (p.count(), s.count())),
            eager.references(&f.key).map(|(p, s)| (p.count(), s.count()))
        );
        for i in 0..3 {
            assert_eq!(deferred.variation(&f.key, i), eager.variation(&f.key, i));
        }
    }
    for snap in [&deferred, &wire, &wire_cold] {
        assert!(snap.flags.iter().all(|f| f.get_now().is_none()), "facts and values read without compiling");
    }
    for f in &set.flags {
        let u1 = Context::new("u1");
        assert_eq!(wire_cold.detail(&f.key, &u1, false), eager.detail(&f.key, &u1, false), "{}", f.key);
    }
    // The same verdicts, compiled or not: a deleted segment still named,
    // a prerequisite out of range, a valid toggle.
    let mut bad = FlagSet::default();
    bad.flags.push(linked("e", 2, true, &[("b".to_owned(), 5)], None));
    for (change, segments_gone) in [(&FlagSet::default(), &["s".to_owned()][..]), (&bad, &[][..])] {
        let want = eager.apply(change, &[], segments_gone, &limits).unwrap_err();
        assert_eq!(deferred.apply(change, &[], segments_gone, &limits).unwrap_err(), want);
    }
    let mut toggle = FlagSet { flags: vec![set.flags[0].clone()], segments: Vec::new() };
    toggle.flags[0].on = false;
    let next = deferred.apply(&toggle, &[], &[], &limits).unwrap();
    assert!(next.flags.iter().all(|f| f.get_now().is_none()), "applied snapshots compile on use too");
    let u1 = Context::new("u1");
    for f in &set.flags {
        assert_eq!(
            next.detail(&f.key, &u1, false),
            eager.apply(&toggle, &[], &[], &limits).unwrap().detail(&f.key, &u1, false)
        );
    }
    assert_eq!(next.flags.iter().filter(|f| f.get_now().is_some()).count(), set.flags.len());
    // A counted first evaluation compiles a cold cell and counts in it;
    // the count stays with the cell in the snapshots that share it.
    let fresh = Snapshot::empty().compiling_on_use().apply(&set, &[], &[], &limits).unwrap();
    assert!(fresh.index.get("c").unwrap().cell.get_now().is_none());
    fresh.detail_counted("c", &u1, false);
    let later = fresh.apply(&toggle, &[], &[], &limits).unwrap();
    assert_eq!(later.flag_usage("c").unwrap().take().variations, [1], "u1 is in segment s");
    // Counted evaluations count there too, once compiled.
    next.detail_counted("a", &u1, false);
    next.detail_counted("a", &u1, true);
    assert_eq!(next.flag_usage("a").unwrap().take().variations, [0, 2]);
}

/// A set built one flag at a time (`compile_each`: each model validated on
/// its own and dropped, then the checks across items on the kept facts) is
/// judged exactly as the whole set is: random sets with prerequisites
/// (unknown keys, variations out of range, cycles, chains too deep), segment
/// references (some unknown), keys twice, too many flags and a regex budget
/// the set overruns; the same problems (in another order: each flag's own
/// first), and a passing set answers like `compile`'s, with its totals, its
/// flags compiled now or on first use as asked.
#[test]
fn a_set_built_one_flag_at_a_time_is_judged_like_the_whole_set() {
    let crossing: FlagSet = serde_yaml_ng::from_str(CROSSING).unwrap();
    let regex_flag = crossing.flags.iter().find(|f| f.key == "d").unwrap().clone();
    let used = validated_costs(&crossing, &Limits::default())["d"].regex_bytes as usize;
    let limits = Limits {
        max_prerequisite_depth: 3,
        max_flags: 20,
        max_regex_env_compiled: used * 2 + 16,
        ..Limits::default()
    };
    let segments: Vec<Segment> = vec![serde_yaml_ng::from_str("{key: s0, included: [u1]}").unwrap()];
    let sorted = |e: ValidationErrors| {
        let mut v: Vec<String> = e.0.iter().map(ToString::to_string).collect();
        v.sort();
        v
    };
    let mut rng = Lcg(11);
    let (mut passed, mut refused) = (0, 0);
    // Problems seen, by what they name: every kind must come up.
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let kinds = [
        "duplicate flag key",
        "unknown flag",
        "out of range",
        "unknown segment",
        "prerequisite chain",
        "prerequisite cycle",
        "regex budget",
        "flags, limit",
        "off_variation",
        "segments[",
    ];
    for round in 0..300 {
        let n = 2 + rng.below(20);
        let mut flags = Vec::new();
        for i in 0..n {
            let pre: Vec<(String, u32)> = match rng.below(6) {
                0 => vec![(format!("f{}", rng.below(n + 2)), rng.below(3) as u32)],
                1 if i > 0 => vec![(format!("f{}", i - 1), 0)],
                _ => Vec::new(),
            };
            let seg = match rng.below(12) {
                0 => Some("s0"),
                1 => Some("nope"),
                _ => None,
            };
            let key = if rng.below(40) == 0 { "f0".to_owned() } else { format!("f{i}") };
            let mut f = linked(&key, 1 + rng.below(3), true, &pre, seg);
            if rng.below(15) == 0 {
                f = regex_flag.clone();
                f.key = format!("f{i}");
            }
            if rng.below(25) == 0 {
                f.off_variation = 9; // a problem of the flag's own
            }
            flags.push(f);
        }
        let mut segments = segments.clone();
        if rng.below(20) == 0 {
            // A segment's own problem: a rule naming a segment not there.
            segments.push(
                serde_yaml_ng::from_str(
                    "{key: s1, rules: [{clauses: [{attribute: key, op: segment_match, values: [none]}]}]}",
                )
                .unwrap(),
            );
        }
        let set = FlagSet { flags, segments };
        let raw = encoded(&set);
        let on_use = round % 2 == 0;
        let want = Snapshot::compile_encoded(set.clone(), raw.clone(), &limits);
        let got =
            Snapshot::compile_each(set.flags.iter().cloned().zip(raw), set.segments.clone(), &limits, on_use);
        match (got, want) {
            (Ok(got), Ok(want)) => {
                passed += 1;
                assert_eq!(got.checked.as_ref().unwrap().totals, want.checked.as_ref().unwrap().totals);
                assert_eq!(got.flags.iter().all(|f| f.get_now().is_none()), on_use, "compiled as asked");
                assert_eq!(got.flags.iter().all(|f| matches!(f, Cell::Cold(_))), on_use, "cold cells on use");
                let ctx = Context::new("u1");
                for f in &set.flags {
                    assert_eq!(got.detail(&f.key, &ctx, "?"), want.detail(&f.key, &ctx, "?"), "{}", f.key);
                    assert_eq!(got.flag(&f.key), want.flag(&f.key));
                }
                // Changes to it are judged by their own items, as to `compile`'s.
                let mut f0 = got.flag(&set.flags[0].key).unwrap();
                f0.on = !f0.on;
                let toggle = FlagSet { flags: vec![f0], segments: Vec::new() };
                let by_change = got.judge_by_change(
                    &Change { set: &toggle, raw: None, deleted_flags: &[], deleted_segments: &[] },
                    &limits,
                );
                assert!(by_change.is_some(), "a toggle is judged by the change alone");
                assert_eq!(
                    got.apply(&toggle, &[], &[], &limits).map(drop),
                    want.apply(&toggle, &[], &[], &limits).map(drop)
                );
            }
            (Err(got), Err(want)) => {
                refused += 1;
                let got = sorted(got);
                for kind in kinds {
                    if got.iter().any(|e| e.contains(kind)) {
                        *seen.entry(kind).or_default() += 1;
                    }
                }
                assert_eq!(got, sorted(want), "round {round}");
            }
            (got, want) => {
                panic!("round {round}: built one at a time {:?}, whole {:?}", got.map(drop), want.map(drop))
            }
        }
    }
    assert!(passed > 20 && refused > 20, "both verdicts exercised ({passed} passed, {refused} refused)");
    for kind in kinds {
        assert!(seen.get(kind).is_some_and(|&n| n > 0), "no set refused for {kind:?}: {seen:?}");
    }
}
