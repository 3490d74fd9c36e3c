//! Replica relays follow their primary: writes reach SDKs on every replica
//! with the primary's epoch, revision and checksum; environments, SDK keys
//! and tokens made or removed at the primary reach the replicas; reads
//! work on a replica and writes are refused with a message naming the
//! primary; `--wait` and propagation count SDKs behind replicas; a replica
//! follows only the environments it lists and shows its freshness.

use std::time::Duration;

use flagstream::{Client, Context};
use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::cluster::{Cluster, eventually, eventually_async};
use flagstream_tests::relay::{bool_flag, put};
use flagstream_tests::subscriber::{Subscriber, Update};

fn client(url: String, key: &str) -> Client {
    Client::builder().endpoints([url]).sdk_key(key).build().expect("client builds")
}

/// [`client`] retrying a refusal within 100 ms or so: used to wait for a
/// key to reach a replica.
fn fast_client(url: String, key: &str) -> Client {
    Client::builder()
        .endpoints([url])
        .sdk_key(key)
        .backoff_base(Duration::from_millis(50))
        .build()
        .expect("client builds")
}

/// A write at the primary reaches SDKs on both replicas; every relay holds
/// the same epoch, revision and checksum; a replica serves reads and
/// refuses writes naming the primary.
#[tokio::test]
async fn writes_reach_sdks_on_both_replicas_and_replicas_refuse_writes() {
    let dir = tempfile::tempdir().unwrap();
    // The Admin API fenced off on its own address: replicas need only the
    // SDK-facing one.
    let c = Cluster::start(
        dir.path(),
        2,
        &["--advertise-url", "http://primary.example:7070", "--admin-listen", "127.0.0.1:0"],
        &[],
    )
    .await;
    let key = c.primary.demo_key();
    let sdks: Vec<Client> = c.replicas.iter().map(|r| client(r.url(), &key)).collect();
    for s in &sdks {
        assert!(s.wait_ready(STEP).await.has_data());
    }
    let mut admin = c.primary.admin().await;
    let revision = put(&mut admin, "demo", bool_flag("from-primary", true)).await.unwrap();
    for s in &sdks {
        eventually("the write on an SDK behind a replica", || {
            s.bool("from-primary", &Context::new("u"), false)
        })
        .await;
        assert_eq!(s.stats().snapshots_applied, 1, "the write came as a delta");
    }
    let p = c.primary.status().await;
    let head = |s: &pb::StatusResponse| {
        let e = s.environments.iter().find(|e| e.name == "demo").unwrap();
        (e.epoch.clone(), e.head_revision, e.checksum)
    };
    assert_eq!(head(&p).1, revision);
    for r in &c.replicas {
        r.wait_head("demo", revision).await;
        assert_eq!(
            head(&r.status().await),
            head(&p),
            "a replica passes epoch, revision and checksum through"
        );
    }

    // Reads work on a replica...
    let mut ra = c.replicas[0].admin().await;
    let f = ra
        .get_flag(pb::GetFlagRequest { environment: "demo".into(), key: "from-primary".into() })
        .await
        .expect("get on a replica")
        .into_inner();
    assert_eq!(f.flag.unwrap().key, "from-primary");
    let listed = ra
        .list_flags(pb::ListFlagsRequest { environment: "demo".into(), ..Default::default() })
        .await
        .expect("list on a replica")
        .into_inner();
    assert!(listed.flags.iter().any(|f| f.key == "from-primary"));
    let s = ra.status(pb::StatusRequest {}).await.unwrap().into_inner();
    assert_eq!(s.role, pb::RelayRole::Replica as i32);
    assert_eq!(s.primary, "http://primary.example:7070", "the primary's address travels down");
    // ...writes are refused, naming the primary, and nothing changes.
    let e = put(&mut ra, "demo", bool_flag("at-replica", true)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unimplemented, "{e:?}");
    assert!(e.message().contains("http://primary.example:7070"), "{}", e.message());
    let e = ra
        .create_environment(pb::CreateEnvironmentRequest { name: "x".into(), description: String::new() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unimplemented, "{e:?}");
    let e = ra
        .list_audit(pb::ListAuditRequest { environment: "demo".into(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unimplemented, "the audit log is the primary's: {e:?}");
    assert!(c.primary.status().await.environments.iter().all(|e| e.head_revision == revision));
}

/// Environments created and deleted at the primary, and SDK keys created
/// and revoked there, reach the replica: a new environment's key works on
/// the replica, a revoked key's stream on the replica ends, a deleted
/// environment's streams end with NOT_FOUND.
#[tokio::test]
async fn environments_and_keys_follow_the_primary() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), 1, &[], &[]).await;
    let replica = &c.replicas[0];
    let staging_key = c.primary.create_env("staging").await;
    let mut admin = c.primary.admin().await;
    put(&mut admin, "staging", bool_flag("s", true)).await.unwrap();
    replica.wait_head("staging", 1).await;
    let sdk = client(replica.url(), &staging_key);
    sdk.wait_ready(STEP).await;
    assert!(sdk.bool("s", &Context::new("u"), false));

    // A second key, made at the primary, opens a stream at the replica.
    let made = admin
        .create_sdk_key(pb::CreateSdkKeyRequest {
            environment: "staging".into(),
            name: "svc".into(),
            client: false,
        })
        .await
        .unwrap()
        .into_inner();
    let id = made.key.unwrap().id;
    // An SDK with the new key is ready at the replica once its catalog has
    // it (refused as unknown until then, the SDK retrying).
    let with_new_key = fast_client(replica.url(), &made.secret);
    assert!(with_new_key.wait_ready(STEP).await.has_data(), "the new key works on the replica");
    let mut sub = Subscriber::connect(replica.channel().await, &made.secret, None).await.unwrap();
    assert!(matches!(sub.next(STEP).await, Ok(Update::Snapshot { .. })));
    // Revoked at the primary: its stream at the replica ends.
    admin.revoke_sdk_key(pb::RevokeSdkKeyRequest { environment: "staging".into(), id }).await.unwrap();
    let end = loop {
        match sub.next(STEP).await {
            Ok(Update::Heartbeat { .. }) => continue,
            other => break other,
        }
    };
    let err = end.expect_err("the stream ends");
    assert!(err.contains("Unauthenticated") || err.contains("revoked"), "{err}");

    // Deleted at the primary: the replica's streams end with NOT_FOUND.
    let mut demo = Subscriber::connect(replica.channel().await, &c.primary.demo_key(), None).await.unwrap();
    assert!(matches!(demo.next(STEP).await, Ok(Update::Snapshot { .. })));
    admin
        .delete_environment(pb::DeleteEnvironmentRequest { name: "demo".into(), expected_revision: None })
        .await
        .unwrap();
    let end = loop {
        match demo.next(STEP).await {
            Ok(Update::Heartbeat { .. }) => continue,
            other => break other,
        }
    };
    let err = end.expect_err("the stream ends");
    assert!(err.contains("NotFound") || err.contains("deleted"), "{err}");
    replica.wait_status("demo gone", |s| s.environments.iter().all(|e| e.name != "demo")).await;

    // The replicas' token revoked at the primary: their streams end there
    // at once, and the replica says its upstream is down.
    replica
        .wait_status("staging live", |s| {
            s.environments.iter().any(|e| e.name == "staging" && e.upstream_live)
        })
        .await;
    admin.revoke_token(pb::RevokeTokenRequest { name: "replicas".into() }).await.unwrap();
    replica
        .wait_status("staging cut off", |s| {
            s.environments.iter().any(|e| e.name == "staging" && !e.upstream_live)
        })
        .await;
    assert!(
        replica.log().contains("Unauthenticated") || replica.log().contains("revoked"),
        "{}",
        replica.log()
    );
}

