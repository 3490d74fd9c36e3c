//! Replica relay streams have a cap per environment like SDK subscribers
//! (`max-replica-streams-per-env`): a replicate token is trusted, but a
//! replica with a bug that opens stream after stream is refused
//! `RESOURCE_EXHAUSTED` naming the option, counted in
//! `limit_hits{limit="max_replica_streams_per_env"}` and
//! `subscribes{reason="replica_streams_full"}`; a stream that ends frees
//! its place, and another environment's stream keeps its heartbeats.

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::sync_client::SyncClient;
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::{Subscriber, Update};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Opens a replica relay stream for `demo`; the sender keeps it open.
async fn replica_stream(
    relay: &Relay,
    token: &str,
) -> Result<(mpsc::Sender<pb::SubscribeRequest>, tonic::Streaming<pb::SubscribeResponse>), tonic::Status> {
    let hello = pb::Hello {
        sdk_key: token.into(),
        subscriber_kind: pb::SubscriberKind::Relay as i32,
        environment: "demo".into(),
        sdk_name: "a-replica".into(),
        ..Default::default()
    };
    let (tx, rx) = mpsc::channel(4);
    tx.send(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(hello)) }).await.unwrap();
    let mut stream =
        SyncClient::new(relay.channel().await).subscribe(ReceiverStream::new(rx)).await?.into_inner();
    // The refusal may come as the stream's status instead of the call's.
    stream.message().await?.expect("a first message");
    Ok((tx, stream))
}

#[tokio::test]
async fn replica_streams_are_capped_per_environment() {
    let dir = tempfile::tempdir().unwrap();
    let relay =
        Relay::start(dir.path(), &["--heartbeat", "200ms", "--max-replica-streams-per-env", "2"]).await;
    let other_key = relay.create_env("other").await;
    let mut other = Subscriber::connect(relay.channel().await, &other_key, None).await.unwrap();
    other.next_change(STEP).await.unwrap();
    let token = relay.replicate_token("follower").await;

    let first = replica_stream(&relay, &token).await.expect("the first replica stream");
    let _second = replica_stream(&relay, &token).await.expect("the second replica stream");
    let err = replica_stream(&relay, &token).await.expect_err("a third is over the cap");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("max-replica-streams-per-env"), "{}", err.message());
    assert_eq!(relay.metric("flagstream_limit_hits_total{limit=\"max_replica_streams_per_env\"}").await, 1.0);
    assert_eq!(
        relay
            .metric("flagstream_subscribes_total{result=\"rejected\",reason=\"replica_streams_full\"}")
            .await,
        1.0
    );
    // SDK subscribers of the same environment are not held by the cap.
    let mut sdk = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    sdk.next_change(STEP).await.unwrap();

    // A stream that ends frees its place.
    drop(first);
    flagstream_tests::cluster::eventually_async("the ended replica stream's place freed", || async {
        replica_stream(&relay, &token).await.is_ok()
    })
    .await;

    for _ in 0..3 {
        assert!(matches!(other.next(STEP).await.unwrap(), Update::Heartbeat { .. }), "heartbeats go on");
    }
}
