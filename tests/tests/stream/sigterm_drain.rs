//! Lifecycle: health is SERVING once loaded, NOT_SERVING as soon as SIGTERM
//! arrives; subscribers are asked to reconnect elsewhere with jittered
//! delays; the process exits 0 after they leave.

use std::time::Duration;

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::{Subscriber, Update};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const SYNC: &str = "flagstream.v1.Sync";

async fn health(relay: &Relay) -> Option<ServingStatus> {
    let ch = tonic::transport::Channel::from_shared(relay.url()).ok()?.connect().await.ok()?;
    let r = HealthClient::new(ch).check(HealthCheckRequest { service: SYNC.into() }).await.ok()?;
    ServingStatus::try_from(r.into_inner().status).ok()
}

/// Waits until health is `want` (the status is set by its own task, a
/// moment after the relay starts listening).
async fn wait_for_health(relay: &Relay, want: ServingStatus) {
    flagstream_tests::cluster::eventually_async(&format!("health {want:?}"), || async {
        health(relay).await == Some(want)
    })
    .await;
}

/// Every subscriber gets a DRAIN reconnect with a delay inside the spread,
/// and the relay exits 0.
#[tokio::test]
async fn sigterm_sends_reconnects_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let mut relay = Relay::start(dir.path(), &["--drain-spread", "2s"]).await;
    // SERVING follows the "listening" line as soon as the data is loaded.
    wait_for_health(&relay, ServingStatus::Serving).await;
    let mut subs = Vec::new();
    for _ in 0..5 {
        let mut s = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
        s.next(STEP).await.unwrap();
        subs.push(s);
    }
    relay.sigterm();
    let mut delays = Vec::new();
    for s in &mut subs {
        loop {
            match s.next(STEP).await.unwrap() {
                Update::Reconnect { reason, delay_ms } => {
                    assert_eq!(reason, pb::ReconnectReason::Drain);
                    assert!(delay_ms < 2_000);
                    delays.push(delay_ms);
                    break;
                }
                Update::Heartbeat { .. } => continue,
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    let status = relay.wait(STEP).await;
    assert!(status.success(), "exit status {status:?}; log:\n{}", relay.log());
    delays.sort_unstable();
    delays.dedup();
    assert!(delays.len() > 1, "reconnect delays are not jittered: {delays:?}");
}

/// While a drain is in progress (a subscriber that stopped reading holds
/// it open), health answers NOT_SERVING.
#[tokio::test]
async fn health_is_not_serving_during_drain() {
    let dir = tempfile::tempdir().unwrap();
    let mut relay =
        Relay::start(dir.path(), &["--drain-grace", "4s", "--chunk-bytes", "16384", "--demo", "false"]).await;
    // Enough data that an unread snapshot fills the HTTP/2 windows.
    let key = relay.create_filled_env("wide", 3_000, 1_000).await;
    let _stuck = Subscriber::connect(relay.channel().await, &key, None).await.unwrap(); // never read
    tokio::time::sleep(Duration::from_millis(300)).await;
    // SERVING before the signal, so the NOT_SERVING below is the drain's.
    wait_for_health(&relay, ServingStatus::Serving).await;
    relay.sigterm();
    wait_for_health(&relay, ServingStatus::NotServing).await;
    assert!(relay.wait(STEP).await.success());
}
