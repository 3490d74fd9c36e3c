//! Fallbacks to callers' defaults, by cause, counted upstream: an SDK on a
//! replica falls back because it had no data yet, because a flag does not
//! exist and because it asked for the wrong type; its replica counts them
//! per flag and cause, forwards its SDKs' merged usage to the primary, and
//! the primary shows the same counts (the whole tree) in `GetUsage` and in
//! its fallback metric.

use std::time::Duration;

use flagstream::Context;
use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::cluster::Cluster;
use flagstream_tests::relay::Relay;

async fn usage(relay: &Relay, key: &str) -> pb::FlagUsageView {
    relay.flag_usage("demo", key).await.expect("the flag asked for")
}

/// Waits (polling GetUsage) until `relay` holds the expected day window.
async fn wait_for(
    relay: &Relay,
    what: &str,
    key: &str,
    ok: impl Fn(&pb::UsageWindow) -> bool,
) -> pb::FlagUsageView {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let f = usage(relay, key).await;
        if f.day.as_ref().is_some_and(&ok) {
            return f;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: never arrived; last seen {f:?}");
        // Poll interval, not a timing: usage and metrics have no change
        // notification to wait on; the deadline checked above bounds the wait.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn fallbacks_by_cause_reach_the_replica_and_the_primary() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), 1, &[], &["--upstream-usage-interval", "200ms"]).await;
    let replica = &c.replicas[0];
    let sdk =
        replica.sdk_for(c.primary.demo_key()).usage_interval(Duration::from_millis(200)).build().unwrap();
    let ctx = Context::new("u");
    // Before any data (build returns before the stream has even
    // connected): NOT_READY.
    assert!(sdk.bool("beta-banner", &ctx, true), "not ready: the default");
    let not_ready = sdk.stats().default_not_ready;
    assert_eq!(not_ready, 1, "counted by the client as not ready");
    assert!(sdk.wait_ready(STEP).await.has_data());
    for _ in 0..3 {
        assert!(sdk.bool("no-such-flag", &ctx, true), "missing: the default");
    }
    for _ in 0..2 {
        assert_eq!(sdk.int("beta-banner", &ctx, 7), 7, "wrong type: the default");
    }
    let stats = sdk.stats();
    assert_eq!((stats.default_not_found, stats.default_wrong_type), (3, 2));

    for (relay, tier) in [(replica, "replica"), (&c.primary, "primary")] {
        let missing = wait_for(relay, tier, "no-such-flag", |w| w.fallback_missing == 3).await;
        assert!(!missing.exists, "{tier}: a key no flag has");
        assert_eq!(missing.defaults.iter().map(|d| d.json.as_str()).collect::<Vec<_>>(), ["true"]);
        assert_eq!(missing.sdks, 1, "{tier}: one SDK instance");
        let banner = wait_for(relay, tier, "beta-banner", |w| {
            w.fallback_wrong_type == 2 && w.fallback_not_ready == not_ready
        })
        .await;
        assert!(banner.exists);
        assert_eq!(banner.sdks, 1, "{tier}: one SDK instance");
        let day = banner.day.unwrap();
        assert_eq!((day.fallback_missing, day.fallback_malformed), (0, 0), "{tier}");
    }
    // The fallback metric at the primary counts the whole tree by cause.
    let missing = "flagstream_usage_fallbacks_total{environment=\"demo\",cause=\"missing\"}";
    let wrong = "flagstream_usage_fallbacks_total{environment=\"demo\",cause=\"wrong_type\"}";
    assert_eq!(c.primary.metric(missing).await, 3.0);
    assert_eq!(c.primary.metric(wrong).await, 2.0);
    assert_eq!(replica.metric(missing).await, 3.0);
}
