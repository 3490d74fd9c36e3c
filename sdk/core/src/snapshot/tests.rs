use std::collections::{HashMap, HashSet};

use prost::Message;

use super::cell::Slot;
use super::*;
use crate::error::ErrorKind;
use crate::{Context, Reason};

fn encoded(set: &FlagSet) -> Vec<Bytes> {
    set.flags.iter().map(|f| Bytes::from(crate::wire::flag_to_proto(f).encode_to_vec())).collect()
}

const SET: &str = r#"
flags:
  - {key: a, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}}
  - key: b
    type: string
    variations: [x, y]
    on: true
    off_variation: 0
    prerequisites: [{key: a, variation: 0}]
    rules: [{id: us, clauses: [{attribute: country, op: in, values: [US]}], serve: {variation: 1}}]
    fallthrough: {variation: 0}
"#;

#[test]
fn encoded_flags_compile_on_first_use_and_answer_like_compiled_ones() {
    let set: FlagSet = serde_yaml_ng::from_str(SET).unwrap();
    let limits = Limits::default();
    let eager = Snapshot::compile(&set, &limits).unwrap();
    let lazy = Snapshot::from_encoded(encoded(&set), Vec::new(), &limits).unwrap();
    assert!(lazy.flags.iter().all(|f| f.get_now().is_none()), "nothing compiled up front");
    let us = Context::new("u").with("country", "US");
    assert_eq!(lazy.string("b", &us, "?"), "y");
    assert_eq!(lazy.detail("b", &us, "?"), eager.detail("b", &us, "?"));
    assert_eq!(lazy.detail("a", &us, false), eager.detail("a", &us, false));
    assert_eq!(lazy.detail::<i64>("a", &us, 7).reason, Reason::Error(ErrorKind::WrongType));
    assert_eq!(lazy.warm_up(), 0, "both flags were compiled by their first evaluation");
    assert_eq!(lazy.to_flag_set(), eager.to_flag_set());
}

#[test]
fn warm_up_compiles_what_nothing_evaluated() {
    let set: FlagSet = serde_yaml_ng::from_str(SET).unwrap();
    let lazy = Snapshot::from_encoded(encoded(&set), Vec::new(), &Limits::default()).unwrap();
    assert_eq!(lazy.warm_up(), 2);
    assert!(lazy.flags.iter().all(|f| f.get_now().is_some()));
    // A delta on a lazy snapshot keeps the unchanged flags and their answers.
    let mut change = set.clone();
    change.flags.retain(|f| f.key == "a");
    change.flags[0].on = false;
    let next = lazy.apply(&change, &[], &[], &Limits::default()).unwrap();
    assert!(!next.bool("a", &Context::new("u"), true));
    assert_eq!(next.string("b", &Context::new("u"), "?"), "x", "prerequisite a now fails: off variation");
}

const CROSSING: &str = r#"
flags:
  - {key: a, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}}
  - {key: b, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0},
     prerequisites: [{key: a, variation: 1}]}
  - key: c
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    rules: [{id: in-s, clauses: [{attribute: key, op: segment_match, values: [s]}], serve: {variation: 0}}]
    fallthrough: {variation: 1}
  - key: d
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    rules: [{id: mail, clauses: [{attribute: email, op: matches, values: ['^[a-z]+@example\.com$']}], serve: {variation: 0}}]
    fallthrough: {variation: 1}
segments:
  - {key: s, included: [u1]}
"#;

