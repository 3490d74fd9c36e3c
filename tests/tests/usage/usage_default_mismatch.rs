//! Usage summaries from a real SDK reach the relay, and `flagctl flag
//! usage` shows them: a kill-switch flag that serves `false` to everyone
//! while callers pass `true` as their default is flagged with a WARNING
//! (the outage's bad fallback), in the table and in `-o json`; the
//! relay's default-mismatch metric counts it.

use std::time::Duration;

use flagstream::Context;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};

fn flagctl(relay: &Relay, args: &[&str]) -> String {
    relay.flagctl("demo", args)
}

#[tokio::test]
async fn a_wrong_default_shows_in_flag_usage_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    // Off: serves its off variation, false, to every context.
    put(&mut admin, "demo", bool_flag("kill-switch", false)).await.unwrap();
    let sdk = relay.sdk().usage_interval(Duration::from_millis(200)).build().unwrap();
    assert!(sdk.wait_ready(STEP).await.has_data());
    for i in 0..10 {
        let ctx = Context::new(format!("user-{i}"));
        assert!(!sdk.bool("kill-switch", &ctx, true), "the flag serves false");
    }

    let deadline = tokio::time::Instant::now() + STEP;
    let flag = loop {
        let out = flagctl(&relay, &["flag", "usage", "kill-switch", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let f = v["flags"][0].clone();
        if f["day"]["evaluations"][1]["evaluations"].as_u64() == Some(10) {
            break f;
        }
        assert!(tokio::time::Instant::now() < deadline, "the 10 evaluations never reached the relay: {out}");
        // Poll interval, not a timing: usage and metrics have no change
        // notification to wait on; the deadline checked above bounds the wait.
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(flag["key"], "kill-switch");
    assert_eq!(flag["hour"]["evaluations"][1]["value"], false);
    assert_eq!(flag["hour"]["evaluations"][1]["evaluations"], 10);
    assert_eq!(flag["sdks"], 1);
    assert!(flag["last_evaluated_unix_ms"].as_u64().unwrap() > 0);
    assert_eq!(flag["defaults"][0]["value"], true);
    assert_eq!(flag["defaults"][0]["mismatch"], true);
    assert_eq!(flag["most_served_variation"], 1);
    assert_eq!(flag["default_mismatch"], true);
    let warning = flag["warnings"][0].as_str().unwrap();
    assert!(warning.contains("callers pass default true but the flag serves false"), "{warning}");

    let table = flagctl(&relay, &["flag", "usage"]);
    assert!(table.contains("kill-switch") && table.contains("false=10"), "{table}");
    assert!(
        table.contains("WARNING: flag \"kill-switch\": callers pass default true but the flag serves false"),
        "{table}"
    );
    assert!(
        relay.metric("flagstream_usage_default_mismatches_total{environment=\"demo\"}").await >= 1.0,
        "the mismatch is counted"
    );

    // A caller passing the served value is no mismatch.
    put(&mut admin, "demo", bool_flag("aligned", false)).await.unwrap();
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        assert!(!sdk.bool("aligned", &Context::new("u"), false));
        let out = flagctl(&relay, &["flag", "usage", "aligned", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let f = &v["flags"][0];
        if f["day"]["evaluations"][1]["evaluations"].as_u64().is_some_and(|n| n > 0) {
            assert_eq!(f["default_mismatch"], false, "{out}");
            assert_eq!(f["warnings"].as_array().map(Vec::len), Some(0), "{out}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no usage for `aligned`: {out}");
        // Poll interval, not a timing: usage and metrics have no change
        // notification to wait on; the deadline checked above bounds the wait.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
