//! Scenario 7 of docs/RESILIENCE.md, relay side: `kill -9` of a relay in
//! the middle of a stream of writes leaves a consistent store: every
//! acknowledged write is there after a restart, the relay's stated
//! checksum matches a recomputation over what it serves, and nothing is
//! torn. A data file garbled so that sled's recovery cuts its log back is
//! refused at start with the marks file named (and served, checksummed,
//! once the operator deletes it); a garble sled does not notice leaves the
//! whole head served; never half-applied, never a panic.

use std::collections::HashMap;

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::copy_dir;
use flagstream_tests::relay::{Relay, bool_flag, put};
use flagstream_tests::subscriber::{Subscriber, Update};
use tokio::sync::watch;

/// Keys the writes cycle over.
const KEYS: usize = 50;

/// Whether a failed write is the relay dying under it (the only failure
/// this test expects), not a refusal.
fn relay_died(s: &tonic::Status) -> bool {
    matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled)
        && (std::error::Error::source(s).is_some() || s.message().contains("transport"))
}

/// Writes run flat out from a task; once a good number is acknowledged the
/// relay is SIGKILLed mid-stream; on restart every key holds its last
/// acknowledged write or one issued after it.
#[tokio::test]
async fn kill_9_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    let (count, mut acked_so_far) = watch::channel(0usize);
    let writer = tokio::spawn(async move {
        // Per key: the number of the last acknowledged write.
        let mut acked: HashMap<String, usize> = HashMap::new();
        let mut last_revision = 0;
        for i in 0.. {
            let key = format!("w-{}", i % KEYS);
            let mut f = bool_flag(&key, i % 3 == 0);
            f.description = format!("write {i}");
            let req = pb::PutFlagRequest {
                environment: "demo".into(),
                flag: Some(f),
                expected_version: None,
                comment: String::new(),
            };
            match admin.put_flag(req).await {
                Ok(r) => {
                    last_revision = r.into_inner().result.expect("a write result").revision;
                    acked.insert(key, i);
                    count.send_replace(i + 1);
                }
                Err(s) if relay_died(&s) => return (acked, last_revision, i),
                Err(s) => panic!("write {i} refused while the relay was up: {s:?}"),
            }
        }
        unreachable!("the loop ends when the relay dies")
    });
    acked_so_far.wait_for(|n| *n >= 200).await.expect("the writer runs");
    relay.kill9();
    relay.wait(STEP).await;
    let (acked, last_revision, issued) = writer.await.unwrap();

    let relay = Relay::start(dir.path(), &[]).await;
    let mut sub = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    // `next` recomputes the checksum over every item received and fails on
    // a mismatch with the one the relay states.
    let Update::Snapshot { revision, .. } = sub.next_change(STEP).await.unwrap() else {
        panic!("expected a snapshot")
    };
    assert!(revision >= last_revision, "head {revision} is behind the last acknowledged {last_revision}");
    for (key, &i) in &acked {
        let flag = sub.flags.get(key).unwrap_or_else(|| panic!("{key} lost"));
        let j: usize = flag.description.trim_start_matches("write ").parse().expect("a write number");
        assert!(
            j >= i && j <= issued && j % KEYS == i % KEYS,
            "{key}: found write {j}, but write {i} was acknowledged (writes issued: {issued})"
        );
    }
    assert_eq!(acked.len(), KEYS, "every key was written at least once");
}

