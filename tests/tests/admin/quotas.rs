//! Tenant isolation: every per-environment quota and admission rate
//! (flags, segments, snapshot bytes, subscribers, writes per environment
//! and per token, new subscriptions per environment and relay-wide)
//! refuses with RESOURCE_EXHAUSTED naming the quota and its setting (rates
//! and subscribers with a retry hint), writes nothing, is counted by
//! environment and quota, leaves other environments alone, and is still on
//! after a restart and after a configuration reload (SIGHUP) — each one
//! checked in all three states.

use std::process::Command;
use std::time::Duration;

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

/// The quota settings of one phase.
#[derive(Clone, Copy)]
struct Q {
    flags: usize,
    segments: usize,
    subscribers: usize,
    writes_per_sec: u32,
}

/// The relay's configuration file for `q` (rates fixed: small, so a
/// refusal comes within a few calls).
fn conf(q: Q) -> String {
    format!(
        "quota-flags = {}\nquota-segments = {}\nquota-snapshot-bytes = 8192\nmax-subscribers-per-env = {}\n\
         quota-writes-per-sec = {}\nquota-token-writes-per-sec = {}\nquota-subscribes-per-sec = 1\n\
         max-subscribes-per-sec = 2\n",
        q.flags,
        q.segments,
        q.subscribers,
        q.writes_per_sec,
        q.writes_per_sec + 1
    )
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

async fn counts(admin: &mut Admin, env: &str) -> (usize, usize) {
    let f = admin.list_flags(pb::ListFlagsRequest { environment: env.into(), ..Default::default() });
    let flags = f.await.unwrap().into_inner().flags.len();
    let s = admin.list_segments(pb::ListSegmentsRequest { environment: env.into(), ..Default::default() });
    (flags, s.await.unwrap().into_inner().segments.len())
}

/// Retries a call refused with a retry hint after waiting for it (what
/// SDKs and flagctl do), so rate quotas do not get in the way of the size
/// checks: `patiently!(expression returning Result<_, Status>)`.
macro_rules! patiently {
    ($call:expr) => {
        loop {
            match $call {
                Err(e) if e.metadata().get("flagstream-retry-after-ms").is_some() => {
                    let ms: u64 = e
                        .metadata()
                        .get("flagstream-retry-after-ms")
                        .unwrap()
                        .to_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    tokio::time::sleep(Duration::from_millis(ms + 10)).await;
                }
                other => break other,
            }
        }
    };
}

/// Size quotas of environment `a` at `q`: filled to the quota, the next
/// item of each kind is refused and nothing is stored; `b` is unaffected.
async fn size_quotas_hold(relay: &Relay, q: Q) {
    let mut admin = relay.admin().await;
    let (flags, segments) = counts(&mut admin, "a").await;
    for i in flags..q.flags {
        patiently!(put(&mut admin, "a", bool_flag(&format!("f{i}"), true)).await).unwrap();
    }
    // A quota-refusal series is made on its first refusal (its labels
    // name the environment): none yet is 0.
    let before = relay.metric_or_zero(&refusals("a", "flags")).await;
    let e = patiently!(put(&mut admin, "a", bool_flag("one-too-many", true)).await).unwrap_err();
    assert_quota(&e, "quota-flags", false);
    let want = format!("{} flags, quota {}", q.flags + 1, q.flags);
    assert!(e.message().contains(&want), "{}", e.message());
    assert_eq!(relay.metric(&refusals("a", "flags")).await, before + 1.0);
    // Changing a flag does not grow the count.
    patiently!(put(&mut admin, "a", bool_flag("f0", false)).await).unwrap();
    for i in segments..q.segments {
        patiently!(segment(&mut admin, "a", &format!("s{i}")).await).unwrap();
    }
    let e = patiently!(segment(&mut admin, "a", "one-too-many").await).unwrap_err();
    assert_quota(&e, "quota-segments", false);
    let mut big = bool_flag("f0", true);
    big.description = "x".repeat(10_000);
    let e = patiently!(put(&mut admin, "a", big.clone()).await).unwrap_err();
    assert_quota(&e, "quota-snapshot-bytes", false);
    assert_eq!(counts(&mut admin, "a").await, (q.flags, q.segments), "a refused write stored something");
    // Environment b has its own counts.
    patiently!(put(&mut admin, "b", bool_flag("b-flag", true)).await).unwrap();
}

/// Rate quotas: one environment's write rate (another environment is
/// unaffected), one token's write rate across environments, new
/// subscriptions per environment and relay-wide.
async fn rate_quotas_hold(relay: &Relay, tokens: &[String], keys: &[String]) {
    let channel = relay.channel().await;
    let client = |t: &String| AdminClient::with_interceptor(channel.clone(), Token(t.clone()));
    let mut t1 = client(&tokens[0]);
    let e = write_until_refused(&mut t1, &["c"]).await;
    assert_quota(&e, "quota-writes-per-sec", true);
    put(&mut client(&tokens[1]), "d", bool_flag("unaffected", true)).await.unwrap();
    let e = write_until_refused(&mut client(&tokens[2]), &["d", "e", "u"]).await;
    assert_quota(&e, "quota-token-writes-per-sec", true);
    let e = subscribe_until_refused(relay, &keys[..1]).await;
    assert_quota(&e, "quota-subscribes-per-sec", true);
    let e = subscribe_until_refused(relay, &keys[1..]).await;
    assert_quota(&e, "max-subscribes-per-sec", true);
    assert!(relay.metric(&refusals("c", "writes_per_sec")).await >= 1.0);
    assert!(relay.metric(&refusals("*", "relay_subscribes_per_sec")).await >= 1.0);
}

/// The subscriber quota of environment `s`: `n` streams open, the next is
/// refused with a hint (counted), a stream of another environment is not.
async fn subscriber_quota_holds(relay: &Relay, s_key: &str, other_key: &str, n: usize) -> Vec<Subscriber> {
    let mut open = Vec::new();
    for _ in 0..n {
        open.push(patiently!(Subscriber::connect(relay.channel().await, s_key, None).await).unwrap());
    }
    let e = loop {
        match Subscriber::connect(relay.channel().await, s_key, None).await {
            Ok(_) => panic!("subscriber {} of a quota of {n} was admitted", n + 1),
            // A subscription rate refusal: wait its hint, try again.
            Err(e)
                if !e.message().contains("max-subscribers-per-env")
                    && e.metadata().get("flagstream-retry-after-ms").is_some() =>
            {
                let ms: u64 =
                    e.metadata().get("flagstream-retry-after-ms").unwrap().to_str().unwrap().parse().unwrap();
                tokio::time::sleep(Duration::from_millis(ms + 10)).await;
            }
            Err(e) => break e,
        }
    };
    assert_quota(&e, "max-subscribers-per-env", true);
    assert!(relay.metric(&refusals("s", "subscribers")).await >= 1.0);
    open.push(patiently!(Subscriber::connect(relay.channel().await, other_key, None).await).unwrap());
    open
}

/// Writes until one is refused (at most 40: far more than any burst here),
/// toggling one flag so no size quota is touched.
async fn write_until_refused(admin: &mut Admin, envs: &[&str]) -> Status {
    for i in 0..40 {
        let env = envs[i % envs.len()];
        if let Err(e) = put(admin, env, bool_flag("w", (i / envs.len()).is_multiple_of(2))).await {
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

/// Every quota, in each of three states: as configured at start, after a
/// restart, and after a SIGHUP reload that raises the size and subscriber
/// quotas (the new values are enforced); a bad file changes nothing.
#[tokio::test]
async fn every_quota_holds_at_start_after_a_restart_and_after_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.toml");
    let first = Q { flags: 3, segments: 1, subscribers: 3, writes_per_sec: 2 };
    std::fs::write(&path, conf(first)).unwrap();
    let args = ["--config", path.to_str().unwrap()];
    let mut relay = Relay::start(dir.path(), &args).await;
    let mut keys = Vec::new();
    for env in ["a", "b", "c", "d", "e", "s", "t", "u"] {
        keys.push(relay.create_env(env).await);
    }
    let (s_key, t_key) = (keys[5].clone(), keys[6].clone());
    let sub_keys = vec![keys[6].clone(), keys[7].clone(), keys[0].clone(), keys[1].clone()];
    let mut boot = relay.admin().await;
    let mut tokens = Vec::new();
    for name in ["t1", "t2", "t3"] {
        let req = pb::CreateTokenRequest {
            name: name.into(),
            role: pb::TokenRole::Write as i32,
            environments: vec![],
            replicate: false,
        };
        tokens.push(boot.create_token(req).await.unwrap().into_inner().secret);
    }

    size_quotas_hold(&relay, first).await;
    rate_quotas_hold(&relay, &tokens, &sub_keys).await;
    let open = subscriber_quota_holds(&relay, &s_key, &t_key, first.subscribers).await;
    drop(open);

    // flagctl honours a rate hint: it waits and its write lands.
    write_until_refused(&mut boot, &["b"]).await;
    let out = Command::new(
        flagstream_tests::relay::relay_binary()
            .with_file_name(format!("flagctl{}", std::env::consts::EXE_SUFFIX)),
    )
    .args([
        "--config",
        "/nonexistent/flagctl.toml",
        "--relay",
        &relay.url(),
        "-e",
        "b",
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

    // After a restart: every quota still on.
    relay.sigterm();
    relay.wait(STEP).await;
    let relay = Relay::start(dir.path(), &args).await;
    size_quotas_hold(&relay, first).await;
    rate_quotas_hold(&relay, &tokens, &sub_keys).await;
    let open = subscriber_quota_holds(&relay, &s_key, &t_key, first.subscribers).await;
    drop(open);

    // A reload raises the size and subscriber quotas; the new values are
    // enforced, and the rates are still on.
    let second = Q { flags: 5, segments: 2, subscribers: 4, writes_per_sec: 2 };
    std::fs::write(&path, conf(second)).unwrap();
    sighup(&relay);
    wait_for_log(&relay, "SIGHUP: configuration reloaded", 1).await;
    size_quotas_hold(&relay, second).await;
    rate_quotas_hold(&relay, &tokens, &sub_keys).await;
    let open = subscriber_quota_holds(&relay, &s_key, &t_key, second.subscribers).await;
    drop(open);

    // A reload that raises an environment's write rate takes effect: 20
    // writes in a row pass where the old rate (bursts of 4) refused the
    // fifth (the token rate is raised with it).
    std::fs::write(&path, conf(Q { writes_per_sec: 50, ..second })).unwrap();
    sighup(&relay);
    wait_for_log(&relay, "SIGHUP: configuration reloaded", 2).await;
    relay.create_env("r").await;
    let mut boot = relay.admin().await;
    for i in 0..20 {
        put(&mut boot, "r", bool_flag("rate", i % 2 == 0))
            .await
            .unwrap_or_else(|e| panic!("write {i}: {e:?}"));
    }

    // A bad file changes nothing.
    std::fs::write(&path, "quota-flags = \"many\"\n").unwrap();
    sighup(&relay);
    wait_for_log(&relay, "SIGHUP: configuration not reloaded", 1).await;
    size_quotas_hold(&relay, second).await;
}
