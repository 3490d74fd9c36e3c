//! Scenario 3 of docs/RESILIENCE.md at CI size: 1,000 SDK streams on one
//! relay, which is killed and started again. Every stream comes back, the
//! relay survives, admission control (here 100 new subscriptions/s, so it
//! bites at this size) refuses with retry-after hints instead of taking
//! everyone at once, and every stream resumes with a delta.

use flagstream_tests::fault::storm::run;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_streams_come_back_after_a_relay_restart() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let dir = tempfile::tempdir().unwrap();
    let guard = std::time::Duration::from_secs(120);
    let r = run(dir.path(), 1_000, &["--quota-subscribes-per-sec", "100"], guard).await;
    eprintln!("back after {:?}, peak RSS {} KiB, refused {}", r.back, r.relay_peak_rss_kib, r.refused);
    assert!(r.relay_alive, "the relay died in the storm");
    assert!(r.refused > 0, "admission control never refused: {r:?}");
    assert_eq!(r.snapshots_sent, 0, "streams resumed with snapshots: {} sent", r.snapshots_sent);
    let last = r.curve.last().expect("samples");
    assert_eq!(last.connected, 1_000, "not every stream is back: {last:?}");
}
