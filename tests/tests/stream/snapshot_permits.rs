//! The snapshot-send budget (`snapshot-concurrency`): a stream that needs
//! a snapshot while every permit is taken waits in line, kept alive by
//! heartbeats and counted once in `limit_hits{limit="snapshot_concurrency"}`,
//! and is sent its snapshot, whole and at the head, as soon as a permit
//! frees.

use flagstream_tests::STEP;
use flagstream_tests::cluster::eventually_async;
use flagstream_tests::relay::{Relay, bool_flag, put};
use flagstream_tests::subscriber::{Subscriber, Update};

const WAITS: &str = "flagstream_limit_hits_total{limit=\"snapshot_concurrency\"}";

#[tokio::test]
async fn a_snapshot_waits_for_a_free_permit_then_is_sent_whole() {
    let dir = tempfile::tempdir().unwrap();
    // One permit; a 3,000-flag snapshot (~3 MiB) in 256 KiB chunks.
    let relay = Relay::start(
        dir.path(),
        &[
            "--snapshot-concurrency",
            "1",
            "--chunk-bytes",
            "262144",
            "--heartbeat",
            "1s",
            "--quota-flags",
            "5000",
        ],
    )
    .await;
    let key = relay.create_filled_env("big", 3_000, 1_000).await;

    // The first subscriber reads nothing yet: its send stalls on the
    // window (1 MiB for this stream, set here so no client default
    // decides), holding the one permit.
    let narrow = tonic::transport::Endpoint::from_shared(relay.url())
        .unwrap()
        .initial_stream_window_size(1 << 20)
        .connect()
        .await
        .unwrap();
    let mut first = Subscriber::connect(narrow, &key, None).await.unwrap();
    eventually_async("the first snapshot send holds the permit", || async {
        relay.metric("flagstream_snapshot_sends").await == 1.0
    })
    .await;
    assert_eq!(relay.metric_or_zero(WAITS).await, 0.0);

    // The second, on its own connection, waits in line: heartbeats only.
    let mut second = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    for _ in 0..2 {
        match second.next(STEP).await.unwrap() {
            Update::Heartbeat { .. } => {}
            other => panic!("no permit is free, yet the waiting stream got {other:?}"),
        }
    }
    assert_eq!(relay.metric(WAITS).await, 1.0, "one wait, counted once whatever its heartbeats");

    // A write while it waits: its snapshot, when it comes, is at the head.
    let head = put(&mut relay.admin().await, "big", bool_flag("late", true)).await.unwrap();

    // The first reads on: its snapshot completes and frees the permit.
    assert!(matches!(first.next_change(STEP).await.unwrap(), Update::Snapshot { .. }));
    match second.next_change(STEP).await.unwrap() {
        Update::Snapshot { revision, chunks } => {
            assert_eq!(revision, head, "the snapshot sent after the wait is the head's");
            assert!(chunks > 1, "a multi-chunk snapshot ({chunks} chunk)");
        }
        other => panic!("expected the snapshot once a permit freed, got {other:?}"),
    }
    assert_eq!(second.flags.len(), 3_001, "every flag, the late one too");
    assert!(second.flags.contains_key("late"));
    assert_eq!(relay.metric(WAITS).await, 1.0);
    // Two snapshots sent, each counted once, however long one waited.
    assert_eq!(relay.metric("flagstream_resyncs_total{cause=\"empty_cursor\"}").await, 2.0);
}
