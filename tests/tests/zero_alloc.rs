//! Evaluation performs zero heap allocations: a counting global allocator
//! watches the evaluating thread while it evaluates every kind of flag.
#![allow(unsafe_code)] // the counting allocator below, nothing else

use std::alloc::{GlobalAlloc, Layout, System};
use std::borrow::Cow;
use std::cell::Cell;

use flagstream::{Client, Context, ErrorKind, FlagHandle, FlagSet, Limits, Snapshot, SnapshotCell};

thread_local! {
    /// Allocations made by this thread. Const-initialised and without a
    /// destructor, so reading it never allocates itself.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: forwards every call unchanged to the system allocator; the only
// addition is bumping a thread-local counter, which cannot allocate or fail.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations `f` makes on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

const FLAGS: &str = r#"
flags:
  - {key: plain, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}}
  - {key: off, type: bool, variations: [true, false], on: false, off_variation: 1, fallthrough: {variation: 0}}
  - key: two-clause
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    rules:
      - id: us-enterprise
        clauses:
          - {attribute: country, op: in, values: [US, CA]}
          - {attribute: plan, op: in, values: [enterprise]}
        serve: {variation: 0}
    fallthrough: {variation: 1}
  - key: rollout
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    fallthrough: {rollout: {variations: [{variation: 0, weight: 10000}, {variation: 1, weight: 90000}]}}
  - key: by-number
    type: int
    variations: [1, 2]
    on: true
    off_variation: 0
    fallthrough: {rollout: {bucket_by: org, variations: [{variation: 0, weight: 50000}, {variation: 1, weight: 50000}]}}
  - key: segmented
    type: string
    variations: [gold, plain]
    on: true
    off_variation: 1
    rules:
      - {clauses: [{attribute: key, op: segment_match, values: [big]}], serve: {variation: 0}}
    fallthrough: {variation: 1}
  - key: operators
    type: float
    variations: [0.5, 1.5]
    on: true
    off_variation: 0
    targets: [{variation: 1, values: [vip]}]
    prerequisites: [{key: plain, variation: 0}]
    rules:
      - clauses: [{attribute: email, op: matches, values: ["^[a-z]+@example\\.com$"]}, {attribute: email, op: ends_with, values: [".com"]}]
        serve: {variation: 1}
      - clauses: [{attribute: age, op: gte, values: [18]}, {attribute: app, op: semver_gt, values: ["2.0.0"]}]
        serve: {variation: 1}
      - clauses: [{attribute: signup, op: before, values: ["2026-01-01T00:00:00Z"]}, {attribute: groups, op: contains, values: [ops]}]
        serve: {variation: 1}
    fallthrough: {variation: 0}
  - key: document
    type: json
    variations: [{"theme": "dark", "limits": [1, 2]}, null]
    on: true
    off_variation: 1
    fallthrough: {variation: 0}
  - key: by-kind
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    targets: [{context_kind: device, variation: 0, values: [d-1]}]
    rules:
      - clauses: [{context_kind: org, attribute: /address/city, op: in, values: [Berlin]}, {attribute: kind, op: in, values: [org]}]
        serve: {variation: 0}
      - clauses: [{context_kind: org, attribute: key, op: segment_match, values: [orgs]}]
        serve: {variation: 0}
    fallthrough: {rollout: {context_kind: org, variations: [{variation: 0, weight: 50000}, {variation: 1, weight: 50000}]}}
  - key: ramp
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    fallthrough: {schedule: {variation: 0, otherwise: 1, context_kind: org, steps: [{start: 0, weight: 10000}, {start: 1000, weight: 60000}]}}
  - key: gated
    type: int
    variations: [1, 2]
    on: true
    off_variation: 0
    prerequisites: [{key: off, variation: 0}]
    fallthrough: {variation: 1}
  - key: long-id
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    rules:
      - id: a-rule-id-longer-than-twenty-two-bytes
        clauses: [{attribute: plan, op: in, values: [enterprise]}]
        serve: {variation: 0}
    fallthrough: {variation: 1}
segments:
  - key: big
    included: []
  - key: orgs
    included_contexts: [{context_kind: org, values: [acme]}]
    rules:
      - {weight: 30000, bucket_by: key, rollout_context_kind: org, clauses: []}
      - {clauses: [{attribute: key, op: segment_match, values: [big]}]}
"#;

fn snapshot() -> Snapshot {
    let mut set: FlagSet = serde_yaml_ng::from_str(FLAGS).expect("fixture parses");
    set.segments[0].included = (0..10_000).map(|i| format!("user-{i}")).collect();
    Snapshot::compile(&set, &Limits::default()).expect("fixture validates")
}

