//! The audit log proves who did what: records are hash-chained, `flagctl
//! audit verify` checks the chain, and editing a record on disk is caught
//! and located.

use std::process::Command;

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};

fn verify(relay: &Relay) -> std::process::Output {
    let bin = flagstream_tests::relay::relay_binary()
        .with_file_name(format!("flagctl{}", std::env::consts::EXE_SUFFIX));
    Command::new(bin)
        .args([
            "--config",
            "/nonexistent/flagctl.toml",
            "--relay",
            &relay.url(),
            "-e",
            "demo",
            "audit",
            "verify",
        ])
        .env("FLAGSTREAM_TOKEN", relay.admin_token())
        .output()
        .unwrap()
}

#[tokio::test]
async fn an_edited_audit_record_breaks_the_chain_at_that_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    for i in 0..5 {
        put(&mut admin, "demo", bool_flag(&format!("f{i}"), true)).await.unwrap();
    }
    put(&mut admin, "demo", bool_flag("f2", false)).await.unwrap();
    let out = verify(&relay);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("holds"));
    let entries = admin
        .list_audit(pb::ListAuditRequest {
            environment: "demo".into(),
            key: "f2".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .entries;
    // Each record says what changed: the update's diff, the creation's.
    assert!(
        entries[0].diff.contains("-on: true") && entries[0].diff.contains("+on: false"),
        "{}",
        entries[0].diff
    );
    assert!(entries[1].diff.contains("+key: f2"), "{}", entries[1].diff);
    let target = entries[1].revision;

    // Someone with disk access rewrites who made revision `target`.
    relay.sigterm();
    relay.wait(STEP).await;
    let mut key = target.to_be_bytes().to_vec();
    key.extend_from_slice(&0u32.to_be_bytes());
    let original = {
        let db = sled::open(relay.data_dir.join("db")).unwrap();
        let audit = db.open_tree("audit/demo").unwrap();
        let record = audit.get(&key).unwrap().expect("the record");
        let edited = String::from_utf8(record.to_vec())
            .unwrap()
            .replace("\"actor\":\"bootstrap\"", "\"actor\":\"someone-else\"");
        assert_ne!(edited.as_bytes(), &record[..], "the edit changed nothing");
        audit.insert(&key, edited.as_bytes()).unwrap();
        db.flush().unwrap();
        record
    };
    let relay = Relay::start(dir.path(), &[]).await;
    let out = verify(&relay);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(9), "{stderr}");
    assert!(stderr.contains(&format!("broken at record {target}.0")), "{stderr}");
    assert!(stderr.contains("does not match its hash"), "{stderr}");

    // Removing the newest record is caught too (the metadata seals the end).
    let mut relay = relay;
    relay.sigterm();
    relay.wait(STEP).await;
    {
        let db = sled::open(relay.data_dir.join("db")).unwrap();
        let audit = db.open_tree("audit/demo").unwrap();
        // Undo the edit, so only the removal is wrong.
        audit.insert(&key, original).unwrap();
        let (k, _) = audit.last().unwrap().unwrap();
        audit.remove(k).unwrap();
        db.flush().unwrap();
    }
    let relay = Relay::start(dir.path(), &[]).await;
    let out = verify(&relay);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(9), "{stderr}");
    assert!(stderr.contains("records at the end were removed or added"), "{stderr}");
}
