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
    assert_eq!(sub.next_change(STEP).await.unwrap(), Update::Delta { from: r1 - 1, to: r1 });
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

/// Every patch kind and both deletes reach a subscriber as verified deltas
/// with the state the Admin API promises: `add_targets` moves a key out of
/// the flag's other target (the first target no longer wins silently), a
/// target left empty disappears, a rule's serve is replaced by its id, and
/// segment key lists change in place.
#[tokio::test]
async fn every_patch_kind_and_delete_arrives_with_the_promised_state() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut sub = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    sub.next(STEP).await.unwrap();
    let mut admin = relay.admin().await;
    let mut flag = bool_flag("p", true);
    flag.targets =
        vec![pb::Target { variation: 1, values: vec!["alice".into(), "bob".into()], ..Default::default() }];
    flag.rules = vec![pb::Rule {
        id: "r1".into(),
        clauses: vec![pb::Clause {
            attribute: "country".into(),
            op: pb::Operator::In as i32,
            values: vec![pb::Scalar { value: Some(pb::scalar::Value::StringValue("NZ".into())) }],
            ..Default::default()
        }],
        serve: Some(pb::Serve { kind: Some(pb::serve::Kind::Variation(0)) }),
    }];
    let r = put(&mut admin, "demo", flag).await.unwrap();
    sub.wait_revision(r, STEP).await.unwrap();
    use pb::flag_patch::Op;
    let patch = |ops: Vec<Op>| pb::PatchFlagRequest {
        environment: "demo".into(),
        key: "p".into(),
        expected_version: None,
        ops: ops.into_iter().map(|op| pb::FlagPatch { op: Some(op) }).collect(),
        comment: String::new(),
    };
    type Check<'a> = &'a dyn Fn(&pb::Flag) -> bool;
    let steps: Vec<(Vec<Op>, Check)> = vec![
        (vec![Op::SetOn(false)], &|f| !f.on),
        (vec![Op::SetOffVariation(0)], &|f| f.off_variation == 0),
        (vec![Op::SetFallthrough(pb::Serve { kind: Some(pb::serve::Kind::Variation(1)) })], &|f| {
            f.fallthrough.as_ref().and_then(|s| s.kind.clone()) == Some(pb::serve::Kind::Variation(1))
        }),
        // alice moves from variation 1's target to variation 0's.
        (
            vec![Op::AddTargets(pb::TargetKeys {
                variation: 0,
                keys: vec!["alice".into()],
                ..Default::default()
            })],
            &|f| {
                f.targets.len() == 2
                    && f.targets.iter().any(|t| t.variation == 0 && t.values == ["alice"])
                    && f.targets.iter().any(|t| t.variation == 1 && t.values == ["bob"])
            },
        ),
        // bob leaves: variation 1's target is empty, so it is gone.
        (
            vec![Op::RemoveTargets(pb::TargetKeys {
                variation: 1,
                keys: vec!["bob".into()],
                ..Default::default()
            })],
            &|f| f.targets.len() == 1 && f.targets[0].variation == 0,
        ),
        (
            vec![Op::SetRuleServe(pb::RuleServe {
                rule_id: "r1".into(),
                serve: Some(pb::Serve { kind: Some(pb::serve::Kind::Variation(1)) }),
            })],
            &|f| {
                f.rules[0].serve.as_ref().and_then(|s| s.kind.clone()) == Some(pb::serve::Kind::Variation(1))
            },
        ),
    ];
    for (ops, holds) in steps {
        let what = format!("{ops:?}");
        let r = admin.patch_flag(patch(ops)).await.unwrap().into_inner().result.unwrap().revision;
        assert_eq!(sub.next_change(STEP).await.unwrap(), Update::Delta { from: r - 1, to: r }, "{what}");
        assert!(holds(&sub.flags["p"]), "{what}: {:?}", sub.flags["p"]);
    }
    // Segment key lists, then the segment's delete (once nothing uses it).
    use pb::segment_patch::Op as S;
    let seg_patch = |op: S| pb::PatchSegmentRequest {
        environment: "demo".into(),
        key: "beta-testers".into(),
        expected_version: None,
        ops: vec![pb::SegmentPatch { op: Some(op) }],
        comment: String::new(),
    };
    let r = admin
        .patch_segment(seg_patch(S::AddIncluded(pb::ContextKeys {
            keys: vec!["zed".into()],
            ..Default::default()
        })))
        .await;
    let r = r.unwrap().into_inner().result.unwrap().revision;
    assert_eq!(sub.next_change(STEP).await.unwrap(), Update::Delta { from: r - 1, to: r });
    assert!(sub.segments["beta-testers"].included.contains(&"zed".to_owned()));
    let r = admin
        .patch_segment(seg_patch(S::AddExcluded(pb::ContextKeys {
            keys: vec!["zed".into()],
            ..Default::default()
        })))
        .await;
    let r = r.unwrap().into_inner().result.unwrap().revision;
    sub.wait_revision(r, STEP).await.unwrap();
    // As admin.proto says: add_excluded does not touch `included`.
    let s = &sub.segments["beta-testers"];
    assert!(s.excluded.contains(&"zed".to_owned()) && s.included.contains(&"zed".to_owned()), "{s:?}");
    let r = admin
        .delete_flag(pb::DeleteFlagRequest {
            environment: "demo".into(),
            key: "beta-banner".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap()
        .revision;
    sub.wait_revision(r, STEP).await.unwrap();
    let r = admin
        .delete_segment(pb::DeleteSegmentRequest {
            environment: "demo".into(),
            key: "beta-testers".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap()
        .revision;
    assert_eq!(sub.next_change(STEP).await.unwrap(), Update::Delta { from: r - 1, to: r });
    assert!(!sub.segments.contains_key("beta-testers") && !sub.flags.contains_key("beta-banner"));
}
