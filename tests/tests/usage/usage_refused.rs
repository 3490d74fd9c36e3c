//! A usage summary over its bounds is refused: dropped whole, counted by
//! the field over its bound, logged with the field and limit; the stream
//! goes on (its data keeps flowing, a later valid summary is accepted).

use std::time::Duration;

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::Subscriber;

fn summary(flags: usize) -> pb::SubscribeRequest {
    let flags = (0..flags)
        // Keys that are no flag of `demo`: the relay keeps their fallbacks
        // only (variation counts need a flag with those variations).
        .map(|i| pb::FlagUsage {
            key: format!("k{i}"),
            variations: vec![1],
            fallback_missing: 1,
            ..Default::default()
        })
        .collect();
    pb::SubscribeRequest {
        kind: Some(pb::subscribe_request::Kind::Usage(pb::UsageSummary { flags, ..Default::default() })),
    }
}

#[tokio::test]
async fn an_oversized_summary_is_refused_and_counted_and_the_stream_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let refused = "flagstream_usage_summaries_total{result=\"refused\",field=\"usage.flags\"}";
    let accepted = "flagstream_usage_summaries_total{result=\"accepted\",field=\"\"}";
    assert_eq!(relay.metric(refused).await, 0.0);
    let mut sub = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    sub.send(summary(1001)).await.unwrap();
    let deadline = tokio::time::Instant::now() + STEP;
    while relay.metric(refused).await < 1.0 {
        assert!(tokio::time::Instant::now() < deadline, "the refusal was never counted");
        // Poll interval, not a timing: usage and metrics have no change
        // notification to wait on; the deadline checked above bounds the wait.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(relay.metric(accepted).await, 0.0, "nothing of it was taken");
    let log = relay.log();
    assert!(
        log.contains("usage.flags: 1001 flags, the limit is 1000"),
        "the log names the field and limit: {log}"
    );

    // The stream is still open: a valid summary on it is taken, and the
    // relay still sends (a write arrives as a delta).
    sub.send(summary(2)).await.unwrap();
    let deadline = tokio::time::Instant::now() + STEP;
    while relay.metric(accepted).await < 1.0 {
        assert!(tokio::time::Instant::now() < deadline, "the valid summary was never taken");
        // Poll interval, not a timing: usage and metrics have no change
        // notification to wait on; the deadline checked above bounds the wait.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = relay
        .admin()
        .await
        .get_usage(pb::GetUsageRequest { environment: "demo".into(), key: "k1".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    let day = r.flags[0].day.as_ref().unwrap();
    assert_eq!(day.fallback_missing, 1, "the valid summary was counted");
    assert!(day.variations.is_empty(), "no variation counts for a key that is no flag: {day:?}");
    let mut admin = relay.admin().await;
    let rev =
        flagstream_tests::relay::put(&mut admin, "demo", flagstream_tests::relay::bool_flag("after", true))
            .await
            .unwrap();
    sub.wait_revision(rev, STEP).await.expect("the stream still delivers");
}
