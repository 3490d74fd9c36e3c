//! What a one-flag change costs an environment's snapshot as the
//! environment grows: `Snapshot::apply` (what the relay runs for every
//! write and every SDK for every delta) on environments of 1,000, 10,000
//! and 50,000 flags, next to the baseline of the same run: compiling the
//! changed flag alone, as an environment of one. Rounds alternate between
//! the two so the machine's drifts hit both alike; prints the medians and
//! their ratio; then the first change to a snapshot built as a client
//! started from its cache builds it (flags in wire form, compiled by the
//! warm-up, never validated in this process). Results: docs/BENCHMARKS.md
//! "Applying a change".
//!
//! ```sh
//! cargo bench -p flagstream --bench apply_cost
//! ```

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use flagstream::{Flag, FlagSet, Limits, Snapshot, wire};
use prost::Message;

const ROUNDS: usize = 15;

/// A flag of the kind a mature environment holds: a description, two
/// rules (one with a regular expression on every hundredth flag: the
/// environment's regex budget, 64 MiB, holds about 4,500 of these), targets,
/// and on every fifth flag a prerequisite.
fn flag(i: usize) -> Flag {
    let regex = if i.is_multiple_of(100) {
        r#"
  - id: beta-mail
    clauses:
      - {attribute: email, op: matches, values: ['^[a-z0-9._%+-]+@(beta|staff)\.example\.com$']}
    serve: {variation: 0}"#
    } else {
        ""
    };
    let prerequisite = if i % 5 == 4 {
        format!("prerequisites: [{{key: flag-{}, variation: 0}}]", i - 1)
    } else {
        String::new()
    };
    let yaml = format!(
        r#"
key: flag-{i}
type: bool
description: "{description}"
variations: [true, false]
on: true
off_variation: 1
targets: [{{variation: 0, values: [user-1, user-2, user-3]}}]
{prerequisite}
rules:
  - id: enterprise
    clauses:
      - {{attribute: country, op: in, values: [US, CA, GB, DE]}}
      - {{attribute: plan, op: in, values: [enterprise]}}
    serve: {{variation: 0}}{regex}
fallthrough: {{rollout: {{variations: [{{variation: 0, weight: 20000}}, {{variation: 1, weight: 80000}}]}}}}
"#,
        description = "d".repeat(200),
    );
    serde_yaml_ng::from_str(&yaml).expect("fixture flag")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Milliseconds each of `a` and `b` takes, the medians of `ROUNDS` runs
/// taken in turn.
fn ms(a: &dyn Fn(), b: &dyn Fn()) -> (f64, f64) {
    let time = |f: &dyn Fn()| {
        let start = Instant::now();
        f();
        start.elapsed().as_secs_f64() * 1e3
    };
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        ta.push(time(a));
        tb.push(time(b));
    }
    (median(&mut ta), median(&mut tb))
}

fn main() {
    // `cargo bench` passes `--bench`; a filter is not supported.
    let limits = Limits::default();
    println!(
        "| flags | apply a one-flag change | baseline: compile the flag alone | ratio | the first change after a start from the cache |"
    );
    println!("|---|---|---|---|---|");
    for n in [1_000, 10_000, 50_000] {
        let set = FlagSet { flags: (0..n).map(flag).collect(), segments: Vec::new() };
        let raw: Vec<Bytes> =
            set.flags.iter().map(|f| wire::flag_to_proto(f).encode_to_vec().into()).collect();
        let snap = Snapshot::compile_set(set, &limits).expect("valid fixture");
        let mut changed = flag(n / 2);
        changed.on = false;
        let change = FlagSet { flags: vec![changed], segments: Vec::new() };
        // Warm-up.
        black_box(snap.apply(&change, &[], &[], &limits).expect("valid change"));
        let (apply, alone) = ms(
            &|| {
                black_box(snap.apply(&change, &[], &[], &limits).expect("valid change"));
            },
            &|| {
                black_box(Snapshot::compile(&change, &limits).expect("valid change"));
            },
        );
        // A client started from its cache: flags in wire form, compiled by
        // the warm-up, never validated in this process.
        let mut first = Vec::new();
        for _ in 0..ROUNDS {
            let cached = Snapshot::from_encoded(raw.iter().cloned(), Vec::new(), &limits).expect("keys");
            cached.warm_up();
            let start = Instant::now();
            black_box(cached.apply(&change, &[], &[], &limits).expect("valid change"));
            first.push(start.elapsed().as_secs_f64() * 1e3);
        }
        println!(
            "| {n} | {apply:.3} ms | {alone:.3} ms | {:.0}× | {:.3} ms |",
            apply / alone,
            median(&mut first)
        );
    }
}
