//! flagstream's evaluation next to the fastest Rust peers on the same flags
//! and contexts: Unleash's engine (`unleash-yggdrasil`, what Unleash's SDKs
//! evaluate with) and LaunchDarkly's (`launchdarkly-server-sdk-evaluation`,
//! its Rust server SDK's), plus a bare map lookup as the floor of a keyed
//! check. Each engine is called as its SDK calls it, keyed by the flag's
//! name, behind one `ArcSwap` load of its flag state:
//!
//! - flagstream: `SnapshotCell::load` + `Snapshot::detail` (value,
//!   variation, reason, flag version, revision), as `Client` evaluates;
//! - Unleash: `EngineState::is_enabled` (a bare bool, its cheapest call; it
//!   loads its state itself);
//! - LaunchDarkly: the store's `ArcSwap` load, the flag looked up by key in
//!   a map, then `evaluate` (value, variation, reason);
//! - floor: `ArcSwap<HashMap<String, bool>>` load + `get` (foldhash, the
//!   hasher of flagstream's index), and the map's `get` alone;
//! - the rule cases' floor: the same load and `get` of a flag that is
//!   only its two clauses (attribute name, values) and its two answers,
//!   matched against a context that is only its attributes (name, value)
//!   by a plain scan: the least any keyed engine does for that rule, with
//!   nothing for reasons, versions, kinds or other operators. With it, the
//!   budget the 3× target leaves (the fastest peer's time / 3) is
//!   compared with what no engine can go below on this machine.
//!
//! Rounds interleave the engines (the order rotates each round), so the
//! machine's drifts hit all alike; a case's ratio is the median over the
//! rounds of each round's ratio (the fastest peer's time over
//! flagstream's). Allocations per evaluation are counted by a global
//! allocator over 10,000 evaluations of each. Results: docs/BENCHMARKS.md
//! "Evaluation against the Rust peers".
//!
//! ```sh
//! cargo bench -p flagstream-peer-bench --features peers
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use arc_swap::ArcSwap;
use flagstream_core::{Context, FlagSet, Limits, Snapshot, SnapshotCell};
use launchdarkly_server_sdk_evaluation as ld;
use serde_json::json;
use unleash_yggdrasil as unleash;

/// Allocations since start, every thread.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

struct Counting;

// SAFETY: forwards every call to the system allocator unchanged; the
// addition is an atomic counter, which cannot allocate or fail.
#[allow(unsafe_code)] // the counting allocator, nothing else
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Flags of the random-key case.
const N: usize = 10_000;
/// Evaluations per engine per round.
const ITERS: usize = 200_000;
const ROUNDS: usize = 21;

/// flagstream's flags: `sdk/benches/eval.rs`'s (`fixture.yaml`), of which
/// the cases here read `plain`, `two-clause`, `rollout` and the 10,000.
fn flagstream_set() -> FlagSet {
    let mut set: FlagSet =
        serde_yaml_ng::from_str(include_str!("../../benches/fixture.yaml")).expect("fixture parses");
    let template = set.flags[0].clone();
    set.flags.extend((0..N).map(|i| {
        let mut f = template.clone();
        f.key = format!("flag-{i}");
        f
    }));
    set
}

/// Unleash's features for the same flags: a `default` strategy (on), one
/// with two `IN` constraints, a 10% `flexibleRollout` by user id.
fn unleash_engine() -> unleash::EngineState {
    let mut features = vec![
        json!({"name": "plain", "enabled": true, "strategies": [{"name": "default"}]}),
        json!({"name": "two-clause", "enabled": true, "strategies": [{
            "name": "default",
            "constraints": [
                {"contextName": "country", "operator": "IN", "values": ["US", "CA"]},
                {"contextName": "plan", "operator": "IN", "values": ["enterprise"]}
            ]
        }]}),
        json!({"name": "rollout", "enabled": true, "strategies": [{
            "name": "flexibleRollout",
            "parameters": {"rollout": "10", "stickiness": "userId", "groupId": "rollout"}
        }]}),
    ];
    features.extend(
        (0..N).map(
            |i| json!({"name": format!("flag-{i}"), "enabled": true, "strategies": [{"name": "default"}]}),
        ),
    );
    let data: unleash::ClientFeatures =
        serde_json::from_value(json!({"version": 2, "features": features})).expect("Unleash features");
    let engine = unleash::EngineState::default();
    let warnings = engine.apply_client_features(data);
    assert!(warnings.is_none(), "Unleash refused the features: {warnings:?}");
    engine
}

