//! Scenario 8 of docs/RESILIENCE.md, against a running relay: Subscribe
//! streams opened with arbitrary Hellos and follow-up messages, and admin
//! writes of mutated flags, are answered with a stream or a clean refusal
//! (never INTERNAL or UNKNOWN); afterwards the relay is up, has logged no
//! panic, and serves a snapshot whose checksum verifies.

use std::time::Duration;

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::sync_client::SyncClient;
use flagstream_tests::STEP;
use flagstream_tests::inbound::seeds;
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::{Subscriber, Update};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use prost::Message;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

/// Codes a refusal may carry; anything else is a defect.
const CLEAN: &[Code] = &[
    Code::Unauthenticated,
    Code::PermissionDenied,
    Code::InvalidArgument,
    Code::OutOfRange,
    Code::ResourceExhausted,
    Code::NotFound,
    Code::FailedPrecondition,
    Code::AlreadyExists,
];

fn text(max: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[ -~]{0,40}",
        proptest::collection::vec(any::<char>(), 0..max).prop_map(String::from_iter)
    ]
}

fn request(key: String) -> impl Strategy<Value = pb::SubscribeRequest> {
    let hello = (
        prop_oneof![Just(key), text(64), Just("k".repeat(200_000))],
        text(40),
        any::<u64>(),
        text(32),
        any::<i32>(),
        text(32),
    )
        .prop_map(|(sdk_key, epoch, revision, environment, kind, sdk_name)| pb::Hello {
            sdk_key,
            cursor: Some(pb::Cursor { epoch, revision }),
            environment,
            subscriber_kind: kind,
            sdk_name,
            ..Default::default()
        });
    let ack = (text(40), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(epoch, revision, us, held)| {
        pb::Ack { epoch, revision, apply_duration_us: us, held_us: held }
    });
    prop_oneof![
        3 => hello.prop_map(|h| pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(h)) }),
        1 => ack.prop_map(|a| pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Ack(a)) }),
        1 => Just(pb::SubscribeRequest { kind: None }),
    ]
}

/// A Hello the relay admits (the real key, no environment, an SDK kind)
/// with an arbitrary cursor: a foreign epoch, or the relay's own with any
/// revision (behind, at or ahead of its head).
fn admitted_hello(key: String, epoch: String) -> impl Strategy<Value = pb::SubscribeRequest> {
    (prop_oneof![text(40), Just(epoch)], prop_oneof![0u64..4, any::<u64>()], 0i32..2, text(32)).prop_map(
        move |(epoch, revision, kind, sdk_name)| pb::SubscribeRequest {
            kind: Some(pb::subscribe_request::Kind::Hello(pb::Hello {
                sdk_key: key.clone(),
                cursor: Some(pb::Cursor { epoch, revision }),
                subscriber_kind: kind,
                sdk_name,
                ..Default::default()
            })),
        },
    )
}

/// A message after the Hello that does not end the stream by itself: an
/// arbitrary ack, or an empty message.
fn follow_up() -> impl Strategy<Value = pb::SubscribeRequest> {
    let ack = (text(40), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(epoch, revision, us, held)| {
        pb::Ack { epoch, revision, apply_duration_us: us, held_us: held }
    });
    prop_oneof![
        ack.prop_map(|a| pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Ack(a)) }),
        Just(pb::SubscribeRequest { kind: None }),
    ]
}

/// How a stream opened with arbitrary messages was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Past the opening heartbeat, the relay acted on the cursor: a
    /// snapshot chunk, a delta or a reconnect request.
    Served,
    /// Past the opening heartbeat, another heartbeat: the relay holds the
    /// stream (a cursor at or ahead of its head).
    Held,
    /// A clean refusal, or the stream ended.
    Refused,
}

/// Opens a stream with `msgs` and reads past its opening heartbeat to
/// what the relay does with the cursor (the relay heartbeats every
/// second, so a held stream answers too).
async fn subscribe(relay: &Relay, msgs: Vec<pb::SubscribeRequest>) -> Result<Answer, String> {
    use pb::subscribe_response::Kind;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    for m in msgs {
        tx.send(m).await.map_err(|e| e.to_string())?;
    }
    let mut client = SyncClient::new(relay.channel().await).max_decoding_message_size(16 << 20);
    let answer = tokio::time::timeout(Duration::from_secs(10), async {
        let mut stream = client.subscribe(ReceiverStream::new(rx)).await?.into_inner();
        let mut heartbeats = 0;
        loop {
            match stream.message().await?.and_then(|m| m.kind) {
                None => return Ok::<_, tonic::Status>(Answer::Refused),
                Some(Kind::Heartbeat(_)) if heartbeats == 0 => heartbeats += 1,
                Some(Kind::Heartbeat(_)) => return Ok(Answer::Held),
                Some(_) => return Ok(Answer::Served),
            }
        }
    })
    .await
    .map_err(|_| "no answer within 10 s".to_owned())?;
    drop(tx);
    match answer {
        Ok(a) => Ok(a),
        Err(s) if CLEAN.contains(&s.code()) => Ok(Answer::Refused),
        Err(s) => Err(format!("{:?}: {}", s.code(), s.message())),
    }
}

