//! Scenario 4 of docs/RESILIENCE.md at CI size: a subscriber reading at
//! 1 KiB/s while 60 KB writes go on 20 times a second. The relay keeps no
//! backlog for it and the others do not wait for it: the five other
//! subscribers get every write, the proxy holds the slow one to its rate,
//! and if the relay cuts a stream off (the send deadline, here 1 s
//! heartbeat + 2 s, once the slow stream's transport stops pulling) it is
//! only that one. (Whether it is cut within the run depends on when its
//! HTTP/2 window fills, so the cut itself is reported, not required; the
//! full-size command in RESILIENCE.md measures the memory.)

use std::time::Duration;

use flagstream_tests::fault::slow::{Load, SLOW_SDK, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_does_not_hold_up_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let guard = Duration::from_secs(120);
    let args = ["--heartbeat", "1s", "--send-deadline", "2s"];
    let load = Load {
        fast: 5,
        writes: 60,
        interval: Duration::from_millis(50),
        flag_bytes: 60_000,
        rate: 1024,
        max_time: Duration::from_secs(4),
    };
    // `run` waits until every fast subscriber has every write.
    let r = run(dir.path(), load, &args, guard).await;
    eprintln!("{r:?}");
    assert!(r.writes >= 60, "{r:?}");
    assert!(r.cut_off <= 1, "a stream other than the slow one was cut off: {r:?}");
    // Which one: every stream cut is the slow reader's (the relay's log
    // names the SDK of each), and no fast client had to reconnect.
    assert_eq!(r.cut_sdks.len() as u64, r.cut_off, "every cut is logged: {r:?}");
    assert!(r.cut_sdks.iter().all(|s| s == SLOW_SDK), "a fast client's stream was cut: {r:?}");
    assert_eq!(r.fast_reconnects, 0, "a fast client lost its stream: {r:?}");
    // The proxy held it to its rate (plus one paced chunk): it cannot have
    // kept up.
    let allowed = 1024.0 * r.ran_for.as_secs_f64() * 1.2 + 1024.0;
    assert!((r.slow_bytes as f64) <= allowed, "the slow reader read faster than 1 KiB/s: {r:?}");
    assert!(r.slow_bytes < (r.writes as u64) * 60_000 / 10, "{r:?}");
}
