//! A replica's propagation report is input like any other: a replica relay
//! (anything holding a replicate-scope token) may report counts up to
//! `u64::MAX`. They add up saturating, so the relay, built here in debug
//! mode where an integer overflow panics, keeps accepting reports and
//! answers propagation queries with the saturated counts.

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::sync_client::SyncClient;
use flagstream_tests::cluster::{eventually_async, replicate_token};
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::Subscriber;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Opens a replica relay's stream for `demo`; returns its request sender
/// (kept open: dropping it ends the stream) and the response stream.
async fn replica_stream(
    relay: &Relay,
    token: &str,
) -> (mpsc::Sender<pb::SubscribeRequest>, tonic::Streaming<pb::SubscribeResponse>) {
    let (tx, rx) = mpsc::channel(4);
    let hello = pb::Hello {
        sdk_key: token.into(),
        environment: "demo".into(),
        subscriber_kind: pb::SubscriberKind::Relay as i32,
        sdk_name: "flagstream-tests".into(),
        sdk_version: "0".into(),
        ..Default::default()
    };
    tx.send(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(hello)) }).await.unwrap();
    let mut stream = SyncClient::new(relay.channel().await)
        .max_decoding_message_size(16 << 20)
        .subscribe(ReceiverStream::new(rx))
        .await
        .expect("a replicate token opens a replica stream")
        .into_inner();
    // The opening heartbeat: admitted.
    stream.message().await.expect("a first message").expect("the stream stays open");
    (tx, stream)
}

#[tokio::test]
async fn reports_with_counts_up_to_u64_max_saturate() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let token = replicate_token(&relay, dir.path(), "replica").await;
    let token = std::fs::read_to_string(token).unwrap().trim().to_owned();
    let status = relay.status().await;
    let env = status.environments.iter().find(|e| e.name == "demo").expect("demo");
    let (epoch, head) = (env.epoch.clone(), env.head_revision);
    // One SDK of the relay's own, and two replicas each reporting u64::MAX.
    let _sdk = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    let huge = pb::PropagationReport {
        epoch: epoch.clone(),
        subscribers: u64::MAX,
        revisions: vec![pb::RevisionPropagation {
            revision: head,
            acked: u64::MAX,
            latency: vec![
                pb::LatencyBucket { index: 3, count: u64::MAX },
                pb::LatencyBucket { index: 3, count: u64::MAX },
            ],
            max_latency_ms: 9,
        }],
        nodes: vec![],
        nodes_omitted: 0,
    };
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let (tx, stream) = replica_stream(&relay, &token).await;
        tx.send(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Report(huge.clone())) })
            .await
            .unwrap();
        replicas.push((tx, stream));
    }
    eventually_async("the propagation counts saturate", || async {
        let p = relay
            .admin()
            .await
            .get_propagation(pb::GetPropagationRequest { environment: "demo".into(), revision: Some(head) })
            .await
            .expect("propagation answered")
            .into_inner()
            .propagation
            .expect("propagation");
        p.subscribers_total == u64::MAX && p.subscribers_acked == u64::MAX && p.relays_reporting == 2
    })
    .await;
    let log = relay.log();
    assert!(!log.contains("panicked"), "{log}");
}