/// `WatchPropagation` at the primary (what `flagctl --wait` uses) counts
/// the SDKs behind replicas, and says every replica reported; `Status` at
/// the primary lists the replicas with their lag.
#[tokio::test]
async fn propagation_counts_sdks_behind_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), 2, &[], &[]).await;
    let key = c.primary.demo_key();
    let mut sdks = vec![client(c.primary.url(), &key)];
    for r in &c.replicas {
        sdks.push(client(r.url(), &key));
        sdks.push(client(r.url(), &key));
    }
    for s in &sdks {
        s.wait_ready(STEP).await;
    }
    let mut admin = c.primary.admin().await;
    let revision = put(&mut admin, "demo", bool_flag("counted", true)).await.unwrap();
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
    let p = last.expect("at least one update");
    assert_eq!(p.subscribers_total, 5, "1 SDK on the primary + 2 behind each replica: {p:?}");
    assert_eq!(p.subscribers_acked, 5, "{p:?}");
    assert_eq!((p.relays_total, p.relays_reporting), (2, 2), "{p:?}");
    assert!(p.latency_max_ms >= p.latency_p99_ms);
    // A replica's own ack may be held up to a second (acks are coalesced)
    // after the reports that ended the watch.
    let acked = |s: &pb::StatusResponse| {
        let demo = s.environments.iter().find(|e| e.name == "demo");
        demo.is_some_and(|d| {
            d.replicas.len() == 2 && d.replicas.iter().all(|r| r.applied_revision == revision)
        })
    };
    c.primary.wait_status("both replicas acked the revision", acked).await;
    let s = c.primary.status().await;
    let demo = s.environments.iter().find(|e| e.name == "demo").unwrap();
    assert_eq!(demo.replicas.len(), 2, "{demo:?}");
    for r in &demo.replicas {
        assert_eq!(r.token, "replicas");
        assert_eq!(r.applied_revision, revision);
        assert_eq!(r.lag_revisions, 0);
        assert_eq!(r.subtree_subscribers, 2);
    }
}

