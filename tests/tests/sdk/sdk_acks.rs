//! The SDK coalesces its acks (at most one a second, the first after a
//! quiet second at once) and the relay still reports every revision as
//! reached by it, each with a latency sample.

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};

/// Acks the relay timed so far (one per ack that moved a subscriber on).
async fn acks(relay: &Relay) -> f64 {
    relay.metric_or_zero("flagstream_ack_latency_seconds_count").await
}

#[tokio::test]
async fn writes_in_a_burst_are_acked_together_and_each_counts_as_reached() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let client = relay.sdk().build().unwrap();
    client.wait_ready(STEP).await;
    let mut admin = relay.admin().await;
    let before = acks(&relay).await;

    // Ten writes, back to back, each its own revision and delta.
    let mut revisions = Vec::new();
    for i in 0..10 {
        revisions.push(put(&mut admin, "demo", bool_flag(&format!("burst-{i}"), true)).await.unwrap());
    }
    let last = *revisions.last().unwrap();

    // The watch ends once every subscriber acked the last revision.
    let mut watch = admin
        .watch_propagation(pb::WatchPropagationRequest {
            environment: "demo".into(),
            revision: Some(last),
            min_interval_ms: 100,
        })
        .await
        .unwrap()
        .into_inner();
    let mut reached = None;
    while let Some(update) = tokio::time::timeout(STEP, watch.message()).await.unwrap().unwrap() {
        reached = update.propagation;
    }
    let reached = reached.expect("a propagation update");
    assert_eq!((reached.subscribers_total, reached.subscribers_acked), (1, 1));
    assert!(client.bool("burst-9", &flagstream::Context::new("u"), false));

    // Every revision of the burst counts as reached, each with its sample.
    for &r in &revisions {
        let p = admin
            .get_propagation(pb::GetPropagationRequest { environment: "demo".into(), revision: Some(r) })
            .await
            .unwrap()
            .into_inner()
            .propagation
            .unwrap();
        assert_eq!(p.subscribers_acked, 1, "revision {r}: {p:?}");
        assert!(p.committed_unix_ms > 0, "revision {r} is tracked: {p:?}");
    }
    // Fewer acks than revisions: the burst's were coalesced (the first at
    // once, the rest held for the second after it). Ten writes spread
    // over ten seconds or more would each be acked.
    let sent = acks(&relay).await - before;
    assert!((1.0..10.0).contains(&sent), "acks for 10 revisions in a burst: {sent}");
}
