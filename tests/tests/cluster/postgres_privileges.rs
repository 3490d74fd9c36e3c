//! A relay on an already migrated database needs only table privileges:
//! a role with SELECT/INSERT/UPDATE/DELETE (no CREATE, no superuser)
//! starts, follows the change feed, detects its database's incarnation and
//! writes, next to a relay that migrated the database as its owner; a
//! schema newer than the relay knows is refused.

use flagstream::Context;
use flagstream_tests::STEP;
use flagstream_tests::postgres::Postgres;
use flagstream_tests::relay::{Relay, bool_flag, put};

#[tokio::test]
async fn a_role_with_only_table_privileges_runs_a_relay() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let owner_url = pg.database("flags");
    let owner = Relay::start(&dir.path().join("owner"), &["--store", &owner_url]).await;
    let app_url = pg.table_privileges_role("flags", "flags_app");
    let mut app = Relay::start(&dir.path().join("app"), &["--store", &app_url, "--demo", "false"]).await;
    app.admin_secret = Some(owner.admin_token());
    let key = owner.demo_key();
    let client = app.sdk_for(&key).build().expect("client config");
    client.wait_ready(STEP).await;
    // A write through the least-privileged relay, and one through the owner.
    let r1 = put(&mut app.admin().await, "demo", bool_flag("from-app", true)).await.unwrap();
    let r2 = put(&mut owner.admin().await, "demo", bool_flag("from-owner", true)).await.unwrap();
    assert_eq!(r2, r1 + 1);
    app.wait_head("demo", r2).await;
    flagstream_tests::cluster::eventually("both writes at the app relay's SDK", || {
        client.bool("from-app", &Context::new("u"), false)
            && client.bool("from-owner", &Context::new("u"), false)
    })
    .await;
    assert!(!app.log().contains("ERROR"), "{}", app.log());
}

/// A database migrated by a newer relay is refused at start with a message
/// naming both schema versions, and nothing in it is touched.
#[tokio::test]
async fn a_relay_refuses_a_schema_newer_than_it_knows() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = pg.database("flags");
    let first = Relay::start(&dir.path().join("first"), &["--store", &url]).await;
    drop(first);
    pg.sql("flags", "INSERT INTO flagstream_migrations (version) VALUES (99)");
    let before = pg.sql("flags", "SELECT name, revision FROM flagstream_envs ORDER BY name");
    let out = std::process::Command::new(flagstream_tests::relay::relay_binary())
        .args(["serve", "--store", &url, "--data-dir"])
        .arg(dir.path().join("second"))
        .output()
        .expect("the relay runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "the database's schema is at version 99; this relay knows versions up to 3: run a newer relay"
        ),
        "{stderr}"
    );
    assert_eq!(pg.sql("flags", "SELECT name, revision FROM flagstream_envs ORDER BY name"), before);
}
