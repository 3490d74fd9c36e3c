//! Tenant isolation: every per-environment quota and admission rate
//! refuses with RESOURCE_EXHAUSTED naming the quota and its setting (rates
//! with a retry hint), writes nothing, is counted by environment and
//! quota, leaves other environments alone, and is still on after a restart
//! and after a configuration reload (SIGHUP).

use std::process::Command;

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::admin_client::AdminClient;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Admin, Relay, Token, bool_flag, put};
use flagstream_tests::subscriber::Subscriber;
use tonic::{Code, Status};

fn refusals(env: &str, quota: &str) -> String {
    format!("flagstream_quota_refusals_total{{env=\"{env}\",quota=\"{quota}\"}}")
}

fn assert_quota(e: &Status, setting: &str, hint: bool) {
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains(setting), "{}", e.message());
    assert_eq!(e.metadata().get("flagstream-retry-after-ms").is_some(), hint, "{e:?}");
}

async fn segment(admin: &mut Admin, env: &str, key: &str) -> Result<(), Status> {
    let segment = pb::Segment { key: key.into(), included: vec!["a".into()], ..Default::default() };
    let req = pb::PutSegmentRequest {
        environment: env.into(),
        segment: Some(segment),
        expected_version: None,
        comment: String::new(),
    };
    admin.put_segment(req).await.map(|_| ())
}

async fn flag_count(admin: &mut Admin, env: &str) -> usize {
    let req = pb::ListFlagsRequest { environment: env.into(), ..Default::default() };
    admin.list_flags(req).await.unwrap().into_inner().flags.len()
}

