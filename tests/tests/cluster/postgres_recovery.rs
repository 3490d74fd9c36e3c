//! Relays on PostgreSQL recover from everything the database can do to
//! them and miss nothing: the database restarted (fast, and `-m
//! immediate`: a crash) while writes continue; a relay restarted (it
//! catches up, and its SDK resumes by delta); a relay's LISTEN session
//! killed with `pg_terminate_backend`; a commit whose connection drops
//! before its answer (retried idempotently: its request id is looked up),
//! also while the commit still waits for a synchronous standby;
//! history lost to a restored backup (a new epoch, clean resyncs).

use std::time::Duration;

use flagstream::{Client, Context};
use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::cluster::eventually;
use flagstream_tests::postgres::Postgres;
use flagstream_tests::proxy::Proxy;
use flagstream_tests::relay::{Relay, bool_flag, put};

fn sdk(url: String, key: &str) -> Client {
    Client::builder().endpoints([url]).sdk_key(key).backoff_base(Duration::from_millis(100)).build().unwrap()
}

async fn flag_keys(relay: &Relay) -> Vec<String> {
    let r = relay
        .admin()
        .await
        .list_flags(pb::ListFlagsRequest { environment: "demo".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    r.flags.into_iter().map(|f| f.key).collect()
}

/// Writes keep coming at both relays while the database restarts twice
/// (cleanly, then crashing); every write that was acknowledged is on both
/// relays and their SDKs afterwards, and the writes made while it was down
/// were refused, not lost silently, and are absent afterwards.
#[tokio::test]
async fn database_restarts_while_writes_continue_lose_nothing() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = pg.database("flags");
    let a = Relay::start(&dir.path().join("a"), &["--store", &url]).await;
    let mut b = Relay::start(&dir.path().join("b"), &["--store", &url, "--demo", "false"]).await;
    b.admin_secret = Some(a.admin_token());
    let key = a.demo_key();
    let sdks = [sdk(a.url(), &key), sdk(b.url(), &key)];
    for s in &sdks {
        s.wait_ready(STEP).await;
    }
    let (mut admins, mut acked, mut refused) = ([a.admin().await, b.admin().await], Vec::new(), Vec::new());
    let mut next = 0usize;
    let mut last_own = [String::new(), String::new()];
    // The next `n` writes: (number, which relay takes it), alternating.
    let mut batch = |n: usize| {
        let out: Vec<(usize, usize)> = (next..next + n).map(|i| (i, i % 2)).collect();
        next += n;
        out
    };
    for mode in ["fast", "immediate"] {
        for (n, relay) in batch(10) {
            put(&mut admins[relay], "demo", bool_flag(&format!("w{n}"), true)).await.unwrap();
            acked.push(format!("w{n}"));
            last_own[relay] = format!("w{n}");
        }
        pg.stop(mode);
        // While it is down: refused with UNAVAILABLE, clearly.
        for (n, relay) in batch(3) {
            let e = put(&mut admins[relay], "demo", bool_flag(&format!("w{n}"), true)).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
            assert!(e.message().contains("database"), "{}", e.message());
            refused.push(format!("w{n}"));
        }
        // Loudly visible: the feed gauges say the data is unconfirmed.
        for r in [&a, &b] {
            wait_metric(r, "flagstream_upstream_live{env=\"demo\"}", |v| v == 0.0).await;
            wait_metric(r, "flagstream_staleness_seconds{env=\"demo\"}", |v| v > 0.0).await;
        }
        // Serving goes on from memory: each relay's own last acknowledged
        // write (in its memory before the ack) reaches its SDK with the
        // database down.
        for (i, s) in sdks.iter().enumerate() {
            let own = &last_own[i];
            eventually("the SDK serves its relay's last write", || s.bool(own, &Context::new("u"), false))
                .await;
        }
        pg.start_again();
        // Writes resume (the pool reconnects; a write may need a moment).
        for (n, relay) in batch(10) {
            let flag = format!("w{n}");
            let mut tries = 0;
            loop {
                match put(&mut admins[relay], "demo", bool_flag(&flag, true)).await {
                    Ok(_) => break,
                    Err(e) if e.code() == tonic::Code::Unavailable && tries < 100 => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => panic!("{flag}: {e:?}"),
                }
            }
            acked.push(flag);
        }
        for r in [&a, &b] {
            wait_metric(r, "flagstream_upstream_live{env=\"demo\"}", |v| v == 1.0).await;
        }
    }
    assert_eq!(refused.len(), 6);
    for s in &sdks {
        let last = acked.last().unwrap().clone();
        eventually("every acknowledged write on every SDK", || {
            acked.iter().all(|f| s.bool(f, &Context::new("u"), false))
                && s.bool(&last, &Context::new("u"), false)
        })
        .await;
        // A refused write was not half-done: nothing of it is served.
        let served: Vec<String> = s.snapshot().keys().map(str::to_owned).collect();
        for f in &refused {
            assert!(!served.contains(f), "{f} was refused but an SDK serves it");
        }
    }
    let (ka, kb) = (flag_keys(&a).await, flag_keys(&b).await);
    assert_eq!(ka, kb, "both relays hold the same flags");
    for f in &acked {
        assert!(ka.contains(f), "{f} was acknowledged but is missing");
    }
    // Nor stored: after both restarts no relay holds a write refused while
    // the database was down.
    for f in &refused {
        assert!(!ka.contains(f), "{f} was refused but is stored");
    }
}

/// A relay stopped while the other writes catches up when it starts
/// again, and its SDK resumes by delta (its change log came from the
/// database's history); a relay whose LISTEN session is killed reconnects
/// and catches up.
#[tokio::test]
async fn a_restarted_relay_and_a_killed_listen_session_catch_up() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = pg.database("flags");
    let mut a = Relay::start(&dir.path().join("a"), &["--store", &url]).await;
    let mut b = Relay::start(&dir.path().join("b"), &["--store", &url, "--demo", "false"]).await;
    b.admin_secret = Some(a.admin_token());
    let token = a.admin_token();
    let client = sdk(a.url(), &a.demo_key());
    client.wait_ready(STEP).await;
    let address = a.grpc.to_string();
    a.sigterm();
    a.wait(STEP).await;
    for i in 0..5 {
        put(&mut b.admin().await, "demo", bool_flag(&format!("while-down-{i}"), true)).await.unwrap();
    }
    let mut a = Relay::start_on(&dir.path().join("a"), &address, &["--store", &url]).await;
    a.admin_secret = Some(token);
    eventually("the writes made while it was down", || {
        client.bool("while-down-4", &Context::new("u"), false)
    })
    .await;
    assert_eq!(client.stats().snapshots_applied, 1, "resumed by delta: {:?}", client.stats());

    // Both relays' LISTEN sessions killed: each reconnects, listens, and
    // catches up with what was written meanwhile.
    let killed = pg.sql(
        "flags",
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'flagstream-relay feed'",
    );
    assert_eq!(killed.trim(), "2", "two listening sessions");
    put(&mut b.admin().await, "demo", bool_flag("after-kill", true)).await.unwrap();
    eventually("a caught up after its session was killed", || {
        client.bool("after-kill", &Context::new("u"), false)
    })
    .await;
    eventually("both sessions back", || {
        pg.sql(
            "flags",
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'flagstream-relay feed'",
        )
        .trim()
            == "2"
    })
    .await;
    assert!(a.log().contains("change feed session ended; reconnecting"), "{}", a.log());
}

