//! A relay with a memory budget refuses a write that would take it past
//! the budget, instead of growing until it is killed: RESOURCE_EXHAUSTED
//! naming `memory-budget` and the figures, counted in
//! `limit_hits{limit="memory_budget"}` and `admin_writes{result="quota"}`;
//! nothing of the refused write is stored or served, the relay keeps
//! serving, and a write that shrinks the environment still goes through.
//! The budget is set by a configuration reload (SIGHUP), a little above
//! the relay's own resident memory.

use std::process::Command;

use flagstream::Context;
use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::cluster::eventually;
use flagstream_tests::relay::{Relay, bool_flag};
use tonic::Code;

/// Room above the relay's resident memory the budget leaves: with three
/// copies of the environment and each batch's processing (~34 MB for a
/// 4 MiB batch of 100 flags) counted, writes stop after a few batches.
const ROOM: u64 = 96 << 20;

/// A batch of 100 flags with 40 KiB descriptions (~4 MiB) named from `start`.
fn batch(start: usize) -> pb::BatchRequest {
    let ops = (start..start + 100)
        .map(|i| {
            let mut f = bool_flag(&format!("big-{i}"), true);
            f.description = "d".repeat(40 << 10);
            pb::BatchOp {
                op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp { flag: Some(f), expected_version: None })),
            }
        })
        .collect();
    pb::BatchRequest { environment: "demo".into(), ops, expected_revision: None, comment: String::new() }
}

async fn head(relay: &Relay) -> (u64, u64) {
    let s = relay.admin().await.status(pb::StatusRequest {}).await.unwrap().into_inner();
    let e = s.environments.into_iter().find(|e| e.name == "demo").expect("demo");
    (e.head_revision, e.checksum)
}

#[tokio::test]
async fn a_write_past_the_memory_budget_is_refused_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.toml");
    std::fs::write(&path, "").unwrap();
    let relay = Relay::start(dir.path(), &["--config", path.to_str().unwrap()]).await;
    let sdk = relay.ready_sdk().await;

    let budget = relay.rss_kib().0 * 1024 + ROOM;
    std::fs::write(&path, format!("memory-budget = {budget}\n")).unwrap();
    let hup = Command::new("kill").args(["-HUP", &relay.pid().to_string()]).status().unwrap();
    assert!(hup.success());
    eventually("the reload in the log", || relay.log().contains("SIGHUP: configuration reloaded")).await;

    // ~4 MiB at a time until the budget refuses one (the size quota,
    // 64 MiB, would refuse only at the 16th).
    let mut admin = relay.admin().await;
    let mut accepted = 0;
    let (refusal, before_refused) = loop {
        assert!(
            accepted < 15,
            "{accepted} batches (~{} MiB) accepted within a {} MiB budget",
            accepted * 4,
            budget >> 20
        );
        let before = head(&relay).await;
        match admin.batch(batch(accepted * 100)).await {
            Ok(_) => accepted += 1,
            Err(e) => break (e, before),
        }
    };
    assert_eq!(refusal.code(), Code::ResourceExhausted, "{refusal:?}");
    let msg = refusal.message();
    assert!(msg.contains("memory-budget") && msg.contains(&budget.to_string()), "{msg}");
    assert!(msg.contains("nothing was written"), "{msg}");
    assert_eq!(relay.metric("flagstream_limit_hits_total{limit=\"memory_budget\"}").await, 1.0);
    assert!(relay.metric("flagstream_admin_writes_total{result=\"quota\"}").await >= 1.0);
    assert!(relay.log().contains("write refused by the memory budget"), "logged with its cause");

    // Nothing of the refused batch is stored or served; the SDK holds the
    // head the relay reports.
    let mut changes = sdk.changes();
    let (revision, checksum) = head(&relay).await;
    assert_eq!((revision, checksum), before_refused, "the head is what it was before the refused write");
    let ctx = Context::new("u");
    // The SDK's change events up to the relay's head (subscribed before
    // the head was read, so none is missed).
    let reached = async {
        while sdk.snapshot().revision() < revision {
            changes.recv().await.expect("the client's change events");
        }
    };
    tokio::time::timeout(STEP, reached).await.expect("the SDK reaches the relay's head");
    assert_eq!(sdk.snapshot().revision(), revision);
    for i in 0..accepted * 100 {
        assert!(sdk.bool(&format!("big-{i}"), &ctx, false), "big-{i}: accepted batches are served");
    }
    for i in accepted * 100..(accepted + 1) * 100 {
        let refused = sdk.bool_detail(&format!("big-{i}"), &ctx, false);
        assert!(refused.error.is_some(), "big-{i}: nothing of the refused batch is served");
    }
    assert_eq!(head(&relay).await, (revision, checksum));

    // Shrinking always goes through, and the relay keeps serving.
    let delete = pb::BatchRequest {
        environment: "demo".into(),
        ops: (0..100)
            .map(|i| pb::BatchOp {
                op: Some(pb::batch_op::Op::DeleteFlag(pb::DeleteFlagOp {
                    key: format!("big-{i}"),
                    expected_version: None,
                })),
            })
            .collect(),
        expected_revision: None,
        comment: String::new(),
    };
    admin.batch(delete).await.expect("a write that shrinks the environment is never refused by the budget");
    assert_eq!(head(&relay).await.0, revision + 1);
}
