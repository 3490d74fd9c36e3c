//! One admin write can be followed in the relay's log from the call to the
//! commit to the streams that delivered it: the write runs in an
//! `admin_write` span (environment, principal, ops, and the revision once
//! committed, logged `write committed`), and each Subscribe stream in a
//! `subscribe` span (environment, subscriber, SDK) that logs `delivered`
//! with the revision it handed over.

use flagstream_tests::STEP;
use flagstream_tests::cluster::eventually;
use flagstream_tests::relay::{Relay, bool_flag, put};
use flagstream_tests::subscriber::Subscriber;

#[tokio::test]
async fn a_write_is_followed_from_the_call_to_the_streams() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut sub = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    sub.next_change(STEP).await.unwrap();
    let mut admin = relay.admin().await;
    let revision = put(&mut admin, "demo", bool_flag("traced", true)).await.unwrap();
    sub.wait_revision(revision, STEP).await.unwrap();

    let committed = format!("revision={revision}");
    eventually("the write's commit in its span", || {
        relay.log().lines().any(|l| {
            l.contains("admin_write{")
                && l.contains("env=demo")
                && l.contains(&committed)
                && l.contains("write committed")
        })
    })
    .await;
    eventually("the stream's delivery of that revision in its span", || {
        relay.log().lines().any(|l| {
            l.contains("subscribe{")
                && l.contains("env=demo")
                && l.contains("delivered")
                && l.contains(&committed)
        })
    })
    .await;
    for l in relay
        .log()
        .lines()
        .filter(|l| l.contains(&committed) && (l.contains("admin_write{") || l.contains("delivered")))
    {
        eprintln!("{l}");
    }
}
