//! Several relays on one PostgreSQL database are all writers: a write at
//! either reaches the SDKs on both with the same epoch, revision and
//! checksum; concurrent conflicting writes at both end with exactly one
//! winner and a conflict naming the version; an SDK fails over between
//! them by delta; propagation counts the SDKs on every relay.

use std::time::Duration;

use flagstream::{Client, Context};
use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::cluster::eventually;
use flagstream_tests::postgres::Postgres;
use flagstream_tests::relay::{Relay, bool_flag, put};

/// Two relays on a fresh database (the first seeds the demo).
async fn two_relays(pg: &Postgres, dir: &std::path::Path) -> (Relay, Relay) {
    let url = pg.database("flags");
    let a = Relay::start(&dir.join("a"), &["--store", &url]).await;
    let mut b = Relay::start(&dir.join("b"), &["--store", &url, "--demo", "false"]).await;
    b.admin_secret = Some(a.admin_token());
    (a, b)
}

fn sdk(urls: &[String], key: &str) -> Client {
    Client::builder()
        .endpoints(urls.to_vec())
        .keep_endpoint_order()
        .sdk_key(key)
        .backoff_base(Duration::from_millis(100))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_write_at_either_relay_reaches_sdks_on_both() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_relays(&pg, dir.path()).await;
    let key = a.demo_key();
    let (on_a, on_b) = (sdk(&[a.url()], &key), sdk(&[b.url()], &key));
    on_a.wait_ready(STEP).await;
    on_b.wait_ready(STEP).await;
    let r1 = put(&mut a.admin().await, "demo", bool_flag("from-a", true)).await.unwrap();
    let r2 = put(&mut b.admin().await, "demo", bool_flag("from-b", true)).await.unwrap();
    assert_eq!(r2, r1 + 1, "one gap-free revision sequence across relays");
    for s in [&on_a, &on_b] {
        eventually("both writes", || {
            s.bool("from-a", &Context::new("u"), false) && s.bool("from-b", &Context::new("u"), false)
        })
        .await;
        assert_eq!(s.stats().snapshots_applied, 1, "writes arrive as deltas\n{}\n{}", a.log(), b.log());
    }
    b.wait_head("demo", r2).await;
    a.wait_head("demo", r2).await;
    // Writes alternating between the relays keep one audit chain, which
    // both relays verify.
    let mut head = 0;
    for i in 0..4 {
        let at = if i % 2 == 0 { &a } else { &b };
        head = put(&mut at.admin().await, "demo", bool_flag(&format!("audited-{i}"), true)).await.unwrap();
    }
    // Both relays at the last write's revision (the one that wrote it
    // last may be the other: its feed can still be behind).
    for (r, name) in [(&a, "a"), (&b, "b")] {
        r.wait_head("demo", head).await;
        let v = r
            .admin()
            .await
            .verify_audit(pb::VerifyAuditRequest { environment: "demo".into() })
            .await
            .unwrap()
            .into_inner();
        assert!(v.ok, "relay {name}: the audit chain broke at {}", v.first_broken);
        assert!(v.records_checked >= 6, "relay {name}: {v:?}");
    }
    let head = |s: pb::StatusResponse| {
        let e = s.environments.into_iter().find(|e| e.name == "demo").unwrap();
        (e.epoch, e.head_revision, e.checksum)
    };
    assert_eq!(head(a.status().await), head(b.status().await), "same epoch, revision and checksum");
    assert_eq!(a.status().await.role, pb::RelayRole::Shared as i32);
    // What operators watch: each relay timed its own commit and the other's
    // arrival through the change feed.
    for (r, name) in [(&a, "a"), (&b, "b")] {
        assert!(r.metric("flagstream_commit_seconds_count").await >= 1.0, "relay {name}");
        assert!(r.metric("flagstream_feed_lag_seconds_count").await >= 1.0, "relay {name}");
    }

    // Propagation at either relay counts the SDKs on both.
    let r3 = put(&mut a.admin().await, "demo", bool_flag("counted", true)).await.unwrap();
    let mut watch = b
        .admin()
        .await
        .watch_propagation(pb::WatchPropagationRequest {
            environment: "demo".into(),
            revision: Some(r3),
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
    assert_eq!((p.subscribers_total, p.subscribers_acked), (2, 2), "{p:?}");
    assert_eq!((p.relays_total, p.relays_reporting), (1, 1), "the other relay reported: {p:?}");

    // After a quiet spell longer than the 10 s a peer's report stays
    // fresh (the input here is time passing, so this one waits), the other
    // relay's SDK still counts.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let p = b
        .admin()
        .await
        .get_propagation(pb::GetPropagationRequest { environment: "demo".into(), revision: Some(r3) })
        .await
        .unwrap()
        .into_inner()
        .propagation
        .unwrap();
    assert_eq!((p.subscribers_total, p.relays_reporting), (2, 1), "a quiet relay still reports: {p:?}");
}

#[tokio::test]
async fn concurrent_conflicting_writes_have_exactly_one_winner() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_relays(&pg, dir.path()).await;
    let v = put(&mut a.admin().await, "demo", bool_flag("contested", true)).await.unwrap();
    b.wait_head("demo", v).await;
    for round in 0..10u64 {
        let current = a
            .admin()
            .await
            .get_flag(pb::GetFlagRequest { environment: "demo".into(), key: "contested".into() })
            .await
            .unwrap()
            .into_inner()
            .flag
            .unwrap()
            .version;
        let head = a_head(&a.status().await.environments);
        b.wait_head("demo", head).await;
        let (mut admin_a, mut admin_b) = (a.admin().await, b.admin().await);
        // Two real changes (neither a no-op), both expecting `current`.
        let req = |by: &str| {
            let mut flag = bool_flag("contested", true);
            flag.description = format!("{by} {round}");
            pb::PutFlagRequest {
                environment: "demo".into(),
                flag: Some(flag),
                expected_version: Some(current),
                comment: String::new(),
            }
        };
        let (ra, rb) = tokio::join!(admin_a.put_flag(req("a")), admin_b.put_flag(req("b")));
        let outcomes = [ra.is_ok(), rb.is_ok()];
        assert_eq!(
            outcomes.iter().filter(|ok| **ok).count(),
            1,
            "round {round}: exactly one wins: {ra:?} {rb:?}"
        );
        let loser = match (ra, rb) {
            (Err(e), _) | (_, Err(e)) => e,
            _ => unreachable!("one of them failed"),
        };
        assert_eq!(loser.code(), tonic::Code::FailedPrecondition, "{loser:?}");
        let want = format!("expected version {current}, but it is at version {}", current + 1);
        assert!(loser.message().contains(&want), "{}", loser.message());
    }
}

/// Creating one environment at two relays at once: one wins, the other
/// gets ALREADY_EXISTS, and the winner's environment (its flags, its SDK
/// key) is untouched.
#[tokio::test]
async fn concurrent_creates_of_one_environment_have_one_winner() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_relays(&pg, dir.path()).await;
    for round in 0..8 {
        let name = format!("race-{round}");
        let req = || pb::CreateEnvironmentRequest { name: name.clone(), description: String::new() };
        let (mut admin_a, mut admin_b) = (a.admin().await, b.admin().await);
        let (ra, rb) = tokio::join!(admin_a.create_environment(req()), admin_b.create_environment(req()));
        let (winner, key, loser) = match (ra, rb) {
            (Ok(w), Err(l)) => (&a, w.into_inner().sdk_key, l),
            (Err(l), Ok(w)) => (&b, w.into_inner().sdk_key, l),
            (ra, rb) => panic!("round {round}: exactly one create wins: {ra:?} {rb:?}"),
        };
        assert_eq!(loser.code(), tonic::Code::AlreadyExists, "{loser:?}");
        let rev = put(&mut winner.admin().await, &name, bool_flag("kept", true)).await.unwrap();
        for r in [&a, &b] {
            r.wait_head(&name, rev).await;
            let client = sdk(&[r.url()], &key);
            client.wait_ready(STEP).await;
            assert!(
                client.bool("kept", &Context::new("u"), false),
                "round {round}: the winner's key and flag"
            );
        }
    }
}

