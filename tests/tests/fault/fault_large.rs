//! Scenario 5 of docs/RESILIENCE.md at CI size: 5,000 flags of 1 KiB (a
//! ~5 MiB snapshot) arrive in several chunks within the message limits,
//! checksummed; an SDK syncs them and cold-starts from its cache with the
//! relay down, serving every flag; each SDK runs in a process of its own
//! (the `resilience` binary's `sdk-peak`).

use flagstream_tests::STEP;
use flagstream_tests::fault::large::{SdkBin, run};

#[tokio::test]
async fn five_thousand_flags_are_chunked_synced_and_cold_started() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let dir = tempfile::tempdir().unwrap();
    let sdk_bin = SdkBin { path: std::path::Path::new(env!("CARGO_BIN_EXE_resilience")), wrap: "" };
    let r = run(dir.path(), 5_000, 1_024, &sdk_bin, STEP * 3).await;
    eprintln!("{r:?}");
    assert!(r.snapshot_bytes > 5_000 * 1_024, "{r:?}");
    assert!(r.chunks > 1, "a 5 MiB snapshot in one message: {r:?}");
    assert_eq!(r.sdk[0].flags, 5_000, "the first sync holds every flag: {r:?}");
    assert_eq!(r.sdk[1].flags, 5_000, "the cold start serves every flag: {r:?}");
    assert!(r.sdk.iter().all(|s| s.peak_kib >= s.start_kib && s.start_kib > 0), "{r:?}");
}