fn unleash_context(country: &str) -> unleash::Context {
    unleash::Context {
        user_id: Some("user-42".to_owned()),
        properties: Some(HashMap::from([
            ("country".to_owned(), country.to_owned()),
            ("plan".to_owned(), "enterprise".to_owned()),
        ])),
        ..unleash::Context::default()
    }
}

/// LaunchDarkly's store: its flags by key (`evaluate` takes the flag; an
/// SDK looks it up by key first, as here).
struct LdStore {
    flags: HashMap<String, ld::Flag, foldhash::fast::RandomState>,
}

impl ld::Store for LdStore {
    fn flag(&self, key: &str) -> Option<ld::Flag> {
        self.flags.get(key).cloned()
    }
    fn segment(&self, _key: &str) -> Option<ld::Segment> {
        None // the flags here match no segment
    }
}

fn ld_store() -> LdStore {
    let flag = |v: serde_json::Value| -> ld::Flag { serde_json::from_value(v).expect("LaunchDarkly flag") };
    let plain = |key: &str| {
        flag(json!({
            "key": key, "version": 1, "on": true, "targets": [], "rules": [], "prerequisites": [],
            "fallthrough": {"variation": 0}, "offVariation": 1, "variations": [true, false], "salt": key
        }))
    };
    let mut flags = vec![
        plain("plain"),
        flag(json!({
            "key": "two-clause", "version": 1, "on": true, "targets": [], "prerequisites": [],
            "rules": [{
                "id": "us-enterprise",
                "clauses": [
                    {"contextKind": "user", "attribute": "country", "op": "in", "values": ["US", "CA"], "negate": false},
                    {"contextKind": "user", "attribute": "plan", "op": "in", "values": ["enterprise"], "negate": false}
                ],
                "variation": 0,
                "trackEvents": false
            }],
            "fallthrough": {"variation": 1}, "offVariation": 1, "variations": [true, false], "salt": "two-clause"
        })),
        flag(json!({
            "key": "rollout", "version": 1, "on": true, "targets": [], "rules": [], "prerequisites": [],
            "fallthrough": {"rollout": {"contextKind": "user", "variations": [
                {"variation": 0, "weight": 10000}, {"variation": 1, "weight": 90000}
            ]}},
            "offVariation": 1, "variations": [true, false], "salt": "rollout"
        })),
    ];
    flags.extend((0..N).map(|i| plain(&format!("flag-{i}"))));
    LdStore { flags: flags.into_iter().map(|f| (f.key.clone(), f)).collect() }
}

fn ld_context(country: &str) -> ld::Context {
    ld::ContextBuilder::new("user-42")
        .set_string("country", country)
        .set_string("plan", "enterprise")
        .build()
        .expect("LaunchDarkly context")
}

/// The rule floor's flag: its clauses (attribute, values), all of which
/// must hold for `matched`, else `otherwise`.
struct FloorRule {
    clauses: Vec<(String, Vec<String>)>,
    matched: bool,
    otherwise: bool,
}

impl FloorRule {
    /// The answer for a context given as its attributes (name, value).
    #[inline]
    fn eval(&self, ctx: &[(String, String)]) -> bool {
        for (attr, values) in &self.clauses {
            let found = ctx.iter().find(|(name, _)| name == attr);
            if !found.is_some_and(|(_, v)| values.iter().any(|x| x == v)) {
                return self.otherwise;
            }
        }
        self.matched
    }
}

/// A rule case's extra rows, per round (ratios of the same round).
#[derive(Default)]
struct RuleRounds {
    floor: Vec<f64>,
    budget: Vec<f64>,
    over_floor: Vec<f64>,
}

/// One case: which flag each iteration asks for, and with which context.
struct Case {
    name: &'static str,
    keys: Vec<String>,
    matching: bool,
}

