//! A relay on an already migrated database needs only table privileges:
//! a role with SELECT/INSERT/UPDATE/DELETE (no CREATE, no superuser)
//! starts, follows the change feed, detects its database's incarnation and
//! writes, next to a relay that migrated the database as its owner.

use flagstream::{Client, Context};
use flagstream_tests::STEP;
use flagstream_tests::postgres::Postgres;
use flagstream_tests::relay::{Relay, bool_flag, put};

#[tokio::test]
async fn a_role_with_only_table_privileges_runs_a_relay() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let owner_url = pg.database("flags");
    let owner = Relay::start(&dir.path().join("owner"), &["--store", &owner_url]).await;
    pg.sql(
        "flags",
        "CREATE ROLE flags_app LOGIN;
         REVOKE CREATE ON SCHEMA public FROM PUBLIC;
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO flags_app;",
    );
    let app_url = owner_url.replace("postgres://postgres@", "postgres://flags_app@");
    let mut app = Relay::start(&dir.path().join("app"), &["--store", &app_url, "--demo", "false"]).await;
    app.admin_secret = Some(owner.admin_token());
    let key = owner.demo_key();
    let client = Client::builder().endpoints(vec![app.url()]).sdk_key(&key).build().expect("client config");
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
