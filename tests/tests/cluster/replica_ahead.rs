//! An SDK whose cursor is ahead of a lagging replica (same epoch: it came
//! from a fresher relay) never gets older data there: the replica holds it
//! with heartbeats while it catches up, then sends deltas.

use std::time::Duration;

use flagstream::{Client, Context};
use flagstream_tests::STEP;
use flagstream_tests::cluster::{eventually, eventually_async, replicate_token};
use flagstream_tests::proxy::Proxy;
use flagstream_tests::relay::{Relay, bool_flag, put};

#[tokio::test]
async fn a_cursor_ahead_of_a_lagging_replica_is_held_until_it_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut primary = Relay::start(&dir.path().join("primary"), &[]).await;
    let token = replicate_token(&primary, dir.path(), "replicas").await;
    // The replica reaches the primary through a proxy that can cut it off.
    let proxy = Proxy::start(primary.grpc).await;
    // Heartbeats every 200 ms: the hold below is seen by them.
    let mut replica =
        Relay::start_replica(&dir.path().join("replica"), &[proxy.url()], &token, &["--heartbeat", "200ms"])
            .await;
    replica.admin_secret = Some(primary.admin_token());
    replica.wait_ready().await;
    let client = Client::builder()
        .endpoints([primary.url(), replica.url()])
        .keep_endpoint_order()
        .sdk_key(primary.demo_key())
        .backoff_base(Duration::from_millis(100))
        .build()
        .unwrap();
    client.wait_ready(STEP).await;
    let lagging = replica.status().await.environments[0].head_revision;

    // The replica falls behind; the SDK, on the primary, moves ahead of it.
    proxy.blackhole_all();
    let mut admin = primary.admin().await;
    put(&mut admin, "demo", bool_flag("ahead-1", true)).await.unwrap();
    let ahead = put(&mut admin, "demo", bool_flag("ahead-2", true)).await.unwrap();
    eventually("the SDK at the primary's head", || client.bool("ahead-2", &Context::new("u"), false)).await;
    assert!(ahead > lagging);
    // Its relay dies; it fails over to the lagging replica.
    let address = primary.grpc.to_string();
    primary.kill9();
    primary.wait(STEP).await;
    let mut changes = client.changes();
    eventually("the SDK on the replica", || client.stats().connects >= 2).await;
    // Held, never sent older data: three more heartbeats reach the SDK's
    // stream there (the hold under way), and it still serves what it had,
    // having applied nothing since.
    let heartbeats = "flagstream_sent_messages_total{kind=\"heartbeat\"}";
    let (held_from, connects) = (replica.metric(heartbeats).await, client.stats().connects);
    eventually_async("three heartbeats of the hold", || async {
        replica.metric(heartbeats).await >= held_from + 3.0
    })
    .await;
    assert_eq!(client.stats().connects, connects, "still on its stream at the replica: {:?}", client.stats());
    assert!(client.bool("ahead-2", &Context::new("u"), false), "an older state was applied");
    assert!(changes.try_recv().is_err(), "a change was applied while held");
    assert_eq!(replica.status().await.environments[0].head_revision, lagging, "still behind");
    assert_eq!(client.stats().snapshots_applied, 1);

    // The primary returns and the replica's link heals: it catches up, and
    // the SDK (held at its cursor) gets the next write by delta.
    primary = Relay::start_on(&dir.path().join("primary"), &address, &[]).await;
    proxy.pass_new();
    replica.wait_head("demo", ahead).await;
    let mut admin = primary.admin().await;
    put(&mut admin, "demo", bool_flag("after", true)).await.unwrap();
    eventually("the next write via the replica", || client.bool("after", &Context::new("u"), false)).await;
    let s = client.stats();
    assert_eq!(s.snapshots_applied, 1, "held, then deltas: never a snapshot, never older data: {s:?}");
    assert!(client.bool("ahead-2", &Context::new("u"), false));
}