/// Bool, string, int, float and JSON flags with targets, prerequisites,
/// rules of every operator family, segments and rollouts evaluate without a
/// single allocation, on borrowed and on owned contexts alike; a pre-resolved
/// handle does too.
#[test]
fn evaluation_never_allocates() {
    let snap = snapshot();
    let groups =
        [flagstream::Scalar::Str(Cow::Borrowed("dev")), flagstream::Scalar::Str(Cow::Borrowed("ops"))];
    let borrowed = Context::new("user-42")
        .with("country", "US")
        .with("plan", "enterprise")
        .with("email", "ann@example.com")
        .with("age", 30)
        .with("app", "2.1.0")
        .with("signup", 1_700_000_000_000i64)
        .with("groups", &groups[..])
        .with("org", 1234);
    let owned = borrowed.clone().into_owned();
    let handle = FlagHandle::new("plain");
    let rule_handle = FlagHandle::new("two-clause");
    let cell = SnapshotCell::new(snapshot());

    let run = |ctx: &Context<'_>| {
        for _ in 0..1_000 {
            assert!(snap.bool("plain", ctx, false));
            assert!(!snap.bool("off", ctx, true));
            assert!(snap.bool("two-clause", ctx, false));
            assert!(!snap.bool("two-clause", &Context::new("x").with("country", "FR"), true));
            std::hint::black_box(snap.bool("rollout", ctx, false));
            std::hint::black_box(snap.int("by-number", ctx, 0));
            assert_eq!(snap.string("segmented", ctx, "?"), "gold");
            assert_eq!(snap.string("segmented", &Context::new("nobody"), "?"), "plain");
            assert_eq!(snap.float("operators", ctx, 0.0), 1.5);
            assert_eq!(snap.json("document", ctx, Cow::Owned(serde_json::Value::Null))["theme"], "dark");
            assert!(!snap.bool("missing", ctx, false));
            assert!(snap.detail("plain", ctx, false).variation == Some(0));
            assert!(handle.bool(&cell, ctx, false));
            assert!(rule_handle.bool(&cell, ctx, false));
            assert_eq!(rule_handle.detail(&snap, ctx, false).variation, Some(0));
        }
    };
    // Warm up: the regex engine fills its per-thread cache on first use.
    run(&borrowed);
    assert_eq!(allocations(|| run(&borrowed)), 0, "allocations while evaluating with a borrowed context");
    // A short-form version ("2.1" for 2.1.0) is read in place.
    let short = Context::new("user-42").with("age", 30).with("app", "2.1");
    let semver_rule = || {
        for _ in 0..100 {
            assert_eq!(snap.float("operators", &short, 0.0), 1.5);
        }
    };
    assert_eq!(allocations(semver_rule), 0, "allocations reading a short-form version");
    assert_eq!(allocations(|| run(&owned)), 0, "allocations while evaluating with an owned context");
}

/// With usage counting on (issue 23), the same calls allocate nothing
/// once each flag has seen its default (the first distinct default per
/// flag, and a missing key's first fallback in an interval, are noted
/// once; a handle's constant shortcut counts in the handle, adopted by the
/// client on its first call).
#[test]
fn counted_client_evaluation_never_allocates() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let _guard = rt.enter();
    let set: FlagSet = serde_yaml_ng::from_str(FLAGS).expect("fixture parses");
    let client = Client::builder().test_data(set).usage_reports(true).build().expect("client");
    let ctx = Context::new("user-42").with("country", "US").with("plan", "enterprise");
    let handle = FlagHandle::new("two-clause");
    let off = FlagHandle::new("off");
    let run = || {
        for _ in 0..1_000 {
            assert!(!client.handle_bool(&off, &ctx, true), "the constant shortcut, counted");
            assert_eq!(client.bool_detail("two-clause", &ctx, false).reason, "RULE_MATCH");
            assert_eq!(client.int_detail("gated", &ctx, 7).value, 1);
            assert_eq!(client.float_detail("operators", &ctx, 9.0).value, 0.5);
            assert_eq!(client.bool_detail("missing", &ctx, true).error, Some(ErrorKind::FlagNotFound));
            assert_eq!(client.int("plain", &ctx, 3), 3, "wrong type");
            assert!(client.bool("plain", &ctx, false) && !client.bool("off", &ctx, true));
            assert!(client.handle_bool(&handle, &ctx, false));
            client.string_with("segmented", &ctx, "?", |s| assert_eq!(s, "plain"));
        }
    };
    run();
    assert_eq!(allocations(run), 0, "allocations while evaluating through a counting client");
}

