//! The SDK coalesces its acks (at most one a second, the first after a
//! quiet second at once) and the relay still reports every revision as
//! reached by it; the relay times a revision when it was applied, the
//! ack's arrival less the time the client says it held the ack.

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};
use flagstream_tests::subscriber::Subscriber;

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
    // Updates come every 100 ms until it ends: the whole wait is bounded.
    let reached = tokio::time::timeout(STEP, async {
        let mut reached = None;
        while let Some(update) = watch.message().await.unwrap() {
            reached = update.propagation;
        }
        reached
    })
    .await
    .expect("every subscriber acked the last revision")
    .expect("a propagation update");
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

/// An ack held for 10 s moves its revision's sample 10 s back: the latency
/// recorded is the commit to when the revision was applied (clamped at 0),
/// not to the ack's arrival. Then an ack held 0 s gives a sample of the
/// time from commit to its arrival, which is not 0.
#[tokio::test]
async fn a_held_ack_is_timed_when_its_revision_was_applied() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    let mut sub = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    sub.next(STEP).await.unwrap();
    sub.auto_ack = false;
    let latency_sum = || relay.metric_or_zero("flagstream_ack_latency_seconds_sum");
    let latency_count = || relay.metric_or_zero("flagstream_ack_latency_seconds_count");

    // Held 10 s by its client's account: the sample is clamped at 0.
    let held = put(&mut admin, "demo", bool_flag("held", true)).await.unwrap();
    sub.wait_revision(held, STEP).await.unwrap();
    let (epoch, revision) = sub.cursor();
    assert_eq!(revision, held);
    let (sum, count) = (latency_sum().await, latency_count().await);
    let ack = pb::Ack { epoch: epoch.clone(), revision, held_us: 10_000_000, ..Default::default() };
    sub.send(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Ack(ack)) }).await.unwrap();
    flagstream_tests::cluster::eventually_async("the held ack counted", || async {
        latency_count().await > count
    })
    .await;
    assert_eq!(latency_sum().await, sum, "a revision applied before its commit counts 0");
    let p = admin
        .get_propagation(pb::GetPropagationRequest { environment: "demo".into(), revision: Some(held) })
        .await
        .unwrap()
        .into_inner()
        .propagation
        .unwrap();
    assert_eq!((p.subscribers_acked, p.latency_max_ms), (1, 0), "{p:?}");
    assert_eq!(relay.metric_or_zero("flagstream_limit_hits_total{limit=\"ack_held\"}").await, 0.0);

    // A claim past the 60 s bound is taken as the bound, and counted.
    let long = put(&mut admin, "demo", bool_flag("long", true)).await.unwrap();
    sub.wait_revision(long, STEP).await.unwrap();
    let ack = pb::Ack { epoch: epoch.clone(), revision: long, held_us: 3_600_000_000, ..Default::default() };
    sub.send(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Ack(ack)) }).await.unwrap();
    flagstream_tests::cluster::eventually_async("the over-long hold counted", || async {
        relay.metric_or_zero("flagstream_limit_hits_total{limit=\"ack_held\"}").await == 1.0
    })
    .await;

    // The same, not held: timed at its arrival, after this test's reads
    // and scrapes since the commit, so more than 0.
    let prompt = put(&mut admin, "demo", bool_flag("prompt", true)).await.unwrap();
    sub.wait_revision(prompt, STEP).await.unwrap();
    let (sum, count) = (latency_sum().await, latency_count().await);
    let ack = pb::Ack { epoch, revision: prompt, held_us: 0, ..Default::default() };
    sub.send(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Ack(ack)) }).await.unwrap();
    flagstream_tests::cluster::eventually_async("the prompt ack counted", || async {
        latency_count().await > count
    })
    .await;
    assert!(latency_sum().await > sum, "an ack not held is timed at its arrival");
}
