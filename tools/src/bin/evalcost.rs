//! The cost of the largest server-side evaluation the context caps admit:
//! 64 kinds of 256 attributes (`max-context-kinds` × `max-context-attributes`)
//! against a flag whose rules read the last kind's last attribute. Times
//! the core's part (protobuf context → `Context`, then the evaluation: what
//! the relay runs on its blocking pool) in this process, and Admin
//! `Evaluate` round trips through a real relay; prints median, p99 and max
//! in milliseconds.
//!
//! ```sh
//! cargo build --release -p flagstream-tests --bin relay   # the relay it starts
//! cargo run --release -p flagstream-tools --bin evalcost -- --runs 200
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use flagstream::model::{Clause, Operator, Rule, Serve};
use flagstream::{FlagSet, MAX_CONTEXT_ATTRIBUTES, MAX_CONTEXT_KINDS, Snapshot, wire};
use flagstream_proto::v1 as pb;
use flagstream_tests::relay::{Relay, bool_flag, put};

/// Options.
#[derive(Debug, Parser)]
struct Args {
    /// Evaluations to time (each way).
    #[arg(long, default_value_t = 200)]
    runs: usize,
}

/// The largest admitted context.
fn largest() -> pb::Context {
    let kind = |k: usize| pb::Context {
        key: format!("key-{k}"),
        kind: format!("kind-{k}"),
        attributes: (0..MAX_CONTEXT_ATTRIBUTES)
            .map(|i| {
                let s = pb::Scalar { value: Some(pb::scalar::Value::StringValue(format!("value-{i}"))) };
                (
                    format!("attribute-{i}"),
                    pb::AttributeValue { value: Some(pb::attribute_value::Value::Scalar(s)) },
                )
            })
            .collect(),
        contexts: Vec::new(),
    };
    pb::Context {
        kind: "multi".into(),
        contexts: (0..MAX_CONTEXT_KINDS).map(kind).collect(),
        ..Default::default()
    }
}

/// A flag with 10 rules, each reading the last kind's last attribute (the
/// longest scans) with `in` and `matches`, none matching: every rule runs.
fn flag() -> flagstream::Flag {
    let mut f = wire::flag_from_proto(&bool_flag("f", true)).expect("a valid flag");
    let last_kind = format!("kind-{}", MAX_CONTEXT_KINDS - 1);
    let last_attr = format!("attribute-{}", MAX_CONTEXT_ATTRIBUTES - 1);
    for r in 0..10 {
        let clause = |op, value: &str| Clause {
            context_kind: last_kind.clone(),
            attribute: last_attr.clone(),
            op,
            values: vec![value.into()],
            negate: false,
        };
        f.rules.push(Rule {
            id: format!("r{r}"),
            clauses: vec![clause(Operator::In, "value-255"), clause(Operator::Matches, "^nope-[0-9]+$")],
            serve: Serve::variation(1),
        });
    }
    f
}

fn report(what: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 * q) as usize).min(ms.len() - 1)];
    println!(
        "{what}: median {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} runs)",
        at(0.5),
        at(0.99),
        at(1.0),
        ms.len()
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let context = largest();
    let bytes = prost::Message::encoded_len(&context);
    println!(
        "largest admitted context: {MAX_CONTEXT_KINDS} kinds x {MAX_CONTEXT_ATTRIBUTES} attributes, {bytes} bytes encoded"
    );

    let snap = Snapshot::compile(
        &FlagSet { flags: vec![flag()], segments: vec![] },
        &flagstream::Limits::default(),
    )?;
    let mut core = Vec::with_capacity(args.runs);
    for _ in 0..args.runs {
        let start = Instant::now();
        let ctx = wire::context_from_proto(&context)?;
        let d = snap.detail("f", &ctx, false);
        std::hint::black_box(d.value);
        drop(ctx);
        core.push(start.elapsed().as_secs_f64() * 1e3);
    }
    report("core: convert + evaluate", core);

    let dir = tempfile::tempdir()?;
    let relay = Relay::start(dir.path(), &["--quota-token-evaluates-per-sec", "100000"]).await;
    relay.create_env("cost").await;
    let mut admin = relay.admin().await;
    put(&mut admin, "cost", wire::flag_to_proto(&flag())).await?;
    let req = pb::EvaluateRequest {
        environment: "cost".into(),
        flag_key: "f".into(),
        context: Some(context),
        requested_type: pb::FlagType::Bool as i32,
        default_value: Some(pb::Variation { value: Some(pb::variation::Value::BoolValue(false)) }),
    };
    let mut trips = Vec::with_capacity(args.runs);
    for _ in 0..args.runs {
        let start = Instant::now();
        let r =
            tokio::time::timeout(Duration::from_secs(30), admin.evaluate(req.clone())).await??.into_inner();
        anyhow::ensure!(
            r.reason.is_some_and(|x| x.kind == pb::ReasonKind::Fallthrough as i32),
            "unexpected reason"
        );
        trips.push(start.elapsed().as_secs_f64() * 1e3);
    }
    report("relay: Evaluate round trip (client encode, relay decode, convert + evaluate, reply)", trips);
    Ok(())
}
