//! Admin writes reach subscribers as deltas whose checksums match a full
//! recomputation, and acks feed the propagation statistics.

use std::time::Duration;

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};
use flagstream_tests::subscriber::{Subscriber, Update};

/// Puts, patches and deletes each arrive as a delta; the checksum is
/// verified after every one; propagation counts the ack.
#[tokio::test]
async fn writes_arrive_as_verified_deltas_and_acks_count() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut sub = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    sub.next(STEP).await.unwrap();
    let mut admin = relay.admin().await;

    let r1 = put(&mut admin, "demo", bool_flag("launch", false)).await.unwrap();
    assert_eq!(sub.next(STEP).await.unwrap(), Update::Delta { from: r1 - 1, to: r1 });
    assert!(!sub.flags["launch"].on);

    let r2 = admin
        .patch_flag(pb::PatchFlagRequest {
            environment: "demo".into(),
            key: "launch".into(),
            expected_version: Some(1),
            ops: vec![pb::FlagPatch { op: Some(pb::flag_patch::Op::SetOn(true)) }],
            comment: "go".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap()
        .revision;
    sub.wait_revision(r2, STEP).await.unwrap();
    assert!(sub.flags["launch"].on);
    assert_eq!(sub.flags["launch"].version, 2);

    let r3 = admin
        .delete_segment(pb::DeleteSegmentRequest {
            environment: "demo".into(),
            key: "beta-testers".into(),
            ..Default::default()
        })
        .await;
    // The beta-banner flag uses the segment: deleting it must be refused.
    let err = r3.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("unknown segment \"beta-testers\""), "{}", err.message());

    let r4 = admin
        .delete_flag(pb::DeleteFlagRequest {
            environment: "demo".into(),
            key: "launch".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap()
        .revision;
    sub.wait_revision(r4, STEP).await.unwrap();
    assert!(!sub.flags.contains_key("launch"));

    // The ack of r4 shows up in propagation.
    let mut acked = 0;
    for _ in 0..100 {
        let p = admin
            .get_propagation(pb::GetPropagationRequest { environment: "demo".into(), revision: Some(r4) })
            .await
            .unwrap()
            .into_inner()
            .propagation
            .unwrap();
        acked = p.subscribers_acked;
        if acked == 1 {
            assert_eq!(p.subscribers_total, 1);
            assert!(p.latency_max_ms < 20_000);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(acked, 1, "the subscriber's ack of revision {r4} was not counted");
}

/// Audit entries record who changed what, newest first.
#[tokio::test]
async fn audit_log_records_writes() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    put(&mut admin, "demo", bool_flag("audited", true)).await.unwrap();
    put(&mut admin, "demo", bool_flag("audited", false)).await.unwrap();
    let entries = admin
        .list_audit(pb::ListAuditRequest {
            environment: "demo".into(),
            key: "audited".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert_eq!(entries.len(), 2);
    assert_eq!((entries[0].version_before, entries[0].version_after), (1, 2));
    assert_eq!(entries[0].action, pb::AuditAction::Update as i32);
    assert_eq!(entries[1].action, pb::AuditAction::Create as i32);
    assert_eq!((entries[0].actor.as_str(), entries[0].on_behalf_of.as_str()), ("bootstrap", "test-suite"));
}

/// Audit pages never skip entries, even inside one large batch.
#[tokio::test]
async fn audit_pages_cover_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    let ops = (0..5)
        .map(|i| pb::BatchOp {
            op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp {
                flag: Some(bool_flag(&format!("b{i}"), true)),
                expected_version: None,
            })),
        })
        .collect();
    admin
        .batch(pb::BatchRequest {
            environment: "demo".into(),
            ops,
            expected_revision: None,
            comment: "five".into(),
        })
        .await
        .unwrap();
    let mut keys = Vec::new();
    let mut token = String::new();
    loop {
        let page = admin
            .list_audit(pb::ListAuditRequest {
                environment: "demo".into(),
                limit: 2,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        keys.extend(page.entries.iter().map(|e| e.key.clone()));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let batch: Vec<_> = keys.iter().filter(|k| k.len() == 2 && k.starts_with('b')).cloned().collect();
    assert_eq!(batch.len(), 5, "{keys:?}");
}

/// A subscriber that resumes already at head counts as having the head
/// revision; one from another epoch does not until it acks.
#[tokio::test]
async fn resumed_subscribers_count_as_acked() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let key = relay.demo_key();
    let mut first = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    first.next(STEP).await.unwrap();
    let cursor = first.cursor();
    drop(first);
    let _resumed = Subscriber::connect(relay.channel().await, &key, Some(cursor.clone())).await.unwrap();
    let _foreign =
        Subscriber::connect(relay.channel().await, &key, Some(("other".into(), cursor.1))).await.unwrap();
    let mut admin = relay.admin().await;
    let mut p = pb::Propagation::default();
    for _ in 0..100 {
        p = admin
            .get_propagation(pb::GetPropagationRequest {
                environment: "demo".into(),
                revision: Some(cursor.1),
            })
            .await
            .unwrap()
            .into_inner()
            .propagation
            .unwrap();
        if p.subscribers_total == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!((p.subscribers_total, p.subscribers_acked), (2, 1), "{p:?}");
}
