//! Evaluation benchmarks, each next to a baseline measured in the same run:
//! a bare `ArcSwap<HashMap<String, bool>>` load + get. Every evaluation here
//! returns the full result (value, variation, reason) through one
//! `ArcSwap<Snapshot>` load, as the SDK does. Results: docs/BENCHMARKS.md.

use std::collections::HashMap;
use std::hint::black_box;

use arc_swap::ArcSwap;
use criterion::{Criterion, criterion_group, criterion_main};
use flagstream::{AttrValue, Context, FlagHandle, FlagSet, Limits, Scalar, Snapshot, SnapshotCell};

const N: usize = 10_000;

fn fixture() -> FlagSet {
    let mut set: FlagSet = serde_yaml_ng::from_str(include_str!("fixture.yaml")).expect("fixture parses");
    set.segments[0].included = (0..N).map(|i| format!("user-{i}")).collect();
    let template = set.flags[0].clone();
    for i in 0..N {
        let mut f = template.clone();
        f.key = format!("flag-{i}");
        set.flags.push(f);
    }
    set
}

/// A rule evaluated by hand: what an application would write without an
/// engine.
struct HandRule {
    countries: Vec<String>,
    plans: Vec<String>,
}

impl HandRule {
    fn matches(&self, ctx: &Context<'_>) -> bool {
        let is_in = |name: &str, values: &[String]| match ctx.attribute(name) {
            Some(AttrValue::Scalar(Scalar::Str(s))) => values.iter().any(|v| v == s),
            _ => false,
        };
        is_in("country", &self.countries) && is_in("plan", &self.plans)
    }
}

