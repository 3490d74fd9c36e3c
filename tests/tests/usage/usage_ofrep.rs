//! OFREP evaluations count in the usage table like an SDK's: single-flag
//! answers by served variation, a bulk answer for every flag it carries,
//! a missing flag as a fallback; `GetUsage` shows them (the OFREP
//! listener hands its counts over every 10 s).

use std::time::Duration;

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::ofrep::post;
use flagstream_tests::relay::Relay;

async fn day(relay: &Relay, key: &str) -> Option<pb::UsageWindow> {
    relay.flag_usage("demo", key).await.and_then(|f| f.day)
}

#[tokio::test]
async fn ofrep_evaluations_reach_the_usage_table() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--ofrep-listen", "127.0.0.1:0"]).await;
    let addr = relay.ofrep.expect("the relay names its OFREP address");
    let bearer = format!("Bearer {}", relay.demo_key());
    let auth = [("Authorization", bearer.as_str())];
    let user42 = r#"{"context": {"targetingKey": "user-42"}}"#;
    for _ in 0..3 {
        assert_eq!(post(addr, "/ofrep/v1/evaluate/flags/theme", &auth, user42).await.status, 200);
    }
    assert_eq!(post(addr, "/ofrep/v1/evaluate/flags/no-such-flag", &auth, user42).await.status, 404);
    assert_eq!(post(addr, "/ofrep/v1/evaluate/flags", &auth, user42).await.status, 200);

    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let theme = day(&relay, "theme").await;
        let missing = day(&relay, "no-such-flag").await;
        // theme for user-42 serves variation 1 ("dark"): 3 single + 1 bulk.
        let theme_ok = theme.as_ref().is_some_and(|w| w.variations.get(1) == Some(&4));
        let missing_ok = missing.as_ref().is_some_and(|w| w.fallback_missing == 1);
        let banner_ok =
            day(&relay, "beta-banner").await.is_some_and(|w| w.variations.iter().sum::<u64>() == 1);
        if theme_ok && missing_ok && banner_ok {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "OFREP usage never arrived: theme {theme:?}, missing {missing:?}"
        );
        // Poll interval, not a timing: usage has no change notification to
        // wait on; the deadline above bounds the wait.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
