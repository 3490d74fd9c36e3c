//! `flagctl flag stale` lists a flag nobody evaluated since it was created,
//! with the evidence, and tells it apart from a flag SDKs evaluate.

use std::time::Duration;

use flagstream::{Client, Context};
use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};

fn flagctl(relay: &Relay, args: &[&str]) -> String {
    relay.flagctl("demo", args)
}

#[tokio::test]
async fn a_flag_never_evaluated_is_stale_with_its_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    put(&mut admin, "demo", bool_flag("never-used", true)).await.unwrap();
    put(&mut admin, "demo", bool_flag("in-use", true)).await.unwrap();
    let sdk = Client::builder()
        .endpoints([relay.url()])
        .sdk_key(relay.demo_key())
        .usage_interval(Duration::from_millis(200))
        .build()
        .unwrap();
    assert!(sdk.wait_ready(STEP).await.has_data());
    assert!(sdk.bool("in-use", &Context::new("u"), false));
    // Wait for the evaluation to reach the relay.
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let r = admin
            .get_usage(pb::GetUsageRequest {
                environment: "demo".into(),
                key: "in-use".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        if r.flags[0].last_evaluated_unix_ms > 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the evaluation never reached the relay");
        // Poll interval, not a timing: usage and metrics have no change
        // notification to wait on; the deadline checked above bounds the wait.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let out = flagctl(&relay, &["flag", "stale", "--days", "0", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["caveat"].as_str().is_some_and(|c| c.contains("send no usage")), "{out}");
    let entries = v["flags"].as_array().unwrap();
    let of = |key: &str, kind: &str| entries.iter().find(|e| e["key"] == key && e["kind"] == kind).cloned();
    let never =
        of("never-used", "not_evaluated").unwrap_or_else(|| panic!("never-used is not listed: {out}"));
    let evidence = never["evidence"].as_str().unwrap();
    assert!(evidence.starts_with("never evaluated since it was created"), "{evidence}");
    assert!(of("never-used", "one_variation").is_none(), "nothing served, no variation to keep: {out}");
    let used = of("in-use", "not_evaluated").expect("at 0 days every flag counts as idle");
    assert!(used["evidence"].as_str().unwrap().starts_with("last evaluated"), "{out}");
    let one = of("in-use", "one_variation").expect("served only `true` so far");
    assert!(one["evidence"].as_str().unwrap().contains("served only variation 0 (true)"), "{out}");

    // Over a longer span nothing qualifies yet: the relay has not watched
    // that long, and the flags were created just now.
    let out = flagctl(&relay, &["flag", "stale", "--days", "30", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["flags"].as_array().map(Vec::len), Some(0), "{out}");
    let table = flagctl(&relay, &["flag", "stale", "--days", "0"]);
    assert!(table.contains("never-used") && table.contains("not_evaluated"), "{table}");
    assert!(table.contains("clients that send no usage"), "the caveat is printed: {table}");
}
