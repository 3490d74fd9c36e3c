//! Evaluation features (PROTOCOL.md §8, rule 7): a subscriber that does not
//! announce a feature its environment's data uses would evaluate that data
//! wrongly, so it is refused with FAILED_PRECONDITION naming the feature,
//! at subscribe time and, if a write starts using it later, at once on its
//! open stream; the SDK (which announces what it implements) follows as
//! before.

use flagstream::Context;
use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};
use flagstream_tests::subscriber::{Subscriber, Update};

/// A 50/50 rollout with LaunchDarkly's bucketing (feature
/// `imported_bucketing`).
fn imported(key: &str) -> pb::Flag {
    let mut f = bool_flag(key, true);
    f.fallthrough = Some(pb::Serve {
        kind: Some(pb::serve::Kind::Rollout(pb::Rollout {
            variations: vec![
                pb::WeightedVariation { variation: 0, weight: 50_000 },
                pb::WeightedVariation { variation: 1, weight: 50_000 },
            ],
            bucketing: Some(pb::Bucketing {
                kind: Some(pb::bucketing::Kind::Launchdarkly(pb::LaunchDarklyBucketing {
                    prefix: "hashKey.saltyA".into(),
                })),
            }),
            ..Default::default()
        })),
    });
    f
}

#[tokio::test]
async fn a_subscriber_without_a_feature_the_data_uses_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;

    // Open before the write: an old client following the environment.
    let mut old =
        Subscriber::connect_with_features(relay.channel().await, &relay.demo_key(), None, &[]).await.unwrap();
    assert!(matches!(old.next(STEP).await, Ok(Update::Snapshot { .. })));
    put(&mut admin, "demo", imported("imported")).await.unwrap();
    let end = loop {
        match old.next(STEP).await {
            Ok(Update::Heartbeat { .. }) => continue,
            other => break other,
        }
    };
    let err = end.expect_err("the old client's stream ends instead of receiving the flag");
    assert!(err.contains("not in a state required") && err.contains("imported_bucketing"), "{err}");

    // A new old client: refused before any message.
    let refused =
        Subscriber::connect_with_features(relay.channel().await, &relay.demo_key(), None, &[]).await;
    let status = match refused {
        Err(s) => s,
        Ok(mut s) => match s.next(STEP).await {
            Err(e) => panic!("refused after opening: {e}"),
            Ok(u) => panic!("served: {u:?}"),
        },
    };
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("imported_bucketing"), "{}", status.message());
    assert!(
        relay.metric("flagstream_subscribes_total{result=\"rejected\",reason=\"missing_feature\"}").await
            >= 1.0
    );

    // A client announcing it is served.
    let mut current = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    assert!(matches!(current.next(STEP).await, Ok(Update::Snapshot { .. })));

    // The SDK announces the feature: it follows and evaluates the flag as
    // LaunchDarkly would (userKeyA at 0.42157587: the first half).
    let sdk = relay.sdk().build().unwrap();
    assert!(sdk.wait_ready(STEP).await.has_data());
    assert!(sdk.bool("imported", &Context::new("userKeyA"), false));
    assert!(!sdk.bool("imported", &Context::new("userKeyB"), true));
}