/// One engine's evaluation of key `k` (`matching`: the context that
/// matches the rule, else one that does not); returns the value for
/// checking.
type Eval<'a> = Box<dyn Fn(&str, bool) -> bool + 'a>;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Nanoseconds per evaluation of `eval` over `case`'s keys, `ITERS` times.
fn time(eval: &Eval<'_>, case: &Case) -> f64 {
    let start = Instant::now();
    for i in 0..ITERS {
        black_box(eval(black_box(&case.keys[i % case.keys.len()]), case.matching));
    }
    start.elapsed().as_nanos() as f64 / ITERS as f64
}

/// Allocations per evaluation of `eval` over `case`.
fn allocations(eval: &Eval<'_>, case: &Case) -> f64 {
    let rounds = 10_000;
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for i in 0..rounds {
        black_box(eval(black_box(&case.keys[i % case.keys.len()]), case.matching));
    }
    (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / rounds as f64
}

fn main() {
    // `cargo bench` passes `--bench`; a filter is not supported.
    let cell = SnapshotCell::new(Snapshot::compile(&flagstream_set(), &Limits::default()).expect("valid"));
    let hit = Context::new("user-42").with("country", "US").with("plan", "enterprise");
    let miss = Context::new("user-42").with("country", "FR").with("plan", "enterprise");
    let unleash = unleash_engine();
    let (u_hit, u_miss) = (unleash_context("US"), unleash_context("FR"));
    let ld = ArcSwap::from_pointee(ld_store());
    let (l_hit, l_miss) = (ld_context("US"), ld_context("FR"));
    let floor: ArcSwap<HashMap<String, bool, foldhash::fast::RandomState>> = ArcSwap::from_pointee(
        (0..N).map(|i| (format!("flag-{i}"), true)).chain([("plain".to_owned(), true)]).collect(),
    );

    let engines: [(&str, Eval<'_>); 3] = [
        ("flagstream", Box::new(|key, m| cell.load().detail(key, if m { &hit } else { &miss }, false).value)),
        (
            "unleash-yggdrasil",
            Box::new(|key, m| unleash.is_enabled(key, if m { &u_hit } else { &u_miss }, &None)),
        ),
        (
            "launchdarkly",
            Box::new(|key, m| {
                let store = ld.load();
                let flag = store.flags.get(key).expect("flag in the LaunchDarkly store");
                let d = ld::evaluate(&**store, flag, if m { &l_hit } else { &l_miss }, None);
                matches!(d.value, Some(ld::FlagValue::Bool(true)))
            }),
        ),
    ];
    /// The peers' positions in `engines`.
    const PEERS: std::ops::Range<usize> = 1..3;
    let floor_eval: Eval<'_> = Box::new(|key, _| floor.load().get(key).copied().unwrap_or(false));
    let held = floor.load_full();
    let map_eval: Eval<'_> = Box::new(|key, _| held.get(key).copied().unwrap_or(false));
    let rule_floor: ArcSwap<HashMap<String, FloorRule, foldhash::fast::RandomState>> = ArcSwap::from_pointee(
        [(
            "two-clause".to_owned(),
            FloorRule {
                clauses: vec![
                    ("country".to_owned(), vec!["US".to_owned(), "CA".to_owned()]),
                    ("plan".to_owned(), vec!["enterprise".to_owned()]),
                ],
                matched: true,
                otherwise: false,
            },
        )]
        .into_iter()
        .collect(),
    );
    let floor_ctx = |country: &str| -> Vec<(String, String)> {
        vec![
            ("key".to_owned(), "user-42".to_owned()),
            ("country".to_owned(), country.to_owned()),
            ("plan".to_owned(), "enterprise".to_owned()),
        ]
    };
    let (f_hit, f_miss) = (floor_ctx("US"), floor_ctx("FR"));
    let rule_floor_eval: Eval<'_> = Box::new(|key, m| {
        rule_floor.load().get(key).is_some_and(|r| r.eval(if m { &f_hit } else { &f_miss }))
    });

    let random_keys: Vec<String> = {
        // The same fixed pseudo-random order (LCG) as sdk/benches/eval.rs.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        (0..N)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                format!("flag-{}", (x >> 33) as usize % N)
            })
            .collect()
    };
    let one = |key: &str| vec![key.to_owned()];
    let cases = [
        Case { name: "on/off flag", keys: one("plain"), matching: true },
        Case { name: "2-clause rule, matching", keys: one("two-clause"), matching: true },
        Case { name: "2-clause rule, not matching", keys: one("two-clause"), matching: false },
        Case { name: "10% rollout", keys: one("rollout"), matching: true },
        Case { name: "random on/off flag of 10,000", keys: random_keys, matching: true },
    ];
    // Same answers before timing: the flags are the same flags.
    for case in &cases {
        let want = engines[0].1(&case.keys[0], case.matching);
        for (name, eval) in &engines[1..] {
            assert_eq!(eval(&case.keys[0], case.matching), want, "{name}: {}", case.name);
        }
    }

    println!(
        "| case | flagstream | unleash-yggdrasil | launchdarkly | fastest peer / flagstream (median of per-round ratios) | allocations per evaluation (flagstream, yggdrasil, LaunchDarkly) |"
    );
    println!("|---|---|---|---|---|---|");
    for case in &cases {
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); engines.len()];
        let mut ratios = Vec::new();
        let (mut floor_times, mut map_times) = (Vec::new(), Vec::new());
        let mut floor_ratios = Vec::new();
        let rule = case.name.starts_with("2-clause");
        // The rule cases' floor, per round: its time, the target's budget
        // and flagstream / floor.
        let mut rule_rounds = RuleRounds::default();
        if rule {
            assert_eq!(
                rule_floor_eval(&case.keys[0], case.matching),
                engines[0].1(&case.keys[0], case.matching)
            );
        }
        for round in 0..ROUNDS {
            // The rule's floor first or last, in turn.
            let rules = || rule.then(|| time(&rule_floor_eval, case));
            let early_rule = if round % 2 == 0 { rules() } else { None };
            // The floors before the engines, then after them, in turn.
            let floors = || (time(&floor_eval, case), time(&map_eval, case));
            let early = (round % 2 == 1).then(floors);
            let mut this = vec![0.0; engines.len()];
            for k in 0..engines.len() {
                let e = (round + k) % engines.len();
                this[e] = time(&engines[e].1, case);
            }
            let (floor_ns, map_ns) = early.unwrap_or_else(floors);
            let fastest_peer = this[PEERS].iter().copied().fold(f64::INFINITY, f64::min);
            if let Some(f) = early_rule.or_else(|| if round % 2 == 1 { rules() } else { None }) {
                rule_rounds.floor.push(f);
                rule_rounds.over_floor.push(this[0] / f);
                rule_rounds.budget.push(fastest_peer / 3.0);
            }
            map_times.push(map_ns);
            ratios.push(fastest_peer / this[0]);
            floor_times.push(floor_ns);
            floor_ratios.push(this[0] / floor_ns);
            for (e, t) in this.into_iter().enumerate() {
                times[e].push(t);
            }
        }
        let allocs: Vec<String> =
            engines.iter().map(|(_, e)| format!("{:.1}", allocations(e, case))).collect();
        let ns: Vec<String> = times.iter_mut().map(|t| format!("{:.1} ns", median(t))).collect();
        println!(
            "| {} | {} | {} | {} | {:.2}× | {} |",
            case.name,
            ns[0],
            ns[1],
            ns[2],
            median(&mut ratios),
            allocs.join(", ")
        );
        if rule {
            let r = &mut rule_rounds;
            println!(
                "| floor of this rule: `ArcSwap` load + map `get` + the clauses scanned | {:.1} ns; the 3× target's budget (fastest peer / 3): {:.1} ns | | | flagstream / floor: {:.2}× | |",
                median(&mut r.floor),
                median(&mut r.budget),
                median(&mut r.over_floor),
            );
        }
        if case.keys.len() > 1 || case.name.starts_with("on/off") {
            println!(
                "| floor: `ArcSwap` load + map `get` | {:.1} ns (the `get` alone {:.1} ns) | | | flagstream / floor (median of per-round ratios): {:.2}× | |",
                median(&mut floor_times),
                median(&mut map_times),
                median(&mut floor_ratios)
            );
        }
    }
}
