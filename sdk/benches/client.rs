//! Evaluation through the client API, next to the bare engine and the bare
//! `ArcSwap<HashMap>` baseline in the same run; also reads of a
//! [`SnapshotCell`] (the type the client reads) while another thread swaps
//! in a new snapshot every 10 ms, as the sync task does when a delta
//! arrives. (The client's own cell is not reachable from outside: only its
//! sync task stores into it.) Results: docs/BENCHMARKS.md.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use criterion::{Criterion, criterion_group, criterion_main};
use flagstream::{Client, Context, FlagHandle, FlagSet, Limits, Snapshot, SnapshotCell};

const FLAGS: &str = r#"
flags:
  - {key: plain, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}}
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
"#;

fn benches(c: &mut Criterion) {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let _guard = rt.enter();
    let set: FlagSet = serde_yaml_ng::from_str(FLAGS).expect("fixture");
    let client = Client::builder().test_data(set.clone()).build().expect("client");
    // The same with usage counting on (issue 23): compare `client_*` with
    // `usage_on/client_*` of the same run.
    let counted = Client::builder().test_data(set.clone()).usage_reports(true).build().expect("client");
    let engine = ArcSwap::from_pointee(Snapshot::compile(&set, &Limits::default()).expect("valid"));
    let baseline: ArcSwap<HashMap<String, bool>> = ArcSwap::from_pointee([("plain".to_owned(), true)].into());
    let ctx = Context::new("user-42").with("country", "US").with("plan", "enterprise");

    let mut g = c.benchmark_group("client");
    g.bench_function("baseline/arcswap_hashmap_hot_key", |b| {
        b.iter(|| black_box(baseline.load().get(black_box("plain")).copied()))
    });
    g.bench_function("engine_bool_on_off", |b| {
        b.iter(|| {
            let s = engine.load();
            black_box(s.detail(black_box("plain"), &ctx, false));
        })
    });
    g.bench_function("client_bool_on_off", |b| {
        b.iter(|| black_box(client.bool(black_box("plain"), &ctx, false)))
    });
    g.bench_function("engine_rule_2_clauses", |b| {
        b.iter(|| {
            let s = engine.load();
            black_box(s.detail(black_box("two-clause"), &ctx, false));
        })
    });
    g.bench_function("client_rule_2_clauses", |b| {
        b.iter(|| black_box(client.bool(black_box("two-clause"), &ctx, false)))
    });
    g.bench_function("client_bool_detail_owned", |b| {
        b.iter(|| black_box(client.bool_detail(black_box("two-clause"), &ctx, false)))
    });
    let plain = FlagHandle::new("plain");
    g.bench_function("client_handle_bool_on_off", |b| {
        b.iter(|| black_box(client.handle_bool(&plain, &ctx, false)))
    });
    let rule = FlagHandle::new("two-clause");
    g.bench_function("client_handle_rule_2_clauses", |b| {
        b.iter(|| black_box(client.handle_bool(&rule, &ctx, false)))
    });

    g.bench_function("usage_on/client_bool_on_off", |b| {
        b.iter(|| black_box(counted.bool(black_box("plain"), &ctx, false)))
    });
    g.bench_function("usage_on/client_rule_2_clauses", |b| {
        b.iter(|| black_box(counted.bool(black_box("two-clause"), &ctx, false)))
    });
    g.bench_function("usage_on/client_bool_detail_owned", |b| {
        b.iter(|| black_box(counted.bool_detail(black_box("two-clause"), &ctx, false)))
    });
    g.bench_function("usage_on/client_handle_bool_on_off", |b| {
        b.iter(|| black_box(counted.handle_bool(&plain, &ctx, false)))
    });
    g.bench_function("usage_on/client_handle_rule_2_clauses", |b| {
        b.iter(|| black_box(counted.handle_bool(&rule, &ctx, false)))
    });
    g.bench_function("usage_on/engine_bool_on_off_counted", |b| {
        b.iter(|| {
            let s = engine.load();
            black_box(s.detail_counted(black_box("plain"), &ctx, false));
        })
    });

    // A writer swaps in a fresh snapshot every 10 ms, as the sync task does.
    let cell = Arc::new(SnapshotCell::new(Snapshot::compile(&set, &Limits::default()).expect("valid")));
    g.bench_function("cell_rule_2_clauses", |b| {
        b.iter(|| black_box(cell.load().detail(black_box("two-clause"), &ctx, false).value))
    });
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (cell, set, stop) = (cell.clone(), set.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let snap = Snapshot::compile(&set, &Limits::default()).expect("valid");
                cell.store(Arc::new(snap));
                swaps += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            swaps
        })
    };
    g.bench_function("cell_rule_2_clauses_during_swaps_every_10ms", |b| {
        b.iter(|| black_box(cell.load().detail(black_box("two-clause"), &ctx, false).value))
    });
    stop.store(true, Ordering::Relaxed);
    let swaps = writer.join().expect("writer");
    assert!(swaps > 10, "the writer barely ran ({swaps} swaps)");
    g.finish();
}

criterion_group!(client, benches);
criterion_main!(client);
