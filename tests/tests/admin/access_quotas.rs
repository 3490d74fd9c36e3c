//! Credentials cannot bloat or stall what others share: SDK keys per
//! environment and admin tokens are capped, audit reads (ListAudit pages,
//! VerifyAudit walks) are rate-limited per token. Each refusal is
//! RESOURCE_EXHAUSTED naming the relay option, counted in
//! `flagstream_quota_refusals_total`, and a SIGHUP reload raising the cap
//! takes effect.

use std::process::Command;
use std::time::Duration;

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Admin, Relay};
use tonic::{Code, Status};

fn refusals(env: &str, quota: &str) -> String {
    format!("flagstream_quota_refusals_total{{env=\"{env}\",quota=\"{quota}\"}}")
}

fn conf(keys: usize, tokens: usize) -> String {
    format!("quota-sdk-keys-per-env = {keys}\nquota-tokens = {tokens}\nquota-audit-reads-per-sec = 1\n")
}

fn sighup(relay: &Relay) {
    let hup = Command::new("kill").args(["-HUP", &relay.pid().to_string()]).status().unwrap();
    assert!(hup.success());
}

async fn wait_for_log(relay: &Relay, needle: &str, count: usize) {
    let deadline = tokio::time::Instant::now() + STEP;
    while relay.log().matches(needle).count() < count {
        assert!(tokio::time::Instant::now() < deadline, "no {needle:?} in the log:\n{}", relay.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn create_key(admin: &mut Admin, name: &str) -> Result<(), Status> {
    let req = pb::CreateSdkKeyRequest { environment: "demo".into(), name: name.into(), client: false };
    admin.create_sdk_key(req).await.map(|_| ())
}

async fn create_token(admin: &mut Admin, name: &str) -> Result<(), Status> {
    let req = pb::CreateTokenRequest {
        name: name.into(),
        role: pb::TokenRole::Read as i32,
        environments: vec![],
        replicate: false,
    };
    admin.create_token(req).await.map(|_| ())
}

fn assert_refused(e: &Status, setting: &str, hint: bool) {
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains(setting), "{}", e.message());
    assert_eq!(e.metadata().get("flagstream-retry-after-ms").is_some(), hint, "{e:?}");
}

#[tokio::test]
async fn key_and_token_caps_and_the_audit_read_rate_refuse_count_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.toml");
    std::fs::write(&path, conf(3, 2)).unwrap();
    let relay = Relay::start(dir.path(), &["--config", path.to_str().unwrap()]).await;
    let mut admin = relay.admin().await;

    // SDK keys: the demo's k1 and two more, then refused; a rotation with
    // a grace period (one key more) too, one without (no more) is not.
    create_key(&mut admin, "two").await.unwrap();
    create_key(&mut admin, "three").await.unwrap();
    let e = create_key(&mut admin, "four").await.unwrap_err();
    assert_refused(&e, "quota-sdk-keys-per-env", false);
    assert!(e.message().contains("4 SDK keys, quota 3"), "{}", e.message());
    let rotate = |grace_ms| pb::RotateSdkKeyRequest {
        environment: "demo".into(),
        id: "k2".into(),
        grace_ms,
        name: String::new(),
    };
    let e = admin.rotate_sdk_key(rotate(60_000)).await.unwrap_err();
    assert_refused(&e, "quota-sdk-keys-per-env", false);
    admin.rotate_sdk_key(rotate(0)).await.unwrap();
    assert_eq!(relay.metric(&refusals("demo", "sdk_keys")).await, 2.0);
    let keys = admin.list_sdk_keys(pb::ListSdkKeysRequest { environment: "demo".into() }).await.unwrap();
    assert_eq!(keys.into_inner().keys.len(), 3, "a refused call made a key");

    // Tokens: bootstrap and one more, then refused.
    create_token(&mut admin, "reader").await.unwrap();
    let e = create_token(&mut admin, "another").await.unwrap_err();
    assert_refused(&e, "quota-tokens", false);
    assert_eq!(relay.metric(&refusals("*", "tokens")).await, 1.0);

    // Audit reads: 1/s, bursts of 2, per token: a burst of ListAudit pages
    // is refused with a retry hint; VerifyAudit shares the bucket.
    let list = || pb::ListAuditRequest { environment: "demo".into(), limit: 1, ..Default::default() };
    let mut refused = None;
    let mut served = 0;
    for _ in 0..10 {
        if let Err(e) = admin.list_audit(list()).await {
            refused = Some(e);
            break;
        }
        served += 1;
    }
    let e = refused.expect("10 audit reads in a row were allowed at 1/s");
    assert_eq!(served, 2, "the burst is exactly twice the rate: 2 reads served, the 3rd refused");
    assert_refused(&e, "quota-audit-reads-per-sec", true);
    let e = admin.verify_audit(pb::VerifyAuditRequest { environment: "demo".into() }).await.unwrap_err();
    assert_refused(&e, "quota-audit-reads-per-sec", true);
    assert!(relay.metric(&refusals("demo", "audit_reads_per_sec")).await >= 2.0);

    // A reload raises both caps: the refused calls now succeed.
    std::fs::write(&path, conf(5, 3)).unwrap();
    sighup(&relay);
    wait_for_log(&relay, "SIGHUP: configuration reloaded", 1).await;
    create_key(&mut admin, "four").await.unwrap();
    create_token(&mut admin, "another").await.unwrap();
}
