//! Scenario 2 of docs/RESILIENCE.md at CI size: a relay killed and
//! restarted on its address, and a replica killed under its SDKs. Every
//! SDK resumes with a delta: the serving relay sends no snapshot (its
//! change log covers the gap) and no SDK applies one.

use flagstream_tests::STEP;
use flagstream_tests::fault::restart::{relay_restart, replica_kill};

/// `kill -9`, start again: 20 SDKs resume from their cursors.
#[tokio::test]
async fn killed_and_restarted_relay_is_resumed_with_deltas() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let dir = tempfile::tempdir().unwrap();
    let r = relay_restart(dir.path(), 20, STEP).await;
    eprintln!("{r:?}");
    assert_eq!(r.snapshots_sent, 0, "the restarted relay sent snapshots: {r:?}");
    assert_eq!(r.sdk_snapshots, 0, "an SDK applied a snapshot: {r:?}");
    assert!(r.sdk_deltas >= 20, "every SDK applied the delta: {r:?}");
}

/// The replica 20 SDKs use is killed: they move to the other replica and
/// resume there with deltas (replicas keep the primary's epoch and
/// revisions).
#[tokio::test]
async fn killed_replica_is_left_for_the_other_with_deltas() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let dir = tempfile::tempdir().unwrap();
    let r = replica_kill(dir.path(), 20, STEP).await;
    eprintln!("{r:?}");
    assert_eq!(r.snapshots_sent, 0, "the surviving replica sent snapshots: {r:?}");
    assert_eq!(r.sdk_snapshots, 0, "an SDK applied a snapshot: {r:?}");
    assert!(r.sdk_deltas >= 20, "every SDK applied the delta: {r:?}");
}
