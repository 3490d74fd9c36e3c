//! Before any authentication, a listener holds its connections to a cap
//! per client address and in total: a connection past either is answered
//! `RESOURCE_EXHAUSTED` naming the option (with a retry hint), counted in
//! `flagstream_limit_hits_total`, logged, and closed. A connection that
//! carries no request for the idle timeout (one that never sends one, or
//! one that sent a request and idles) is closed and counted; and the
//! streams already admitted keep their heartbeats throughout.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use flagstream_tests::STEP;
use flagstream_tests::cluster::eventually_async;
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::{HeartbeatWatch, Subscriber, Update};
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// The largest gap between an innocent stream's heartbeats (every 200 ms)
/// while others are refused: ten intervals, well inside the SDK's stall
/// detection (5 s); a stream starved by the attack misses it.
const LIVE: Duration = Duration::from_secs(2);

/// A gRPC channel to `relay` from the loopback address `127.0.0.{host}`.
async fn channel_from(host: u8, relay: &Relay) -> Channel {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_local_address(Some(IpAddr::from([127, 0, 0, host])));
    Endpoint::from_shared(relay.url()).unwrap().connect_with_connector(http).await.unwrap()
}

/// A TCP connection from `127.0.0.{host}`.
async fn tcp_from(host: u8, to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::from(([127, 0, 0, host], 0))).unwrap();
    s.connect(to).await.unwrap()
}

/// A connection from `127.0.0.{host}` holding one request open (a health
/// watch, which needs no credential) for as long as the stream is kept.
async fn holding_from(
    host: u8,
    relay: &Relay,
) -> (HealthClient<Channel>, tonic::Streaming<HealthCheckResponse>) {
    let mut health = HealthClient::new(channel_from(host, relay).await);
    let mut watch = health.watch(HealthCheckRequest { service: String::new() }).await.unwrap().into_inner();
    watch.message().await.unwrap().expect("the current health");
    (health, watch)
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
    let args = [
        "--max-connections",
        "4",
        "--max-subscribers",
        "4",
        "--max-connections-per-address",
        "2",
        "--heartbeat",
        "200ms",
    ];
    let relay = Relay::start(dir.path(), &args).await;
    // A subscriber already in (its own address), whose heartbeats must go on.
    let mut admitted =
        Subscriber::connect(channel_from(2, &relay).await, &relay.demo_key(), None).await.unwrap();
    assert!(matches!(admitted.next_change(STEP).await.unwrap(), Update::Snapshot { .. }));
    let watch = HeartbeatWatch::start(admitted);

    // One address holds its two connections; a third is refused.
    let held = [holding_from(1, &relay).await, holding_from(1, &relay).await];
    let status = refused_from(1, &relay).await;
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("max-connections-per-address is 2"), "{}", status.message());
    assert!(status.metadata().get("flagstream-retry-after-ms").is_some(), "{status:?}");

    // Four open in all: a fifth, from a fresh address, is refused too.
    let fourth = holding_from(3, &relay).await;
    let status = refused_from(4, &relay).await;
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("max-connections is 4"), "{}", status.message());

    assert!(relay.metric("flagstream_limit_hits_total{limit=\"connections_per_address\"}").await >= 1.0);
    assert!(relay.metric("flagstream_limit_hits_total{limit=\"connections\"}").await >= 1.0);
    assert_eq!(relay.metric("flagstream_connections{listener=\"grpc\"}").await, 4.0);
    let log = relay.log();
    assert!(log.contains("connection refused: max-connections-per-address (2) reached"), "{log}");
    assert!(log.contains("connection refused: max-connections (4) reached"), "{log}");
    let (mut admitted, gap, heartbeats) = watch.stop().await;
    assert!(heartbeats >= 1 && gap < LIVE, "the admitted stream's heartbeats went on: largest gap {gap:?}");
    drop((held, fourth));
    eventually_async("the freed places", || async {
        relay.metric("flagstream_connections{listener=\"grpc\"}").await == 1.0
    })
    .await;
    let mut back = Subscriber::connect(channel_from(1, &relay).await, &relay.demo_key(), None).await.unwrap();
    assert!(matches!(back.next_change(STEP).await.unwrap(), Update::Snapshot { .. }));
    assert!(matches!(admitted.next(STEP).await.unwrap(), Update::Heartbeat { .. }));
}

#[tokio::test]
async fn connections_that_carry_no_request_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--connection-idle-timeout", "1s", "--heartbeat", "200ms"]).await;
    let mut admitted = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    admitted.next_change(STEP).await.unwrap();
    let watch = HeartbeatWatch::start(admitted);

    // Never a byte: closed.
    let mut silent = tcp_from(1, relay.grpc).await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(STEP, silent.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "a silent connection was kept open");

    // One request (a health check, no credential needed), then idle: the
    // relay ends the connection.
    let (mut send, conn) = h2::client::handshake(tcp_from(2, relay.grpc).await).await.unwrap();
    let conn = tokio::spawn(conn);
    let req = http::Request::post(format!("http://{}/grpc.health.v1.Health/Check", relay.grpc))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut body) = send.send_request(req, false).unwrap();
    body.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true).unwrap(); // an empty HealthCheckRequest
    let mut answer = response.await.unwrap().into_body();
    while let Some(chunk) = answer.data().await {
        chunk.unwrap();
    }
    let trailers = answer.trailers().await.unwrap().expect("grpc trailers");
    assert_eq!(trailers.get("grpc-status").map(|v| v.as_bytes()), Some(&b"0"[..]));
    let ended = tokio::time::timeout(STEP, conn).await;
    assert!(ended.is_ok(), "an idle connection was kept open");

    assert!(relay.metric("flagstream_limit_hits_total{limit=\"connection_idle\"}").await >= 2.0);
    // A connection with a stream open is never idle: its heartbeats went on
    // through the idle deadlines of the others.
    let (_, gap, heartbeats) = watch.stop().await;
    assert!(heartbeats >= 5 && gap < LIVE, "{heartbeats} heartbeats, largest gap {gap:?}");
}