/// Garbles 512 bytes of sled's log, at one offset after another (each on
/// a fresh copy of the same data), until sled's recovery cuts the log back
/// to an earlier consistent point without a word. The relay's commit marks
/// catch that: it refuses to start, naming the environment, both revisions
/// and the marks file; deleting the marks file (the documented way to
/// accept the loss) serves what is left, whole and checksummed. A garble
/// that sled's recovery does not notice (it hit unused space) must leave
/// the relay serving the whole, checksummed head. Never a panic, never a
/// head served short without the refusal.
#[tokio::test]
async fn garbled_data_files_are_refused_not_served_short() {
    let dir = tempfile::tempdir().unwrap();
    let pristine = dir.path().join("pristine");
    let mut relay = Relay::start(&pristine, &[]).await;
    let mut admin = relay.admin().await;
    let mut head = 0;
    for i in 0..100 {
        let mut f = bool_flag(&format!("g-{i}"), true);
        f.description = "x".repeat(2_000);
        head = put(&mut admin, "demo", f).await.unwrap();
    }
    relay.sigterm();
    assert!(relay.wait(STEP).await.success());
    // sled's log file (not its snapshot files, whose own CRC makes sled
    // fail to open instead of cutting back).
    let len = std::fs::metadata(pristine.join("data/db/db")).unwrap().len() as usize;
    assert!(len > 64 << 10, "the sled log is only {len} bytes");

    // Offsets from the middle outwards, then ever finer.
    let offsets = [8, 4, 12, 2, 6, 10, 14, 1, 3, 5, 7, 9, 11, 13, 15].map(|sixteenths| len * sixteenths / 16);
    let mut tried = Vec::new();
    for (n, at) in offsets.into_iter().enumerate() {
        let copy = dir.path().join(format!("garbled-{n}"));
        copy_dir(&pristine, &copy);
        let log = copy.join("data/db/db");
        let mut bytes = std::fs::read(&log).unwrap();
        for b in &mut bytes[at..(at + 512).min(len)] {
            *b ^= 0x5a;
        }
        std::fs::write(&log, bytes).unwrap();

        match Relay::try_start(&copy, &[]).await {
            Ok(started) => {
                // Unnoticed by sled: the whole head, checksummed.
                let mut sub =
                    Subscriber::connect(started.channel().await, &started.demo_key(), None).await.unwrap();
                let update = sub.next_change(STEP).await;
                assert_eq!(update, Ok(Update::Snapshot { revision: head, chunks: 1 }), "{}", started.log());
                tried.push(at);
            }
            Err((status, log)) => {
                assert!(status.is_some_and(|s| !s.success()), "{status:?}\n{log}");
                assert!(!log.contains("panicked"), "a panic instead of an error:\n{log}");
                assert!(
                    log.contains("environment \"demo\"")
                        && log.contains(&format!("revision {head} of epoch"))
                        && log.contains("commit-marks.json"),
                    "the refusal (garble at byte {at} of {len}) does not say what is wrong:\n{log}"
                );
                // The operator accepts the loss: the relay serves what is
                // left, whole and checksummed (`next` verifies the checksum).
                std::fs::remove_file(copy.join("data/commit-marks.json")).unwrap();
                let started = Relay::start(&copy, &[]).await;
                let mut sub =
                    Subscriber::connect(started.channel().await, &started.demo_key(), None).await.unwrap();
                let update = sub.next_change(STEP).await.unwrap();
                assert!(matches!(update, Update::Snapshot { revision, .. } if revision < head), "{update:?}");
                eprintln!(
                    "garble at byte {at} of {len}: refused (after {} unnoticed: {tried:?})",
                    tried.len()
                );
                return;
            }
        }
    }
    panic!(
        "no garble made sled cut its log back (offsets {tried:?} of {len}): the refusal was never exercised"
    );
}

/// sled's recovery can cut its log back to before an environment was
/// created (here: the data directory from before the creation, under the
/// commit marks written since): the relay refuses to start, naming the
/// environment, instead of serving without it.
#[tokio::test]
async fn an_environment_the_store_lost_entirely_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut relay = Relay::start(dir.path(), &[]).await;
    relay.sigterm();
    assert!(relay.wait(STEP).await.success());
    let db = dir.path().join("data/db");
    let before = dir.path().join("db-before");
    copy_dir(&db, &before);

    let mut relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    admin
        .create_environment(pb::CreateEnvironmentRequest { name: "later".into(), description: String::new() })
        .await
        .unwrap();
    let head = put(&mut admin, "later", bool_flag("f", true)).await.unwrap();
    relay.sigterm();
    assert!(relay.wait(STEP).await.success());
    std::fs::remove_dir_all(&db).unwrap();
    std::fs::rename(&before, &db).unwrap();

    match Relay::try_start(dir.path(), &[]).await {
        Ok(started) => panic!("started without environment \"later\":\n{}", started.log()),
        Err((status, log)) => {
            assert!(status.is_some_and(|s| !s.success()), "{status:?}\n{log}");
            assert!(
                log.contains("environment \"later\"")
                    && log.contains("no such environment")
                    && log.contains(&format!("revision {head} of epoch"))
                    && log.contains("commit-marks.json"),
                "the refusal does not say what is wrong:\n{log}"
            );
        }
    }
    // An environment deleted on purpose is no loss: a restart is fine.
    std::fs::remove_file(dir.path().join("data/commit-marks.json")).unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    admin
        .create_environment(pb::CreateEnvironmentRequest { name: "brief".into(), description: String::new() })
        .await
        .unwrap();
    admin
        .delete_environment(pb::DeleteEnvironmentRequest { name: "brief".into(), ..Default::default() })
        .await
        .unwrap();
    let mut relay = relay;
    relay.sigterm();
    assert!(relay.wait(STEP).await.success());
    Relay::start(dir.path(), &[]).await;
}
