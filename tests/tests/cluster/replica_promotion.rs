//! Manual failover (docs/OPERATIONS.md): with the primary dead, a stopped
//! replica is promoted and started as the primary; the other replica is
//! pointed at it. Every environment has a new epoch, so every SDK
//! resynchronises with one full snapshot (never mixed state), the flags are
//! what they were, the replicated admin tokens keep working, and writes
//! at the new primary reach SDKs below the other replica.

use flagstream::{Client, Context};
use flagstream_tests::STEP;
use flagstream_tests::cluster::{Cluster, eventually};
use flagstream_tests::relay::{Relay, bool_flag, put};

#[tokio::test]
async fn a_promoted_replica_becomes_the_primary_with_new_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(dir.path(), 2, &[], &[]).await;
    let mut admin = c.primary.admin().await;
    let revision = put(&mut admin, "demo", bool_flag("kept", true)).await.unwrap();
    for r in &c.replicas {
        r.wait_head("demo", revision).await;
    }
    let old_epoch = c.primary.status().await.environments[0].epoch.clone();
    let token = c.primary.admin_token();
    let sdk =
        Client::builder().endpoints([c.replicas[1].url()]).sdk_key(c.primary.demo_key()).build().unwrap();
    sdk.wait_ready(STEP).await;
    c.primary.kill9();
    c.primary.wait(STEP).await;

    // A replica's store cannot be served as a primary's by mistake.
    let a = dir.path().join("replica-0");
    c.replicas[0].sigterm();
    c.replicas[0].wait(STEP).await;
    let refused = std::process::Command::new(flagstream_tests::relay::relay_binary())
        .args(["serve", "--data-dir"])
        .arg(a.join("data"))
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("promote"), "{refused:?}");

    let promoted = std::process::Command::new(flagstream_tests::relay::relay_binary())
        .args(["promote", "--data-dir"])
        .arg(a.join("data"))
        .output()
        .unwrap();
    assert!(promoted.status.success(), "{promoted:?}");
    let mut primary = Relay::start(&a, &["--demo", "false"]).await;
    primary.admin_secret = Some(token.clone());
    let s = primary.status().await;
    let demo = s.environments.iter().find(|e| e.name == "demo").unwrap();
    assert_ne!(demo.epoch, old_epoch, "a new epoch");
    assert_eq!(demo.head_revision, revision, "revisions continue");

    // The other replica follows the new primary.
    let b = dir.path().join("replica-1");
    let addr = c.replicas[1].grpc.to_string();
    c.replicas[1].sigterm();
    c.replicas[1].wait(STEP).await;
    let mut replica = Relay::start_replica_on(&b, &addr, &[primary.url()], &c.token, &[]).await;
    replica.admin_secret = Some(token);
    replica.wait_status("the new epoch", |s| s.environments.iter().any(|e| e.epoch == demo.epoch)).await;
    eventually("the SDK's clean resync", || sdk.stats().snapshots_applied == 2).await;
    assert!(sdk.bool("kept", &Context::new("u"), false));

    let mut admin = primary.admin().await;
    put(&mut admin, "demo", bool_flag("after-promotion", true)).await.unwrap();
    eventually("a write at the new primary", || sdk.bool("after-promotion", &Context::new("u"), false)).await;
    assert_eq!(sdk.stats().snapshots_applied, 2, "one resync, then deltas");
}
