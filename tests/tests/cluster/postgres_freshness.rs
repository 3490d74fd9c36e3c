//! A relay on PostgreSQL reports its data fresh only when it is: a query of
//! the change feed that hangs (a lock on its table) neither stops the
//! catch-up of other relays' writes nor goes unnoticed, and an environment
//! whose state in the database does not verify is never reported fresh.

use std::time::Duration;

use flagstream::Context;
use flagstream_tests::STEP;
use flagstream_tests::cluster::{eventually, eventually_async};
use flagstream_tests::postgres::Postgres;
use flagstream_tests::relay::{Relay, bool_flag, put};

const LIVE: &str = "flagstream_upstream_live{env=\"demo\"}";
const STALENESS: &str = "flagstream_staleness_seconds{env=\"demo\"}";

/// Waits until `r`'s `/metrics` sample satisfies `ok`.
/// Waits until `sample` is exported and `ok`: a reload of the environment
/// drops and recreates its series, so a moment without it is waited out.
async fn wait_metric(r: &Relay, sample: &str, ok: impl Fn(f64) -> bool) {
    eventually_async(sample, || async { r.try_metric(sample).await.is_some_and(&ok) }).await;
}

async fn demo_live(r: &Relay) -> bool {
    r.status().await.environments.iter().find(|e| e.name == "demo").expect("demo").upstream_live
}

/// The propagation report table is locked: the relays' report queries
/// wait on it, and writes still reach the other relay's SDKs by its feed,
/// which still reports its data current.
#[tokio::test]
async fn a_hung_report_query_does_not_stop_the_catch_up() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = pg.database("flags");
    let a = Relay::start(&dir.path().join("a"), &["--store", &url]).await;
    let b = Relay::start(&dir.path().join("b"), &["--store", &url, "--demo", "false"]).await;
    let sdk = b.sdk_for(a.demo_key()).backoff_base(Duration::from_millis(100)).build().unwrap();
    sdk.wait_ready(STEP).await;
    let held = pg.hold("flags", "LOCK TABLE flagstream_relays IN ACCESS EXCLUSIVE MODE");
    eventually("the report table is locked", || pg.table_locked("flags", "flagstream_relays")).await;
    eventually("both relays' report queries wait on the lock", || {
        pg.waiting_for_locks("flagstream-relay") >= 2
    })
    .await;
    put(&mut a.admin().await, "demo", bool_flag("while-locked", true)).await.unwrap();
    eventually("the write reaches the other relay's SDK", || {
        sdk.bool("while-locked", &Context::new("u"), false)
    })
    .await;
    wait_metric(&b, LIVE, |v| v == 1.0).await;
    drop(held);
}

/// The environments table is locked and the feed is told to catch `demo`
/// up: its query waits. While it still waits (before the step's own
/// timeout ends the session), the relay reports `demo` unconfirmed and
/// its staleness growing; once the lock goes, the catch-up finishes and
/// `demo` is live again.
#[tokio::test]
async fn a_hung_catch_up_is_reported_stale_until_it_resumes() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = pg.database("flags");
    let relay = Relay::start(&dir.path().join("a"), &["--store", &url]).await;
    wait_metric(&relay, LIVE, |v| v == 1.0).await;
    let held = pg.hold("flags", "LOCK TABLE flagstream_envs IN ACCESS EXCLUSIVE MODE");
    eventually("the environments table is locked", || pg.table_locked("flags", "flagstream_envs")).await;
    pg.sql("flags", "NOTIFY flagstream, 'rev:demo:1'");
    eventually("the feed's catch-up waits on the lock", || pg.waiting_for_locks("flagstream-relay") >= 1)
        .await;
    wait_metric(&relay, LIVE, |v| v == 0.0).await;
    wait_metric(&relay, STALENESS, |v| v > 0.0).await;
    assert!(!demo_live(&relay).await, "Status says live while the catch-up hangs");
    assert!(
        !relay.log().contains("change feed session ended"),
        "reported stale only once the step timed out, not while it hung:\n{}",
        relay.log()
    );
    drop(held);
    wait_metric(&relay, LIVE, |v| v == 1.0).await;
    wait_metric(&relay, STALENESS, |v| v == 0.0).await;
    put(&mut relay.admin().await, "demo", bool_flag("after", true)).await.unwrap();
}

/// The database's state of `demo` is made not to verify (another epoch
/// whose checksum does not match its items): the reload fails, and the
/// relay reports `demo` unconfirmed, with its staleness growing, however
/// often its feed's ping succeeds; once the state verifies again, `demo`
/// is live again.
#[tokio::test]
async fn an_environment_whose_reload_does_not_verify_is_not_fresh() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = pg.database("flags");
    let relay = Relay::start(&dir.path().join("a"), &["--store", &url]).await;
    wait_metric(&relay, LIVE, |v| v == 1.0).await;
    let row = pg.sql("flags", "SELECT epoch || ' ' || checksum FROM flagstream_envs WHERE name = 'demo'");
    let (epoch, checksum) = row.trim().split_once(' ').expect("epoch and checksum");
    pg.sql(
        "flags",
        "UPDATE flagstream_envs SET epoch = 'forged', checksum = checksum # 1 WHERE name = 'demo'",
    );
    pg.sql("flags", "NOTIFY flagstream, 'rev:demo:1'");
    eventually("the reload fails", || relay.log().contains("does not verify")).await;
    wait_metric(&relay, LIVE, |v| v == 0.0).await;
    wait_metric(&relay, STALENESS, |v| v > 0.0).await;
    assert!(!demo_live(&relay).await, "Status says live for data that did not verify");
    // Pings keep succeeding meanwhile; the environment stays unconfirmed.
    wait_metric(&relay, STALENESS, |v| v > 6.0).await;
    assert_eq!(relay.metric(LIVE).await, 0.0, "a ping made unverified data live");

    pg.sql(
        "flags",
        &format!("UPDATE flagstream_envs SET epoch = '{epoch}', checksum = {checksum} WHERE name = 'demo'"),
    );
    pg.sql("flags", "NOTIFY flagstream, 'rev:demo:1'");
    wait_metric(&relay, LIVE, |v| v == 1.0).await;
    wait_metric(&relay, STALENESS, |v| v == 0.0).await;
}