/// The connection of a commit drops after the database received COMMIT and
/// before the relay heard back: the relay looks the write's request id up,
/// finds it committed, and answers OK; the revision exists once.
#[tokio::test]
async fn a_commit_whose_connection_drops_is_confirmed_by_its_request_id() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    pg.database("flags");
    let proxy = Proxy::start(format!("127.0.0.1:{}", pg.port).parse().unwrap()).await;
    let url = format!("postgres://postgres@{}/flags", proxy.addr);
    let a = Relay::start(&dir.path().join("a"), &["--store", &url]).await;
    let mut admin = a.admin().await;
    let before = put(&mut admin, "demo", bool_flag("before", true)).await.unwrap();
    proxy.cut_after(b"COMMIT");
    let r = put(&mut admin, "demo", bool_flag("cut", true)).await.expect("confirmed, not failed");
    assert_eq!(proxy.cuts(), 1, "the commit's connection was cut");
    assert_eq!(r, before + 1);
    let revisions =
        pg.sql("flags", "SELECT count(*) FROM flagstream_history WHERE env = 'demo' AND revision > 1");
    assert_eq!(revisions.trim(), "2", "each write exactly once");
    assert!(a.log().contains("looking its request id up"), "{}", a.log());
    assert!(a.log().contains("the commit had happened"), "{}", a.log());
    let after = put(&mut admin, "demo", bool_flag("after", true)).await.unwrap();
    assert_eq!(after, r + 1, "the next write continues the sequence");
}

