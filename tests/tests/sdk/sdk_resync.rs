//! A delta whose checksum does not match is never applied silently: the
//! SDK counts it, keeps serving its last good snapshot, and resubscribes
//! with an empty cursor for a full snapshot. The relay here is a
//! fault-injecting Sync server that corrupts the checksum on purpose.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flagstream::{Client, Context, Status};
use flagstream_proto::v1 as pb;
use flagstream_proto::v1::sync_server::{Sync as SyncService, SyncServer};
use flagstream_tests::cluster::eventually;
use flagstream_tests::relay::bool_flag;
use prost::Message;
use tokio_stream::{Stream, StreamExt};

type Out = Pin<Box<dyn Stream<Item = Result<pb::SubscribeResponse, tonic::Status>> + Send>>;

#[derive(Clone, Default)]
struct Faulty {
    hellos: Arc<Mutex<Vec<pb::Cursor>>>,
    /// Corrupt every snapshot, forever.
    always_bad: bool,
}

fn checksum(flags: &[pb::Flag]) -> u64 {
    flags
        .iter()
        .fold(0u64, |s, f| s.wrapping_add(flagstream::checksum::item_hash(1, &f.key, &f.encode_to_vec())))
}

fn msg(kind: pb::subscribe_response::Kind) -> Result<pb::SubscribeResponse, tonic::Status> {
    Ok(pb::SubscribeResponse { kind: Some(kind) })
}

#[tonic::async_trait]
impl SyncService for Faulty {
    type SubscribeStream = Out;
    async fn subscribe(
        &self,
        req: tonic::Request<tonic::Streaming<pb::SubscribeRequest>>,
    ) -> Result<tonic::Response<Out>, tonic::Status> {
        let mut inbound = req.into_inner();
        let Some(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(h)) }) =
            inbound.message().await?
        else {
            return Err(tonic::Status::invalid_argument("hello first"));
        };
        let mut hellos = self.hellos.lock().unwrap();
        hellos.push(h.cursor.unwrap_or_default());
        let attempt = hellos.len();
        drop(hellos);
        tokio::spawn(async move { while let Ok(Some(_)) = inbound.message().await {} });
        let mut v1 = bool_flag("a", true);
        v1.version = 1;
        let heartbeat = msg(pb::subscribe_response::Kind::Heartbeat(pb::Heartbeat {
            epoch: "e".into(),
            head_revision: 1,
            interval_ms: 60_000,
            ..Default::default()
        }));
        let items: Vec<_> = if self.always_bad {
            let flags = vec![v1.clone()];
            vec![
                heartbeat,
                msg(pb::subscribe_response::Kind::SnapshotChunk(pb::SnapshotChunk {
                    epoch: "e".into(),
                    revision: 1,
                    total_chunks: 1,
                    last_chunk: true,
                    checksum: checksum(&flags).wrapping_add(1),
                    flags,
                    ..Default::default()
                })),
            ]
        } else if attempt == 1 {
            let flags = vec![v1.clone()];
            let mut v2 = bool_flag("a", false);
            v2.version = 2;
            vec![
                heartbeat,
                msg(pb::subscribe_response::Kind::SnapshotChunk(pb::SnapshotChunk {
                    epoch: "e".into(),
                    revision: 1,
                    total_chunks: 1,
                    last_chunk: true,
                    checksum: checksum(&flags),
                    flags,
                    ..Default::default()
                })),
                // The corrupted delta: checksum off by one.
                msg(pb::subscribe_response::Kind::Delta(pb::Delta {
                    epoch: "e".into(),
                    from_revision: 1,
                    to_revision: 2,
                    checksum: checksum(std::slice::from_ref(&v2)).wrapping_add(1),
                    upserted_flags: vec![v2],
                    ..Default::default()
                })),
            ]
        } else {
            let mut fixed = bool_flag("a", false);
            fixed.version = 3;
            let flags = vec![fixed, bool_flag("resynced", true)];
            vec![
                heartbeat,
                msg(pb::subscribe_response::Kind::SnapshotChunk(pb::SnapshotChunk {
                    epoch: "e".into(),
                    revision: 3,
                    total_chunks: 1,
                    last_chunk: true,
                    checksum: checksum(&flags),
                    flags,
                    ..Default::default()
                })),
            ]
        };
        let stream = tokio_stream::iter(items).chain(tokio_stream::pending());
        Ok(tonic::Response::new(Box::pin(stream)))
    }
}

async fn serve(faulty: Faulty) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(SyncServer::new(faulty))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    addr
}

/// Data that never applies does not become a snapshot storm: the first
/// resync is planned at once, the following ones take the backoff (whose
/// ceiling doubles: 400 ms, 800 ms, ...). The plans are asserted, not the
/// clock; `follow/plan.rs` unit-tests the growth.
#[tokio::test]
async fn repeated_failures_back_off() {
    let faulty = Faulty { always_bad: true, ..Faulty::default() };
    let hellos = faulty.hellos.clone();
    let addr = serve(faulty).await;
    let c = Client::builder()
        .endpoints([format!("http://{addr}")])
        .sdk_key("k")
        .backoff_base(Duration::from_millis(400))
        .build()
        .unwrap();
    eventually("a fourth subscription", || hellos.lock().unwrap().len() >= 4).await;
    let Status::Initializing { attempts } = c.status() else { panic!("no data expected: {:?}", c.status()) };
    assert!(attempts.len() >= 3, "{attempts:?}");
    assert!(attempts.iter().all(|a| a.error.contains("resync after")), "{attempts:?}");
    assert!(attempts[0].retry_in < Duration::from_millis(200), "the first resync is immediate: {attempts:?}");
    assert!(attempts[1].retry_in < Duration::from_millis(400), "{attempts:?}");
    assert!(attempts[2].retry_in < Duration::from_millis(800), "{attempts:?}");
    // Drawn from the backoff, not zero: three uniform draws from [0, 400),
    // [0, 800), [0, 1600) ms summing under 10 ms has odds below 1e-6.
    let waited: Duration = attempts[1..].iter().map(|a| a.retry_in).sum();
    assert!(waited > Duration::from_millis(10), "the resyncs after the first did not back off: {attempts:?}");
    assert!(c.stats().checksum_mismatches >= 3);
    assert!(
        hellos.lock().unwrap().iter().all(|h| h.epoch.is_empty()),
        "every resubscription asks for a snapshot"
    );
}

/// The bad delta is refused and counted; a full snapshot replaces it.
#[tokio::test]
async fn checksum_mismatch_resyncs() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let faulty = Faulty::default();
    let hellos = faulty.hellos.clone();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(SyncServer::new(faulty))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let c = Client::builder().endpoints([format!("http://{addr}")]).sdk_key("k").build().unwrap();
    let ctx = Context::new("u");
    eventually("the resynced snapshot", || c.bool("resynced", &ctx, false)).await;
    assert!(!c.bool("a", &ctx, true), "the resynced snapshot's value is served");
    let s = c.stats();
    assert_eq!(
        (s.checksum_mismatches, s.resyncs, s.snapshots_applied, s.deltas_applied),
        (1, 1, 2, 0),
        "{s:?}"
    );
    let hellos = hellos.lock().unwrap();
    assert_eq!(hellos[0].epoch, "");
    assert_eq!(hellos[1].epoch, "", "the resubscription asked for a full snapshot: {hellos:?}");
}
