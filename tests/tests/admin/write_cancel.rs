//! A caller that goes away in the middle of a write (a deadline, a Ctrl-C)
//! never leaves the relay's memory, its disk and its subscribers
//! disagreeing: a commit finishes whole or not at all, the next write gets
//! the next revision, and a restart verifies the checksum.

use std::time::{Duration, Instant};

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Admin, Relay, bool_flag};
use flagstream_tests::subscriber::{Subscriber, Update};
use rand::Rng;

/// A batch that rewrites `flags` flags with `bytes`-long descriptions: a
/// large commit (MiBs through validation, sled and its flush).
fn big_batch(round: usize, flags: usize, bytes: usize) -> pb::BatchRequest {
    let ops = (0..flags)
        .map(|i| {
            let mut f = bool_flag(&format!("f-{i}"), (i + round).is_multiple_of(2));
            f.description = format!("{round}-{}", "x".repeat(bytes));
            pb::BatchOp {
                op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp { flag: Some(f), expected_version: None })),
            }
        })
        // One flag of the round's own: a commit that reached disk but not
        // memory leaves an item the next rounds never overwrite, so any such
        // divergence shows at the restart's checksum, not only the last one.
        .chain(std::iter::once(pb::BatchOp {
            op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp {
                flag: Some(bool_flag(&format!("round-{round}"), true)),
                expected_version: None,
            })),
        }))
        .collect();
    pb::BatchRequest {
        environment: "demo".into(),
        ops,
        expected_revision: None,
        comment: format!("round {round}"),
    }
}

async fn head(admin: &mut Admin) -> (u64, u64) {
    let status = admin.status(pb::StatusRequest {}).await.expect("status").into_inner();
    let env = status.environments.iter().find(|e| e.name == "demo").expect("demo environment");
    (env.head_revision, env.checksum)
}

/// Every flag's key, version and description as a subscriber sees them.
async fn contents(relay: &Relay) -> (u64, Vec<(String, u64, String)>) {
    let mut sub =
        Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.expect("subscribe");
    // The subscriber verifies the checksum of what it received.
    let Update::Snapshot { revision, .. } = sub.next(STEP).await.expect("snapshot") else {
        panic!("expected a snapshot")
    };
    let mut flags: Vec<_> =
        sub.flags.values().map(|f| (f.key.clone(), f.version, f.description.clone())).collect();
    flags.sort();
    (revision, flags)
}

#[tokio::test]
async fn cancelled_writes_leave_memory_disk_and_subscribers_agreeing() {
    let dir = tempfile::tempdir().unwrap();
    let mut relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    let (flags, bytes) = (3_000, 600);

    // One write uncancelled, to learn how long a commit takes here.
    let started = Instant::now();
    admin.batch(big_batch(0, flags, bytes)).await.expect("first batch");
    let full = started.elapsed();

    // Callers that give up at random points of the same kind of write:
    // while the request is sent, validated, committed or flushed.
    let mut rng = rand::rng();
    let mut cancelled = Vec::new();
    for round in 1..=40 {
        let mut client = relay.admin().await;
        let after = full.mul_f64(rng.random_range(0.05..1.2));
        match tokio::time::timeout(after, client.batch(big_batch(round, flags, bytes))).await {
            Err(_) => cancelled.push(round),
            Ok(r) => {
                r.expect("an uncancelled batch succeeds");
            }
        }
    }

    // A detached commit may still be finishing: the next write waits for
    // it (one writer per environment) and must get the revision after it.
    let (before, _) = head(&mut admin).await;
    let r = admin.batch(big_batch(1_000, 10, 10)).await.expect("write after the cancellations");
    let revision = r.into_inner().result.unwrap().revision;
    let (now, checksum) = head(&mut admin).await;
    assert!(revision > before, "revision {revision} reused (head was {before})");
    assert_eq!(now, revision);

    // Memory = what subscribers get.
    let (sub_revision, seen) = contents(&relay).await;
    assert_eq!(sub_revision, revision);

    // A cancelled round whose own flag is there was cut mid-flight: its
    // caller left, its commit finished (detached) anyway. One whose flag
    // is not there never committed (its caller left before the request was
    // whole, or while it waited for its turn). The test is about the
    // first kind: there must be some, or nothing here was cut mid-commit.
    let committed = |round: &usize| seen.iter().any(|(k, _, _)| *k == format!("round-{round}"));
    let (cut_mid_flight, never_committed): (Vec<usize>, Vec<usize>) =
        cancelled.iter().copied().partition(|r| committed(r));
    let abandoned = relay.metric("flagstream_admin_writes_total{result=\"abandoned\"}").await;
    eprintln!(
        "cancelled {}: {} cut mid-flight and committed, {} never committed ({abandoned} abandoned in the queue)",
        cancelled.len(),
        cut_mid_flight.len(),
        never_committed.len()
    );
    assert!(
        !cut_mid_flight.is_empty(),
        "no commit was cut mid-flight (cancelled rounds {cancelled:?} all left nothing)"
    );

    // Disk = memory: a restart loads (verifying the checksum) the same
    // revision, checksum and items.
    relay.sigterm();
    relay.wait(STEP).await;
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    assert_eq!(head(&mut admin).await, (revision, checksum), "disk and memory disagreed");
    assert_eq!(contents(&relay).await, (revision, seen));
    // And the store keeps working: the next revision follows.
    let r = admin.batch(big_batch(2_000, 10, 10)).await.expect("write after restart");
    assert_eq!(r.into_inner().result.unwrap().revision, revision + 1);
}

#[tokio::test]
async fn cancelled_environment_creation_and_deletion_is_whole_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    let mut rng = rand::rng();
    for i in 0..30 {
        let name = format!("env-{}", i % 5);
        let mut client = relay.admin().await;
        let after = Duration::from_micros(rng.random_range(50..20_000));
        let _ = tokio::time::timeout(after, async {
            let created = client.create_environment(pb::CreateEnvironmentRequest {
                name: name.clone(),
                description: String::new(),
            });
            if created.await.is_err() {
                let _ = client
                    .delete_environment(pb::DeleteEnvironmentRequest {
                        name: name.clone(),
                        expected_revision: None,
                    })
                    .await;
            }
        })
        .await;
    }
    // Whatever finished: the list in memory survives a restart unchanged,
    // and each listed environment loads (its checksum verified) and takes
    // a write at revision 1 or later.
    let list = |envs: pb::ListEnvironmentsResponse| {
        let mut v: Vec<_> = envs.environments.into_iter().map(|e| (e.name, e.epoch, e.revision)).collect();
        v.sort();
        v
    };
    // Wait for detached work: creating a probe environment queues behind it.
    admin
        .create_environment(pb::CreateEnvironmentRequest { name: "probe".into(), description: String::new() })
        .await
        .expect("probe");
    let before =
        list(admin.list_environments(pb::ListEnvironmentsRequest::default()).await.unwrap().into_inner());
    relay.sigterm();
    relay.wait(STEP).await;
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    let after =
        list(admin.list_environments(pb::ListEnvironmentsRequest::default()).await.unwrap().into_inner());
    assert_eq!(before, after);
    for (name, _, revision) in &after {
        let r = admin
            .put_flag(pb::PutFlagRequest {
                environment: name.clone(),
                flag: Some(bool_flag("after-restart", true)),
                expected_version: None,
                comment: String::new(),
            })
            .await
            .unwrap_or_else(|e| panic!("write to {name}: {e}"));
        assert_eq!(r.into_inner().result.unwrap().revision, revision + 1);
    }
}
