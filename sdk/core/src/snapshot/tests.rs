use std::collections::HashMap;

use prost::Message;

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
    let flags: Vec<&Flag> =
        base.flags().filter(|f| !gone_flags.contains(f.key.as_str())).chain(&change.flags).collect();
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
    snap.flags.iter().map(|c| (c.key().to_owned(), *c.cost.get().expect("validated"))).collect()
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
        for cell in &snap.flags {
            assert!(cell.cost.get().is_none());
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
    assert_eq!(lazy.flags[0].cost(), validated);
    // A field this build does not know (a newer relay's): the wire
    // bytes count whole, more than validation would measure after
    // decoding; on the safe side of `max_snapshot_bytes`.
    let mut raw = encoded(&set)[0].to_vec();
    raw.extend_from_slice(b"\x98\x06\x01"); // field 99, varint 1
    let newer = Snapshot::from_encoded([Bytes::from(raw)], Vec::new(), &limits).unwrap();
    let cost = newer.flags[0].cost();
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
    assert!(cached.index.values().all(|s| s.head.is_none()));
    cached.warm_up();
    for mut snap in [Snapshot::compile(&start, &limits).unwrap(), cached] {
        changes_find_every_flag(&mut snap, start.clone(), &limits, &flag);
    }
}

/// Deletes, changes and adds, twice over, each step against a fresh
/// compile of the same flags: the index moved, not rebuilt, must find
/// the same flag under every key, with every slot's head as a rebuilt
/// index would have it.
fn changes_find_every_flag(
    snap: &mut Snapshot,
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
        assert!(snap.index.values().all(|s| s.head.is_some()), "every flag is compiled: a head each");
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