/// Through the client too: the typed calls and their owned results (rule
/// ids and prerequisite keys are `Name`s, short ones copied inline, long
/// ones shared with the snapshot), pre-resolved handles and fallbacks
/// allocate nothing for bool, int and float flags.
#[test]
fn client_evaluation_never_allocates() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let _guard = rt.enter();
    let set: FlagSet = serde_yaml_ng::from_str(FLAGS).expect("fixture parses");
    let client = Client::builder().test_data(set).build().expect("client");
    let ctx = Context::new("user-42").with("country", "US").with("plan", "enterprise");
    let handle = FlagHandle::new("two-clause");
    let plain = FlagHandle::new("plain");
    let run = || {
        for _ in 0..1_000 {
            let d = client.bool_detail("two-clause", &ctx, false);
            assert_eq!(
                (d.value, d.reason, d.rule_id.as_deref()),
                (true, "RULE_MATCH", Some("us-enterprise"))
            );
            let d = client.bool_detail("long-id", &ctx, false);
            assert_eq!(d.rule_id.as_deref(), Some("a-rule-id-longer-than-twenty-two-bytes"));
            let d = client.int_detail("gated", &ctx, 7);
            assert_eq!(
                (d.value, d.reason, d.prerequisite_key.as_deref()),
                (1, "PREREQUISITE_FAILED", Some("off"))
            );
            assert_eq!(client.float_detail("operators", &ctx, 9.0).value, 0.5);
            assert_eq!(client.bool_detail("missing", &ctx, true).error, Some(ErrorKind::FlagNotFound));
            assert!(client.bool("plain", &ctx, false) && !client.bool("off", &ctx, true));
            std::hint::black_box(client.int("by-number", &ctx, 0));
            assert!(client.handle_bool(&handle, &ctx, false) && client.handle_bool(&plain, &ctx, false));
            client.string_with("segmented", &ctx, "?", |s| assert_eq!(s, "plain"));
        }
    };
    run();
    assert_eq!(allocations(run), 0, "allocations while evaluating through the client");
    assert!(client.stats().default_not_found >= 2_000, "the missing flag was counted");
}

/// Flags served from encoded form (a cold start from the cache) allocate
/// while each compiles on its first evaluation, and never after.
#[test]
fn flags_compiled_on_first_use_never_allocate_after_it() {
    let eager = snapshot();
    let flags = eager
        .flags()
        .map(|f| bytes::Bytes::from(prost::Message::encode_to_vec(&flagstream::wire::flag_to_proto(&f))));
    let snap = Snapshot::from_encoded(
        flags.collect::<Vec<_>>(),
        eager.segments().cloned().collect(),
        &Limits::default(),
    )
    .expect("keys decode");
    let ctx = Context::new("user-42").with("country", "US").with("plan", "enterprise").with("org", 7);
    let run = || {
        for _ in 0..100 {
            assert!(snap.bool("two-clause", &ctx, false));
            assert_eq!(snap.string("segmented", &ctx, "?"), "gold");
            std::hint::black_box(snap.int("by-number", &ctx, 0));
            assert!(!snap.bool("off", &ctx, true));
        }
    };
    assert!(allocations(run) > 0, "the first evaluations compile");
    assert_eq!(allocations(run), 0, "allocations after every flag was compiled");
}

/// Multi-kind contexts (borrowed kinds) and JSON attributes read by
/// references evaluate without allocating: per-kind targets, clauses and
/// segment lists, nested segments, weighted segment rules, rollouts and
/// schedules by kind.
#[test]
fn multi_kind_and_nested_references_never_allocate() {
    let snap = snapshot();
    let address = serde_json::json!({"city": "Berlin", "zip": "10115"});
    let elsewhere = serde_json::json!({"city": "Paris"});
    let kinds =
        [Context::new("acme").kind("org").with("address", &address), Context::new("d-1").kind("device")];
    let other =
        [Context::new("globex").kind("org").with("address", &elsewhere), Context::new("d-2").kind("device")];
    let multi = Context::multi_borrowed(Context::new("user-42").with("country", "US"), &kinds);
    let multi_other = Context::multi_borrowed(Context::new("user-7"), &other);
    // Not targeted: its org's rule (reference and `kind` clauses) serves.
    let berlin = [Context::new("initech").kind("org").with("address", &address)];
    let multi_berlin = Context::multi_borrowed(Context::new("user-8"), &berlin);
    let run = || {
        for _ in 0..100 {
            assert!(snap.bool("by-kind", &multi, false));
            let d = snap.detail("by-kind", &multi, false);
            assert_eq!(d.variation, Some(0));
            std::hint::black_box(snap.detail("by-kind", &multi_other, false));
            let d = snap.detail("by-kind", &multi_berlin, false);
            assert!(matches!(d.reason, flagstream::Reason::RuleMatch { index: 0, .. }), "{:?}", d.reason);
            std::hint::black_box(snap.detail_at::<bool>("ramp", &multi, false, 500));
            std::hint::black_box(snap.detail_at::<bool>("ramp", &multi_other, false, 5_000));
            std::hint::black_box(snap.detail("two-clause", &multi, false));
        }
    };
    run();
    assert_eq!(allocations(run), 0, "allocations evaluating multi-kind contexts and references");
    let n = allocations(|| {
        std::hint::black_box(Context::multi_borrowed(Context::new("u").with("address", &address), &kinds));
    });
    assert_eq!(n, 0, "building a borrowed multi-kind context");
}

/// A context built from borrowed strings and numbers allocates nothing (up to
/// four attributes live inline).
#[test]
fn borrowed_context_never_allocates() {
    let n = allocations(|| {
        let ctx = Context::new("user-1")
            .with("country", "US")
            .with("plan", "pro")
            .with("age", 41)
            .with("beta", true);
        std::hint::black_box(&ctx);
    });
    assert_eq!(n, 0);
}
