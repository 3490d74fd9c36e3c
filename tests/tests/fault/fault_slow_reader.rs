//! Scenario 4 of docs/RESILIENCE.md at CI size.
//!
//! 1. A subscriber reading at 1 KiB/s while 60 KB writes go on 20 times a
//!    second. The relay keeps no backlog for it and the others do not wait
//!    for it: the five other subscribers get every write, the proxy holds
//!    the slow one to its rate, and the relay cuts that stream off, only
//!    that one, by the behind deadline (here 2 s): it keeps pulling, slowly,
//!    but stays behind the head (the send deadline, 1 s heartbeat + 30 s,
//!    cannot fire first).
//! 2. A large snapshot (~600 KB in 16 KiB chunks) read at ~80 KiB/s, over
//!    4× the default progress rate (16 KiB/s), while writes go on: behind
//!    the head for longer than the deadline, but credited for its progress,
//!    it is not cut and reaches the head. The same snapshot read at 8 KiB/s
//!    (half the progress rate) is cut; read at 8 KiB/s with no write going
//!    on (the head does not move past it), it is not.

use std::time::{Duration, Instant};

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::sync_client::SyncClient;
use flagstream_tests::fault::slow::{Load, SLOW_SDK, run};
use flagstream_tests::relay::{Relay, bool_flag, put};
use tokio::sync::{mpsc, watch};
use tonic::transport::Channel;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_is_cut_off_by_the_behind_deadline_and_does_not_hold_up_the_others() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let dir = tempfile::tempdir().unwrap();
    let guard = Duration::from_secs(120);
    let args = ["--heartbeat", "1s", "--send-deadline", "30s", "--behind-deadline", "2s"];
    let load = Load {
        fast: 5,
        writes: 60,
        interval: Duration::from_millis(50),
        flag_bytes: 60_000,
        rate: 1024,
        // Writes go on until the cut is seen, at most this long.
        max_time: Duration::from_secs(30),
    };
    // `run` waits until every fast subscriber has every write.
    let r = run(dir.path(), load, &args, guard).await;
    eprintln!("{r:?}");
    assert!(r.writes >= 60, "{r:?}");
    // Cut, once, by the behind deadline, within the run (well before the
    // send deadline's 31 s could apply).
    assert_eq!(r.cut_off, 1, "the slow reader was not cut off (or others were): {r:?}");
    assert_eq!(r.cut_behind, 1, "the cut was not the behind deadline's: {r:?}");
    assert!(r.cut_after.is_some_and(|d| d < Duration::from_secs(30)), "{r:?}");
    // Which one: the relay's log names the SDK of the stream it cut, and no
    // fast client had to reconnect.
    assert_eq!(r.cut_sdks, vec![SLOW_SDK.to_owned()], "a fast client's stream was cut: {r:?}");
    assert_eq!(r.fast_reconnects, 0, "a fast client lost its stream: {r:?}");
    // It kept pulling: it read, at its rate (plus one paced chunk), and
    // cannot have kept up.
    assert!(r.slow_bytes > 0, "{r:?}");
    let allowed = 1024.0 * r.ran_for.as_secs_f64() * 1.2 + 1024.0;
    assert!((r.slow_bytes as f64) <= allowed, "the slow reader read faster than 1 KiB/s: {r:?}");
    assert!(r.slow_bytes < (r.writes as u64) * 60_000 / 10, "{r:?}");
}

/// What a paced reader saw.
#[derive(Debug, Default, Clone)]
struct Seen {
    /// Snapshot chunks received.
    chunks: u32,
    /// When the snapshot's last chunk arrived (from the stream's start).
    snapshot_done: Option<Duration>,
    /// The revision it holds (0 until the snapshot is whole).
    revision: u64,
    /// How the stream ended (`None`: still open).
    ended: Option<String>,
}

