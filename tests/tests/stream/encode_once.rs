//! Each revision is encoded once, however many subscribers receive it:
//! 1,000 subscribers at the same cursor cost one snapshot encoding and one
//! delta encoding per revision.

use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};
use flagstream_tests::subscriber::{Subscriber, Update};

/// 1,000 subscribers over 8 connections: encodes stay at one per revision.
#[tokio::test]
async fn thousand_subscribers_share_one_encoding() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--max-concurrent-streams", "200"]).await;
    let key = relay.demo_key();
    let channels: Vec<_> = futures_join(8, &relay).await;
    let mut subs = Vec::new();
    for i in 0..1_000 {
        subs.push(Subscriber::connect(channels[i % channels.len()].clone(), &key, None).await.unwrap());
    }
    for s in &mut subs {
        assert!(matches!(s.next(STEP).await.unwrap(), Update::Snapshot { .. }));
    }
    assert_eq!(relay.metric("flagstream_encodes_total{kind=\"snapshot\"}").await, 1.0);
    assert_eq!(
        relay.metric("flagstream_encodes_total{kind=\"snapshot_chunk\"}").await,
        1.0,
        "a one-chunk snapshot is assembled once and kept for every subscriber"
    );

    let mut admin = relay.admin().await;
    for round in 0..3 {
        let head = put(&mut admin, "demo", bool_flag("shared", round % 2 == 0)).await.unwrap();
        for s in &mut subs {
            s.wait_revision(head, STEP).await.unwrap();
        }
    }
    assert_eq!(
        relay.metric("flagstream_encodes_total{kind=\"delta\"}").await,
        3.0,
        "one delta encoding per revision"
    );
    assert_eq!(relay.metric("flagstream_encodes_total{kind=\"snapshot\"}").await, 1.0);
    assert!(relay.metric("flagstream_sent_messages_total{kind=\"delta\"}").await >= 3_000.0);
}

async fn futures_join(n: usize, relay: &Relay) -> Vec<tonic::transport::Channel> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(relay.channel().await);
    }
    v
}
