//! Replicas through their upstream's outage: with the primary killed they
//! keep serving, their SDKs see nothing but staleness (reported down the
//! tree), writes fail with a clear message; when the primary is back they
//! catch up by delta. A replica restarted while its upstream is down
//! serves its own persisted copy; one with no data at all is never ready;
//! one with the catalog but no snapshot of an environment refuses its SDKs
//! with `UNAVAILABLE` "holds no data".

use std::time::Duration;

use flagstream::{Context, Status};
use flagstream_tests::STEP;
use flagstream_tests::cluster::{Cluster, eventually, replicate_token};
use flagstream_tests::proxy::{Mode, Proxy};
use flagstream_tests::relay::{Relay, bool_flag, put};
use flagstream_tests::subscriber::{Subscriber, Update};

/// Primary killed: the replica serves on, the SDK below it turns stale
/// (its relay's heartbeats say how old the data is) but keeps every flag;
/// the primary restarted on its address: the replica resumes by delta (no
/// snapshot is sent), the SDK is fresh again and gets new writes as deltas.
#[tokio::test]
async fn replicas_serve_through_a_primary_outage_and_catch_up_by_delta() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(dir.path(), 1, &[], &["--heartbeat", "300ms"]).await;
    let replica = &c.replicas[0];
    let sdk = replica.sdk_for(c.primary.demo_key()).stale_after(Duration::from_secs(1)).build().unwrap();
    sdk.wait_ready(STEP).await;
    let mut admin = c.primary.admin().await;
    let before = put(&mut admin, "demo", bool_flag("before-outage", true)).await.unwrap();
    eventually("the first write", || sdk.bool("before-outage", &Context::new("u"), false)).await;

    let address = c.primary.grpc.to_string();
    c.primary.kill9();
    c.primary.wait(STEP).await;
    // The SDK's own stream is healthy; only its relay's data is getting old.
    eventually("the SDK reports stale data", || matches!(sdk.status(), Status::Stale { .. })).await;
    match sdk.status() {
        Status::Stale { reason, .. } => assert!(reason.contains("upstream"), "{reason}"),
        s => panic!("{s:?}"),
    }
    assert!(sdk.data_age().expect("confirmed once") >= Duration::from_secs(1));
    assert!(sdk.bool("before-outage", &Context::new("u"), false), "known flags keep their values");
    let s = replica.status().await;
    let demo = s.environments.iter().find(|e| e.name == "demo").unwrap();
    assert!(!demo.upstream_live && demo.staleness_ms >= 1000, "{demo:?}");
    let mut ra = replica.admin().await;
    let e = put(&mut ra, "demo", bool_flag("during-outage", true)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unimplemented);
    assert!(e.message().contains("replica") && e.message().contains(&address), "{}", e.message());

    // The primary comes back on the same address.
    c.primary = Relay::start_on(&dir.path().join("primary"), &address, &[]).await;
    let mut admin = c.primary.admin().await;
    let after = put(&mut admin, "demo", bool_flag("after-outage", true)).await.unwrap();
    assert_eq!(after, before + 1);
    eventually("the write after the outage", || sdk.bool("after-outage", &Context::new("u"), false)).await;
    eventually("the SDK is fresh again", || matches!(sdk.status(), Status::Ready { .. })).await;
    assert_eq!(sdk.stats().snapshots_applied, 1, "the SDK never needed a snapshot: {:?}", sdk.stats());
    let snapshots = c.primary.metric("flagstream_sent_messages_total{kind=\"snapshot_chunk\"}").await;
    assert_eq!(snapshots, 0.0, "the replica resumed from its cursor, by delta");
    assert!(c.primary.metric("flagstream_sent_messages_total{kind=\"delta\"}").await >= 1.0);
}

