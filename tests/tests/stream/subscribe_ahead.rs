//! A subscriber whose cursor is ahead of the relay's head (same epoch: it
//! came from a fresher relay) never receives older data: it is held with
//! heartbeats until the head reaches its cursor and then continues with
//! deltas, or, if that takes longer than `--ahead-hold`, is asked to
//! reconnect elsewhere (PROTOCOL.md §2.2).

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::cluster::eventually_async;
use flagstream_tests::copy_dir;
use flagstream_tests::relay::{Admin, Relay, bool_flag, put};
use flagstream_tests::subscriber::{Subscriber, Update};

/// The same writes give the same items, versions and revisions.
async fn write(admin: &mut Admin, i: usize) -> u64 {
    put(admin, "demo", bool_flag(&format!("extra-{i}"), true)).await.unwrap()
}

#[tokio::test]
async fn a_cursor_ahead_is_held_with_heartbeats_then_gets_deltas() {
    let root = tempfile::tempdir().unwrap();
    let (live, backup) = (root.path().join("live"), root.path().join("backup"));
    std::fs::create_dir_all(&live).unwrap();
    let mut relay = Relay::start(&live, &["--heartbeat", "200ms"]).await;
    let key = relay.demo_key();
    // A backup of the store at head h.
    relay.sigterm();
    relay.wait(STEP).await;
    copy_dir(&live, &backup);
    let mut relay = Relay::start(&live, &["--heartbeat", "200ms"]).await;
    let mut sub = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    let Update::Snapshot { revision: h, .. } = sub.next(STEP).await.unwrap() else { panic!("no snapshot") };
    let mut admin = relay.admin().await;
    write(&mut admin, 1).await;
    let ahead = write(&mut admin, 2).await;
    sub.wait_revision(ahead, STEP).await.unwrap();

    // The relay comes back from the backup: same epoch, head h < cursor.
    relay.sigterm();
    relay.wait(STEP).await;
    std::fs::remove_dir_all(&live).unwrap();
    copy_dir(&backup, &live);
    let relay = Relay::start(&live, &["--heartbeat", "200ms"]).await;
    sub.reconnect(relay.channel().await, &key).await.unwrap();
    let mut admin = relay.admin().await;
    // Held: heartbeats only, while the head catches up to the cursor.
    for _ in 0..3 {
        assert_eq!(sub.next(STEP).await.unwrap(), Update::Heartbeat { head: h });
    }
    assert_eq!(write(&mut admin, 1).await, h + 1);
    assert_eq!(write(&mut admin, 2).await, ahead);
    // The head reached the held cursor: the subscriber counts as having
    // that revision (it receives nothing, so it sends no ack).
    let mut watch = admin
        .watch_propagation(pb::WatchPropagationRequest {
            environment: "demo".into(),
            revision: Some(ahead),
            min_interval_ms: 100,
        })
        .await
        .unwrap()
        .into_inner();
    loop {
        let p =
            tokio::time::timeout(STEP, watch.message()).await.unwrap().unwrap().unwrap().propagation.unwrap();
        if p.subscribers_total == 1 && p.subscribers_acked == 1 {
            break;
        }
    }
    let next = write(&mut admin, 3).await;
    // Then the first thing besides heartbeats is the delta from its cursor.
    loop {
        match sub.next(STEP).await.unwrap() {
            Update::Heartbeat { head } => assert!(head <= next),
            other => {
                assert_eq!(other, Update::Delta { from: ahead, to: next });
                break;
            }
        }
    }
    assert!(sub.flags.contains_key("extra-3"));
    // The restored relay never sent it (or anyone) a snapshot.
    assert_eq!(relay.metric("flagstream_sent_messages_total{kind=\"snapshot_chunk\"}").await, 0.0);
}

#[tokio::test]
async fn a_cursor_still_ahead_after_the_hold_is_sent_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--heartbeat", "200ms", "--ahead-hold", "1s"]).await;
    let mut admin = relay.admin().await;
    let status = admin.status(pb::StatusRequest {}).await.unwrap().into_inner();
    let demo = status.environments.iter().find(|e| e.name == "demo").unwrap();
    let cursor = (demo.epoch.clone(), demo.head_revision + 5);
    let mut sub = Subscriber::connect(relay.channel().await, &relay.demo_key(), Some(cursor)).await.unwrap();
    loop {
        match sub.next(STEP).await.unwrap() {
            Update::Heartbeat { head } => assert_eq!(head, demo.head_revision),
            Update::Reconnect { reason, delay_ms } => {
                assert_eq!(reason, pb::ReconnectReason::Rebalance);
                assert!(delay_ms < 1_000);
                break;
            }
            other => panic!("a cursor ahead of the head was sent {other:?}"),
        }
    }
    assert_eq!(sub.next(STEP).await, Err("stream ended".to_owned()));
    assert_eq!(relay.metric("flagstream_limit_hits_total{limit=\"cursor_ahead\"}").await, 1.0);
    // Counted when the relay drops the stream, which may be just after the
    // client read its end.
    eventually_async("the stream's end counted as cursor_ahead", || async {
        relay.metric_or_zero("flagstream_stream_ends_total{reason=\"cursor_ahead\"}").await == 1.0
    })
    .await;
}
