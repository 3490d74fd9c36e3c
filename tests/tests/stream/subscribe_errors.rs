//! Subscribe protocol errors end the stream with a status that names the
//! problem (PROTOCOL.md §6), never a silent close: a second Hello, a Hello
//! whose `environment` is not the key's.

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::sync_client::SyncClient;
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

fn hello(key: &str, environment: &str) -> pb::SubscribeRequest {
    let h = pb::Hello { sdk_key: key.into(), environment: environment.into(), ..Default::default() };
    pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(h)) }
}

#[tokio::test]
async fn a_second_hello_ends_the_stream_with_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let key = relay.demo_key();
    let (tx, rx) = mpsc::channel(4);
    tx.send(hello(&key, "")).await.unwrap();
    let mut stream =
        SyncClient::new(relay.channel().await).subscribe(ReceiverStream::new(rx)).await.unwrap().into_inner();
    // The opening heartbeat and the snapshot arrive as usual.
    for _ in 0..2 {
        tokio::time::timeout(STEP, stream.message()).await.unwrap().unwrap().unwrap();
    }
    tx.send(hello(&key, "")).await.unwrap();
    let status = loop {
        match tokio::time::timeout(STEP, stream.message()).await.unwrap() {
            Ok(Some(_)) => continue, // a heartbeat may come first
            Ok(None) => panic!("the stream ended without a status"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("second Hello"), "{}", status.message());
}

#[tokio::test]
async fn a_hello_for_another_environment_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let key = relay.demo_key();
    let err = SyncClient::new(relay.channel().await)
        .subscribe(tokio_stream::iter([hello(&key, "production")]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("hello.environment"), "{}", err.message());
    assert_eq!(
        relay
            .metric("flagstream_subscribes_total{result=\"rejected\",reason=\"environment_mismatch\"}")
            .await,
        1.0
    );
    // The right name, or none, is accepted.
    let mut ok = SyncClient::new(relay.channel().await)
        .subscribe(tokio_stream::iter([hello(&key, "demo")]))
        .await
        .unwrap()
        .into_inner();
    assert!(tokio::time::timeout(STEP, ok.message()).await.unwrap().unwrap().is_some());
}