/// A replica restarted while its primary is down is ready at once from its
/// own store and serves the flags it had; a replica that never received
/// anything is not ready, however long it waits.
#[tokio::test]
async fn a_replica_serves_its_persisted_copy_with_the_upstream_down_and_is_never_ready_without_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(dir.path(), 1, &[], &[]).await;
    let mut admin = c.primary.admin().await;
    let revision = put(&mut admin, "demo", bool_flag("persisted", true)).await.unwrap();
    c.replicas[0].wait_head("demo", revision).await;
    let key = c.primary.demo_key();
    let upstream = c.primary.url();
    let stopped = std::time::Instant::now();
    c.replicas[0].sigterm();
    c.replicas[0].wait(STEP).await;
    c.primary.kill9();
    c.primary.wait(STEP).await;

    let mut replica =
        Relay::start_replica(&dir.path().join("replica-0"), std::slice::from_ref(&upstream), &c.token, &[])
            .await;
    replica.admin_secret = Some(c.primary.admin_token());
    replica.wait_ready().await;
    let sdk = replica
        .sdk_for(&key)
        // Any age above 1 ms is stale: the data is at least as old as the
        // replica's downtime.
        .stale_after(Duration::from_millis(1))
        .build()
        .unwrap();
    assert!(sdk.wait_ready(STEP).await.has_data());
    assert!(sdk.bool("persisted", &Context::new("u"), false));
    // Its data was last confirmed before the restart: never fresh.
    match sdk.status() {
        Status::Stale { reason, .. } => assert!(reason.contains("upstream"), "{reason}"),
        s => panic!("data from before the restart looks fresh: {s:?}"),
    }
    let s = replica.status().await;
    let demo = s.environments.iter().find(|e| e.name == "demo").unwrap();
    assert_eq!(demo.head_revision, revision);
    assert!(!demo.upstream_live, "{demo:?}");
    // Its age counts from before it stopped, not from its restart.
    let down = stopped.elapsed().as_millis() as u64;
    let s = replica.status().await;
    let demo = s.environments.iter().find(|e| e.name == "demo").unwrap();
    assert!(
        demo.staleness_ms >= down,
        "staleness {} ms, but it was stopped {down} ms ago",
        demo.staleness_ms
    );
    assert!(replica.log().contains("catalog poll failed"), "it keeps trying its upstream");

    // A fresh replica of the dead primary: it has tried, it holds nothing,
    // it is not ready and sends SDKs elsewhere.
    let mut fresh = Relay::start_replica(&dir.path().join("fresh"), &[upstream], &c.token, &[]).await;
    fresh.admin_secret = Some(c.primary.admin_token());
    eventually("two failed catalog polls", || fresh.log().matches("catalog poll failed").count() >= 2).await;
    // It knows no tokens yet either: nobody can even ask its status.
    let e = fresh.admin().await.status(flagstream_proto::v1::StatusRequest {}).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    let mut health = tonic_health::pb::health_client::HealthClient::new(fresh.channel().await);
    let h = health.check(tonic_health::pb::HealthCheckRequest { service: String::new() }).await.unwrap();
    assert_eq!(
        h.into_inner().status,
        tonic_health::pb::health_check_response::ServingStatus::NotServing as i32
    );
    // It holds no catalog either, so the key itself is unknown there.
    let e = Subscriber::connect(fresh.channel().await, &key, None).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "no data, no stream: {e:?}");
}

/// A replica that holds its upstream's catalog but no snapshot of an
/// environment (its follower's connections to the upstream hang) refuses
/// that environment's SDKs with `UNAVAILABLE` "holds no data" (so they try
/// another relay), and counts the refusal; the environments it has data
/// for are served as usual.
#[tokio::test]
async fn a_replica_with_the_catalog_but_no_snapshot_answers_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let primary = Relay::start(&dir.path().join("primary"), &[]).await;
    let token = replicate_token(&primary, dir.path(), "replicas").await;
    let proxy = Proxy::start(primary.grpc).await;
    let mut replica = Relay::start_replica(&dir.path().join("replica"), &[proxy.url()], &token, &[]).await;
    replica.admin_secret = Some(primary.admin_token());
    replica.wait_ready().await;
    // Every connection made from now on hangs; those open now (the demo
    // stream and the pending catalog long poll) pass. The new environment
    // arrives by that catalog poll; its follower's connections hang.
    proxy.set_new(Mode::Blackhole);
    let late_key = primary.create_env("late").await;
    put(&mut primary.admin().await, "late", bool_flag("x", true)).await.unwrap();
    replica.wait_status("the catalog with late", |s| s.environments.iter().any(|e| e.name == "late")).await;
    let s = replica.status().await;
    let late = s.environments.iter().find(|e| e.name == "late").unwrap();
    assert_eq!(late.head_revision, 0, "no snapshot of late arrived: {late:?}");

    let e = Subscriber::connect(replica.channel().await, &late_key, None).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    assert_eq!(
        e.message(),
        "this relay holds no data for environment \"late\" yet; try another relay",
        "{e:?}"
    );
    assert_eq!(
        replica.metric("flagstream_subscribes_total{result=\"rejected\",reason=\"no_data\"}").await,
        1.0
    );
    // The environment it has data for is served.
    let mut demo = Subscriber::connect(replica.channel().await, &primary.demo_key(), None).await.unwrap();
    assert!(matches!(demo.next(STEP).await, Ok(Update::Snapshot { .. })));
}
