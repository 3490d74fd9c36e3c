use super::*;

fn hub() -> Arc<Hub> {
    let limits = HubLimits {
        max_subscribers: 10,
        max_subscribers_per_env: 10,
        max_replica_streams_per_env: 2,
        snapshot_concurrency: 1,
        send_deadline: Duration::from_secs(2),
        heartbeat: Duration::from_secs(1),
        behind_deadline: Duration::from_secs(2),
        behind_progress_rate: 1000,
    };
    Arc::new(Hub::new(limits, Metrics::new()))
}

/// Steps the paused clock in small increments, letting the reaper run.
async fn advance(ms: u64) {
    for _ in 0..ms / 100 {
        tokio::time::advance(Duration::from_millis(100)).await;
        tokio::task::yield_now().await;
    }
}

/// The send deadline runs on the monotonic clock: a subscriber that
/// keeps pulling is never cut off, one that stops is cut off once
/// heartbeat + deadline have passed, not before.
#[tokio::test(start_paused = true)]
async fn reaper_cuts_off_only_subscribers_past_the_deadline_on_the_monotonic_clock() {
    let hub = hub();
    let stop = CancellationToken::new();
    tokio::spawn(hub.clone().reap(stop.clone()));
    let stuck = hub.admit("e", "k1", None, String::new(), 0, false).unwrap();
    let reading = hub.admit("e", "k1", None, String::new(), 0, false).unwrap();
    for _ in 0..25 {
        advance(100).await;
        reading.last_progress_ms.store(hub.mono_ms(), Ordering::Relaxed);
    }
    // 2.5 s: within heartbeat (1 s) + deadline (2 s).
    assert!(!stuck.is_stopped());
    for _ in 0..15 {
        advance(100).await;
        reading.last_progress_ms.store(hub.mono_ms(), Ordering::Relaxed);
    }
    // 4 s: past it.
    assert!(stuck.is_stopped(), "the stuck subscriber was not cut off");
    assert!(!reading.is_stopped(), "a reading subscriber was cut off");
    assert_eq!(hub.total(), 1);
    stop.cancel();
}

/// The behind deadline: a subscriber that keeps pulling but is handed
/// the head only every 5 s (deadline 2 s) is cut off; one receiving a
/// snapshot (no revision handed yet) at twice the progress rate, and
/// one handed every revision, are not.
#[tokio::test(start_paused = true)]
async fn reaper_cuts_off_subscribers_that_stay_behind_but_credits_progress() {
    let hub = hub();
    let stop = CancellationToken::new();
    tokio::spawn(hub.clone().reap(stop.clone()));
    let (head, rx) = tokio::sync::watch::channel(1u64);
    let admit = || {
        let s = hub.admit("e", "k1", None, String::new(), 0, false).unwrap();
        s.head.set(rx.clone()).unwrap();
        s
    };
    let (slow, snapshot, current) = (admit(), admit(), admit());
    for step in 0..80u64 {
        advance(100).await;
        // Ten writes a second.
        let revision = 2 + step;
        head.send_replace(revision);
        for s in [&slow, &snapshot, &current] {
            s.last_progress_ms.store(hub.mono_ms(), Ordering::Relaxed);
        }
        if step % 50 == 0 {
            slow.sent_revision.store(revision, Ordering::Relaxed);
            slow.sent_bytes.fetch_add(100, Ordering::Relaxed);
        }
        // 2,000 B/s of snapshot chunks; the rate is 1,000 B/s.
        snapshot.sent_bytes.fetch_add(200, Ordering::Relaxed);
        current.sent_revision.store(revision, Ordering::Relaxed);
        current.sent_bytes.fetch_add(100, Ordering::Relaxed);
    }
    assert!(slow.is_stopped(), "the subscriber handed the head every 5 s was not cut off");
    assert!(!snapshot.is_stopped(), "a snapshot progressing faster than the rate was cut off");
    assert!(!current.is_stopped(), "a current subscriber was cut off");
    // A snapshot slower than the rate is cut too.
    // (Its credit so far: 16 s; 15 s more at 100 B/s outlast it.)
    for _ in 0..150 {
        advance(100).await;
        snapshot.last_progress_ms.store(hub.mono_ms(), Ordering::Relaxed);
        current.last_progress_ms.store(hub.mono_ms(), Ordering::Relaxed);
        snapshot.sent_bytes.fetch_add(10, Ordering::Relaxed);
    }
    assert!(snapshot.is_stopped(), "a snapshot progressing at a tenth of the rate was not cut off");
    assert!(!current.is_stopped());
    stop.cancel();
}
