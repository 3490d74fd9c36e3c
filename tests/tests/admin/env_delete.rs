//! Deleting an environment ends its subscribers' streams with NOT_FOUND
//! (never a silent hang on a stream that will not change again), counts
//! the ends, and its SDK key stops working.

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::cluster::eventually_async;
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::{Subscriber, Update};

#[tokio::test]
async fn deleting_an_environment_ends_its_streams_with_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let key = relay.create_env("doomed").await;
    let mut subs = Vec::new();
    for _ in 0..3 {
        let mut s = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
        // Wait until each one is current and idle.
        while !matches!(s.next(STEP).await.unwrap(), Update::Snapshot { .. }) {}
        subs.push(s);
    }
    relay
        .admin()
        .await
        .delete_environment(pb::DeleteEnvironmentRequest { name: "doomed".into(), expected_revision: None })
        .await
        .unwrap();
    for mut s in subs {
        let err = loop {
            match s.next(STEP).await {
                Ok(Update::Heartbeat { .. }) => continue,
                Ok(other) => panic!("expected the stream to end, got {other:?}"),
                Err(e) => break e,
            }
        };
        assert!(err.contains("entity was not found") && err.contains("was deleted"), "{err}");
    }
    // Counted when the relay drops each stream, which may be just after
    // its client read the end.
    eventually_async("three stream ends counted as environment_deleted", || async {
        relay.metric_or_zero("flagstream_stream_ends_total{reason=\"environment_deleted\"}").await == 3.0
    })
    .await;
    let err = Subscriber::connect(relay.channel().await, &key, None).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
}
