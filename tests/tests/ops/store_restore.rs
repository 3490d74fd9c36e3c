//! A restored backup never serves a lost history as current (PROTOCOL.md
//! §2.2, §2.6). Heartbeats carry the head's checksum; a client whose cursor
//! equals the head but whose content differs (the restored store's new
//! writes reached its revision number again) resyncs with a snapshot. A
//! data directory restored with its commit marks deleted is a new epoch.

use flagstream::Client;
use flagstream_tests::STEP;
use flagstream_tests::cluster::eventually;
use flagstream_tests::copy_dir;
use flagstream_tests::relay::{Relay, bool_flag, put};
use flagstream_tests::subscriber::{Subscriber, Update, checksum};

const ARGS: &[&str] = &["--heartbeat", "200ms"];

/// `relay`'s gRPC address, to start it again on the same one.
fn addr(relay: &Relay) -> String {
    relay.url().trim_start_matches("http://").to_owned()
}

async fn stop(mut relay: Relay) {
    relay.sigterm();
    assert!(relay.wait(STEP).await.success());
}

/// Every heartbeat states the checksum of the head: the same value as the
/// snapshot at that revision, and the new one after a write.
#[tokio::test]
async fn heartbeats_carry_the_checksum_of_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), ARGS).await;
    let mut sub = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    let Update::Snapshot { revision, .. } = sub.next_change(STEP).await.unwrap() else {
        panic!("no snapshot")
    };
    let opening = sub.heartbeat.clone().expect("the opening heartbeat");
    assert_eq!(opening.head_revision, revision);
    assert_eq!(opening.checksum, Some(checksum(&sub.flags, &sub.segments)), "the opening heartbeat");
    let mut admin = relay.admin().await;
    let head = put(&mut admin, "demo", bool_flag("after", true)).await.unwrap();
    sub.wait_revision(head, STEP).await.unwrap();
    let want = checksum(&sub.flags, &sub.segments);
    loop {
        if let Update::Heartbeat { head: h } = sub.next(STEP).await.unwrap()
            && h == head
        {
            break;
        }
    }
    assert_eq!(sub.heartbeat.unwrap().checksum, Some(want), "a heartbeat after the write");
}

/// What both restore tests share: a relay backed up (cold) at revision
/// `n`, then written to `n + 2` (flags `lost-1`, `lost-2`) while a raw
/// subscriber follows, then stopped.
struct Restored {
    live: std::path::PathBuf,
    backup: std::path::PathBuf,
    addr: String,
    key: String,
    n: u64,
    sub: Subscriber,
    /// The checksum the subscriber holds at `n + 2`.
    lost_checksum: u64,
    _root: tempfile::TempDir,
}

async fn backed_up_then_lost(with_sdk: bool) -> (Restored, Option<Client>) {
    let root = tempfile::tempdir().unwrap();
    let (live, backup) = (root.path().join("live"), root.path().join("backup"));
    let relay = Relay::start(&live, ARGS).await;
    let (addr, key) = (addr(&relay), relay.demo_key());
    stop(relay).await;
    std::fs::create_dir_all(&backup).unwrap();
    copy_dir(&live.join("data"), &backup.join("data"));
    let relay = Relay::start_on(&live, &addr, ARGS).await;
    let mut sub = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    let Update::Snapshot { revision: n, .. } = sub.next_change(STEP).await.unwrap() else {
        panic!("no snapshot")
    };
    let client = with_sdk.then(|| relay.sdk_for(&key).build().unwrap());
    let mut admin = relay.admin().await;
    put(&mut admin, "demo", bool_flag("lost-1", true)).await.unwrap();
    let lost = put(&mut admin, "demo", bool_flag("lost-2", true)).await.unwrap();
    assert_eq!(lost, n + 2);
    sub.wait_revision(lost, STEP).await.unwrap();
    if let Some(c) = &client {
        eventually("the SDK has revision n + 2", || c.snapshot().revision() == lost).await;
    }
    let lost_checksum = checksum(&sub.flags, &sub.segments);
    stop(relay).await;
    let restored = Restored { live, backup, addr, key, n, sub, lost_checksum, _root: root };
    (restored, client)
}

impl Restored {
    /// Puts the backup back in place of the live data directory.
    fn restore(&self) {
        std::fs::remove_dir_all(self.live.join("data")).unwrap();
        copy_dir(&self.backup.join("data"), &self.live.join("data"));
    }
}

