//! The SDK honours the relay's retry-after hint: refused at admission with
//! `RESOURCE_EXHAUSTED` and `flagstream-retry-after-ms` (2.5–5 s here), it
//! does not try again before the hint, says why it is not ready, and gets
//! in once a place frees up.

use std::time::{Duration, Instant};

use flagstream::{Client, Status};
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::Subscriber;

#[tokio::test]
async fn refused_client_waits_for_the_retry_after_hint() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--max-subscribers-per-env", "1"]).await;
    let key = relay.demo_key();
    let mut holder = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    holder.next(STEP).await.unwrap();

    let c = Client::builder().endpoints([relay.url()]).sdk_key(key).build().unwrap();
    let deadline = Instant::now() + STEP;
    while c.stats().retry_hints == 0 {
        assert!(Instant::now() < deadline, "never refused: {:?}", c.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused_at = Instant::now();
    match c.status() {
        Status::Initializing { attempts } => {
            let last = attempts.last().expect("the refusal is listed");
            assert!(last.error.contains("retry after"), "{}", last.error);
        }
        other => panic!("expected Initializing, got {other:?}"),
    }
    // The relay's hint is at least 2.5 s; plain backoff would have retried
    // within 1 s.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s = c.stats();
    assert_eq!((s.reconnects, s.retry_hints), (1, 1), "retried before the hint: {s:?}");

    drop(holder);
    c.wait_ready(Duration::from_secs(15)).await;
    assert!(c.status().has_data(), "{:?}", c.status());
    assert!(refused_at.elapsed() >= Duration::from_millis(2_500), "got in before the hint");
}