fn benches(c: &mut Criterion) {
    let set = fixture();
    let snap = ArcSwap::from_pointee(Snapshot::compile(&set, &Limits::default()).expect("valid"));
    let baseline: ArcSwap<HashMap<String, bool>> = ArcSwap::from_pointee(
        (0..N).map(|i| (format!("flag-{i}"), i % 2 == 0)).chain([("plain".to_owned(), true)]).collect(),
    );
    let random_keys: Vec<String> = {
        // A fixed pseudo-random order (LCG) so both sides see the same keys.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        (0..N)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                format!("flag-{}", (x >> 33) as usize % N)
            })
            .collect()
    };
    // The same 10,000 keys, each a flag with the 2-clause rule (no constant
    // answer: every evaluation runs the rule).
    let rule_snap = {
        let rule = set.flags.iter().find(|f| f.key == "two-clause").expect("fixture").clone();
        let flags = (0..N)
            .map(|i| {
                let mut f = rule.clone();
                f.key = format!("flag-{i}");
                f
            })
            .collect();
        ArcSwap::from_pointee(
            Snapshot::compile(&FlagSet { flags, segments: vec![] }, &Limits::default()).expect("valid"),
        )
    };
    let ctx = Context::new("user-42").with("country", "US").with("plan", "enterprise");
    let miss = Context::new("user-42").with("country", "FR").with("plan", "enterprise");
    let outsider = Context::new("someone-else");
    // A three-kind context borrowing its kinds, and a JSON attribute read
    // by a reference (both borrowed: no allocation to build them).
    let address = serde_json::json!({"city": "Berlin", "street": "Unter den Linden"});
    let kinds =
        [Context::new("acme").kind("org").with("plan", "enterprise"), Context::new("d-1").kind("device")];
    let multi = Context::multi_borrowed(Context::new("user-42").with("country", "US"), &kinds);
    let nested = Context::new("user-42").with("country", "US").with("address", &address);

    let mut g = c.benchmark_group("eval");
    g.bench_function("baseline/arcswap_hashmap_hot_key", |b| {
        b.iter(|| black_box(baseline.load().get(black_box("plain")).copied()))
    });
    g.bench_function("baseline/arcswap_load_only", |b| {
        b.iter(|| {
            let g = snap.load();
            black_box(&*g);
        })
    });
    g.bench_function("bool_on_off", |b| {
        b.iter(|| {
            let g = snap.load();
            black_box(g.detail(black_box("plain"), &ctx, false));
        })
    });
    let cell = SnapshotCell::new(Snapshot::compile(&set, &Limits::default()).expect("valid"));
    g.bench_function("handle_bool_on_off_value", |b| {
        let h = FlagHandle::new("plain");
        b.iter(|| black_box(h.bool(&cell, &ctx, false)))
    });
    g.bench_function("handle_rule_2_clauses_value", |b| {
        let h = FlagHandle::new("two-clause");
        b.iter(|| black_box(h.bool(&cell, &ctx, false)))
    });
    g.bench_function("handle_bool_on_off_detail", |b| {
        let h = FlagHandle::new("plain");
        b.iter(|| {
            let g = snap.load();
            black_box(h.detail(&g, &ctx, false));
        })
    });
    // The same rule written by hand over the same context: a baseline
    // lookup, then `country in [US, CA] && plan in [enterprise]`.
    let rules: ArcSwap<HashMap<String, HandRule>> = ArcSwap::from_pointee(
        [(
            "two-clause".to_owned(),
            HandRule { countries: vec!["US".into(), "CA".into()], plans: vec!["enterprise".into()] },
        )]
        .into(),
    );
    g.bench_function("baseline/handwritten_rule_2_clauses", |b| {
        b.iter(|| {
            let g = rules.load();
            black_box(g.get(black_box("two-clause")).map(|r| r.matches(&ctx)))
        })
    });
    g.bench_function("rule_2_clauses_match", |b| {
        b.iter(|| {
            let g = snap.load();
            black_box(g.detail(black_box("two-clause"), &ctx, false));
        })
    });
    g.bench_function("rule_2_clauses_no_match", |b| {
        b.iter(|| {
            let g = snap.load();
            black_box(g.detail(black_box("two-clause"), &miss, false));
        })
    });
    g.bench_function("rollout_10_percent", |b| {
        b.iter(|| {
            let g = snap.load();
            black_box(g.detail(black_box("rollout"), &ctx, false));
        })
    });
    g.bench_function("segment_match_10k_member", |b| {
        b.iter(|| {
            let g = snap.load();
            black_box(g.detail(black_box("segmented"), &ctx, false));
        })
    });
    g.bench_function("segment_match_10k_outsider", |b| {
        b.iter(|| {
            let g = snap.load();
            black_box(g.detail(black_box("segmented"), &outsider, false));
        })
    });
    g.bench_function("multi_kind_rule_2_clauses_match", |b| {
        b.iter(|| {
            let g = snap.load();
            black_box(g.detail(black_box("by-kind"), &multi, false));
        })
    });
    g.bench_function("nested_reference_rule_2_clauses_match", |b| {
        b.iter(|| {
            let g = snap.load();
            black_box(g.detail(black_box("nested-ref"), &nested, false));
        })
    });
    g.bench_function("schedule_3_steps", |b| {
        b.iter(|| {
            let g = snap.load();
            black_box(g.detail(black_box("ramp"), &ctx, false));
        })
    });
    g.bench_function("baseline/arcswap_hashmap_random_of_10k", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % N;
            black_box(baseline.load().get(random_keys[i].as_str()).copied())
        })
    });
    g.bench_function("random_flag_of_10k", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % N;
            let g = snap.load();
            black_box(g.detail(random_keys[i].as_str(), &ctx, false));
        })
    });
    g.bench_function("random_rule_flag_of_10k", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % N;
            let g = rule_snap.load();
            black_box(g.detail(random_keys[i].as_str(), &ctx, false));
        })
    });
    g.finish();

    let mut g = c.benchmark_group("context");
    g.bench_function("owned_key_and_2_attributes", |b| {
        b.iter(|| {
            black_box(
                Context::new(black_box("user-42").to_owned())
                    .with("country", black_box("US").to_owned())
                    .with("plan", black_box("enterprise").to_owned()),
            )
        })
    });
    g.bench_function("borrowed_key_and_2_attributes", |b| {
        b.iter(|| {
            black_box(
                Context::new(black_box("user-42"))
                    .with("country", black_box("US"))
                    .with("plan", black_box("enterprise")),
            )
        })
    });
    g.bench_function("borrowed_3_kinds", |b| {
        b.iter(|| black_box(Context::multi_borrowed(Context::new(black_box("user-42")), &kinds)))
    });
    g.finish();

    let mut g = c.benchmark_group("compile");
    g.sample_size(10);
    g.bench_function("snapshot_10k_flags", |b| {
        b.iter(|| black_box(Snapshot::compile(&set, &Limits::default())))
    });
    g.finish();
}

criterion_group!(eval, benches);
criterion_main!(eval);
