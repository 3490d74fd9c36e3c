//! A client's cursor is a claim, never evidence: a raw client holding only
//! the SDK key that presents a cursor far ahead of the head, again and
//! again, at both relays of a shared PostgreSQL database, is held and
//! then asked to reconnect (counted as `cursor_ahead`), and nothing shared
//! changes: the epoch, the history, and every other SDK's stream (no
//! resync, the next write arrives as a delta). Before issue 20 each such
//! cursor ended the epoch, dropped the history and sent every SDK a full
//! snapshot.

use std::time::Duration;

use flagstream::{Client, Context};
use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::cluster::eventually;
use flagstream_tests::postgres::Postgres;
use flagstream_tests::relay::{Relay, bool_flag, put};
use flagstream_tests::subscriber::{Subscriber, Update};

fn epoch_and_head(s: &pb::StatusResponse) -> (String, u64) {
    let e = s.environments.iter().find(|e| e.name == "demo").expect("demo environment");
    (e.epoch.clone(), e.head_revision)
}

#[tokio::test]
async fn a_cursor_far_ahead_never_starts_an_epoch() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = pg.database("flags");
    // A short hold, so each hostile stream is answered within the test.
    let args = ["--store", &url, "--ahead-hold", "500ms"];
    let a = Relay::start(&dir.path().join("a"), &args).await;
    let mut b = Relay::start(&dir.path().join("b"), &[&args[..], &["--demo", "false"]].concat()).await;
    b.admin_secret = Some(a.admin_token());
    let key = a.demo_key();
    let sdk = |url: String| {
        Client::builder()
            .endpoints([url])
            .sdk_key(key.clone())
            .backoff_base(Duration::from_millis(100))
            .build()
    };
    let (on_a, on_b) = (sdk(a.url()).unwrap(), sdk(b.url()).unwrap());
    on_a.wait_ready(STEP).await;
    on_b.wait_ready(STEP).await;
    let r1 = put(&mut a.admin().await, "demo", bool_flag("before", true)).await.unwrap();
    b.wait_head("demo", r1).await;
    let (epoch, head) = epoch_and_head(&a.status().await);
    let history = pg.sql("flags", "SELECT count(*) FROM flagstream_history");

    for i in 0..6u64 {
        let relay = if i % 2 == 0 { &a } else { &b };
        let cursor = (epoch.clone(), u64::MAX - i);
        let mut hostile = Subscriber::connect(relay.channel().await, &key, Some(cursor)).await.unwrap();
        // Held with heartbeats, then asked to reconnect: never data.
        match hostile.next_change(STEP).await {
            Ok(Update::Reconnect { reason, .. }) => assert_eq!(reason, pb::ReconnectReason::Rebalance),
            other => panic!("a cursor ahead of the head got {other:?}"),
        }
    }
    // A write at each relay reaches the other through its change feed: a
    // catch-up of "demo" ran after every hostile cursor was noted.
    let r2 = put(&mut a.admin().await, "demo", bool_flag("after-a", true)).await.unwrap();
    let r3 = put(&mut b.admin().await, "demo", bool_flag("after-b", true)).await.unwrap();
    assert_eq!((r2, r3), (head + 1, head + 2), "one gap-free sequence in the same history");
    a.wait_head("demo", r3).await;
    b.wait_head("demo", r3).await;

    for (relay, name) in [(&a, "a"), (&b, "b")] {
        let (e, h) = epoch_and_head(&relay.status().await);
        assert_eq!(
            (e.as_str(), h),
            (epoch.as_str(), r3),
            "relay {name}: the epoch survived\n{}",
            relay.log()
        );
        assert_eq!(relay.metric("flagstream_limit_hits_total{limit=\"history_lost\"}").await, 0.0);
        assert_eq!(
            relay.metric("flagstream_limit_hits_total{limit=\"cursor_ahead\"}").await,
            3.0,
            "relay {name}"
        );
        assert!(!relay.log().contains("history in the database was lost"), "relay {name}:\n{}", relay.log());
    }
    let after: u64 = pg.sql("flags", "SELECT count(*) FROM flagstream_history").trim().parse().unwrap();
    assert!(after >= history.trim().parse::<u64>().unwrap() + 2, "the history was kept and extended");
    for (c, name) in [(&on_a, "a"), (&on_b, "b")] {
        eventually("both writes", || {
            c.bool("after-a", &Context::new("u"), false) && c.bool("after-b", &Context::new("u"), false)
        })
        .await;
        let s = c.stats();
        assert_eq!(s.snapshots_applied, 1, "SDK on {name}: no resync, the writes came as deltas: {s:?}");
        assert_eq!(s.reconnects, 0, "SDK on {name}: its stream was never disturbed: {s:?}");
    }
}
