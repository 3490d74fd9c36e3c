//! A restarted relay keeps its epoch, revision and flags, so a subscriber
//! resumes across the restart with a delta instead of a full snapshot.

use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};
use flagstream_tests::subscriber::{Subscriber, Update};

/// Epoch, revision and flags survive SIGTERM + start; resume is a delta.
#[tokio::test]
async fn restart_keeps_cursor_valid() {
    let dir = tempfile::tempdir().unwrap();
    let mut relay = Relay::start(dir.path(), &[]).await;
    let key = relay.demo_key();
    let mut admin = relay.admin().await;
    put(&mut admin, "demo", bool_flag("before-restart", true)).await.unwrap();
    let mut sub = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    sub.next(STEP).await.unwrap();
    let (epoch, revision) = sub.cursor();
    relay.sigterm();
    assert!(relay.wait(STEP).await.success());

    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    let head = put(&mut admin, "demo", bool_flag("after-restart", true)).await.unwrap();
    assert_eq!(head, revision + 1, "revision continues");
    sub.reconnect(relay.channel().await, &key).await.unwrap();
    assert_eq!(sub.next_change(STEP).await.unwrap(), Update::Delta { from: revision, to: head });
    assert_eq!(sub.epoch, epoch, "epoch kept");
    assert!(sub.flags.contains_key("before-restart") && sub.flags.contains_key("after-restart"));
}
