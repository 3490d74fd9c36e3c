//! Server-side evaluation (Admin `Evaluate`, a read token) is bounded: a
//! context over the caps (kinds, attributes per kind) or with a kind twice
//! is refused INVALID_ARGUMENT naming the field and the limit; the largest
//! admitted context evaluates; a token over its evaluation rate is refused
//! RESOURCE_EXHAUSTED with a retry hint, counted; and while one
//! environment's token floods the relay with hostile contexts, another
//! environment's SDK stream keeps getting heartbeats and deltas (the
//! conversion runs on the blocking pool, in linear time).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Admin, Relay, bool_flag, put};
use flagstream_tests::subscriber::{Subscriber, Update};
use tonic::Code;

/// One kind with `attributes` numeric attributes.
fn kind(name: &str, attributes: usize) -> pb::Context {
    pb::Context {
        key: format!("{name}-key"),
        kind: name.to_owned(),
        attributes: (0..attributes)
            .map(|i| {
                let scalar = pb::Scalar { value: Some(pb::scalar::Value::NumberValue(i as f64)) };
                (
                    format!("attribute-{i}"),
                    pb::AttributeValue { value: Some(pb::attribute_value::Value::Scalar(scalar)) },
                )
            })
            .collect(),
        contexts: Vec::new(),
    }
}

fn multi(kinds: Vec<pb::Context>) -> pb::Context {
    pb::Context { kind: "multi".into(), contexts: kinds, ..pb::Context::default() }
}

fn request(env: &str, context: pb::Context) -> pb::EvaluateRequest {
    pb::EvaluateRequest {
        environment: env.into(),
        flag_key: "f".into(),
        context: Some(context),
        requested_type: pb::FlagType::Bool as i32,
        default_value: Some(pb::Variation { value: Some(pb::variation::Value::BoolValue(false)) }),
    }
}

async fn evaluate(
    admin: &mut Admin,
    env: &str,
    context: pb::Context,
) -> Result<pb::EvaluateResponse, tonic::Status> {
    admin.evaluate(request(env, context)).await.map(tonic::Response::into_inner)
}

