//! A subscriber with an empty cursor gets a full snapshot, chunked under the
//! configured size, applied only when complete, with a matching checksum.

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag};
use flagstream_tests::subscriber::{Subscriber, Update};

/// The demo environment arrives whole on an empty cursor.
#[tokio::test]
async fn empty_cursor_gets_the_demo_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut sub = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    let update = sub.next(STEP).await.unwrap();
    assert!(matches!(update, Update::Snapshot { revision: 1, chunks: 1 }), "{update:?}");
    assert!(sub.flags.contains_key("new-checkout"));
    assert!(sub.segments.contains_key("beta-testers"));
    assert!(!sub.epoch.is_empty());
}

/// 10,000 flags with 256 KiB chunks: many chunks, every flag present once.
#[tokio::test]
async fn ten_thousand_flags_arrive_whole_in_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--chunk-bytes", "262144", "--demo", "false"]).await;
    let key = relay.create_env("big").await;
    let mut admin = relay.admin().await;
    let ops: Vec<pb::BatchOp> = (0..10_000)
        .map(|i| {
            let mut f = bool_flag(&format!("flag-{i:05}"), i % 2 == 0);
            f.description = "x".repeat(64);
            pb::BatchOp {
                op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp {
                    flag: Some(f),
                    expected_version: Some(0),
                })),
            }
        })
        .collect();
    let r = admin
        .batch(pb::BatchRequest {
            environment: "big".into(),
            ops,
            expected_revision: None,
            comment: "bulk".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.result.unwrap().revision, 1, "one batch is one revision");
    let mut sub = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    match sub.next(STEP).await.unwrap() {
        Update::Snapshot { revision: 1, chunks } => assert!(chunks > 3, "only {chunks} chunks"),
        other => panic!("expected a snapshot, got {other:?}"),
    }
    assert_eq!(sub.flags.len(), 10_000);
    assert!(sub.flags["flag-00000"].on && !sub.flags["flag-00001"].on);
}
