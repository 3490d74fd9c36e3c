//! Building an environment's items and snapshot from stored or received
//! bytes (`build_items`): validated one flag's model at a time, data that
//! fails this relay's limits still served, loudly.

use bytes::Bytes;
use flagstream::{Context, FlagSet, Limits, Reason};
use prost::Message;

use super::build::{build_snapshot, decode_items};
use super::build_items;
use super::state::Kind;
use crate::ops::metrics::Metrics;

fn items(yaml: &str) -> Vec<(Kind, Bytes)> {
    let set: FlagSet = serde_yaml_ng::from_str(yaml).unwrap();
    let flags = set
        .flags
        .iter()
        .map(|f| (Kind::Flag, Bytes::from(flagstream::wire::flag_to_proto(f).encode_to_vec())));
    let segments = set
        .segments
        .iter()
        .map(|s| (Kind::Segment, Bytes::from(flagstream::wire::segment_to_proto(s).encode_to_vec())));
    // Segments after the flags, as a replica's snapshot chunk lists them.
    flags.chain(segments).collect()
}

fn invalid_data_hits(m: &Metrics) -> usize {
    m.render()
        .lines()
        .filter(|l| l.starts_with("flagstream_limit_hits_total{limit=\"stored_data_invalid\"} 1"))
        .count()
}

const VALID: &str = r#"
flags:
  - {key: a, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}}
  - {key: b, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0},
     prerequisites: [{key: a, variation: 0}]}
  - key: c
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    rules: [{id: in-s, clauses: [{attribute: key, op: segment_match, values: [s]}], serve: {variation: 0}}]
    fallthrough: {variation: 1}
segments:
  - {key: s, included: [u1]}
"#;

/// Valid stored items: every item held, every flag served and answering
/// (prerequisites and segments resolved), nothing counted.
#[test]
fn stored_items_load_into_a_validated_snapshot() {
    let m = Metrics::new();
    let (items, snap) = build_items("e", items(VALID), &Limits::default(), &m).unwrap();
    assert_eq!(items.len(), 4, "three flags and a segment");
    assert_eq!(snap.keys().count(), 3);
    let (u1, u2) = (Context::new("u1"), Context::new("u2"));
    assert!(snap.detail("b", &u1, false).value, "its prerequisite passes");
    assert_eq!(snap.detail("c", &u1, false).reason, Reason::RuleMatch { index: 0, id: "in-s", step: None });
    assert!(!snap.detail("c", &u2, true).value);
    assert_eq!(invalid_data_hits(&m), 0);
}

/// Stored data that fails validation here (a prerequisite naming no flag,
/// a variation index out of range: written under other limits, or sent by
/// a newer upstream) is served anyway, every flag of it, and counted in
/// `limit_hits{limit="stored_data_invalid"}`: problems across items and a
/// flag's own alike, though each model is validated and dropped in turn.
#[test]
fn stored_items_that_fail_validation_are_served_and_counted() {
    let across = VALID
        .replace("prerequisites: [{key: a, variation: 0}]", "prerequisites: [{key: gone, variation: 0}]");
    let own = VALID.replace(
        "off_variation: 1, fallthrough: {variation: 0}}\n  - {key: b",
        "off_variation: 7, fallthrough: {variation: 0}}\n  - {key: b",
    );
    assert_ne!(own, VALID);
    for (what, yaml) in [("a prerequisite naming no flag", across), ("an off variation out of range", own)] {
        let m = Metrics::new();
        let (items, snap) = build_items("e", items(&yaml), &Limits::default(), &m).unwrap();
        assert_eq!((items.len(), snap.keys().count()), (4, 3), "{what}: every item served");
        assert_eq!(invalid_data_hits(&m), 1, "{what}: counted");
        assert!(snap.detail("c", &Context::new("u1"), false).value, "{what}: the other flags answer");
    }
}

/// Bytes that do not decode are an error naming the item, not a guess:
/// a flag's (also after flags that fail validation), a segment's.
#[test]
fn undecodable_stored_bytes_are_refused() {
    let across = VALID
        .replace("prerequisites: [{key: a, variation: 0}]", "prerequisites: [{key: gone, variation: 0}]");
    for (what, yaml, at, kind) in [
        ("a flag", VALID, 1, "flag "),
        ("a flag after an invalid one", &across, 2, "flag "),
        ("a segment", VALID, 3, "segment "),
    ] {
        let mut raw = items(yaml);
        raw[at].1 = Bytes::from_static(b"\xff\xff\xff");
        let m = Metrics::new();
        let Err(err) = build_items("e", raw.clone(), &Limits::default(), &m) else {
            panic!("{what}: accepted")
        };
        assert!(err.starts_with(kind), "{what}: {err}");
        assert_eq!(invalid_data_hits(&m), 0, "{what}: refused, not served");
        // A received snapshot's items, decoded before they are stored:
        // refused the same way, before anything is stored.
        let Err(err) = decode_items(raw, 0) else { panic!("{what}: decoded") };
        assert!(err.starts_with(kind), "{what}: {err}");
    }
    // Bytes protobuf reads but the model does not (an unknown flag type):
    // refused by decoding too, not only by building the snapshot.
    let mut raw = items(VALID);
    let mut p = flagstream_proto::v1::Flag::decode(raw[0].1.clone()).unwrap();
    p.r#type = 99;
    raw[0].1 = Bytes::from(p.encode_to_vec());
    let Err(err) = decode_items(raw.clone(), 0) else { panic!("an unknown flag type decoded") };
    assert!(err.starts_with("flag ") && err.contains("unknown flag type 99"), "{err}");
    assert!(build_items("e", raw, &Limits::default(), &Metrics::new()).is_err());
}

/// A received snapshot's items decoded first and its snapshot built from
/// them once stored (`decode_items`, then `build_snapshot`) are what
/// `build_items` makes of the same bytes: the same items, the same
/// answers, data that fails validation served and counted once.
#[test]
fn items_decoded_then_built_match_items_built_at_once() {
    let across = VALID
        .replace("prerequisites: [{key: a, variation: 0}]", "prerequisites: [{key: gone, variation: 0}]");
    for (what, yaml, invalid) in [("valid", VALID, 0), ("failing validation", &across, 1)] {
        let (m1, m2) = (Metrics::new(), Metrics::new());
        let (whole, snap) = build_items("e", items(yaml), &Limits::default(), &m1).unwrap();
        let decoded = decode_items(items(yaml), 0).unwrap();
        let built = build_snapshot("e", &decoded, &Limits::default(), &m2).unwrap();
        let listed = |items: &super::state::Items| {
            items.iter().map(|(k, i)| (k.clone(), i.bytes.clone(), i.hash, i.version)).collect::<Vec<_>>()
        };
        assert_eq!(listed(&decoded), listed(&whole), "{what}: the same items");
        let keys = |s: &flagstream::Snapshot| {
            let mut k: Vec<String> = s.keys().map(str::to_owned).collect();
            k.sort();
            k
        };
        assert_eq!(keys(&built), keys(&snap), "{what}");
        for (flag, user) in [("a", "u1"), ("b", "u1"), ("c", "u1"), ("c", "u2")] {
            let ctx = Context::new(user);
            assert_eq!(
                built.detail(flag, &ctx, false),
                snap.detail(flag, &ctx, false),
                "{what}: {flag} for {user}"
            );
        }
        assert_eq!(
            (invalid_data_hits(&m1), invalid_data_hits(&m2)),
            (invalid, invalid),
            "{what}: counted once"
        );
    }
}
