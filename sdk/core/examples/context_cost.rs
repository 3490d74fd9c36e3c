//! The core's cost of the largest server-side evaluation the context caps
//! admit: 64 kinds of 256 attributes (`max-context-kinds` ×
//! `max-context-attributes`), converted from protobuf and evaluated against
//! a flag whose 10 rules read the last kind's last attribute (the longest
//! scans): what the relay runs on its blocking pool per `Evaluate`. Prints
//! median, p99 and max in milliseconds. The round trip through a relay is
//! `tools/src/bin/evalcost.rs`.
//!
//! ```sh
//! cargo run --release -p flagstream-core --example context_cost -- 500
//! ```

use std::time::Instant;

use flagstream_core::model::{Clause, Flag, FlagSet, Operator, Rule, Serve};
use flagstream_core::{
    FlagType, Limits, MAX_CONTEXT_ATTRIBUTES, MAX_CONTEXT_KINDS, Snapshot, proto as pb, wire,
};

fn main() {
    let runs: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(500);
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
    let context = pb::Context {
        kind: "multi".into(),
        contexts: (0..MAX_CONTEXT_KINDS).map(kind).collect(),
        ..Default::default()
    };
    let (last_kind, last_attr) =
        (format!("kind-{}", MAX_CONTEXT_KINDS - 1), format!("attribute-{}", MAX_CONTEXT_ATTRIBUTES - 1));
    let clause = |op, value: &str| Clause {
        context_kind: last_kind.clone(),
        attribute: last_attr.clone(),
        op,
        values: vec![value.into()],
        negate: false,
    };
    let flag = Flag {
        key: "f".into(),
        flag_type: FlagType::Bool,
        variations: vec![true.into(), false.into()],
        on: true,
        off_variation: 1,
        targets: vec![],
        rules: (0..10)
            .map(|r| Rule {
                id: format!("r{r}"),
                clauses: vec![clause(Operator::In, "value-255"), clause(Operator::Matches, "^nope-[0-9]+$")],
                serve: Serve::variation(1),
            })
            .collect(),
        fallthrough: Serve::variation(0),
        prerequisites: vec![],
        salt: String::new(),
        version: 1,
        revision: 0,
        description: String::new(),
        tags: vec![],
        owner: String::new(),
        client_visible: false,
    };
    let snap = Snapshot::compile(&FlagSet { flags: vec![flag], segments: vec![] }, &Limits::default())
        .expect("a valid flag");
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let ctx = wire::context_from_proto(&context).expect("admitted");
        let d = snap.detail("f", &ctx, false);
        assert!(d.value, "every rule runs, none matches: the fallthrough");
        drop(ctx);
        ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 * q) as usize).min(ms.len() - 1)];
    println!(
        "{MAX_CONTEXT_KINDS} kinds x {MAX_CONTEXT_ATTRIBUTES} attributes ({} bytes encoded): convert + evaluate median {:.2} ms, p99 {:.2} ms, max {:.2} ms ({runs} runs)",
        prost::Message::encoded_len(&context),
        at(0.5),
        at(0.99),
        at(1.0)
    );
}
