//! A silently stalled connection (bytes stop, nothing closes) is detected
//! by the heartbeat watchdog within the configured bound; the client drops
//! the channel, reconnects on a new one and carries on. Evaluation keeps
//! answering throughout.

use std::time::{Duration, Instant};

use flagstream::{Client, Context};
use flagstream_tests::STEP;
use flagstream_tests::proxy::Proxy;
use flagstream_tests::relay::{Relay, bool_flag, put};

/// Heartbeat 300 ms × 3 misses: a blackhole is replaced in well under the
/// bound, and the next write arrives over the new connection.
#[tokio::test]
async fn blackholed_connection_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--heartbeat", "300ms"]).await;
    let proxy = Proxy::start(relay.grpc).await;
    let c = Client::builder()
        .endpoints([proxy.url()])
        .sdk_key(relay.demo_key())
        .stall_jitter(Duration::from_millis(100))
        .keepalive_interval(Duration::from_secs(30))
        .keepalive_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    c.wait_ready(STEP).await;
    assert_eq!(proxy.connections(), 1);
    proxy.blackhole_existing();
    let frozen_at = Instant::now();
    // Evaluation does not wait on any of this.
    let t = Instant::now();
    for _ in 0..1_000 {
        assert!(c.bool("beta-banner", &Context::new("user-1"), false));
    }
    assert!(t.elapsed() < Duration::from_millis(500));
    let mut admin = relay.admin().await;
    put(&mut admin, "demo", bool_flag("after-stall", true)).await.unwrap();
    while !c.bool("after-stall", &Context::new("u"), false) {
        assert!(frozen_at.elapsed() < STEP, "stall never detected: {:?}", c.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let detected = frozen_at.elapsed();
    let s = c.stats();
    assert_eq!(s.stalls, 1, "{s:?}");
    assert!(proxy.connections() >= 2, "a new connection was made");
    // Watchdog 3 × 300 ms + jitter ≤ 100 ms + reconnect: bounded well below 3 s.
    assert!(detected < Duration::from_secs(3), "took {detected:?}");
}
