//! Scenario 5 of docs/RESILIENCE.md at CI size: 5,000 flags of 1 KiB (a
//! ~5 MiB snapshot) arrive in several chunks within the message limits,
//! checksummed; an SDK syncs them and cold-starts from its cache with the
//! relay down, serving every flag; each SDK runs in a process of its own
//! (the `resilience` binary's `sdk-peak`).

use flagstream_tests::STEP;
use flagstream_tests::fault::large::{FloorWrites, SdkBin, run, sled_floor};

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

#[test]
fn the_sled_floor_writes_every_item_and_audit_record() {
    // `resilience sled-floor` at CI size: 3,000 flags in batches of 1,000
    // (as a fill: transactions with their audit records; as a replica:
    // batches, then the metadata), each item and record counted after.
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let dir = tempfile::tempdir().unwrap();
    for writes in [FloorWrites::Fill, FloorWrites::Replica] {
        let r = sled_floor(&dir.path().join(format!("{writes:?}")), 3_000, 1_024, 16 << 20, writes);
        assert_eq!(r.flags, 3_000);
        assert!(r.data_kib >= 3_000 * 1_024 / 1024, "every item's description written: {r:?}");
        assert!(r.peak_kib >= r.peak_anon_kib, "the peak counts the anonymous memory: {r:?}");
    }
}