#[test]
fn arbitrary_subscriptions_and_mutated_writes_are_answered_cleanly() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut relay = rt.block_on(Relay::start(dir.path(), &["--heartbeat", "1s"]));
    let key = relay.demo_key();

    let chain = |(first, rest): (pb::SubscribeRequest, Vec<pb::SubscribeRequest>)| {
        std::iter::once(first).chain(rest).collect::<Vec<_>>()
    };
    let arbitrary =
        (request(key.clone()), proptest::collection::vec(request(key.clone()), 0..4)).prop_map(chain);
    // Two streams in three open with an admitted Hello and arbitrary acks
    // after it, so arbitrary cursors reach the relay's cursor handling,
    // not only its authentication.
    let demo = rt.block_on(relay.status()).environments.into_iter().find(|e| e.name == "demo").expect("demo");
    let admitted = (admitted_hello(key.clone(), demo.epoch), proptest::collection::vec(follow_up(), 0..4))
        .prop_map(chain);
    let streams = prop_oneof![1 => arbitrary, 2 => admitted];
    let mut runner = TestRunner::new(Config { cases: 48, failure_persistence: None, ..Config::default() });
    let answers = std::cell::RefCell::new(Vec::new());
    runner
        .run(&streams, |msgs| {
            let got = rt.block_on(subscribe(&relay, msgs.clone()));
            prop_assert!(got.is_ok(), "{got:?} for {msgs:?}");
            answers.borrow_mut().extend(got);
            Ok(())
        })
        .unwrap();
    let answers = answers.into_inner();
    let count = |a: Answer| answers.iter().filter(|&&x| x == a).count();
    eprintln!(
        "subscriptions: {} served, {} held, {} refused",
        count(Answer::Served),
        count(Answer::Held),
        count(Answer::Refused)
    );
    // Arbitrary cursors really reached the relay's cursor handling.
    assert!(
        count(Answer::Served) + count(Answer::Held) >= 16,
        "too few streams got past their opening heartbeat: {answers:?}"
    );

    // Writes: valid flags of the evaluation suite, changed field by field
    // (a key, a type, an index, an operator, an attribute, truncated lists)
    // or byte by byte, so most decode and reach the relay's checks.
    let writes: Vec<pb::PutFlagRequest> =
        seeds("admin_put_flag").iter().map(|b| pb::PutFlagRequest::decode(b.as_slice()).unwrap()).collect();
    let edits = (
        proptest::option::of(text(300)),
        proptest::option::of(any::<i32>()),
        any::<bool>(),
        0usize..6,
        0usize..4,
        proptest::option::of(text(80)),
        proptest::option::of(any::<i32>()),
        // Most writes keep their bytes: a flipped byte mostly stops the
        // message decoding, and only decoded writes reach the relay.
        prop_oneof![
            3 => Just(Vec::new()),
            1 => proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..3)
        ],
    );
    let mutated =
        (0..writes.len(), edits).prop_map(move |(i, (key, kind, on, vars, rules, attr, op, flips))| {
            let mut req = writes[i].clone();
            let f = req.flag.as_mut().expect("a flag");
            if let Some(k) = key {
                f.key = k;
            }
            if let Some(t) = kind {
                f.r#type = t;
            }
            f.on = on;
            f.variations.truncate(vars);
            f.rules.truncate(rules);
            if let Some(c) = f.rules.first_mut().and_then(|r| r.clauses.first_mut()) {
                if let Some(a) = attr {
                    c.attribute = a;
                }
                if let Some(o) = op {
                    c.op = o;
                }
            }
            let mut b = req.encode_to_vec();
            for (at, byte) in flips {
                let at = at.index(b.len());
                b[at] ^= byte | 1;
            }
            b
        });
    let mut runner = TestRunner::new(Config { cases: 128, failure_persistence: None, ..Config::default() });
    let (accepted, refused, undecoded) =
        (std::cell::Cell::new(0), std::cell::Cell::new(0), std::cell::Cell::new(0));
    runner
        .run(&mutated, |bytes| {
            let Ok(mut req) = pb::PutFlagRequest::decode(bytes.as_slice()) else {
                undecoded.set(undecoded.get() + 1);
                return Ok(());
            };
            req.environment = "demo".into();
            let got = rt.block_on(async { relay.admin().await.put_flag(req.clone()).await });
            match got {
                Ok(_) => accepted.set(accepted.get() + 1),
                Err(s) => {
                    prop_assert!(CLEAN.contains(&s.code()), "{:?}: {} for {req:?}", s.code(), s.message());
                    refused.set(refused.get() + 1);
                }
            }
            Ok(())
        })
        .unwrap();
    let sent = accepted.get() + refused.get();
    eprintln!(
        "mutated writes: {} accepted, {} refused, {} did not decode (not sent)",
        accepted.get(),
        refused.get(),
        undecoded.get()
    );
    assert!(
        sent > undecoded.get(),
        "most mutated writes must reach the relay: only {sent} of {} decoded",
        sent + undecoded.get()
    );

    assert!(relay.running(), "the relay died:\n{}", relay.log());
    assert!(!relay.log().contains("panicked"), "{}", relay.log());
    rt.block_on(async {
        let mut sub = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
        let update = sub.next_change(STEP).await;
        assert!(matches!(update, Ok(Update::Snapshot { .. })), "{update:?}");
    });
}