/// A replica can follow one relay of a shared database; its token revoked
/// at the *other* relay ends its stream here too, at once.
#[tokio::test]
async fn a_token_revoked_at_one_relay_ends_replica_streams_at_the_other() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_relays(&pg, dir.path()).await;
    let token = flagstream_tests::cluster::replicate_token(&a, dir.path(), "replicas").await;
    let mut replica = Relay::start_replica(&dir.path().join("replica"), &[b.url()], &token, &[]).await;
    replica.admin_secret = Some(a.admin_token());
    replica.wait_ready().await;
    let rev = put(&mut a.admin().await, "demo", bool_flag("via-b", true)).await.unwrap();
    replica.wait_head("demo", rev).await;
    replica.wait_status("live", |s| s.environments.iter().any(|e| e.name == "demo" && e.upstream_live)).await;
    a.admin().await.revoke_token(pb::RevokeTokenRequest { name: "replicas".into() }).await.unwrap();
    replica
        .wait_status("cut off", |s| s.environments.iter().any(|e| e.name == "demo" && !e.upstream_live))
        .await;
    assert!(b.log().contains("token revoked at another relay"), "{}", b.log());
}

fn a_head(envs: &[pb::EnvironmentStatus]) -> u64 {
    envs.iter().find(|e| e.name == "demo").map_or(0, |e| e.head_revision)
}

#[tokio::test]
async fn an_sdk_fails_over_between_relays_by_delta() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (mut a, b) = two_relays(&pg, dir.path()).await;
    let client = sdk(&[a.url(), b.url()], &a.demo_key());
    client.wait_ready(STEP).await;
    a.kill9();
    a.wait(STEP).await;
    put(&mut b.admin().await, "demo", bool_flag("after-failover", true)).await.unwrap();
    eventually("the write via relay b", || client.bool("after-failover", &Context::new("u"), false)).await;
    assert_eq!(client.stats().snapshots_applied, 1, "resumed by delta: {:?}", client.stats());
}