/// What `apply` must answer: the whole would-be set validated, the kept
/// items first, in the order `apply` lists them.
fn whole(
    base: &Snapshot,
    change: &FlagSet,
    deleted: (&[&str], &[&str]),
    limits: &Limits,
) -> Result<(), ValidationErrors> {
    let gone_flags: HashSet<&str> =
        change.flags.iter().map(|f| f.key.as_str()).chain(deleted.0.iter().copied()).collect();
    let gone_segments: HashSet<&str> =
        change.segments.iter().map(|s| s.key.as_str()).chain(deleted.1.iter().copied()).collect();
    let kept: Vec<Flag> = base.flags().filter(|f| !gone_flags.contains(f.key.as_str())).collect();
    let flags: Vec<&Flag> = kept.iter().chain(&change.flags).collect();
    let segments: Vec<&Segment> =
        base.segments().filter(|s| !gone_segments.contains(s.key.as_str())).chain(&change.segments).collect();
    validate::items(&flags, &segments, limits)
}

#[test]
fn a_change_is_judged_exactly_like_the_whole_would_be_set() {
    let set: FlagSet = serde_yaml_ng::from_str(CROSSING).unwrap();
    let one = |yaml: &str| -> Flag { serde_yaml_ng::from_str(yaml).unwrap() };
    let regex_flag = |key: &str| {
        let mut f = set.flags[3].clone();
        f.key = key.into();
        f
    };
    // Budgets that the set fits with a little room: a change that
    // needs more must be refused with the same figures as a whole-set
    // validation gives (what the kept flags used counts).
    let mut limits = Limits::default();
    let costs = validated_costs(&set, &limits);
    let used = costs["d"].regex_bytes as usize;
    let bytes: usize = costs.values().map(|c| c.encoded_bytes as usize).sum();
    limits.max_regex_env_compiled = used + 16;
    limits.max_flags = 5;
    limits.max_prerequisite_depth = 1;
    limits.max_snapshot_bytes = bytes + 100 + crate::wire::segment_to_proto(&set.segments[0]).encoded_len();
    let on = |key: &str, on: bool| {
        let mut f = set.flags.iter().find(|f| f.key == key).unwrap().clone();
        f.on = on;
        f
    };
    let flags = |fs: Vec<Flag>| FlagSet { flags: fs, segments: Vec::new() };
    let renamed = |mut f: Flag, key: &str| {
        f.key = key.into();
        f
    };
    let described = |mut f: Flag| {
        f.description = "x".repeat(200);
        f
    };
    let cases: Vec<(&str, FlagSet, &[&str], &[&str])> = vec![
            ("a toggle", flags(vec![on("a", false)]), &[], &[]),
            ("a prerequisite deleted", flags(vec![]), &["a"], &[]),
            (
                "a prerequisite's variation gone",
                flags(vec![one(
                    "{key: a, type: bool, variations: [true], on: true, off_variation: 0, fallthrough: {variation: 0}}",
                )]),
                &[],
                &[],
            ),
            ("a referenced segment deleted", flags(vec![]), &[], &["s"]),
            (
                "a prerequisite cycle through a kept flag",
                flags(vec![one(
                    "{key: a, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}, prerequisites: [{key: b, variation: 0}]}",
                )]),
                &[],
                &[],
            ),
            ("a key twice", flags(vec![renamed(on("a", true), "e"), renamed(on("a", false), "e")]), &[], &[]),
            ("the environment's regex budget", flags(vec![regex_flag("d2")]), &[], &[]),
            ("a regex flag replaced", flags(vec![regex_flag("d")]), &[], &[]),
            ("the snapshot's bytes", flags(vec![described(renamed(on("a", true), "big"))]), &[], &[]),
            (
                "a flag its own prerequisite",
                flags(vec![one("{key: a, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}, prerequisites: [{key: a, variation: 0}]}")]),
                &[],
                &[],
            ),
            (
                "a chain too deep",
                flags(vec![one("{key: e, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}, prerequisites: [{key: b, variation: 0}]}")]),
                &[],
                &[],
            ),
            (
                // Segments take from the regex budget before flags: the kept
                // flag's regex no longer fits.
                "a segment's regex ahead of a kept flag's",
                FlagSet {
                    flags: Vec::new(),
                    segments: vec![serde_yaml_ng::from_str(
                        r"{key: s2, rules: [{clauses: [{attribute: email, op: matches, values: ['^[a-z]+@example\.com$']}]}]}",
                    )
                    .unwrap()],
                },
                &[],
                &[],
            ),
        ];
    let encoded = Snapshot::from_encoded(encoded(&set), set.segments.clone(), &limits).unwrap();
    for base in [Snapshot::compile(&set, &limits).unwrap(), encoded] {
        for (what, change, del_flags, del_segments) in &cases {
            let want = whole(&base, change, (del_flags, del_segments), &limits);
            let owned = |keys: &[&str]| keys.iter().map(|k| k.to_string()).collect::<Vec<_>>();
            let got = base.apply(change, &owned(del_flags), &owned(del_segments), &limits).map(drop);
            assert_eq!(got, want, "{what}");
        }
    }
    // The cases refuse for the reasons they name, not for one another's.
    let base = Snapshot::compile(&set, &limits).unwrap();
    let refused = |i: usize| {
        let (_, change, f, s) = &cases[i];
        let owned = |keys: &[&str]| keys.iter().map(|k| k.to_string()).collect::<Vec<_>>();
        base.apply(change, &owned(f), &owned(s), &limits).map(drop).unwrap_err().to_string()
    };
    assert!(base.apply(&cases[0].1, &[], &[], &limits).is_ok());
    assert!(base.apply(&cases[7].1, &[], &[], &limits).is_ok(), "the replaced flag's budget is freed");
    for (i, want) in [
        (1, r#"flags["b"].prerequisites[0].key: unknown flag "a""#),
        (2, r#"flags["b"].prerequisites[0].variation: index 1 out of range"#),
        (3, r#"flags["c"].rules[0].clauses[0].values[0]: unknown segment "s""#),
        (4, "prerequisite cycle"),
        (5, r#"flags["e"]: duplicate flag key"#),
        (5, "flags: 6 flags, limit 5"),
        (6, "over the environment's regex budget"),
        (8, "encoded bytes, limit"),
        (9, r#"flags["a"].prerequisites[0].key: a flag cannot be its own prerequisite"#),
        (10, "prerequisite chain 2 deep, limit 1"),
        (11, r#"flags["d"]: compiled regexes over the environment's regex budget"#),
    ] {
        let got = refused(i);
        assert!(got.contains(want), "{}: {got}", cases[i].0);
    }
}

/// Each flag's cost as validating `set` whole finds it, by key.
fn validated_costs(set: &FlagSet, limits: &Limits) -> HashMap<String, ItemCost> {
    let snap = Snapshot::compile(set, limits).unwrap();
    snap.flags.iter().map(|c| (c.key().to_owned(), c.cost_now().expect("validated"))).collect()
}

#[test]
fn a_flag_costs_the_same_validated_or_read_from_its_compiled_form() {
    let set: FlagSet = serde_yaml_ng::from_str(CROSSING).unwrap();
    let limits = Limits::default();
    let validated = validated_costs(&set, &limits);
    assert!(validated["d"].regex_bytes > 0, "the regex is counted");
    // Never validated here: the cost comes from the compiled form (and
    // the wire bytes), as for a client started from its cache.
    let lazy = Snapshot::from_encoded(encoded(&set), set.segments.clone(), &limits).unwrap();
    let unvalidated = Snapshot::compile_unvalidated(&set, &limits);
    for snap in [&lazy, &unvalidated] {
        for cell in snap.flags.iter() {
            assert!(cell.cost_now().is_none());
            assert_eq!(cell.cost(), validated[cell.key()], "{}", cell.key());
        }
    }
    // Patterns in several rules, charged in the same order either way.
    let mut many = set.flags[3].clone();
    many.key = "many".into();
    let mut rule = many.rules[0].clone();
    rule.id = "more".into();
    rule.clauses[0].values = vec!["^a+$".into(), "^(b|c)[0-9]{2,5}$".into()];
    many.rules.push(rule);
    let set = FlagSet { flags: vec![many], segments: Vec::new() };
    let validated = validated_costs(&set, &limits)["many"];
    let lazy = Snapshot::from_encoded(encoded(&set), Vec::new(), &limits).unwrap();
    assert_eq!(lazy.flags.get(0).cost(), validated);
    // A field this build does not know (a newer relay's): the wire
    // bytes count whole, more than validation would measure after
    // decoding; on the safe side of `max_snapshot_bytes`.
    let mut raw = encoded(&set)[0].to_vec();
    raw.extend_from_slice(b"\x98\x06\x01"); // field 99, varint 1
    let newer = Snapshot::from_encoded([Bytes::from(raw)], Vec::new(), &limits).unwrap();
    let cost = newer.flags.get(0).cost();
    assert_eq!((cost.encoded_bytes, cost.regex_bytes), (validated.encoded_bytes + 3, validated.regex_bytes));
}

#[test]
fn changes_find_every_flag_where_a_fresh_compile_does() {
    let flag = |i: usize, on: bool| -> Flag {
        serde_yaml_ng::from_str(&format!(
                "{{key: f{i}, type: string, variations: [v{i}, off], on: {on}, off_variation: 1, fallthrough: {{variation: 0}}}}"
            ))
            .unwrap()
    };
    let limits = Limits::default();
    let start = FlagSet { flags: (0..20).map(|i| flag(i, true)).collect(), segments: Vec::new() };
    // Compiled, and as a client started from its cache holds it (wire
    // form, compiled by the warm-up: its slots made without a head).
    let cached = Snapshot::from_encoded(encoded(&start), Vec::new(), &limits).unwrap();
    assert!(cached.index.values().iter().all(|s| s.head.is_none()));
    cached.warm_up();
    // And as a relay holds it (compiling on use, its index bare): loaded,
    // built from wire form, written to an empty environment, and a
    // compiled snapshot turned into one (its headed index rebuilt bare).
    let loaded =
        Snapshot::compile_each(start.flags.iter().cloned().zip(encoded(&start)), Vec::new(), &limits, true)
            .unwrap();
    let wire_cold = Snapshot::from_encoded_on_use(encoded(&start), Vec::new(), &limits).unwrap();
    let written = Snapshot::empty().compiling_on_use().apply(&start, &[], &[], &limits).unwrap();
    let turned = Snapshot::compile(&start, &limits).unwrap().compiling_on_use();
    for snap in [&loaded, &wire_cold, &written, &turned] {
        assert!(matches!(snap.index, Keys::Bare(_)), "a snapshot compiling on use has a bare index");
        assert_eq!(snap.index.len(), start.flags.len());
        for f in &start.flags {
            let found = snap.index.get(&f.key).unwrap();
            assert_eq!(
                snap.flags.get(found.index as usize).key(),
                f.key,
                "the slot's position holds its flag"
            );
        }
    }
    let headed = [Snapshot::compile(&start, &limits).unwrap(), cached].map(|s| (s, false));
    let bare = [loaded, wire_cold, written, turned].map(|s| (s, true));
    for (mut snap, bare) in headed.into_iter().chain(bare) {
        changes_find_every_flag(&mut snap, bare, start.clone(), &limits, &flag);
    }
}

/// Deletes, changes and adds, twice over, each step against a fresh
/// compile of the same flags: the index moved, not rebuilt, must find
/// the same flag under every key, with every slot's head as a rebuilt
/// index would have it (a snapshot compiling on use, `bare`: its index
/// still bare, each answer the same).
fn changes_find_every_flag(
    snap: &mut Snapshot,
    bare: bool,
    mut set: FlagSet,
    limits: &Limits,
    flag: &dyn Fn(usize, bool) -> Flag,
) {
    let limits = limits.clone();
    let steps: [(&[usize], &[usize], &[usize]); 2] =
        [(&[3, 7], &[5, 12], &[20, 21]), (&[0, 19, 20], &[21, 6], &[3])];
    for (deleted, changed, added) in steps {
        let change = FlagSet {
            flags: changed
                .iter()
                .map(|&i| flag(i, false))
                .chain(added.iter().map(|&i| flag(i, true)))
                .collect(),
            segments: Vec::new(),
        };
        let gone: Vec<String> = deleted.iter().map(|i| format!("f{i}")).collect();
        *snap = snap.apply(&change, &gone, &[], &limits).unwrap();
        assert_eq!(matches!(snap.index, Keys::Bare(_)), bare, "the index keeps its form");
        if !bare {
            assert!(
                snap.index.values().iter().all(|s| s.head.is_some()),
                "every flag is compiled: a head each"
            );
        }
        set.flags.retain(|f| !gone.contains(&f.key) && !change.flags.iter().any(|c| c.key == f.key));
        set.flags.extend(change.flags.iter().cloned());
        let fresh = Snapshot::compile(&set, &limits).unwrap();
        assert_eq!(snap.len(), fresh.len());
        let ctx = Context::new("u");
        for i in 0..22 {
            let key = format!("f{i}");
            assert_eq!(snap.flag(&key), fresh.flag(&key), "{key}");
            assert_eq!(snap.detail(&key, &ctx, "?"), fresh.detail(&key, &ctx, "?"), "{key}");
        }
    }
}

#[test]
fn undecodable_flag_bytes_evaluate_to_malformed_not_a_guess() {
    // Field 1 (key) is fine; field 2 claims 100 bytes that are not there.
    let raw = Bytes::from_static(b"\x0a\x01k\x12\x64oops");
    let lazy = Snapshot::from_encoded([raw], Vec::new(), &Limits::default()).unwrap();
    let d = lazy.detail("k", &Context::new("u"), true);
    assert_eq!((d.value, d.reason), (true, Reason::Error(ErrorKind::MalformedFlag)));
    assert!(
        Snapshot::from_encoded([Bytes::from_static(b"\x0a\x09k")], Vec::new(), &Limits::default()).is_err()
    );
}

/// A small deterministic generator for the randomised tests (no
/// dependency): a 64-bit LCG, its high bits.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

/// A string flag with `variations` variations, these prerequisites and,
/// when given, a rule matching a segment.
fn linked(
    key: &str,
    variations: usize,
    on: bool,
    prerequisites: &[(String, u32)],
    segment: Option<&str>,
) -> Flag {
    let values: Vec<String> = (0..variations).map(|i| format!("v{i}")).collect();
    let pre: Vec<String> =
        prerequisites.iter().map(|(k, v)| format!("{{key: {k}, variation: {v}}}")).collect();
    let rules = segment.map_or(String::new(), |s| {
        format!(", rules: [{{id: r, clauses: [{{attribute: key, op: segment_match, values: [{s}]}}], serve: {{variation: 0}}}}]")
    });
    serde_yaml_ng::from_str(&format!(
        "{{key: {key}, type: string, variations: [{}], on: {on}, off_variation: 0, fallthrough: {{variation: 0}}, prerequisites: [{}]{rules}}}",
        values.join(", "),
        pre.join(", ")
    ))
    .unwrap()
}

/// Random changes (toggles, fewer variations, new prerequisite keys, new
/// flags with chains and cycles among them, unknown segments, deletions),
/// applied one after another from each accepted result: every verdict is
/// a whole-set validation's, the judgement by the change alone is only
/// ever a pass the whole set confirms with the same totals, and every
/// accepted snapshot answers like a fresh compile of its flags.
#[test]
fn changes_judged_by_their_own_items_agree_with_the_whole_set() {
    let limits = Limits { max_prerequisite_depth: 3, max_flags: 30, ..Limits::default() };
    let segments: Vec<Segment> = vec![
        serde_yaml_ng::from_str("{key: s0, included: [u1]}").unwrap(),
        serde_yaml_ng::from_str("{key: s1, included: [u2]}").unwrap(),
    ];
    let mut rng = Lcg(7);
    let (mut by_change, mut deleting_by_change) = (0, 0);
    for round in 0..30 {
        // A valid environment: a DAG of prerequisites, at most 3 deep
        // (every other round none: deletions can be judged by the change).
        let mut flags: Vec<Flag> = Vec::new();
        for i in 0..24 {
            let pre: Vec<(String, u32)> = if round % 2 == 0 && i > 2 && rng.below(3) == 0 {
                let j = i - 1 - rng.below(3);
                vec![(format!("f{j}"), rng.below(2) as u32)]
            } else {
                Vec::new()
            };
            let seg = (rng.below(5) == 0).then(|| ["s0", "s1"][rng.below(2)]);
            flags.push(linked(&format!("f{i}"), 2 + rng.below(2), true, &pre, seg));
        }
        let set = FlagSet { flags, segments: segments.clone() };
        let Ok(mut snap) = Snapshot::compile(&set, &limits) else {
            continue; // a chain too deep by chance: another draw
        };
        let mut next_new = 0usize;
        for _step in 0..30 {
            let keys: Vec<String> = snap.keys().map(str::to_owned).collect();
            let pick = |rng: &mut Lcg| keys[rng.below(keys.len())].clone();
            let mut change = FlagSet::default();
            let mut deleted = Vec::new();
            for _ in 0..1 + rng.below(3) {
                let key = pick(&mut rng);
                let was = snap.flag(&key).unwrap().clone();
                let pre: Vec<(String, u32)> =
                    was.prerequisites.iter().map(|p| (p.key.clone(), p.variation)).collect();
                let n = was.variations.len();
                // Every other round adds no prerequisite: the environment
                // stays without any, and deletions count too.
                let plain = round % 2 == 1;
                match rng.below(8) {
                    0 | 1 => change.flags.push(linked(&key, n, !was.on, &pre, None)),
                    2 => change.flags.push(linked(&key, n.saturating_sub(1).max(1), true, &pre, None)),
                    3 if plain => change.flags.push(linked(&key, n + 1, true, &pre, None)),
                    3 => change.flags.push(linked(&key, n + 1, true, &[(pick(&mut rng), 0)], None)),
                    4 | 5 => {
                        // A new flag on a chain, maybe through another new
                        // one of this change, maybe back to itself.
                        next_new += 1;
                        let target = match rng.below(3) {
                            0 => format!("g{}", next_new + 1),
                            1 => format!("g{}", next_new.saturating_sub(1)),
                            _ => pick(&mut rng),
                        };
                        let v = rng.below(3) as u32;
                        let pre = if plain { Vec::new() } else { vec![(target, v)] };
                        change.flags.push(linked(&format!("g{next_new}"), 2, true, &pre, None));
                    }
                    6 => change.flags.push(linked(&key, n, true, &pre, Some(["s0", "nope"][rng.below(2)]))),
                    _ => deleted.push(key),
                }
            }
            let want = whole(
                &snap,
                &change,
                (&deleted.iter().map(String::as_str).collect::<Vec<_>>(), &[]),
                &limits,
            );
            let written = Change { set: &change, raw: None, deleted_flags: &deleted, deleted_segments: &[] };
            let quick = snap.judge_by_change(&written, &limits);
            if let Some(quick) = &quick {
                by_change += 1;
                deleting_by_change += usize::from(!deleted.is_empty());
                assert!(want.is_ok(), "judged a pass by the change alone: {want:?}");
                let whole_totals = snap.judge_whole(&written, &limits).unwrap().totals;
                assert_eq!(quick.totals, whole_totals);
            }
            let got = snap.apply(&change, &deleted, &[], &limits);
            assert_eq!(got.as_ref().map(drop).map_err(Clone::clone), want);
            if let Ok(next) = got {
                let fresh = Snapshot::compile(&next.to_flag_set(), &limits).unwrap();
                assert_eq!(next.len(), fresh.len());
                assert_eq!(next.checked.as_ref().unwrap().totals, fresh.checked.as_ref().unwrap().totals);
                let ctx = Context::new("u1");
                for f in fresh.flags() {
                    assert_eq!(next.detail(&f.key, &ctx, "?"), fresh.detail(&f.key, &ctx, "?"), "{}", f.key);
                    let at = next.index.get(&f.key).unwrap().index as usize;
                    assert_eq!(next.flags.get(at).key(), f.key, "the slot's position holds its flag");
                }
                snap = next;
            }
        }
    }
    assert!(by_change > 100, "the judgement by the change alone was exercised ({by_change} times)");
    assert!(deleting_by_change > 10, "deletions judged by the change alone ({deleting_by_change} times)");
}

/// An environment grown one flag at a time past several rebuilds of its
/// index, then shrunk: every flag is found, at its position.
#[test]
fn an_index_grown_and_shrunk_one_flag_at_a_time_finds_every_flag() {
    let limits = Limits::default();
    let mut snap = Snapshot::compile(&FlagSet::default(), &limits).unwrap();
    for i in 0..3000 {
        let change =
            FlagSet { flags: vec![linked(&format!("f{i}"), 2, true, &[], None)], segments: Vec::new() };
        snap = snap.apply(&change, &[], &[], &limits).unwrap();
    }
    for i in (0..3000).step_by(3) {
        snap = snap.apply(&FlagSet::default(), &[format!("f{i}")], &[], &limits).unwrap();
    }
    assert_eq!(snap.len(), 2000);
    for i in 0..3000 {
        let key = format!("f{i}");
        match snap.index.get(&key) {
            Some(slot) => {
                assert!(i % 3 != 0, "{key} was deleted");
                assert_eq!(snap.flags.get(slot.index as usize).key(), key);
            }
            None => assert_eq!(i % 3, 0, "{key} is missing"),
        }
    }
}

/// Unvalidated data holding a key twice (a snapshot compiled without
/// validation): a change that replaces or deletes the key leaves it once
/// or not at all, as a fresh compile of the result would.
#[test]
fn a_key_held_twice_is_replaced_or_deleted_whole() {
    let limits = Limits::default();
    let twice = FlagSet {
        flags: vec![
            linked("a", 2, true, &[], None),
            linked("b", 2, true, &[], None),
            linked("a", 3, false, &[], None),
        ],
        segments: Vec::new(),
    };
    // As compiled, and turned into a snapshot compiling on use (its
    // index rebuilt bare: the key indexed at its first position again).
    let compiled = Snapshot::compile_unvalidated(&twice, &limits);
    let turned = Snapshot::compile_unvalidated(&twice, &limits).compiling_on_use();
    for snap in [compiled, turned] {
        assert_eq!((snap.len(), snap.index.len()), (3, 2));
        assert_eq!(snap.index.get("a").unwrap().index, 0, "the first of the two");
        let new_a = linked("a", 2, false, &[], None);
        let change = FlagSet { flags: vec![new_a.clone()], segments: Vec::new() };
        let replaced = snap.apply(&change, &[], &[], &limits).unwrap();
        assert_eq!(replaced.len(), 2);
        assert_eq!(replaced.flag("a"), Some(new_a));
        assert_eq!(replaced.flags().filter(|f| f.key == "a").count(), 1);
        let deleted = snap.apply(&FlagSet::default(), &["a".to_owned()], &[], &limits).unwrap();
        assert_eq!(deleted.keys().collect::<Vec<_>>(), ["b"]);
        assert_eq!(deleted.defer(), snap.defer(), "the form kept through the rebuild");
    }
}

mod held;
