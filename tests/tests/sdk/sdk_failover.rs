//! Failover and resume: when the relay the SDK uses dies, it moves to the
//! next endpoint and resumes with a delta (same epoch); after a relay
//! restart on the same address it resumes with a delta too.

use std::time::Duration;

use flagstream::{Client, Context};
use flagstream_tests::STEP;
use flagstream_tests::copy_dir;
use flagstream_tests::relay::{Relay, bool_flag, put};

async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..400 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// Two relays with the same store (same epoch): killing the first moves
/// the client to the second, which it resumes with a delta, not a snapshot.
#[tokio::test]
async fn kill_first_relay_fails_over_with_a_delta() {
    let a_dir = tempfile::tempdir().unwrap();
    let b_dir = tempfile::tempdir().unwrap();
    let mut a = Relay::start(a_dir.path(), &[]).await;
    a.sigterm();
    a.wait(STEP).await;
    copy_dir(&a_dir.path().join("data"), &b_dir.path().join("data"));
    let mut a = Relay::start(a_dir.path(), &[]).await;
    let b = Relay::start(b_dir.path(), &[]).await;
    let c = Client::builder()
        .endpoints([a.url(), b.url()])
        .keep_endpoint_order()
        .sdk_key(a.demo_key())
        .backoff_base(Duration::from_millis(100))
        .build()
        .unwrap();
    c.wait_ready(STEP).await;
    assert_eq!(c.stats().snapshots_applied, 1);
    a.kill9();
    a.wait(STEP).await;
    let mut admin_b = b.admin().await;
    put(&mut admin_b, "demo", bool_flag("after-failover", true)).await.unwrap();
    eventually("the write on relay B", || c.bool("after-failover", &Context::new("u"), false)).await;
    let s = c.stats();
    assert_eq!(s.snapshots_applied, 1, "resumed with a delta, not a snapshot: {s:?}");
    assert!(s.endpoint_switches >= 1 && s.deltas_applied >= 1, "{s:?}");
}

/// A relay restarted on the same address: the client resumes by delta.
#[tokio::test]
async fn relay_restart_resumes_with_a_delta() {
    let dir = tempfile::tempdir().unwrap();
    let mut relay = Relay::start(dir.path(), &[]).await;
    let addr = relay.grpc.to_string();
    let c = relay
        .sdk()
        .backoff_base(Duration::from_millis(100))
        .stale_after(Duration::from_millis(100))
        .build()
        .unwrap();
    c.wait_ready(STEP).await;
    relay.sigterm();
    relay.wait(STEP).await;
    eventually("stale while the relay is down", || c.status().is_stale()).await;
    assert!(
        c.bool("new-checkout", &Context::new("u").with("country", "US").with("plan", "enterprise"), false),
        "still serving"
    );
    let relay = Relay::start_on(dir.path(), &addr, &[]).await;
    let mut admin = relay.admin().await;
    put(&mut admin, "demo", bool_flag("after-restart", true)).await.unwrap();
    eventually("the write after restart", || c.bool("after-restart", &Context::new("u"), false)).await;
    eventually("ready again", || !c.status().is_stale()).await;
    let s = c.stats();
    assert_eq!(s.snapshots_applied, 1, "{s:?}");
    assert!(s.stale_ms > 0, "{s:?}");
}
