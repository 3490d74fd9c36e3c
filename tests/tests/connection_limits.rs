//! Before any authentication, a listener holds its connections to a cap
//! per client address and in total: a connection past either is answered
//! `RESOURCE_EXHAUSTED` naming the option (with a retry hint), counted in
//! `flagstream_limit_hits_total`, logged, and closed; a connection that
//! sends no request within the first-request timeout is closed; and the
//! streams already admitted keep their heartbeats throughout.

use std::net::{IpAddr, SocketAddr};

use flagstream_tests::STEP;
use flagstream_tests::cluster::eventually_async;
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::{Subscriber, Update};
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};
use tonic::transport::{Channel, Endpoint};

/// A gRPC channel to `relay` from the loopback address `127.0.0.{host}`.
async fn channel_from(host: u8, relay: &Relay) -> Channel {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_local_address(Some(IpAddr::from([127, 0, 0, host])));
    Endpoint::from_shared(relay.url()).unwrap().connect_with_connector(http).await.unwrap()
}

/// A TCP connection from `127.0.0.{host}` that never sends a byte.
async fn silent_from(host: u8, to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::from(([127, 0, 0, host], 0))).unwrap();
    s.connect(to).await.unwrap()
}

/// The status a Subscribe from `127.0.0.{host}` gets.
async fn refused_from(host: u8, relay: &Relay) -> tonic::Status {
    match Subscriber::connect(channel_from(host, relay).await, &relay.demo_key(), None).await {
        Ok(mut s) => match s.next(STEP).await {
            Ok(u) => panic!("admitted past the connection caps: {u:?}"),
            Err(e) => panic!("no status, but {e}"),
        },
        Err(status) => status,
    }
}

#[tokio::test]
async fn connections_past_the_caps_are_refused_counted_and_logged() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--max-connections", "4", "--max-connections-per-address", "2", "--heartbeat", "200ms"];
    let relay = Relay::start(dir.path(), &args).await;
    // A subscriber already in (its own address), whose heartbeats must go on.
    let mut admitted =
        Subscriber::connect(channel_from(2, &relay).await, &relay.demo_key(), None).await.unwrap();
    assert!(matches!(admitted.next_change(STEP).await.unwrap(), Update::Snapshot { .. }));

    // One address holds its two connections, silently; a third is refused.
    let held = [silent_from(1, relay.grpc).await, silent_from(1, relay.grpc).await];
    let status = refused_from(1, &relay).await;
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("max-connections-per-address is 2"), "{}", status.message());
    assert!(status.metadata().get("flagstream-retry-after-ms").is_some(), "{status:?}");

    // Four open in all: a fifth, from a fresh address, is refused too.
    let _fourth = silent_from(3, relay.grpc).await;
    let status = refused_from(4, &relay).await;
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("max-connections is 4"), "{}", status.message());

    assert!(relay.metric("flagstream_limit_hits_total{limit=\"connections_per_address\"}").await >= 1.0);
    assert!(relay.metric("flagstream_limit_hits_total{limit=\"connections\"}").await >= 1.0);
    assert_eq!(relay.metric("flagstream_connections{listener=\"grpc\"}").await, 4.0);
    let log = relay.log();
    assert!(log.contains("connection refused: max-connections-per-address (2) reached"), "{log}");
    assert!(log.contains("connection refused: max-connections (4) reached"), "{log}");
    for _ in 0..3 {
        assert!(matches!(admitted.next(STEP).await.unwrap(), Update::Heartbeat { .. }), "heartbeats go on");
    }

    // The silent connections are closed by the first-request timeout
    // (the hello timeout, 10 s by default), freeing their places.
    for mut s in held {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(STEP, s.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "a silent connection was kept open");
    }
    eventually_async("the freed places", || async {
        relay.metric("flagstream_connections{listener=\"grpc\"}").await <= 2.0
    })
    .await;
    assert!(relay.metric("flagstream_limit_hits_total{limit=\"connection_first_request\"}").await >= 2.0);
    let mut back = Subscriber::connect(channel_from(1, &relay).await, &relay.demo_key(), None).await.unwrap();
    assert!(matches!(back.next_change(STEP).await.unwrap(), Update::Snapshot { .. }));
    assert!(matches!(admitted.next(STEP).await.unwrap(), Update::Heartbeat { .. }));
}
