//! Cursor rules: a current cursor resumes with one delta; a foreign epoch or
//! a cursor older than the change log gets a full snapshot; lag coalesces
//! into one delta.

use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};
use flagstream_tests::subscriber::{Subscriber, Update};

/// Resuming at revision r after three writes gets one delta r → r+3.
#[tokio::test]
async fn resume_gets_one_coalesced_delta() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let key = relay.demo_key();
    let mut sub = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    sub.next(STEP).await.unwrap();
    let cursor = sub.cursor();
    let mut admin = relay.admin().await;
    let mut head = 0;
    for i in 0..3 {
        head = put(&mut admin, "demo", bool_flag(&format!("extra-{i}"), true)).await.unwrap();
    }
    // A new stream from the old cursor, keeping the applied state (the old
    // stream's unread messages are dropped with it).
    sub.reconnect(relay.channel().await, &key).await.unwrap();
    assert_eq!(sub.next_change(STEP).await.unwrap(), Update::Delta { from: cursor.1, to: head });
    assert!(sub.flags.contains_key("extra-2"));
}

/// A cursor from another epoch gets a snapshot, not a delta.
#[tokio::test]
async fn foreign_epoch_gets_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut sub =
        Subscriber::connect(relay.channel().await, &relay.demo_key(), Some(("someone-else".into(), 1)))
            .await
            .unwrap();
    assert!(matches!(sub.next(STEP).await.unwrap(), Update::Snapshot { .. }));
}

/// A cursor older than the retained change log gets a snapshot.
#[tokio::test]
async fn too_old_cursor_gets_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--changelog-revisions", "2"]).await;
    let key = relay.demo_key();
    let mut sub = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    sub.next(STEP).await.unwrap();
    let cursor = sub.cursor();
    drop(sub);
    let mut admin = relay.admin().await;
    for i in 0..5 {
        put(&mut admin, "demo", bool_flag(&format!("churn-{i}"), true)).await.unwrap();
    }
    let mut sub = Subscriber::connect(relay.channel().await, &key, Some(cursor)).await.unwrap();
    assert!(matches!(sub.next(STEP).await.unwrap(), Update::Snapshot { revision: 6, .. }));
    assert!(relay.metric("flagstream_resyncs_total{cause=\"too_old\"}").await >= 1.0);
}

/// Every stream opens with a heartbeat carrying the head revision (so the
/// client's first-message deadline holds and its watchdog is sized before
/// any data); a subscriber already at head then gets nothing else until a
/// heartbeat or a change.
#[tokio::test]
async fn streams_open_with_a_heartbeat() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--heartbeat", "300ms"]).await;
    let key = relay.demo_key();
    let mut sub = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    assert!(matches!(sub.next(STEP).await.unwrap(), Update::Snapshot { revision: 1, .. }));
    assert_eq!(sub.opening_heartbeat, Some(1));
    let cursor = sub.cursor();
    let mut again = Subscriber::connect(relay.channel().await, &key, Some(cursor.clone())).await.unwrap();
    assert_eq!(again.next(STEP).await.unwrap(), Update::Heartbeat { head: cursor.1 });
    assert_eq!(again.opening_heartbeat, Some(cursor.1));
    assert_eq!(again.history.len(), 2, "opening heartbeat, then a periodic one: {:?}", again.history);
}
