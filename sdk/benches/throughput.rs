//! Multi-thread scaling: aggregate evaluations per second with two threads
//! against one, for flagstream and for the bare `ArcSwap<HashMap>` baseline.
//! Prints a table; results go to docs/BENCHMARKS.md. Run with
//! `cargo bench -p flagstream --bench throughput`.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use flagstream::{Context, FlagSet, Limits, Snapshot};

const ITERS: u64 = 20_000_000;

/// Evaluations per second over `threads` threads each running `f` ITERS times.
fn rate(threads: usize, f: &(dyn Fn() + Sync)) -> f64 {
    let barrier = Barrier::new(threads);
    let elapsed: Vec<Duration> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let t = Instant::now();
                    for _ in 0..ITERS {
                        f();
                    }
                    t.elapsed()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("bench thread")).collect()
    });
    let slowest = elapsed.into_iter().max().unwrap_or_default();
    (threads as u64 * ITERS) as f64 / slowest.as_secs_f64()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` probes with --list
    }
    let set: FlagSet = serde_yaml_ng::from_str(
        r#"
flags:
  - key: two-clause
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    rules:
      - clauses:
          - {attribute: country, op: in, values: [US, CA]}
          - {attribute: plan, op: in, values: [enterprise]}
        serve: {variation: 0}
    fallthrough: {variation: 1}
"#,
    )
    .expect("fixture parses");
    let snap = ArcSwap::from_pointee(Snapshot::compile(&set, &Limits::default()).expect("valid"));
    let baseline: ArcSwap<HashMap<String, bool>> =
        ArcSwap::from_pointee([("two-clause".to_owned(), true)].into());
    let ctx = Context::new("user-42").with("country", "US").with("plan", "enterprise");

    let ours = || {
        let g = snap.load();
        black_box(g.detail(black_box("two-clause"), &ctx, false));
    };
    let base = || {
        black_box(baseline.load().get(black_box("two-clause")).copied());
    };
    println!("{:<34} {:>14} {:>14} {:>8}", "workload", "1 thread/s", "2 threads/s", "scaling");
    for (name, f) in
        [("baseline arcswap hashmap get", &base as &(dyn Fn() + Sync)), ("flagstream 2-clause rule", &ours)]
    {
        let one = rate(1, f);
        let two = rate(2, f);
        println!("{name:<34} {one:>14.0} {two:>14.0} {:>7.2}x", two / one);
    }
}