/// A subscriber on its own connection, with 64 KiB HTTP/2 windows so that
/// its reading pace is what the relay's transport sees, waiting `pace`
/// after each message it receives.
fn paced_reader(url: String, key: String, pace: Duration) -> watch::Receiver<Seen> {
    let (tx, rx) = watch::channel(Seen::default());
    tokio::spawn(async move {
        let ended = async {
            let channel = Channel::from_shared(url)
                .map_err(|e| e.to_string())?
                .initial_stream_window_size(65_535)
                .initial_connection_window_size(65_535)
                .connect()
                .await
                .map_err(|e| e.to_string())?;
            let (req_tx, req_rx) = mpsc::channel(4);
            let hello = pb::Hello { sdk_key: key, sdk_name: "paced".into(), ..Default::default() };
            req_tx
                .send(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(hello)) })
                .await
                .map_err(|e| e.to_string())?;
            let started = Instant::now();
            let mut stream = SyncClient::new(channel)
                .subscribe(tokio_stream::wrappers::ReceiverStream::new(req_rx))
                .await
                .map_err(|s| s.to_string())?
                .into_inner();
            loop {
                let msg = stream.message().await.map_err(|s| s.to_string())?;
                let Some(msg) = msg else { return Err::<(), String>("stream ended".into()) };
                tx.send_modify(|seen| match msg.kind {
                    Some(pb::subscribe_response::Kind::SnapshotChunk(c)) => {
                        seen.chunks += 1;
                        if c.last_chunk {
                            seen.revision = c.revision;
                            seen.snapshot_done = Some(started.elapsed());
                        }
                    }
                    Some(pb::subscribe_response::Kind::Delta(d)) => seen.revision = d.to_revision,
                    _ => {}
                });
                // The reader's pace is what the test varies (its link rate).
                tokio::time::sleep(pace).await;
            }
        }
        .await;
        // Ok(()) never happens (the loop only ends in an error): empty then.
        let why = ended.err().unwrap_or_default();
        tx.send_modify(|seen| seen.ended = Some(why));
    });
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_snapshot_on_a_slow_link_that_keeps_progressing_is_not_cut_off() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let dir = tempfile::tempdir().unwrap();
    let guard = Duration::from_secs(120);
    let relay =
        Relay::start(dir.path(), &["--heartbeat", "1s", "--behind-deadline", "2s", "--chunk-bytes", "16384"])
            .await;
    // ~600 KB: about 37 chunks of 16 KiB.
    let key = relay.create_filled_env("big", 300, 2_000).await;
    let behind_cuts =
        || async { relay.metric("flagstream_stream_ends_total{reason=\"behind_deadline\"}").await as u64 };
    assert_eq!(behind_cuts().await, 0);

    // Writes every 100 ms for as long as the readers run: the head moves
    // past both of them the whole time.
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let mut admin = relay.admin().await;
    let writer = tokio::spawn(async move {
        let mut head = 0;
        let mut i = 0u64;
        while !*stop_rx.borrow() {
            head = put(&mut admin, "big", bool_flag("tick", i.is_multiple_of(2))).await.expect("write");
            i += 1;
            tokio::select! {
                // The write rate (10 a second) that moves the head.
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = stop_rx.changed() => {}
            }
        }
        head
    });

    // 16 KiB every 200 ms (~80 KiB/s) and every 2 s (8 KiB/s).
    let mut progressing = paced_reader(relay.url(), key.clone(), Duration::from_millis(200));
    let mut too_slow = paced_reader(relay.url(), key.clone(), Duration::from_secs(2));

    let deadline = tokio::time::Instant::now() + guard;
    let done = tokio::time::timeout_at(
        deadline,
        progressing.wait_for(|s| s.snapshot_done.is_some() || s.ended.is_some()),
    )
    .await
    .expect("the progressing reader's snapshot within the guard")
    .expect("reader alive")
    .clone();
    assert!(done.ended.is_none(), "the progressing snapshot was cut off: {done:?}\n{}", relay.log());
    // Long enough that, without the progress credit, the 2 s deadline (plus
    // the reaper's 1 s sampling) would have cut it.
    let took = done.snapshot_done.expect("snapshot done");
    assert!(took > Duration::from_secs(4), "the snapshot arrived too fast to test the credit: {done:?}");
    assert!(done.chunks > 20, "{done:?}");

    // The reader reading at half the progress rate is cut.
    let cut = tokio::time::timeout_at(deadline, too_slow.wait_for(|s| s.ended.is_some()))
        .await
        .expect("the too-slow reader was not cut off within the guard")
        .expect("reader alive")
        .clone();
    assert!(cut.snapshot_done.is_none(), "{cut:?}");
    assert!(cut.chunks >= 1, "it was reading: {cut:?}");

    // The writes stop; the progressing reader reaches the head.
    stop_tx.send(true).expect("writer alive");
    let head = writer.await.expect("writer");
    let at_head =
        tokio::time::timeout_at(deadline, progressing.wait_for(|s| s.revision >= head || s.ended.is_some()))
            .await
            .expect("the progressing reader at the head within the guard")
            .expect("reader alive")
            .clone();
    assert!(at_head.ended.is_none(), "{at_head:?}");
    assert!(at_head.revision >= head, "{at_head:?}");

    // With no write moving the head past it, a snapshot on its way is not
    // behind: one read at 8 KiB/s is not cut, however long it takes. By
    // its 6th chunk (~10 s) it has been on its way for longer than the
    // deadline plus its credit (2 s + 5 chunks of 16 KiB at 16 KiB/s).
    let mut quiet = paced_reader(relay.url(), key, Duration::from_secs(2));
    let read = tokio::time::timeout_at(deadline, quiet.wait_for(|s| s.chunks >= 6 || s.ended.is_some()))
        .await
        .expect("the quiet reader's 6th chunk within the guard")
        .expect("reader alive")
        .clone();
    assert!(read.ended.is_none(), "a snapshot with no newer write was cut: {read:?}\n{}", relay.log());

    // Exactly one cut, the too-slow reader's, counted and logged.
    assert_eq!(behind_cuts().await, 1, "{}", relay.log());
    let log = relay.log();
    assert_eq!(log.matches("behind deadline passed").count(), 1, "{log}");
}
