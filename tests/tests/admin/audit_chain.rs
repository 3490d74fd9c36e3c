//! The audit log proves who did what: records are hash-chained, `flagctl
//! audit verify` checks the chain, and editing a record on disk is caught
//! and located — also with its hash blanked. SDK key, environment and
//! token events are on the chains, with no secret; a deleted environment's
//! records stay verifiable under its archive name.

use std::process::Command;

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Admin, Relay, bool_flag, put};
use sha2::Digest;

fn flagctl(relay: &Relay, env: &str, args: &[&str]) -> std::process::Output {
    let bin = flagstream_tests::relay::relay_binary()
        .with_file_name(format!("flagctl{}", std::env::consts::EXE_SUFFIX));
    Command::new(bin)
        .args(["--config", "/nonexistent/flagctl.toml", "--relay", &relay.url(), "-e", env])
        .args(args)
        .env("FLAGSTREAM_TOKEN", relay.admin_token())
        .output()
        .unwrap()
}

fn verify(relay: &Relay) -> std::process::Output {
    flagctl(relay, "demo", &["audit", "verify"])
}

async fn entries(admin: &mut Admin, env: &str) -> Vec<pb::AuditEntry> {
    let req = pb::ListAuditRequest { environment: env.into(), limit: 1000, ..Default::default() };
    admin.list_audit(req).await.unwrap().into_inner().entries
}

/// Edits the stored audit record of `env` at `revision.0` with `edit`
/// (the relay stopped), as someone with the data directory would.
fn edit_record(relay: &Relay, env: &str, revision: u64, edit: impl Fn(String) -> String) {
    let mut key = revision.to_be_bytes().to_vec();
    key.extend_from_slice(&0u32.to_be_bytes());
    let db = sled::open(relay.data_dir.join("db")).unwrap();
    let audit = db.open_tree(format!("audit/{env}")).unwrap();
    let record = audit.get(&key).unwrap().expect("the record");
    let edited = edit(String::from_utf8(record.to_vec()).unwrap());
    assert_ne!(edited.as_bytes(), &record[..], "the edit changed nothing");
    audit.insert(&key, edited.as_bytes()).unwrap();
    db.flush().unwrap();
}

/// Blanks the record's hash and rewrites its actor.
fn blank_and_edit(json: String) -> String {
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let mut v = v.as_object().unwrap().clone();
    v.insert("hash".into(), "".into());
    v.insert("actor".into(), "someone-else".into());
    serde_json::to_string(&v).unwrap()
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

/// Before, a record whose hash was blanked was skipped as one "from before
/// the chain" and the chain restarted after it: an edit hidden that way
/// passed, even though the newest hash (the one an operator exports) was
/// unchanged. Now a record without a hash after hashed ones is a break.
#[tokio::test]
async fn a_blanked_hash_is_caught_while_the_exported_head_still_matches() {
    let dir = tempfile::tempdir().unwrap();
    let mut relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    for i in 0..5 {
        put(&mut admin, "demo", bool_flag(&format!("f{i}"), true)).await.unwrap();
    }
    let all = entries(&mut admin, "demo").await;
    let exported = all[0].hash.clone();
    let target = all.iter().find(|e| e.key == "f2").unwrap().revision;
    relay.sigterm();
    relay.wait(STEP).await;
    edit_record(&relay, "demo", target, blank_and_edit);
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    assert_eq!(entries(&mut admin, "demo").await[0].hash, exported, "the exported head still matches");
    let out = verify(&relay);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(9), "{stderr}");
    assert!(stderr.contains(&format!("broken at record {target}.0")), "{stderr}");
    assert!(stderr.contains("no hash"), "{stderr}");
}

