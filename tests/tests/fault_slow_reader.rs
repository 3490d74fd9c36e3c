//! Scenario 4 of docs/RESILIENCE.md at CI size: a subscriber reading at
//! 1 KiB/s while 60 KB writes go on 20 times a second. The relay keeps no
//! backlog for it: once its HTTP/2 window is full the send deadline (here
//! 1 s heartbeat + 2 s) cuts it off, and the five other subscribers get
//! every write.

use std::time::Duration;

use flagstream_tests::fault::slow::{Load, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_is_cut_off_and_the_others_are_unaffected() {
    let dir = tempfile::tempdir().unwrap();
    let guard = Duration::from_secs(120);
    let args = ["--heartbeat", "1s", "--send-deadline", "2s"];
    let load = Load {
        fast: 5,
        writes: 60,
        interval: Duration::from_millis(50),
        flag_bytes: 60_000,
        rate: 1024,
        max_time: guard,
    };
    let r = run(dir.path(), load, &args, guard).await;
    eprintln!("{r:?}");
    assert!(r.cut_after.is_some(), "the slow stream was never cut off: {r:?}");
    assert_eq!(r.cut_off, 1, "the slow stream, and only it, was cut off: {r:?}");
    // The proxy held it to its rate (plus one paced chunk).
    let allowed = 1024.0 * r.ran_for.as_secs_f64() * 1.2 + 1024.0;
    assert!((r.slow_bytes as f64) <= allowed, "the slow reader read faster than 1 KiB/s: {r:?}");
}
