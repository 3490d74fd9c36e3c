//! SDKs move between replicas without a full snapshot: a cursor from one
//! relay of the tree is valid at every other (same epochs, revisions and
//! checksums), so a replica killed or drained sends its SDKs to the other
//! replica, where they resume by delta.

use std::time::Duration;

use flagstream::{Client, Context};
use flagstream_tests::STEP;
use flagstream_tests::cluster::{Cluster, eventually};
use flagstream_tests::relay::{bool_flag, put};

fn sdk(c: &Cluster) -> Client {
    Client::builder()
        .endpoints([c.replicas[0].url(), c.replicas[1].url()])
        .keep_endpoint_order()
        .sdk_key(c.primary.demo_key())
        .backoff_base(Duration::from_millis(100))
        .build()
        .unwrap()
}

/// Replica killed (`kill -9`): its SDK moves to the other replica and
/// resumes by delta; zero snapshots after the first.
#[tokio::test]
async fn a_killed_replicas_sdks_resume_on_the_other_replica_by_delta() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), 2, &[], &[]).await;
    let client = sdk(&c);
    client.wait_ready(STEP).await;
    assert_eq!(c.replicas[0].status().await.environments[0].subscribers, 1, "it started on replica 0");
    c.replicas[0].kill9();
    let mut admin = c.primary.admin().await;
    put(&mut admin, "demo", bool_flag("after-kill", true)).await.unwrap();
    eventually("the write via replica 1", || client.bool("after-kill", &Context::new("u"), false)).await;
    let s = client.stats();
    assert_eq!(s.snapshots_applied, 1, "resumed by delta: {s:?}");
    assert!(s.endpoint_switches >= 1, "{s:?}");
}

/// Replica drained (SIGTERM): it asks its SDKs to reconnect elsewhere; they
/// resume on the other replica by delta while it exits cleanly.
#[tokio::test]
async fn a_drained_replicas_sdks_move_to_the_other_replica_by_delta() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(dir.path(), 2, &[], &["--drain-spread", "100ms"]).await;
    let client = sdk(&c);
    client.wait_ready(STEP).await;
    c.replicas[0].sigterm();
    eventually("the SDK on replica 1", || client.stats().reconnects >= 1 && client.stats().connects >= 2)
        .await;
    assert!(c.replicas[0].wait(STEP).await.success(), "the drained replica exits cleanly");
    let mut admin = c.primary.admin().await;
    put(&mut admin, "demo", bool_flag("after-drain", true)).await.unwrap();
    eventually("the write via replica 1", || client.bool("after-drain", &Context::new("u"), false)).await;
    assert_eq!(client.stats().snapshots_applied, 1, "{:?}", client.stats());
    assert!(c.replicas[0].log().contains("all subscribers left"), "{}", c.replicas[0].log());
}
