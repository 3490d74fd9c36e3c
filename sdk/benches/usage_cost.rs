//! The cost usage counting (issue 23) adds to an evaluation, measured
//! interleaved: rounds alternate between a client with counting off and one
//! with it on (same flags, same context), so the machine's slow drifts hit
//! both alike; prints per-evaluation medians over the rounds and the
//! median of the per-round differences. Results: docs/BENCHMARKS.md
//! "Usage counting".
//!
//! ```sh
//! cargo bench -p flagstream --bench usage_cost
//! ```

use std::hint::black_box;
use std::time::Instant;

use flagstream::{Client, Context, FlagHandle, FlagSet};

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

const ROUNDS: usize = 41;
const PER_ROUND: u32 = 1_000_000;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// ns per call of `f`, over one round.
fn round(f: &dyn Fn() -> bool) -> f64 {
    let start = Instant::now();
    for _ in 0..PER_ROUND {
        black_box(f());
    }
    start.elapsed().as_nanos() as f64 / f64::from(PER_ROUND)
}

fn main() {
    // `cargo bench` passes `--bench`; a filter is not supported.
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let _guard = rt.enter();
    let set: FlagSet = serde_yaml_ng::from_str(FLAGS).expect("fixture");
    let off = Client::builder().test_data(set.clone()).usage_reports(false).build().expect("client");
    let on = Client::builder().test_data(set).usage_reports(true).build().expect("client");
    let ctx = Context::new("user-42").with("country", "US").with("plan", "enterprise");
    let plain = FlagHandle::new("plain");
    let rule = FlagHandle::new("two-clause");
    type Case<'a> = (&'a str, Box<dyn Fn(&Client) -> bool + 'a>);
    let cases: Vec<Case> = vec![
        ("client.bool, on/off flag", Box::new(|c: &Client| c.bool(black_box("plain"), &ctx, false))),
        ("client.bool, 2-clause rule", Box::new(|c: &Client| c.bool(black_box("two-clause"), &ctx, false))),
        (
            "client.bool_detail, 2-clause rule",
            Box::new(|c: &Client| c.bool_detail(black_box("two-clause"), &ctx, false).value),
        ),
        ("client.handle_bool, on/off flag", Box::new(|c: &Client| c.handle_bool(&plain, &ctx, false))),
        ("client.handle_bool, 2-clause rule", Box::new(|c: &Client| c.handle_bool(&rule, &ctx, false))),
    ];
    println!("| case | counting off | counting on | added (median of per-round differences) |");
    println!("|---|---|---|---|");
    for (name, f) in &cases {
        let (mut a, mut b, mut d) = (Vec::new(), Vec::new(), Vec::new());
        // Warm-up.
        round(&|| f(&off));
        round(&|| f(&on));
        for i in 0..ROUNDS {
            // Alternate which goes first, so neither always follows the other.
            let (x, y) = if i % 2 == 0 {
                let x = round(&|| f(&off));
                (x, round(&|| f(&on)))
            } else {
                let y = round(&|| f(&on));
                (round(&|| f(&off)), y)
            };
            a.push(x);
            b.push(y);
            d.push(y - x);
        }
        println!(
            "| {name} | {:.2} ns | {:.2} ns | {:+.2} ns |",
            median(&mut a),
            median(&mut b),
            median(&mut d)
        );
    }
}