async fn wait_for_log(relay: &Relay, needle: &str) {
    let deadline = tokio::time::Instant::now() + STEP;
    while !relay.log().contains(needle) {
        assert!(tokio::time::Instant::now() < deadline, "no {needle:?} in the log:\n{}", relay.log());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn size_quotas_refuse_and_hold_across_restart_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("relay.toml");
    std::fs::write(&conf, "quota-flags = 4\nquota-segments = 1\nquota-snapshot-bytes = 4096\n").unwrap();
    let args = ["--config", conf.to_str().unwrap()];
    let mut relay = Relay::start(dir.path(), &args).await;
    relay.create_env("a").await;
    relay.create_env("b").await;
    let mut admin = relay.admin().await;
    for i in 0..4 {
        put(&mut admin, "a", bool_flag(&format!("f{i}"), true)).await.unwrap();
    }
    let e = put(&mut admin, "a", bool_flag("f4", true)).await.unwrap_err();
    assert_quota(&e, "quota-flags", false);
    assert!(e.message().contains("5 flags, quota 4"), "{}", e.message());
    assert_eq!(flag_count(&mut admin, "a").await, 4, "a refused write stored something");
    // Changing a flag does not grow the count.
    put(&mut admin, "a", bool_flag("f0", false)).await.unwrap();
    segment(&mut admin, "a", "s0").await.unwrap();
    assert_quota(&segment(&mut admin, "a", "s1").await.unwrap_err(), "quota-segments", false);
    let mut big = bool_flag("f1", true);
    big.description = "x".repeat(6_000);
    assert_quota(&put(&mut admin, "a", big).await.unwrap_err(), "quota-snapshot-bytes", false);
    // Environment b has its own counts.
    for i in 0..4 {
        put(&mut admin, "b", bool_flag(&format!("f{i}"), true)).await.unwrap();
    }
    for quota in ["flags", "segments", "snapshot_bytes"] {
        assert_eq!(relay.metric(&refusals("a", quota)).await, 1.0, "{quota}");
    }

    // After a restart: still on.
    relay.sigterm();
    relay.wait(STEP).await;
    let relay = Relay::start(dir.path(), &args).await;
    let mut admin = relay.admin().await;
    assert_quota(&put(&mut admin, "a", bool_flag("f4", true)).await.unwrap_err(), "quota-flags", false);
    assert_quota(&segment(&mut admin, "a", "s1").await.unwrap_err(), "quota-segments", false);

    // A reload raises the flag quota; the new value is enforced in turn.
    std::fs::write(&conf, "quota-flags = 6\nquota-segments = 1\nquota-snapshot-bytes = 4096\n").unwrap();
    let hup = Command::new("kill").args(["-HUP", &relay.pid().to_string()]).status().unwrap();
    assert!(hup.success());
    wait_for_log(&relay, "SIGHUP: configuration reloaded").await;
    put(&mut admin, "a", bool_flag("f4", true)).await.unwrap();
    put(&mut admin, "a", bool_flag("f5", true)).await.unwrap();
    let e = put(&mut admin, "a", bool_flag("f6", true)).await.unwrap_err();
    assert_quota(&e, "quota-flags", false);
    assert!(e.message().contains("7 flags, quota 6"), "{}", e.message());
    // A bad file changes nothing.
    std::fs::write(&conf, "quota-flags = \"many\"\n").unwrap();
    let hup = Command::new("kill").args(["-HUP", &relay.pid().to_string()]).status().unwrap();
    assert!(hup.success());
    wait_for_log(&relay, "SIGHUP: configuration not reloaded").await;
    assert_quota(&put(&mut admin, "a", bool_flag("f6", true)).await.unwrap_err(), "quota-flags", false);
}

/// Writes until one is refused (at most 40: far more than any burst here).
async fn write_until_refused(admin: &mut Admin, envs: &[&str]) -> Status {
    for i in 0..40 {
        let env = envs[i % envs.len()];
        if let Err(e) = put(admin, env, bool_flag(&format!("w{i}"), i % 2 == 0)).await {
            return e;
        }
    }
    panic!("40 writes in a row were accepted")
}

/// Subscribes until one is refused (at most 40).
async fn subscribe_until_refused(relay: &Relay, keys: &[String]) -> Status {
    let mut open = Vec::new();
    for i in 0..40 {
        match Subscriber::connect(relay.channel().await, &keys[i % keys.len()], None).await {
            Ok(s) => open.push(s),
            Err(e) => return e,
        }
    }
    panic!("40 subscriptions in a row were accepted")
}

#[tokio::test]
async fn rate_quotas_refuse_with_a_hint_and_hold_across_restart() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--quota-writes-per-sec",
        "2",
        "--quota-token-writes-per-sec",
        "3",
        "--quota-subscribes-per-sec",
        "2",
        "--max-subscribes-per-sec",
        "3",
    ];
    let mut relay = Relay::start(dir.path(), &args).await;
    let keys = [relay.create_env("a").await, relay.create_env("b").await, relay.create_env("c").await];
    let mut boot = relay.admin().await;
    let mut tokens = Vec::new();
    for name in ["t1", "t2", "t3"] {
        let req = pb::CreateTokenRequest {
            name: name.into(),
            role: pb::TokenRole::Write as i32,
            environments: vec![],
            replicate: false,
        };
        let secret = boot.create_token(req).await.unwrap().into_inner().secret;
        tokens.push(AdminClient::with_interceptor(relay.channel().await, Token(secret)));
    }

    // One environment's write rate; another environment (other token) is
    // not affected.
    let e = write_until_refused(&mut tokens[0], &["a"]).await;
    assert_quota(&e, "quota-writes-per-sec", true);
    put(&mut tokens[1], "b", bool_flag("unaffected", true)).await.unwrap();
    // One token's write rate, spread over environments.
    let e = write_until_refused(&mut tokens[2], &["b", "c", "demo"]).await;
    assert_quota(&e, "quota-token-writes-per-sec", true);
    // New subscriptions: per environment, and relay-wide.
    let e = subscribe_until_refused(&relay, &keys[..1]).await;
    assert_quota(&e, "quota-subscribes-per-sec", true);
    let e = subscribe_until_refused(&relay, &keys[1..]).await;
    assert_quota(&e, "max-subscribes-per-sec", true);
    assert!(relay.metric(&refusals("a", "writes_per_sec")).await >= 1.0);
    assert!(relay.metric(&refusals("*", "relay_subscribes_per_sec")).await >= 1.0);

    // flagctl honours the hint: it waits and its write lands.
    let bin = flagstream_tests::relay::relay_binary()
        .with_file_name(format!("flagctl{}", std::env::consts::EXE_SUFFIX));
    write_until_refused(&mut boot, &["a"]).await;
    let out = Command::new(bin)
        .args([
            "--config",
            "/nonexistent/flagctl.toml",
            "--relay",
            &relay.url(),
            "-e",
            "a",
            "flag",
            "create",
            "by-flagctl",
            "--yes",
        ])
        .env("FLAGSTREAM_TOKEN", relay.admin_token())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("relay busy") && stderr.contains("retrying in"), "{stderr}");

    // After a restart: still on.
    relay.sigterm();
    relay.wait(STEP).await;
    let relay = Relay::start(dir.path(), &args).await;
    let mut admin = relay.admin().await;
    assert_quota(&write_until_refused(&mut admin, &["a"]).await, "quota-writes-per-sec", true);
    assert_quota(&subscribe_until_refused(&relay, &keys[..1]).await, "quota-subscribes-per-sec", true);
}
