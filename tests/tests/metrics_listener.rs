//! The metrics listener is bounded like the gRPC one: a connection that
//! sends no request is closed after the header timeout, and connections
//! beyond the limit are closed at once and counted; scrapes work again as
//! soon as there is room.

use flagstream_relay::metrics::MAX_METRICS_CONNECTIONS;
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Waits until the relay closes `s` (EOF or reset); returns what it sent.
async fn closed_by_relay(mut s: TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    match tokio::time::timeout(STEP, s.read_to_end(&mut got)).await {
        Ok(_) => got,
        Err(_) => panic!("the relay kept an idle metrics connection open"),
    }
}

#[tokio::test]
async fn idle_and_excess_metrics_connections_are_closed_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    // Fill every slot with connections that never send a request.
    let mut idle = Vec::new();
    for _ in 0..MAX_METRICS_CONNECTIONS {
        idle.push(TcpStream::connect(relay.metrics).await.unwrap());
    }
    // One more is closed at once, without an answer. (The relay accepts
    // in order, so the idle ones hold their slots by now.)
    let excess = TcpStream::connect(relay.metrics).await.unwrap();
    assert_eq!(closed_by_relay(excess).await, b"");
    // The idle ones are closed by the header timeout.
    for s in idle {
        let answer = closed_by_relay(s).await;
        assert!(!answer.starts_with(b"HTTP/1.1 200"), "an idle connection got a response");
    }
    // Room again: a scrape works and shows the refusal.
    let refused = relay.metric("flagstream_limit_hits_total{limit=\"metrics_connections\"}").await;
    assert!(refused >= 1.0, "refusal not counted: {refused}");
}
