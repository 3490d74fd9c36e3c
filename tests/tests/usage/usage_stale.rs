//! `flagctl flag stale` lists a flag nobody evaluated since it was created,
//! with the evidence, and tells it apart from a flag SDKs evaluate: over a
//! span the unused flag has been idle and the used one has not, only the
//! unused one is listed.

use std::time::Duration;

use flagstream::Context;
use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};

fn never_or(entry: Option<serde_json::Value>, key: &str) -> serde_json::Value {
    entry.unwrap_or_else(|| panic!("{key} is not listed"))
}

fn flagctl(relay: &Relay, args: &[&str]) -> String {
    relay.flagctl("demo", args)
}

#[tokio::test]
async fn a_flag_never_evaluated_is_stale_with_its_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    put(&mut admin, "demo", bool_flag("never-used", true)).await.unwrap();
    // Ages are what `stale` reads: the used flag's last evaluation must come
    // measurably later than the unused flag's creation (below, a span is
    // chosen between the two, with flagctl's start-up well inside it).
    tokio::time::sleep(Duration::from_secs(3)).await;
    put(&mut admin, "demo", bool_flag("in-use", true)).await.unwrap();
    let sdk = relay.sdk().usage_interval(Duration::from_millis(200)).build().unwrap();
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

    // A span just short of the unused flag's idle time (measured from now,
    // before flagctl starts): the unused flag is listed, and the used one,
    // idle ~3 s less, is not (flagctl's start-up has ~2.8 s of room).
    let since = |key: &str| never_or(of(key, "not_evaluated"), key)["since_unix_ms"].as_u64().unwrap();
    let (created, evaluated) = (since("never-used"), since("in-use"));
    assert!(evaluated >= created + 3_000, "evaluated {evaluated}, created {created}");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let days = format!("{:.9}", now.saturating_sub(created + 200) as f64 / 86_400_000.0);
    let out = flagctl(&relay, &["flag", "stale", "--days", &days, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // (The demo environment's own flags, never evaluated either, are
    // listed too; only these two are at stake.)
    let listed: Vec<(&str, &str)> = v["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["key"].as_str().unwrap(), e["kind"].as_str().unwrap()))
        .filter(|(key, _)| ["never-used", "in-use"].contains(key))
        .collect();
    assert_eq!(listed, [("never-used", "not_evaluated")], "over {days} days: {out}");

    // Over a longer span nothing qualifies yet: the relay has not watched
    // that long, and the flags were created just now.
    let out = flagctl(&relay, &["flag", "stale", "--days", "30", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["flags"].as_array().map(Vec::len), Some(0), "{out}");
    let table = flagctl(&relay, &["flag", "stale", "--days", "0"]);
    assert!(table.contains("never-used") && table.contains("not_evaluated"), "{table}");
    assert!(table.contains("clients that send no usage"), "the caveat is printed: {table}");
}
