//! Limits on streams are enforced and counted: admission per environment
//! with a retry hint, the maximum stream age, and the send deadline that
//! cuts off a subscriber that stopped reading.

use std::time::Duration;

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::{Subscriber, Update};

/// The third subscriber of an environment limited to two is refused with
/// RESOURCE_EXHAUSTED and a retry hint, and the refusal is counted.
#[tokio::test]
async fn admission_limit_rejects_with_retry_hint() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--max-subscribers-per-env", "2"]).await;
    let key = relay.demo_key();
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
        s.next(STEP).await.unwrap();
        held.push(s);
    }
    let err = Subscriber::connect(relay.channel().await, &key, None).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    let hint: u64 =
        err.metadata().get("flagstream-retry-after-ms").unwrap().to_str().unwrap().parse().unwrap();
    assert!((1..=5_000).contains(&hint));
    assert_eq!(
        relay.metric("flagstream_subscribes_total{result=\"rejected\",reason=\"environment_full\"}").await,
        1.0
    );
    assert_eq!(relay.metric("flagstream_limit_hits_total{limit=\"max_subscribers_per_env\"}").await, 1.0);
    // Leaving frees a place.
    drop(held.pop());
    let mut ok = None;
    for _ in 0..50 {
        if let Ok(s) = Subscriber::connect(relay.channel().await, &key, None).await {
            ok = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok.is_some(), "a place did not free up after a subscriber left");
}

/// A stream past its maximum age is asked to reconnect, then ends.
#[tokio::test]
async fn max_stream_age_asks_for_reconnect() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--max-stream-age", "1s"]).await;
    let mut s = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    loop {
        match s.next(STEP).await.unwrap() {
            Update::Reconnect { reason, .. } => {
                assert_eq!(reason, pb::ReconnectReason::MaxStreamAge);
                break;
            }
            Update::Snapshot { .. } | Update::Heartbeat { .. } => continue,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(s.next(STEP).await.is_err(), "the stream should end after the reconnect");
}

/// A subscriber that stops reading is cut off after the send deadline and
/// counted; the relay's other subscribers carry on.
#[tokio::test]
async fn send_deadline_cuts_off_a_reader_that_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(
        dir.path(),
        &["--send-deadline", "1s", "--heartbeat", "500ms", "--chunk-bytes", "16384", "--demo", "false"],
    )
    .await;
    // Enough data that an unread snapshot fills the HTTP/2 windows.
    let key = relay.create_filled_env("wide", 3_000, 1_000).await;
    let mut healthy = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    healthy.next(STEP).await.unwrap();
    let _stuck = Subscriber::connect(relay.channel().await, &key, None).await.unwrap(); // never read
    let mut cut = 0.0;
    for _ in 0..100 {
        cut = relay.metric("flagstream_limit_hits_total{limit=\"send_deadline\"}").await;
        if cut >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(cut, 1.0, "the stuck subscriber was not cut off");
    // The healthy one still gets heartbeats.
    assert!(matches!(healthy.next(STEP).await.unwrap(), Update::Heartbeat { .. }));
    assert_eq!(relay.metric("flagstream_subscribers{env=\"wide\"}").await, 1.0);
}

/// A Hello over the 4 KiB limit (read before the caller is known) is
/// refused with OUT_OF_RANGE (a code clients do not retry) naming the size
/// and the limit, and counted; the relay keeps serving others.
#[tokio::test]
async fn oversized_request_message_is_refused_and_counted() {
    use flagstream_proto::v1::sync_client::SyncClient;
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let hello = pb::Hello { sdk_key: relay.demo_key(), sdk_name: "x".repeat(5_000), ..Default::default() };
    let first = pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(hello)) };
    let mut client = SyncClient::new(relay.channel().await);
    let err = match client.subscribe(tokio_stream::iter([first])).await {
        Ok(r) => r.into_inner().message().await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(err.code(), tonic::Code::OutOfRange, "{err:?}");
    assert!(err.message().starts_with("hello: request message of 5"), "{}", err.message());
    assert!(err.message().contains("exceeds the limit of 4096 bytes"), "{}", err.message());
    assert_eq!(relay.metric("flagstream_limit_hits_total{limit=\"hello_bytes\"}").await, 1.0);
    let mut ok = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    assert!(matches!(ok.next(STEP).await.unwrap(), Update::Heartbeat { .. } | Update::Snapshot { .. }));
}