/// The connection of a commit is cut while the commit waits for a
/// synchronous standby that is down: the primary has the commit in its
/// WAL, but the transaction has not ended, so its rows are invisible to
/// any other session. The relay waits for it to end rather than answering
/// "nothing was written" for a write that is about to land; the standby
/// comes back, the commit ends, and the caller gets OK.
#[tokio::test]
async fn a_cut_commit_waiting_for_a_synchronous_standby_is_answered_truthfully() {
    let Some(pg) = Postgres::start() else { return };
    let standby = pg.synchronous_standby();
    let dir = tempfile::tempdir().unwrap();
    pg.database("flags");
    let proxy = Proxy::start(format!("127.0.0.1:{}", pg.port).parse().unwrap()).await;
    let url = format!("postgres://postgres@{}/flags", proxy.addr);
    let a = Relay::start(&dir.path().join("a"), &["--store", &url]).await;
    let mut admin = a.admin().await;
    let before = put(&mut admin, "demo", bool_flag("before", true)).await.unwrap();
    standby.stop();
    proxy.cut_after(b"COMMIT");
    let write = tokio::spawn(async move { put(&mut admin, "demo", bool_flag("cut", true)).await });
    eventually("the relay looks the cut commit up", || a.log().contains("looking its request id up")).await;
    assert_eq!(proxy.cuts(), 1, "the commit's connection was cut");
    assert!(pg.commit_waits_for_standby("flags"), "the commit waits for the standby");
    standby.start_again();
    let r =
        write.await.unwrap().expect("the write landed: the caller must hear OK, not \"nothing was written\"");
    assert_eq!(r, before + 1);
    let revisions =
        pg.sql("flags", "SELECT count(*) FROM flagstream_history WHERE env = 'demo' AND revision > 1");
    assert_eq!(revisions.trim(), "2", "each write exactly once");
    assert!(a.log().contains("the commit had happened"), "{}", a.log());
}

/// A backup restored over the database (its history behind what the
/// relays served): the relays detect it, the environment gets a new epoch,
/// and every SDK resynchronises with one snapshot of the restored state,
/// never a mix of the two histories.
#[tokio::test]
async fn a_restored_backup_becomes_a_new_epoch() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = pg.database("flags");
    let a = Relay::start(&dir.path().join("a"), &["--store", &url]).await;
    let mut b = Relay::start(&dir.path().join("b"), &["--store", &url, "--demo", "false"]).await;
    b.admin_secret = Some(a.admin_token());
    let client = sdk(b.url(), &a.demo_key());
    client.wait_ready(STEP).await;
    put(&mut a.admin().await, "demo", bool_flag("in-backup", true)).await.unwrap();
    let backup = pg.dump("flags");
    let epoch = a.status().await.environments[0].epoch.clone();
    put(&mut a.admin().await, "demo", bool_flag("lost-1", true)).await.unwrap();
    let lost = put(&mut a.admin().await, "demo", bool_flag("lost-2", true)).await.unwrap();
    eventually("the SDK has the later writes", || client.bool("lost-2", &Context::new("u"), false)).await;
    b.wait_head("demo", lost).await;

    pg.restore("flags", &backup);
    // The first write after the restore finds the database behind what its
    // relay served (relays would also notice within their 30 s poll).
    let after = put(&mut a.admin().await, "demo", bool_flag("after-restore", true)).await.unwrap();
    for r in [&a, &b] {
        r.wait_status("a new epoch", |s| s.environments.iter().any(|e| e.epoch != epoch)).await;
        r.wait_head("demo", after).await;
    }
    eventually("the SDK's clean resync", || client.stats().snapshots_applied == 2).await;
    assert!(client.bool("in-backup", &Context::new("u"), false));
    assert!(!client.bool("lost-1", &Context::new("u"), false), "state of the lost history survived");
    let (sa, sb) = (a.status().await, b.status().await);
    assert_eq!(sa.environments[0].epoch, sb.environments[0].epoch, "one new epoch for all");
    assert_eq!(sa.environments[0].checksum, sb.environments[0].checksum);
    assert!(
        a.log().contains("history in the database was lost")
            || b.log().contains("history in the database was lost")
    );
    // The write was made in the new epoch.
    eventually("the write after the restore", || client.bool("after-restore", &Context::new("u"), false))
        .await;
}

/// Waits until `r` exports the `/metrics` sample and it satisfies `ok`.
async fn wait_metric(r: &Relay, sample: &str, ok: impl Fn(f64) -> bool) {
    flagstream_tests::cluster::eventually_async(sample, || async {
        r.try_metric(sample).await.is_some_and(&ok)
    })
    .await;
}
