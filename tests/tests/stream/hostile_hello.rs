//! What one stream can pin in a relay does not depend on what its client
//! sends: a Hello is at most 4 KiB (read before authentication; a larger
//! one is refused `OUT_OF_RANGE` naming the limit, and counted), and the
//! relay keeps at most 64 bytes each of `sdk_name` and `sdk_version`.
//! Other subscribers keep their heartbeats.

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::sync_client::SyncClient;
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::{HeartbeatWatch, Subscriber};

fn hello(h: pb::Hello) -> pb::SubscribeRequest {
    pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(h)) }
}

#[tokio::test]
async fn a_hello_is_bounded_and_what_a_stream_keeps_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--heartbeat", "200ms"]).await;
    let mut other = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    other.next_change(STEP).await.unwrap();
    let watch = HeartbeatWatch::start(other);

    // Just over the limit: refused before anything is looked up.
    let big = pb::Hello { sdk_key: relay.demo_key(), sdk_version: "v".repeat(4_100), ..Default::default() };
    let err = match SyncClient::new(relay.channel().await).subscribe(tokio_stream::iter([hello(big)])).await {
        Ok(r) => r.into_inner().message().await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(err.code(), tonic::Code::OutOfRange, "{err:?}");
    assert!(err.message().contains("exceeds the limit of 4096 bytes"), "{}", err.message());
    assert!(err.message().contains("Hello size limit"), "{}", err.message());
    assert_eq!(relay.metric("flagstream_limit_hits_total{limit=\"hello_bytes\"}").await, 1.0);

    // Within the limit but with long names: admitted, names cut. A replica
    // relay's version is what Status shows, so subscribe as one.
    let token = relay.replicate_token("follower").await;
    let long = pb::Hello {
        sdk_key: token,
        subscriber_kind: pb::SubscriberKind::Relay as i32,
        environment: "demo".into(),
        sdk_name: "n".repeat(1_500),
        sdk_version: "é".repeat(1_000),
        ..Default::default()
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(hello(long)).await.unwrap();
    let mut stream = SyncClient::new(relay.channel().await)
        .subscribe(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("a Hello under 4 KiB is admitted")
        .into_inner();
    stream.message().await.unwrap().expect("the opening heartbeat");
    let status = relay.status().await;
    let demo = status.environments.iter().find(|e| e.name == "demo").unwrap();
    let version = &demo.replicas.first().expect("the follower is listed").version;
    assert_eq!(version, &format!("{}/{}", "n".repeat(64), "é".repeat(32)), "cut to 64 bytes each");

    // The other stream's heartbeats (every 200 ms) went on throughout:
    // never ten intervals without one, well inside the SDK's 5 s stall
    // detection.
    let (_, gap, heartbeats) = watch.stop().await;
    assert!(heartbeats >= 1 && gap < std::time::Duration::from_secs(2), "largest gap {gap:?}");
}
