//! A relay cannot park its clients: a `reconnect` asking for the largest
//! delay the protocol can carry (`suggested_delay_ms` and `jitter_ms` at
//! u32::MAX, ~99 days) makes the SDK plan its next attempt within 60 s
//! (plus its own jitter of up to a second), as a retry-after hint would.
//! The relay here is a hostile Sync server that answers every Hello that
//! way.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flagstream::{Client, Status};
use flagstream_proto::v1 as pb;
use flagstream_proto::v1::sync_server::{Sync as SyncService, SyncServer};
use flagstream_tests::cluster::eventually;
use tokio_stream::Stream;

type Out = Pin<Box<dyn Stream<Item = Result<pb::SubscribeResponse, tonic::Status>> + Send>>;

#[derive(Clone, Default)]
struct Parking {
    hellos: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl SyncService for Parking {
    type SubscribeStream = Out;
    async fn subscribe(
        &self,
        req: tonic::Request<tonic::Streaming<pb::SubscribeRequest>>,
    ) -> Result<tonic::Response<Out>, tonic::Status> {
        let mut inbound = req.into_inner();
        inbound.message().await?;
        self.hellos.fetch_add(1, Ordering::SeqCst);
        let msg = |kind| Ok(pb::SubscribeResponse { kind: Some(kind) });
        let out = vec![
            msg(pb::subscribe_response::Kind::Heartbeat(pb::Heartbeat {
                epoch: "e".into(),
                head_revision: 1,
                interval_ms: 60_000,
                ..Default::default()
            })),
            msg(pb::subscribe_response::Kind::Reconnect(pb::Reconnect {
                reason: pb::ReconnectReason::Drain as i32,
                suggested_delay_ms: u32::MAX,
                jitter_ms: u32::MAX,
                message: "go away for 99 days".into(),
                ..Default::default()
            })),
        ];
        Ok(tonic::Response::new(Box::pin(tokio_stream::iter(out))))
    }
}

#[tokio::test]
async fn a_reconnect_request_cannot_park_the_client() {
    let parking = Parking::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(SyncServer::new(parking.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let c = Client::builder().endpoints([format!("http://{addr}")]).sdk_key("any").build().unwrap();
    eventually("the reconnect request", || {
        matches!(c.status(), Status::Initializing { attempts } if attempts.iter().any(|a| a.error.contains("99 days")))
    })
    .await;
    let Status::Initializing { attempts } = c.status() else { panic!("no data was ever sent") };
    let planned = attempts.iter().find(|a| a.error.contains("99 days")).unwrap();
    assert!(
        planned.retry_in >= Duration::from_secs(60),
        "it waits what was asked, up to the cap: {planned:?}"
    );
    assert!(planned.retry_in < Duration::from_secs(61), "capped at 60 s plus its own jitter: {planned:?}");
    assert_eq!(parking.hellos.load(Ordering::SeqCst), 1);
}