/// The largest context the caps admit: 64 kinds of 256 attributes.
fn largest() -> pb::Context {
    multi((0..64).map(|k| kind(&format!("k{k}"), 256)).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contexts_over_the_caps_are_refused_and_other_streams_keep_flowing() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(
        dir.path(),
        &[
            "--heartbeat",
            "200ms",
            "--quota-token-evaluates-per-sec",
            "100000",
            "--max-concurrent-streams",
            "1024",
        ],
    )
    .await;
    relay.create_env("hostile").await;
    let calm_key = relay.create_env("calm").await;
    let mut admin = relay.admin().await;
    put(&mut admin, "hostile", bool_flag("f", true)).await.unwrap();
    put(&mut admin, "calm", bool_flag("g", true)).await.unwrap();

    // Each cap, named with its field.
    let e = evaluate(&mut admin, "hostile", multi((0..65).map(|k| kind(&format!("k{k}"), 0)).collect()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert_eq!(e.message(), "context.contexts: 65 kinds, the limit is 64 (max-context-kinds)");
    let e =
        evaluate(&mut admin, "hostile", multi(vec![kind("org", 0), kind("device", 257)])).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert_eq!(
        e.message(),
        "context.contexts[1].attributes: 257 attributes, the limit is 256 (max-context-attributes)"
    );
    let e = evaluate(&mut admin, "hostile", kind("user", 100_000)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert_eq!(
        e.message(),
        "context.attributes: 100000 attributes, the limit is 256 (max-context-attributes)"
    );
    let mut twice: Vec<pb::Context> = (0..60).map(|k| kind(&format!("k{k}"), 0)).collect();
    twice.push(kind("k7", 0));
    let e = evaluate(&mut admin, "hostile", multi(twice)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert_eq!(e.message(), r#"context.contexts[60].kind: kind "k7" appears twice"#);

    // The largest admitted context evaluates.
    let r = evaluate(&mut admin, "hostile", largest()).await.unwrap();
    assert_eq!(r.reason.unwrap().kind, pb::ReasonKind::Fallthrough as i32);

    // Another environment's stream, opened before the flood.
    let mut calm = Subscriber::connect(relay.channel().await, &calm_key, None).await.unwrap();
    let opened = calm.next_change(STEP).await.unwrap();
    assert!(matches!(opened, Update::Snapshot { .. }), "{opened:?}");

    // The flood: clients sending a context of one kind with 200,000
    // attributes (≈6 MiB: the old conversion scanned the attributes so far
    // for each one) and the largest admitted one, until stopped.
    let stop = Arc::new(AtomicBool::new(false));
    let mut flood = Vec::new();
    for i in 0..6 {
        let (mut admin, stop) = (relay.admin().await, stop.clone());
        flood.push(tokio::spawn(async move {
            let hostile = if i % 2 == 0 { kind("user", 200_000) } else { largest() };
            let mut refused = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match evaluate(&mut admin, "hostile", hostile.clone()).await {
                    Ok(_) => {}
                    Err(e) if e.code() == Code::InvalidArgument => refused += 1,
                    Err(e) => panic!("unexpected refusal: {e:?}"),
                }
            }
            refused
        }));
    }
    // Meanwhile the calm stream gets its heartbeats (every 200 ms) and a
    // write's delta, each well within its timeout.
    for _ in 0..5 {
        assert!(matches!(calm.next(Duration::from_secs(2)).await.unwrap(), Update::Heartbeat { .. }));
    }
    let rev = tokio::time::timeout(STEP, put(&mut admin, "calm", bool_flag("g", false)))
        .await
        .expect("the write to the calm environment is answered")
        .unwrap();
    loop {
        match calm.next(Duration::from_secs(2)).await.unwrap() {
            Update::Heartbeat { .. } => continue,
            Update::Delta { to, .. } => {
                assert_eq!(to, rev);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut refused = 0;
    for f in flood {
        refused += f.await.unwrap();
    }
    assert!(refused > 0, "the hostile contexts were sent and refused");
    // Every refusal counted (the four above and the flood's).
    let counted = relay
        .metric(
            "flagstream_grpc_refusals_total{service=\"flagstream.v1.Admin\",method=\"Evaluate\",code=\"INVALID_ARGUMENT\"}",
        )
        .await;
    assert_eq!(counted, (refused + 4) as f64);
}

#[tokio::test]
async fn a_token_over_its_evaluation_rate_is_refused_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--quota-token-evaluates-per-sec", "2"]).await;
    relay.create_env("a").await;
    let mut admin = relay.admin().await;
    put(&mut admin, "a", bool_flag("f", true)).await.unwrap();
    // The burst is twice the rate; no token refills in the few
    // milliseconds the calls take (2/s: one every 500 ms).
    let mut refusal = None;
    for call in 0..10 {
        if let Err(e) = evaluate(&mut admin, "a", kind("user", 1)).await {
            refusal = Some((call, e));
            break;
        }
    }
    let (call, e) = refusal.expect("a burst past the rate is refused");
    assert_eq!(call, 4, "the burst is exactly twice the rate: 4 calls served, the 5th refused");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("over its evaluation rate of 2/s (quota-token-evaluates-per-sec)"),
        "{}",
        e.message()
    );
    let hint: u64 = e.metadata().get("flagstream-retry-after-ms").unwrap().to_str().unwrap().parse().unwrap();
    assert!(hint > 0 && hint <= 1_000, "{hint}");
    assert_eq!(
        relay.metric("flagstream_quota_refusals_total{env=\"a\",quota=\"token_evaluates_per_sec\"}").await,
        1.0
    );
    // After the hint, the token is served again: the relay's token bucket
    // refills on its (real, monotonic) clock, so the test waits the hint it
    // was given, as a client would.
    tokio::time::sleep(Duration::from_millis(hint)).await;
    evaluate(&mut admin, "a", kind("user", 1)).await.unwrap();
}
