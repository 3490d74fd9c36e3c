//! Relays form a tree of any depth: a replica of a replica of the primary
//! serves SDKs with the primary's revisions, and the primary's propagation
//! answer counts the SDKs at the bottom (each replica reports its
//! subtree, merged on the way up).

use flagstream::Context;
use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::cluster::{Cluster, eventually};
use flagstream_tests::relay::{Relay, bool_flag, put};

/// primary → tier 1 → tier 2 → SDK: a write at the primary reaches the
/// SDK, and propagation at the primary reports it acked.
#[tokio::test]
async fn a_chain_of_depth_three_serves_and_reports_to_the_top() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), 1, &[], &[]).await;
    let tier1 = &c.replicas[0];
    let mut tier2 = Relay::start_replica(&dir.path().join("tier2"), &[tier1.url()], &c.token, &[]).await;
    tier2.admin_secret = Some(c.primary.admin_token());
    tier2.wait_ready().await;
    let sdk = tier2.sdk_for(c.primary.demo_key()).build().unwrap();
    sdk.wait_ready(STEP).await;
    let mut admin = c.primary.admin().await;
    let revision = put(&mut admin, "demo", bool_flag("deep", true)).await.unwrap();
    eventually("the write at the bottom of the tree", || sdk.bool("deep", &Context::new("u"), false)).await;
    assert_eq!(sdk.stats().snapshots_applied, 1);
    let head = |s: pb::StatusResponse| s.environments.into_iter().find(|e| e.name == "demo").unwrap();
    assert_eq!(head(tier2.status().await).checksum, head(c.primary.status().await).checksum);

    // Reports travel up: tier 2 → tier 1 → primary.
    let mut watch = admin
        .watch_propagation(pb::WatchPropagationRequest {
            environment: "demo".into(),
            revision: Some(revision),
            min_interval_ms: 100,
        })
        .await
        .unwrap()
        .into_inner();
    let mut last = None;
    while let Some(u) = tokio::time::timeout(STEP, watch.message()).await.expect("updates").unwrap() {
        last = u.propagation;
    }
    let p = last.unwrap();
    assert_eq!((p.subscribers_total, p.subscribers_acked), (1, 1), "{p:?}");
    assert_eq!((p.relays_total, p.relays_reporting), (1, 1), "tier 1 reported for its subtree: {p:?}");
    let t1 = head(tier1.status().await);
    assert_eq!(t1.replicas.len(), 1, "tier 1 lists tier 2: {t1:?}");
    assert_eq!(t1.replicas[0].subtree_subscribers, 1);
}