/// `--environments` limits what a replica follows: another environment of
/// the primary never appears there and its keys are unknown there. The
/// replica's freshness is visible: `flagstream.v1.Upstream` health and the
/// `upstream_live` / `staleness_seconds` gauges follow its upstream's
/// state.
#[tokio::test]
async fn a_replica_follows_only_its_environments_and_shows_its_freshness() {
    use tonic_health::pb::health_check_response::ServingStatus;
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), 1, &[], &["--environments", "demo"]).await;
    let replica = &c.replicas[0];
    let staging_key = c.primary.create_env("staging").await;
    let mut admin = c.primary.admin().await;
    put(&mut admin, "staging", bool_flag("s", true)).await.unwrap();
    let rev = put(&mut admin, "demo", bool_flag("after-staging", true)).await.unwrap();
    replica.wait_head("demo", rev).await;
    // Its catalog (keys, environments) is polled separately from the
    // streams: wait until it has seen a change made after staging's key.
    let made = admin
        .create_sdk_key(pb::CreateSdkKeyRequest {
            environment: "demo".into(),
            name: "later".into(),
            client: false,
        })
        .await
        .unwrap()
        .into_inner();
    let later = fast_client(replica.url(), &made.secret);
    assert!(later.wait_ready(STEP).await.has_data(), "the later demo key reached the replica");
    let status = replica.status().await;
    let names: Vec<&str> = status.environments.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["demo"], "only the listed environment");
    let e = Subscriber::connect(replica.channel().await, &staging_key, None).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");

    // Set by the replica's once-a-second freshness task.
    eventually_async("Upstream health SERVING", || async {
        upstream_health(replica).await == ServingStatus::Serving as i32
    })
    .await;
    let live = "flagstream_upstream_live{env=\"demo\"}";
    let stale = "flagstream_staleness_seconds{env=\"demo\"}";
    eventually_async("upstream_live 1", || async { replica.try_metric(live).await == Some(1.0) }).await;
    assert!(replica.metric(stale).await < 5.0);

    // The primary goes away: the link is down, and it says so.
    c.primary.kill9();
    eventually_async("the gauges showing the outage", || async {
        replica.metric(live).await == 0.0 && replica.metric(stale).await > 0.0
    })
    .await;
    eventually_async("Upstream health NOT_SERVING", || async {
        upstream_health(replica).await == ServingStatus::NotServing as i32
    })
    .await;
}

async fn upstream_health(r: &flagstream_tests::relay::Relay) -> i32 {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let mut h = HealthClient::new(r.channel().await);
    h.check(HealthCheckRequest { service: "flagstream.v1.Upstream".into() })
        .await
        .unwrap()
        .into_inner()
        .status
}

/// flagctl at the tree: `status` at the primary lists each replica with
/// its lag and the SDKs below it; at a replica it names the upstream;
/// `eval` and `export` read a replica's copy.
#[tokio::test]
async fn flagctl_shows_the_tree_and_reads_at_a_replica() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), 1, &[], &[]).await;
    let replica = &c.replicas[0];
    let sdk = client(replica.url(), &c.primary.demo_key());
    sdk.wait_ready(STEP).await;
    let rev = put(&mut c.primary.admin().await, "demo", bool_flag("tree", true)).await.unwrap();
    replica.wait_head("demo", rev).await;
    let flagctl = |relay: &str, args: &[&str]| {
        let bin = flagstream_tests::relay::relay_binary()
            .with_file_name(format!("flagctl{}", std::env::consts::EXE_SUFFIX));
        let out = std::process::Command::new(bin)
            .args(["--config", "/nonexistent/flagctl.toml", "--relay", relay, "-e", "demo"])
            .args(args)
            .env("FLAGSTREAM_TOKEN", c.primary.admin_token())
            .output()
            .expect("flagctl runs");
        assert!(out.status.success(), "flagctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut at_primary = String::new();
    eventually("the replica reported its SDK", || {
        at_primary = flagctl(&c.primary.url(), &["status"]);
        at_primary.lines().any(|l| l.contains("replicas") && l.contains("0 revisions") && l.contains(" 1 "))
    })
    .await;
    assert!(at_primary.contains("REPLICA") && at_primary.contains("SDKS BELOW"), "{at_primary}");
    let at_replica = flagctl(&replica.url(), &["status"]);
    assert!(
        at_replica.contains("(replica,") && at_replica.contains(&format!("upstream  {}", c.primary.url())),
        "{at_replica}"
    );
    assert!(at_replica.contains("live ("), "{at_replica}");
    let eval = flagctl(&replica.url(), &["eval", "tree", "--key", "u"]);
    assert!(eval.contains("value      true") && eval.contains(&format!("(revision {rev})")), "{eval}");
    let export = flagctl(&replica.url(), &["export"]);
    assert!(export.contains("key: tree"), "{export}");
}
