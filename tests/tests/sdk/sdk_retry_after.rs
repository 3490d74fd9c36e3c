//! The SDK honours the relay's retry-after hint: refused at admission with
//! `RESOURCE_EXHAUSTED` and `flagstream-retry-after-ms` (2.5–5 s here), it
//! plans its next attempt no sooner than the hint, says why it is not
//! ready, and gets in once a place frees up. (That the plan is never below
//! the hint is unit-tested in `follow/plan.rs`; no wall-clock bound here.)

use std::time::Duration;

use flagstream::Status;
use flagstream_tests::STEP;
use flagstream_tests::cluster::eventually;
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::Subscriber;

#[tokio::test]
async fn refused_client_waits_for_the_retry_after_hint() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--max-subscribers-per-env", "1"]).await;
    let key = relay.demo_key();
    let mut holder = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    holder.next(STEP).await.unwrap();

    let c = relay.sdk_for(key).build().unwrap();
    eventually("the refusal", || c.stats().retry_hints == 1).await;
    match c.status() {
        Status::Initializing { attempts } => {
            let last = attempts.last().expect("the refusal is listed");
            assert!(last.error.contains("retry after"), "{}", last.error);
            // The relay's hint is at least 2.5 s; plain backoff (base 1 s)
            // would have planned less.
            assert!(last.retry_in >= Duration::from_millis(2_500), "{last:?}");
        }
        other => panic!("expected Initializing, got {other:?}"),
    }
    let refusals = relay.metric("flagstream_quota_refusals_total{env=\"demo\",quota=\"subscribers\"}").await;
    assert_eq!(refusals, 1.0, "one attempt so far");

    drop(holder);
    c.wait_ready(STEP).await;
    assert!(c.status().has_data(), "{:?}", c.status());
    let s = c.stats();
    assert!(s.reconnects >= 1 && s.retry_hints == s.reconnects && s.snapshots_applied == 1, "{s:?}");
}
