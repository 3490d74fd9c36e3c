//! What observing evaluations (`FlagstreamProvider::on_evaluation`) costs,
//! and that without an observer the provider adds nothing: interleaved
//! rounds of the same 2-clause rule evaluated (1) as the provider did before
//! observation existed (context conversion, `with_detail`, the resolution
//! details built with no metadata, in a boxed future polled once as
//! `async_trait` makes the provider's method — written out here as the
//! same-run baseline), (2) by the provider without an observer, (3) by the provider
//! with one (each result then carries its version in the flag metadata),
//! and (4) and (5) through the OpenFeature client without and with the
//! observer (its hook called with the attributes). Prints per-call medians
//! over the rounds. Results: docs/BENCHMARKS.md "OpenFeature observation".
//!
//! ```sh
//! cargo bench -p flagstream --features openfeature --bench openfeature_cost
//! ```

use std::hint::black_box;
use std::pin::pin;
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Instant;

use flagstream::openfeature::{FlagstreamProvider, checked_context, reason};
use flagstream::{Client, FlagSet};
use open_feature::provider::{FeatureProvider, ResolutionDetails};
use open_feature::{EvaluationContext, OpenFeature};

const FLAGS: &str = r#"
flags:
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

const ROUNDS: usize = 21;
const PER_ROUND: u32 = 200_000;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Polls a future that never waits (the provider's resolve) to its end.
fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut TaskContext::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the provider's resolve does not wait"),
    }
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
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let _guard = rt.enter();
    let set: FlagSet = serde_yaml_ng::from_str(FLAGS).expect("fixture");
    let client = || Client::builder().test_data(set.clone()).usage_reports(false).build().expect("client");
    let base = client();
    let plain = FlagstreamProvider::new(client());
    let observed = FlagstreamProvider::new(client()).on_evaluation(|a: &[(&'static str, String)]| {
        black_box(a);
    });
    rt.block_on(async {
        let mut api = OpenFeature::singleton_mut().await;
        api.set_named_provider("plain", plain.clone()).await;
        api.set_named_provider("observed", observed.clone()).await;
    });
    let (of_plain, of_observed) = rt.block_on(async {
        let api = OpenFeature::singleton().await;
        (api.create_named_client("plain"), api.create_named_client("observed"))
    });
    let ctx = EvaluationContext::default()
        .with_targeting_key("user-42")
        .with_custom_field("country", "US")
        .with_custom_field("plan", "enterprise");
    type Case<'a> = (&'a str, Box<dyn Fn() -> bool + 'a>);
    let cases: Vec<Case> = vec![
        (
            "provider as before (same-run baseline)",
            // Boxed and polled as `async_trait` makes the provider's method.
            Box::new(|| {
                let old = Box::pin(async {
                    let c = checked_context(&ctx).expect("context");
                    let r: ResolutionDetails<bool> =
                        base.with_detail(black_box("two-clause"), &c, false, |d| ResolutionDetails {
                            value: d.value,
                            variant: d.variation.map(|v| v.to_string()),
                            reason: Some(reason(&d.reason, d.stale)),
                            flag_metadata: None,
                        });
                    r
                });
                ready(black_box(old)
                    as std::pin::Pin<Box<dyn Future<Output = ResolutionDetails<bool>> + Send + '_>>)
                .value
            }),
        ),
        (
            "provider, no observer",
            Box::new(|| {
                ready(plain.resolve_bool_value(black_box("two-clause"), &ctx)).expect("resolved").value
            }),
        ),
        (
            "provider, observer (metadata built)",
            Box::new(|| {
                ready(observed.resolve_bool_value(black_box("two-clause"), &ctx)).expect("resolved").value
            }),
        ),
        (
            "OpenFeature client, no observer",
            Box::new(|| {
                rt.block_on(of_plain.get_bool_value(black_box("two-clause"), Some(&ctx), None))
                    .expect("value")
            }),
        ),
        (
            "OpenFeature client, observer (hook called)",
            Box::new(|| {
                rt.block_on(of_observed.get_bool_value(black_box("two-clause"), Some(&ctx), None))
                    .expect("value")
            }),
        ),
    ];
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for (_, f) in &cases {
        round(f.as_ref()); // warm-up
    }
    for _ in 0..ROUNDS {
        for (i, (_, f)) in cases.iter().enumerate() {
            samples[i].push(round(f.as_ref()));
        }
    }
    println!("| case | ns per evaluation (median of {ROUNDS} interleaved rounds) |");
    println!("|---|---|");
    for ((name, _), s) in cases.iter().zip(&mut samples) {
        println!("| {name} | {:.1} |", median(s));
    }
}
