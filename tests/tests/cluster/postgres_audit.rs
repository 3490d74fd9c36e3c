//! The audit chain on PostgreSQL: a database at schema version 1 is
//! migrated to the current version (3) at start; a hash blanked in a row (by someone with
//! the database) is caught by `VerifyAudit` while the exported newest hash
//! still matches; SDK key events are chained; a deleted environment's
//! records are kept, verifiable, under its archive name.

use flagstream_proto::v1 as pb;
use flagstream_tests::postgres::Postgres;
use flagstream_tests::relay::{Admin, Relay, bool_flag, put};

/// The newest entry of `env`'s audit log (its hash is what one exports).
async fn newest(admin: &mut Admin) -> pb::AuditEntry {
    let req = pb::ListAuditRequest { environment: "demo".into(), limit: 1, ..Default::default() };
    admin.list_audit(req).await.unwrap().into_inner().entries.remove(0)
}

#[tokio::test]
async fn a_migrated_v1_database_keeps_a_chain_no_blanked_hash_can_hide_in() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    // A database as a relay of schema version 1 left it.
    let url = pg.database("flags");
    pg.sql(
        "flags",
        &format!(
            "CREATE TABLE flagstream_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
             {}
             ;INSERT INTO flagstream_migrations (version) VALUES (1);",
            include_str!("../../../relay/src/store/postgres/schema.sql")
        ),
    );
    let relay = Relay::start(dir.path(), &["--store", &url]).await;
    assert_eq!(pg.sql("flags", "SELECT max(version) FROM flagstream_migrations").trim(), "3");
    let mut admin = relay.admin().await;
    for i in 0..4 {
        put(&mut admin, "demo", bool_flag(&format!("f{i}"), true)).await.unwrap();
    }
    let key = admin
        .create_sdk_key(pb::CreateSdkKeyRequest {
            environment: "demo".into(),
            name: "ci".into(),
            client: false,
        })
        .await
        .unwrap()
        .into_inner();
    let verify = |env: &str| pb::VerifyAuditRequest { environment: env.into() };
    let v = admin.verify_audit(verify("demo")).await.unwrap().into_inner();
    assert!(v.ok, "{v:?}");
    let exported = newest(&mut admin).await;
    assert_eq!(exported.action, pb::AuditAction::SdkKeyCreate as i32);
    assert_eq!(exported.key, key.key.unwrap().id);
    assert!(!exported.diff.contains(&key.secret));

    // Someone with the database edits a middle record and blanks its hash.
    let target = pg.sql("flags", "SELECT revision FROM flagstream_audit WHERE env = 'demo' AND key = 'f1'");
    pg.sql(
        "flags",
        &format!(
            "UPDATE flagstream_audit SET record = record || '{{\"actor\": \"someone-else\", \"hash\": \"\"}}'::jsonb
             WHERE env = 'demo' AND revision = {} AND seq = 0",
            target.trim()
        ),
    );
    // The newest hash is still the one exported; the chain check fails.
    assert_eq!(newest(&mut admin).await.hash, exported.hash);
    let v = admin.verify_audit(verify("demo")).await.unwrap().into_inner();
    assert!(!v.ok, "{v:?}");
    assert_eq!(v.first_broken, format!("{}.0", target.trim()));
    assert!(v.problem.contains("no hash"), "{}", v.problem);

    // A deleted environment's records stay, verifiable, under its archive.
    relay.create_env("gone").await;
    put(&mut admin, "gone", bool_flag("g", true)).await.unwrap();
    let archive = admin
        .delete_environment(pb::DeleteEnvironmentRequest { name: "gone".into(), expected_revision: None })
        .await
        .unwrap()
        .into_inner()
        .audit_archive;
    assert!(archive.starts_with("gone.deleted."), "{archive}");
    let v = admin.verify_audit(verify(&archive)).await.unwrap().into_inner();
    assert!(v.ok && v.records_checked == 3, "{v:?}");
    // Recreated, the name starts a chain of its own.
    relay.create_env("gone").await;
    let v = admin.verify_audit(verify("gone")).await.unwrap().into_inner();
    assert!(v.ok && v.records_checked == 1, "{v:?}");
    assert_eq!(
        pg.sql("flags", &format!("SELECT count(*) FROM flagstream_audit WHERE env = '{archive}'")).trim(),
        "3"
    );
}
