//! Scenario 5, large flag sets: an environment of many flags (50,000 of
//! ~1 KiB at full size, a ~50 MiB snapshot) is sent in chunks within the
//! message limits, an SDK syncs it from the relay and cold-starts from its
//! cache with every relay down, and the memory peaks are reported.

use std::path::Path;
use std::time::{Duration, Instant};

use flagstream::Client;

use crate::relay::Relay;
use crate::subscriber::{Subscriber, Update};

/// What one run measured.
#[derive(Debug, Clone)]
pub struct LargeReport {
    /// Flags in the environment.
    pub flags: usize,
    /// Bytes of stored flag encodings (`flagstream_store_bytes`).
    pub snapshot_bytes: u64,
    /// Chunks the snapshot came in.
    pub chunks: u32,
    /// An SDK's first sync: build → ready from the relay.
    pub first_sync: Duration,
    /// An SDK's cold start from its cache with the relay down: build →
    /// serving (`build` returns with the cache loaded).
    pub cold_start: Duration,
    /// Flags the cold-started SDK serves.
    pub cold_flags: usize,
    /// Relay peak resident memory, KiB.
    pub relay_peak_rss_kib: u64,
    /// This process's peak resident memory, KiB (the SDKs plus the
    /// harness; meaningful in the full-size command's own process).
    pub process_peak_rss_kib: u64,
}

/// Runs the scenario with `flags` flags of `description_bytes` each.
pub async fn run(dir: &Path, flags: usize, description_bytes: usize, guard: Duration) -> LargeReport {
    let quota = (flags + 100).to_string();
    let mut relay = Relay::start(&dir.join("relay"), &["--quota-flags", &quota]).await;
    let key = relay.create_filled_env("big", flags, description_bytes).await;
    let snapshot_bytes = relay.metric("flagstream_store_bytes{env=\"big\"}").await as u64;

    let mut raw = Subscriber::connect(relay.channel().await, &key, None).await.expect("subscribe");
    let chunks = match raw.next_change(guard).await.expect("the snapshot arrives whole and checksummed") {
        Update::Snapshot { chunks, .. } => chunks,
        other => panic!("expected a snapshot, got {other:?}"),
    };
    assert_eq!(raw.flags.len(), flags, "every flag arrived");
    drop(raw);

    let cache = dir.join("sdk-cache");
    let started = Instant::now();
    let c = Client::builder()
        .endpoints([relay.url()])
        .sdk_key(key.clone())
        .cache_dir(&cache)
        .build()
        .expect("builds");
    c.wait_ready(guard).await;
    let first_sync = started.elapsed();
    assert_eq!(c.snapshot().len(), flags, "the SDK holds every flag");
    drop(c); // writes the cache
    let relay_peak_rss_kib = relay.rss_kib().1;
    relay.kill9();
    relay.wait(guard).await;

    let started = Instant::now();
    let cold =
        Client::builder().endpoints([relay.url()]).sdk_key(key).cache_dir(&cache).build().expect("builds");
    let cold_start = started.elapsed();
    let cold_flags = cold.snapshot().len();
    drop(cold);
    LargeReport {
        flags,
        snapshot_bytes,
        chunks,
        first_sync,
        cold_start,
        cold_flags,
        relay_peak_rss_kib,
        process_peak_rss_kib: self_peak_rss_kib(),
    }
}

/// This process's VmHWM, KiB.
pub fn self_peak_rss_kib() -> u64 {
    // A missing file would report 0 KiB: a false figure, so fail.
    std::fs::read_to_string("/proc/self/status")
        .expect("this process's /proc status")
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:")?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
