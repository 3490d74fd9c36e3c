//! SIGTERM finishes what is under way before the relay exits: a busy
//! write whose caller went away is committed whole before the last flush
//! (on sled, found after a restart), and on a shared database the usage
//! the relay's SDKs reported since its last turn reaches the other relays
//! (its last usage turn).

use std::time::Duration;

use flagstream::Context;
use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::cluster::{eventually, eventually_async};
use flagstream_tests::postgres::Postgres;
use flagstream_tests::relay::{Relay, bool_flag, put};

/// Flags in the write SIGTERM interrupts on PostgreSQL.
const FLAGS: usize = 200;

/// A batch putting `flags` flags `f-0`… (on) into `demo`, sent by a task
/// the test can abort (the caller going away).
async fn batch(
    relay: &Relay,
    flags: usize,
) -> tokio::task::JoinHandle<Result<tonic::Response<pb::BatchResponse>, tonic::Status>> {
    let mut admin = relay.admin().await;
    tokio::spawn(async move {
        let ops = (0..flags)
            .map(|i| pb::BatchOp {
                op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp {
                    flag: Some(bool_flag(&format!("f-{i}"), true)),
                    expected_version: None,
                })),
            })
            .collect();
        let req = pb::BatchRequest {
            environment: "demo".into(),
            ops,
            expected_revision: None,
            comment: String::new(),
        };
        admin.batch(req).await
    })
}

#[tokio::test]
async fn sigterm_during_a_busy_write_commits_it_before_the_relay_exits() {
    let dir = tempfile::tempdir().unwrap();
    let mut relay = Relay::start_on(dir.path(), "127.0.0.1:0", &["--drain-grace", "1s"]).await;
    let head = put(&mut relay.admin().await, "demo", bool_flag("first", true)).await.unwrap();
    // The largest batch there is: long enough to be under way at SIGTERM.
    let write = batch(&relay, 10_000).await;
    eventually_async("the write under way", || async {
        relay.metric_or_zero("flagstream_store_operations").await == 1.0
    })
    .await;
    write.abort();
    assert!(write.await.unwrap_err().is_cancelled(), "the caller went away before an answer");
    relay.sigterm();
    let status = relay.wait(STEP).await;
    assert!(status.success(), "{status:?}\n{}", relay.log());
    let log = relay.log();
    let (term, committed) = (log.find("SIGTERM: draining"), log.find("ops=10000"));
    assert!(
        term.is_some() && committed.is_some() && term < committed,
        "SIGTERM came while the write ran, and the write committed: {log}"
    );
    assert!(log.contains("shutdown: waiting for the store's operations in progress"), "{log}");

    // After a restart the write is there, whole: one revision, every flag.
    let listen = relay.grpc.to_string();
    let relay = Relay::start_on(dir.path(), &listen, &["--drain-grace", "1s"]).await;
    relay.wait_head("demo", head + 1).await;
    let sdk = relay.ready_sdk().await;
    for i in 0..10_000 {
        assert!(sdk.bool(&format!("f-{i}"), &Context::new("u"), false), "flag f-{i} after the restart");
    }
    assert!(sdk.close(Duration::from_secs(2)).await);
}

/// The day's evaluations of `key` that `relay` counts.
fn evaluations(relay: &Relay, key: &str) -> u64 {
    let out = relay.flagctl("demo", &["flag", "usage", key, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    v["flags"][0]["day"]["evaluations"]
        .as_array()
        .map_or(0, |a| a.iter().map(|e| e["evaluations"].as_u64().unwrap_or(0)).sum())
}

#[tokio::test]
async fn sigterm_during_a_write_and_before_a_usage_turn_leaves_nothing_half_done() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = pg.database("flags");
    // A passes usage on once an hour: after its first turn at start, only
    // its last turn, at shutdown, can pass on what its SDK reports.
    let mut a = Relay::start_on(
        &dir.path().join("a"),
        "127.0.0.1:0",
        &["--store", &url, "--usage-share-interval", "1h", "--drain-grace", "1s"],
    )
    .await;
    let mut b = Relay::start_on(
        &dir.path().join("b"),
        "127.0.0.1:0",
        &["--store", &url, "--demo", "false", "--usage-share-interval", "200ms"],
    )
    .await;
    b.admin_secret = Some(a.admin_token());
    let head = put(&mut a.admin().await, "demo", bool_flag("kill-switch", false)).await.unwrap();
    b.wait_head("demo", head).await;

    // Seven evaluations at A, reported when the client closes.
    let key = a.demo_key();
    let sdk = a.sdk_for(&key).build().unwrap();
    assert!(sdk.wait_ready(STEP).await.has_data());
    for i in 0..7 {
        assert!(!sdk.bool("kill-switch", &Context::new(format!("u{i}")), true));
    }
    assert!(sdk.close(STEP).await, "the client sent its last counts");
    eventually("A counting its SDK's 7 evaluations", || evaluations(&a, "kill-switch") == 7).await;
    assert_eq!(evaluations(&b, "kill-switch"), 0, "A has not passed them on yet");

    // A write of 200 flags that waits for the environment's row, held by
    // another session; its caller gives up while it waits.
    let held = pg.hold("flags", "SELECT 1 FROM flagstream_envs WHERE name = 'demo' FOR UPDATE");
    let write = batch(&a, FLAGS).await;
    eventually("A's write waiting for the row", || pg.waiting_for_locks("flagstream-relay") >= 1).await;
    assert_eq!(a.metric("flagstream_store_operations").await, 1.0, "the write is under way");
    write.abort();
    assert!(write.await.unwrap_err().is_cancelled(), "the caller went away before an answer");

    // SIGTERM while the write waits: A drains, then waits for the write.
    a.sigterm();
    eventually("A waiting for its write at shutdown", || {
        a.log().contains("shutdown: waiting for the store's operations in progress")
    })
    .await;
    drop(held);
    let status = a.wait(STEP).await;
    assert!(status.success(), "A exits cleanly: {status:?}\n{}", a.log());
    let log = a.log();
    assert!(log.contains("write committed"), "{log}");
    assert!(!log.contains("work still running at the deadline"), "{log}");

    // Nothing half-done: the whole write is there (one revision, every
    // flag), and A's last usage turn reached B.
    b.wait_head("demo", head + 1).await;
    let at_b = b.sdk_for(&key).build().unwrap();
    assert!(at_b.wait_ready(STEP).await.has_data());
    for i in 0..FLAGS {
        assert!(at_b.bool(&format!("f-{i}"), &Context::new("u"), false), "flag f-{i} at B");
    }
    eventually("B counting A's 7 evaluations", || evaluations(&b, "kill-switch") >= 7).await;
    assert_eq!(evaluations(&b, "kill-switch"), 7, "counted once");
    assert!(!b.log().contains("usage not passed"), "{}", b.log());
    assert!(at_b.close(Duration::from_secs(2)).await);
}