/// SDK key and environment events are on the environment's chain, token
/// events on the relay's (`*`): listed, verified, shown by `flagctl audit
/// log`, and none holds a secret or its hash.
#[tokio::test]
async fn access_events_are_chained_and_hold_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    let mut secrets = vec![relay.create_env("acc").await];
    let created = admin
        .create_sdk_key(pb::CreateSdkKeyRequest {
            environment: "acc".into(),
            name: "ci".into(),
            client: false,
        })
        .await
        .unwrap()
        .into_inner();
    secrets.push(created.secret);
    let rotated = admin
        .rotate_sdk_key(pb::RotateSdkKeyRequest {
            environment: "acc".into(),
            id: "k2".into(),
            grace_ms: 60_000,
            name: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    secrets.push(rotated.secret);
    admin
        .revoke_sdk_key(pb::RevokeSdkKeyRequest { environment: "acc".into(), id: "k1".into() })
        .await
        .unwrap();
    let token = admin
        .create_token(pb::CreateTokenRequest {
            name: "auditor".into(),
            role: pb::TokenRole::Read as i32,
            environments: vec!["acc".into()],
            replicate: false,
        })
        .await
        .unwrap()
        .into_inner();
    secrets.push(token.secret);
    admin.revoke_token(pb::RevokeTokenRequest { name: "auditor".into() }).await.unwrap();

    use pb::AuditAction as A;
    let acc = entries(&mut admin, "acc").await;
    let actions: Vec<(i32, &str)> = acc.iter().map(|e| (e.action, e.key.as_str())).collect();
    assert_eq!(
        actions,
        vec![
            (A::SdkKeyRevoke as i32, "k1"),
            (A::SdkKeyRotate as i32, "k3"),
            (A::SdkKeyCreate as i32, "k2"),
            (A::EnvironmentCreate as i32, "acc"),
        ]
    );
    assert!(acc[1].diff.contains("replaces: k2"), "{}", acc[1].diff);
    assert!(acc.iter().all(|e| e.actor == "bootstrap" && e.item_kind == pb::ItemKind::Unspecified as i32));
    let relay_chain = entries(&mut admin, "*").await;
    let actions: Vec<(i32, &str)> = relay_chain.iter().map(|e| (e.action, e.key.as_str())).collect();
    assert_eq!(actions, vec![(A::TokenRevoke as i32, "auditor"), (A::TokenCreate as i32, "auditor")]);
    assert!(relay_chain[1].diff.contains("role: read"), "{}", relay_chain[1].diff);
    for env in ["acc", "*"] {
        let v = admin
            .verify_audit(pb::VerifyAuditRequest { environment: env.into() })
            .await
            .unwrap()
            .into_inner();
        assert!(v.ok && v.records_checked >= 2, "{env}: {v:?}");
    }
    // No secret, nor its SHA-256, nor a part of either, in any entry.
    let text = format!("{acc:?}{relay_chain:?}");
    for s in &secrets {
        let hash = hex::encode(sha2::Sha256::digest(s.as_bytes()));
        let body = s.split_once('_').map_or(s.as_str(), |(_, b)| b);
        for needle in [s.as_str(), &body[body.len() - 12..], &hash[..12]] {
            assert!(!text.contains(needle), "{needle:?} is in the audit log");
        }
    }
    let out = flagctl(&relay, "acc", &["audit", "log"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("sdk_key.rotate") && stdout.contains("environment.create"), "{stdout}");
}

/// Deleting an environment keeps its audit records, under an archive name
/// the call returns, ending with the deletion: listed, verified, and an
/// edit on disk is caught there too. The name, created again, starts a
/// chain of its own.
#[tokio::test]
async fn a_deleted_environments_records_stay_verifiable() {
    let dir = tempfile::tempdir().unwrap();
    let mut relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    relay.create_env("gone").await;
    let revision = put(&mut admin, "gone", bool_flag("g", true)).await.unwrap();
    let archive = admin
        .delete_environment(pb::DeleteEnvironmentRequest { name: "gone".into(), expected_revision: None })
        .await
        .unwrap()
        .into_inner()
        .audit_archive;
    assert!(archive.starts_with("gone.deleted."), "{archive}");
    let kept = entries(&mut admin, &archive).await;
    assert_eq!(kept.len(), 3);
    assert_eq!(kept[0].action, pb::AuditAction::EnvironmentDelete as i32);
    let out = flagctl(&relay, &archive, &["audit", "verify"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("3 records verified"));
    relay.create_env("gone").await;
    let v =
        admin.verify_audit(pb::VerifyAuditRequest { environment: "gone".into() }).await.unwrap().into_inner();
    assert!(v.ok && v.records_checked == 1, "{v:?}");

    relay.sigterm();
    relay.wait(STEP).await;
    edit_record(&relay, &archive, revision, |j| {
        j.replace("\"actor\":\"bootstrap\"", "\"actor\":\"someone-else\"")
    });
    let relay = Relay::start(dir.path(), &[]).await;
    let out = flagctl(&relay, &archive, &["audit", "verify"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(9), "{stderr}");
    assert!(stderr.contains("does not match its hash"), "{stderr}");
}