/// The whole data directory restored (marks included: nothing tells the
/// relay), then divergent writes reach the revision clients hold again. An
/// SDK held across the restore, and a subscriber arriving with the old
/// cursor, are not told they are current: the heartbeat's checksum differs
/// from theirs, and the SDK resyncs to the restored store's content.
#[tokio::test]
async fn divergent_writes_after_a_restore_are_never_current_for_old_cursors() {
    let (mut r, client) = backed_up_then_lost(true).await;
    let client = client.unwrap();
    let old_epoch = client.snapshot().epoch().to_owned();
    r.restore();
    let relay = Relay::start_on(&r.live, &r.addr, ARGS).await;
    let mut admin = relay.admin().await;
    put(&mut admin, "demo", bool_flag("new-1", true)).await.unwrap();
    let head = put(&mut admin, "demo", bool_flag("new-2", false)).await.unwrap();
    assert_eq!(head, r.n + 2, "the restored store reached the old revision number again");

    // The relay's state, from a fresh subscriber (checksum-verified).
    let mut fresh = Subscriber::connect(relay.channel().await, &r.key, None).await.unwrap();
    fresh.next_change(STEP).await.unwrap();
    let restored_checksum = checksum(&fresh.flags, &fresh.segments);
    assert_ne!(restored_checksum, r.lost_checksum, "the histories diverged");

    // A subscriber with the old cursor: same epoch, same revision as the
    // head, other content. Its heartbeats say so.
    r.sub.reconnect(relay.channel().await, &r.key).await.unwrap();
    assert_eq!(r.sub.cursor(), (old_epoch.clone(), head));
    r.sub.next(STEP).await.unwrap();
    let hb = r.sub.heartbeat.clone().expect("a heartbeat");
    assert_eq!((hb.epoch.as_str(), hb.head_revision), (old_epoch.as_str(), head));
    assert_eq!(hb.checksum, Some(restored_checksum), "the heartbeat names the restored content");

    // The SDK held across the restore ends up with the restored content.
    eventually("the SDK serves the restored store's flags", || {
        let s = client.snapshot();
        s.flag("new-2").is_some() && s.flag("lost-2").is_none()
    })
    .await;
    let s = client.snapshot();
    assert_eq!((s.epoch(), s.revision()), (old_epoch.as_str(), head));
    let keys: Vec<&str> = s.keys().collect();
    let want: Vec<&str> = fresh.flags.keys().map(String::as_str).collect();
    let mut keys_sorted = keys.clone();
    keys_sorted.sort_unstable();
    assert_eq!(keys_sorted, want, "the SDK holds exactly the restored store's flags");
    let stats = client.stats();
    assert!(stats.diverged_heads >= 1 && stats.resyncs >= 1, "{stats:?}");
}

/// The data directory restored with its commit marks deleted (the
/// documented way to declare a restore): every environment gets a new
/// epoch, so a cursor from before the restore is foreign and gets a
/// snapshot of the restored state, never held or resumed.
#[tokio::test]
async fn a_restore_without_its_commit_marks_is_a_new_epoch() {
    let (mut r, _) = backed_up_then_lost(false).await;
    let old_epoch = r.sub.epoch.clone();
    r.restore();
    std::fs::remove_file(r.live.join("data/commit-marks.json")).unwrap();
    let relay = Relay::start_on(&r.live, &r.addr, ARGS).await;
    r.sub.reconnect(relay.channel().await, &r.key).await.unwrap();
    let update = r.sub.next_change(STEP).await.unwrap();
    assert_eq!(update, Update::Snapshot { revision: r.n, chunks: 1 }, "{}", relay.log());
    assert_ne!(r.sub.epoch, old_epoch, "a new epoch");
    assert!(!r.sub.flags.contains_key("lost-2"));
    assert_eq!(relay.metric("flagstream_limit_hits_total{limit=\"history_lost\"}").await, 1.0);
    // Started again with its marks: the epoch stays.
    let epoch = r.sub.epoch.clone();
    stop(relay).await;
    let relay = Relay::start_on(&r.live, &r.addr, ARGS).await;
    r.sub.reconnect(relay.channel().await, &r.key).await.unwrap();
    let mut admin = relay.admin().await;
    let next = put(&mut admin, "demo", bool_flag("after", true)).await.unwrap();
    assert_eq!(r.sub.next_change(STEP).await.unwrap(), Update::Delta { from: r.n, to: next });
    assert_eq!(r.sub.epoch, epoch);
}

/// A replica relay follows its upstream with the same engine: held ahead
/// of the restored primary, it finds the divergence by the heartbeat's
/// checksum, replaces its copy with the primary's snapshot, and its own
/// SDKs, told the new checksum in turn, resync to the restored content.
#[tokio::test]
async fn a_replica_of_a_restored_primary_resyncs_and_so_do_its_sdks() {
    let root = tempfile::tempdir().unwrap();
    let (live, backup) = (root.path().join("live"), root.path().join("backup"));
    let primary = Relay::start(&live, ARGS).await;
    let (addr, key) = (addr(&primary), primary.demo_key());
    // The token is in the backup too: the replica follows the restored
    // primary with it.
    let token = flagstream_tests::cluster::replicate_token(&primary, root.path(), "replica").await;
    stop(primary).await;
    std::fs::create_dir_all(&backup).unwrap();
    copy_dir(&live.join("data"), &backup.join("data"));
    let primary = Relay::start_on(&live, &addr, ARGS).await;
    let mut replica =
        Relay::start_replica(&root.path().join("replica"), &[primary.url()], &token, ARGS).await;
    replica.admin_secret = Some(primary.admin_token());
    replica.wait_ready().await;
    let client = replica.sdk_for(&key).build().unwrap();
    client.wait_ready(STEP).await;
    let mut admin = primary.admin().await;
    put(&mut admin, "demo", bool_flag("lost-1", true)).await.unwrap();
    let lost = put(&mut admin, "demo", bool_flag("lost-2", true)).await.unwrap();
    eventually("the SDK has the lost writes", || client.snapshot().revision() == lost).await;
    stop(primary).await;

    std::fs::remove_dir_all(live.join("data")).unwrap();
    copy_dir(&backup.join("data"), &live.join("data"));
    let primary = Relay::start_on(&live, &addr, ARGS).await;
    let mut admin = primary.admin().await;
    put(&mut admin, "demo", bool_flag("new-1", true)).await.unwrap();
    assert_eq!(put(&mut admin, "demo", bool_flag("new-2", false)).await.unwrap(), lost);
    eventually("the replica's SDK serves the restored store's flags", || {
        let s = client.snapshot();
        s.flag("new-2").is_some() && s.flag("lost-2").is_none()
    })
    .await;
    assert_eq!(client.snapshot().revision(), lost);
    assert!(client.stats().diverged_heads >= 1, "{:?}", client.stats());
    assert!(replica.log().contains("the upstream holds other content"), "{}", replica.log());
}
