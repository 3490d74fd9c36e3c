use super::*;
use crate::model::{Prerequisite, Rule, Serve, Target, WeightedVariation};

fn flag(key: &str) -> Flag {
    Flag {
        key: key.into(),
        flag_type: crate::FlagType::Bool,
        variations: vec![Json::Bool(true), Json::Bool(false)],
        on: true,
        off_variation: 1,
        targets: vec![],
        rules: vec![],
        fallthrough: Serve::variation(0),
        prerequisites: vec![],
        salt: String::new(),
        version: 1,
        revision: 0,
        description: String::new(),
        tags: vec![],
        owner: String::new(),
        client_visible: false,
    }
}

fn rule(attr: &str, op: Operator, values: Vec<Json>) -> Rule {
    Rule {
        id: String::new(),
        clauses: vec![Clause {
            context_kind: String::new(),
            attribute: attr.into(),
            op,
            values,
            negate: false,
        }],
        serve: Serve::variation(0),
    }
}

fn errors(flags: Vec<Flag>, segments: Vec<Segment>) -> Vec<String> {
    match flag_set(&FlagSet { flags, segments }, &Limits::default()) {
        Ok(()) => vec![],
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

fn assert_error(errs: &[String], want: &str) {
    assert!(errs.iter().any(|e| e == want), "wanted {want:?} in {errs:#?}");
}

/// A valid flag passes.
#[test]
fn valid_flag_passes() {
    let mut f = flag("checkout");
    f.rules.push(rule("country", Operator::In, vec!["US".into(), 1.into(), true.into()]));
    assert_eq!(errors(vec![f], vec![]), Vec::<String>::new());
}

/// Each error names the field path and what is wrong or the limit.
#[test]
fn errors_name_path_and_limit() {
    let mut f = flag("checkout");
    f.off_variation = 2;
    f.targets.push(Target { variation: 5, values: vec!["u".into()], context_kind: String::new() });
    f.rules.push(rule("age", Operator::Lt, vec!["ten".into()]));
    f.rules.push(rule("email", Operator::Matches, vec!["(unclosed".into()]));
    f.rules.push(rule("v", Operator::SemverGt, vec!["one".into()]));
    f.rules.push(rule("", Operator::In, vec!["x".into()]));
    f.rules.push(rule("x", Operator::In, vec![Json::Array(vec![])]));
    f.rules.push(rule("t", Operator::Before, vec!["soon".into()]));
    f.rules.push(rule("s", Operator::SegmentMatch, vec!["nope".into()]));
    f.rules.push(Rule { id: String::new(), clauses: vec![], serve: Serve::variation(0) });
    f.rules.push(rule("x", Operator::In, (0..10_001).map(Json::from).collect()));
    f.fallthrough = Serve::rollout(Rollout {
        context_kind: String::new(),
        bucket_by: String::new(),
        seed: None,
        variations: vec![
            WeightedVariation { variation: 0, weight: 60_000 },
            WeightedVariation { variation: 1, weight: 30_000 },
        ],
        bucketing: None,
    });
    let errs = errors(vec![f], vec![]);
    for want in [
        r#"flags["checkout"].off_variation: variation index 2 out of range: the flag has 2 variations"#,
        r#"flags["checkout"].targets[0].variation: variation index 5 out of range: the flag has 2 variations"#,
        r#"flags["checkout"].rules[0].clauses[0].values[0]: "ten": `lt` takes numbers"#,
        r#"flags["checkout"].rules[2].clauses[0].values[0]: "one": `semver_gt` takes versions like "1.2.3""#,
        r#"flags["checkout"].rules[3].clauses[0].attribute: must not be empty"#,
        r#"flags["checkout"].rules[4].clauses[0].values[0]: []: `in` takes strings, numbers or bools"#,
        r#"flags["checkout"].rules[5].clauses[0].values[0]: "soon": `before` takes Unix milliseconds or RFC 3339 times"#,
        r#"flags["checkout"].rules[6].clauses[0].values[0]: unknown segment "nope""#,
        r#"flags["checkout"].rules[7].clauses: at least one clause is required"#,
        r#"flags["checkout"].rules[8].clauses[0].values: 10001 values, limit 10000"#,
        r#"flags["checkout"].fallthrough.rollout.variations: weights sum to 90000, must be 100000 (units of 1/100000)"#,
    ] {
        assert_error(&errs, want);
    }
    assert!(
        errs.iter()
            .any(|e| e.starts_with(r#"flags["checkout"].rules[1].clauses[0].values[0]: invalid regex"#)),
        "{errs:#?}"
    );
}

/// Keys: charset, length, duplicates.
#[test]
fn keys() {
    let errs = errors(vec![flag("-bad"), flag(&"k".repeat(257)), flag("ok"), flag("ok")], vec![]);
    assert_error(
        &errs,
        r#"flags["-bad"].key: "-bad": use A-Z a-z 0-9 . _ - and start with a letter or digit"#,
    );
    assert!(errs.iter().any(|e| e.ends_with(".key: 257 bytes, limit 256")), "{errs:#?}");
    assert_error(&errs, r#"flags["ok"]: duplicate flag key"#);
}

/// Variations must match the flag's type.
#[test]
fn variation_types() {
    let mut f = flag("n");
    f.flag_type = crate::FlagType::Int;
    f.variations = vec![1.into(), 1.5.into(), "2".into()];
    let errs = errors(vec![f], vec![]);
    assert_error(&errs, r#"flags["n"].variations[1]: 1.5 is not a int value"#);
    assert_error(&errs, r#"flags["n"].variations[2]: "2" is not a int value"#);
}

/// Prerequisite cycles, self-references, unknown flags and deep chains are
/// rejected.
#[test]
fn prerequisites() {
    let pre = |k: &str| Prerequisite { key: k.into(), variation: 0 };
    let mut a = flag("a");
    a.prerequisites.push(pre("b"));
    let mut b = flag("b");
    b.prerequisites.push(pre("a"));
    let mut c = flag("c");
    c.prerequisites = vec![pre("c"), pre("zzz")];
    let errs = errors(vec![a, b, c], vec![]);
    assert_error(&errs, r#"flags["a"].prerequisites: prerequisite cycle: a -> b -> a"#);
    assert_error(&errs, r#"flags["c"].prerequisites[0].key: a flag cannot be its own prerequisite"#);
    assert_error(&errs, r#"flags["c"].prerequisites[1].key: unknown flag "zzz""#);

    // A chain of 10 edges is allowed, 11 is not.
    let chain = |n: usize| {
        (0..=n)
            .map(|i| {
                let mut f = flag(&format!("f{i}"));
                if i < n {
                    f.prerequisites.push(pre(&format!("f{}", i + 1)));
                }
                f
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(errors(chain(10), vec![]), Vec::<String>::new());
    let errs = errors(chain(11), vec![]);
    assert_error(&errs, r#"flags["f0"].prerequisites: prerequisite chain 11 deep, limit 10"#);
}

fn nesting(key: &str, inner: &[&str]) -> Segment {
    Segment {
        key: key.into(),
        rules: vec![crate::model::SegmentRule {
            id: String::new(),
            clauses: inner
                .iter()
                .map(|k| Clause {
                    context_kind: String::new(),
                    attribute: String::new(),
                    op: Operator::SegmentMatch,
                    values: vec![(*k).into()],
                    negate: false,
                })
                .collect(),
            weight: None,
            bucket_by: String::new(),
            rollout_context_kind: String::new(),
            bucketing: None,
        }],
        ..Segment::default()
    }
}

/// Segments nest, but never in a cycle, never deeper than the limit and
/// never into a segment that does not exist.
#[test]
fn nested_segments() {
    let errs = errors(vec![], vec![nesting("a", &["b"]), nesting("b", &["c"]), nesting("c", &["a"])]);
    assert_error(&errs, r#"segments["a"].rules: segment cycle: a -> b -> c -> a"#);
    assert_eq!(errs.len(), 1, "one cycle, one error: {errs:?}");
    // A segment that only leads into a cycle is not reported as one, and
    // the cycle is filed under its own first segment.
    let errs = errors(
        vec![],
        vec![nesting("a", &["b"]), nesting("b", &["c"]), nesting("c", &["b"]), nesting("z", &["a"])],
    );
    assert_error(&errs, r#"segments["b"].rules: segment cycle: b -> c -> b"#);
    assert_eq!(errs.len(), 1, "only the cycle itself: {errs:?}");
    let errs = errors(vec![], vec![nesting("self", &["self"])]);
    assert_error(&errs, r#"segments["self"].rules: segment cycle: self -> self"#);
    let errs = errors(vec![], vec![nesting("a", &["nope"])]);
    assert_error(&errs, r#"segments["a"].rules[0].clauses[0].values[0]: unknown segment "nope""#);
    // 11 deep: s0 -> s1 -> ... -> s10.
    let keys: Vec<String> = (0..=10).map(|i| format!("s{i}")).collect();
    let mut chain: Vec<Segment> = keys.windows(2).map(|w| nesting(&w[0], &[w[1].as_str()])).collect();
    chain.push(Segment { key: "s10".into(), included: vec!["u".into()], ..Segment::default() });
    let errs = errors(vec![], chain.clone());
    assert_error(&errs, r#"segments["s0"].rules: segments nested 11 deep, limit 10"#);
    chain.remove(0);
    flag_set(&FlagSet { flags: vec![], segments: chain }, &Limits::default()).expect("10 deep is fine");
}

/// Configured limits are enforced, not just the defaults.
#[test]
fn custom_limits() {
    let limits = Limits { max_flags: 1, ..Limits::default() };
    let err =
        flag_set(&FlagSet { flags: vec![flag("a"), flag("b")], segments: vec![] }, &limits).unwrap_err();
    assert_eq!(err.to_string(), "flags: 2 flags, limit 1");
}

/// An imported bucketing is checked: a LaunchDarkly prefix is not empty,
/// an Unleash modulus divides 100,000; a file names exactly one mode.
#[test]
fn imported_bucketing_is_checked() {
    use crate::model::Bucketing;
    let with = |b: Bucketing| {
        let mut f = flag("imported");
        f.fallthrough = Serve::rollout(Rollout {
            variations: vec![
                WeightedVariation { variation: 0, weight: 50_000 },
                WeightedVariation { variation: 1, weight: 50_000 },
            ],
            bucketing: Some(b),
            ..Rollout::default()
        });
        errors(vec![f], vec![])
    };
    assert_error(
        &with(Bucketing::Unleash { group: "g".into(), seed: 0, modulus: 7 }),
        r#"flags["imported"].fallthrough.rollout.bucketing.unleash.modulus: 7 does not divide 100000"#,
    );
    assert_error(
        &with(Bucketing::Launchdarkly { prefix: String::new() }),
        r#"flags["imported"].fallthrough.rollout.bucketing.launchdarkly.prefix: empty: "<flag key>.<salt>" or the seed"#,
    );
    assert!(with(Bucketing::Unleash { group: "g".into(), seed: 86_028_157, modulus: 1000 }).is_empty());
    let both: Result<Bucketing, _> = serde_json::from_str(
        r#"{"launchdarkly": {"prefix": "a"}, "unleash": {"group": "g", "modulus": 100}}"#,
    );
    assert!(both.unwrap_err().to_string().contains("exactly one of launchdarkly and unleash"));
}
