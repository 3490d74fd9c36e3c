//! Scenario 1 of docs/RESILIENCE.md at CI size: a silently stalled relay
//! (every connection through the proxy blackholed: no FIN, no RST) is
//! detected with the SDK's default settings and the SDK streams from the
//! other relay; the same when the stalled hop is a replica's upstream
//! link. Throughout, no evaluation of a known flag returns the default.

use flagstream_tests::STEP;
use flagstream_tests::fault::stall::{Hop, run};

/// The SDK's own stream stalls: detected by the HTTP/2 keepalive (the
/// default budget), not the 45 s heartbeat watchdog; it moves to the
/// replica and gets the write made after the stall as a delta.
#[tokio::test]
async fn stalled_relay_is_left_for_the_other_with_default_settings() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let dir = tempfile::tempdir().unwrap();
    let r = run(dir.path(), Hop::Relay, STEP * 2).await;
    eprintln!("{r:#?}");
    assert_eq!(r.eval.defaults, 0, "an evaluation of a known flag returned the default: {r:?}");
    assert!(r.eval.evaluations > 0);
    assert_eq!(r.stats.stalls, 1, "detected as one stall: {:?}", r.stats);
    assert_eq!(r.stats.endpoint_switches, 1, "moved to the other relay: {:?}", r.stats);
    assert_eq!(r.stats.snapshots_applied, 1, "resumed with a delta: {:?}", r.stats);
}

/// The replica's upstream link stalls: the replica moves to its other
/// link; its SDK keeps its stream and gets the write.
#[tokio::test]
async fn stalled_replica_upstream_is_left_for_the_other_link() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let dir = tempfile::tempdir().unwrap();
    let r = run(dir.path(), Hop::Replica, STEP * 2).await;
    eprintln!("{r:#?}");
    assert_eq!(r.eval.defaults, 0, "an evaluation of a known flag returned the default: {r:?}");
    assert!(r.stalls >= 1, "the replica counted its upstream stall: {r:?}");
    assert_eq!(r.stats.reconnects, 0, "the SDK's own stream was never touched: {:?}", r.stats);
}

/// Behind something that answers HTTP/2 PINGs itself (an L7 proxy), only
/// the heartbeat watchdog sees a stall: with the keepalive set long, a
/// blackholed stream is still torn down (3 missed 300 ms heartbeats) and
/// replaced over a new connection, which brings the next write.
#[tokio::test]
async fn the_heartbeat_watchdog_catches_what_the_keepalive_does_not() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    use std::time::Duration;

    use flagstream::Client;
    use flagstream_tests::fault::wait_change;
    use flagstream_tests::proxy::Proxy;
    use flagstream_tests::relay::{Relay, bool_flag, put};

    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--heartbeat", "300ms"]).await;
    let proxy = Proxy::start(relay.grpc).await;
    let c = Client::builder()
        .endpoints([proxy.url()])
        .sdk_key(relay.demo_key())
        .keepalive_interval(Duration::from_secs(600))
        .keepalive_timeout(Duration::from_secs(300))
        .build()
        .unwrap();
    c.wait_ready(STEP).await;
    assert_eq!(proxy.connections(), 1);
    let mut changes = c.changes();
    proxy.blackhole_existing();
    put(&mut relay.admin().await, "demo", bool_flag("after-stall", true)).await.unwrap();
    wait_change(&mut changes, "after-stall", STEP).await;
    let s = c.stats();
    assert_eq!(s.stalls, 1, "{s:?}");
    assert!(proxy.connections() >= 2, "a new connection was made");
    assert_eq!(s.snapshots_applied, 1, "resumed with a delta: {s:?}");
}
