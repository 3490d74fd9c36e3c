//! The audit log is bounded: only the records of the last `audit-revisions`
//! revisions are kept, on every write and (after the setting is lowered)
//! at start; every dropped record is counted.

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Admin, Relay, bool_flag, put};

async fn audited_revisions(admin: &mut Admin) -> Vec<u64> {
    let entries = admin
        .list_audit(pb::ListAuditRequest { environment: "demo".into(), limit: 1000, ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .entries;
    let mut revisions: Vec<u64> = entries.iter().map(|e| e.revision).collect();
    revisions.dedup();
    revisions
}

#[tokio::test]
async fn audit_log_keeps_only_the_configured_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let mut relay = Relay::start(dir.path(), &["--audit-revisions", "3"]).await;
    let mut admin = relay.admin().await;
    let mut head = 0;
    for i in 0..6 {
        head = put(&mut admin, "demo", bool_flag(&format!("f{i}"), true)).await.unwrap();
    }
    assert_eq!(audited_revisions(&mut admin).await, vec![head, head - 1, head - 2], "newest first");
    // The demo seed's records and those of the first three puts were dropped.
    let dropped = relay.metric("flagstream_audit_records_trimmed_total").await;
    assert!(dropped >= 3.0, "{dropped}");

    relay.sigterm();
    assert!(relay.wait(STEP).await.success());
    // Lowered: the excess goes at start, counted.
    let relay = Relay::start(dir.path(), &["--audit-revisions", "1"]).await;
    let mut admin = relay.admin().await;
    assert_eq!(audited_revisions(&mut admin).await, vec![head]);
    assert_eq!(relay.metric("flagstream_audit_records_trimmed_total").await, 2.0);
    // Items are untouched by audit retention.
    let flags = admin
        .list_flags(pb::ListFlagsRequest { environment: "demo".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .flags;
    assert!((0..6).all(|i| flags.iter().any(|f| f.key == format!("f{i}"))));
}
