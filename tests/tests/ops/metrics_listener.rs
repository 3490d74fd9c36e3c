//! The metrics listener is bounded like the gRPC one, and idle clients
//! cannot hold it: a connection that sends no request is closed after the
//! header timeout, one that was answered is closed at once (no keep-alive),
//! one client address holds at most four slots, connections beyond the
//! limits are closed at once and counted, and a scraper on another address
//! gets its answer while one address floods.

use std::net::SocketAddr;

use flagstream_relay::scrape::{MAX_METRICS_CONNECTIONS, MAX_METRICS_CONNECTIONS_PER_ADDRESS};
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Waits until the relay closes `s` (EOF or reset); returns what it sent.
async fn closed_by_relay(mut s: TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    match tokio::time::timeout(STEP, s.read_to_end(&mut got)).await {
        Ok(_) => got,
        Err(_) => panic!("the relay kept a metrics connection open"),
    }
}

/// A connection to `to` from the loopback address `127.0.0.{host}`.
async fn connect_from(host: u8, to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::from(([127, 0, 0, host], 0))).unwrap();
    s.connect(to).await.unwrap()
}

/// A scrape from `127.0.0.{host}` that does not ask to close: the relay
/// answers and closes the connection itself.
async fn scrape_from(host: u8, to: SocketAddr) -> String {
    let mut s = connect_from(host, to).await;
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    String::from_utf8(closed_by_relay(s).await).unwrap()
}

#[tokio::test]
async fn idle_and_excess_metrics_connections_are_closed_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let per = MAX_METRICS_CONNECTIONS_PER_ADDRESS;
    // One address floods with idle connections: it holds `per` slots, the
    // rest are closed at once, without an answer.
    let mut idle = Vec::new();
    for _ in 0..per {
        idle.push(connect_from(1, relay.metrics).await);
    }
    for _ in 0..3 {
        assert_eq!(closed_by_relay(connect_from(1, relay.metrics).await).await, b"");
    }
    // Meanwhile a scraper on another address is answered.
    let answer = scrape_from(2, relay.metrics).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("flagstream_limit_hits_total{limit=\"metrics_connections_per_address\"} 3"),
        "{answer}"
    );
    // Every slot taken, by addresses within their own limit: one more
    // (from a fresh address) is closed at once.
    for host in 3.. {
        if idle.len() == MAX_METRICS_CONNECTIONS {
            break;
        }
        for _ in 0..per.min(MAX_METRICS_CONNECTIONS - idle.len()) {
            idle.push(connect_from(host, relay.metrics).await);
        }
    }
    assert_eq!(closed_by_relay(connect_from(200, relay.metrics).await).await, b"");
    // The idle ones are closed by the header timeout.
    for s in idle {
        let answer = closed_by_relay(s).await;
        assert!(!answer.starts_with(b"HTTP/1.1 200"), "an idle connection got a response");
    }
    // Room again: a scrape works and shows the refusal.
    let refused = relay.metric("flagstream_limit_hits_total{limit=\"metrics_connections\"}").await;
    assert!(refused >= 1.0, "refusal not counted: {refused}");
}
