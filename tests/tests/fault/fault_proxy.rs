//! The fault proxy does what each mode promises, against an echo server:
//! pass and latency forward everything in order, throttle holds the
//! server-to-client rate, blackhole forwards nothing and closes nothing
//! (and forwards what it held, in order, once passing again), reset ends
//! both sides with an RST.

use std::time::Duration;

use flagstream_tests::STEP;
use flagstream_tests::proxy::{Mode, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An echo server; returns its address.
async fn echo() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

async fn round_trip(c: &mut TcpStream, data: &[u8]) -> Vec<u8> {
    c.write_all(data).await.unwrap();
    let mut got = vec![0; data.len()];
    tokio::time::timeout(STEP, c.read_exact(&mut got)).await.expect("echoed in time").unwrap();
    got
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

#[tokio::test]
async fn pass_latency_and_throttle_forward_everything_in_order() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let proxy = Proxy::start(echo().await).await;
    let mut c = TcpStream::connect(proxy.addr).await.unwrap();
    assert_eq!(round_trip(&mut c, &pattern(100_000)).await, pattern(100_000));
    proxy.set(0, Mode::Latency(Duration::from_millis(20)));
    assert_eq!(round_trip(&mut c, &pattern(50_000)).await, pattern(50_000));
    proxy.set(0, Mode::Throttle(20_000));
    assert_eq!(round_trip(&mut c, &pattern(30_000)).await, pattern(30_000));
    assert_eq!(proxy.bytes_down(), 180_000);
}

/// While blackholed nothing arrives (checked by a marker sent through a
/// second, passing connection first), nothing is closed, and everything
/// held is delivered in order once the connection passes again.
#[tokio::test]
async fn blackhole_holds_and_releases_in_order() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let proxy = Proxy::start(echo().await).await;
    let mut held = TcpStream::connect(proxy.addr).await.unwrap();
    assert_eq!(round_trip(&mut held, b"warm").await, b"warm");
    proxy.blackhole_existing();
    held.write_all(&pattern(40_000)).await.unwrap();
    // A later connection passes, and its echo comes back: by then the
    // proxy has had every chance to forward the held bytes.
    let mut other = TcpStream::connect(proxy.addr).await.unwrap();
    assert_eq!(round_trip(&mut other, b"marker").await, b"marker");
    let mut probe = [0u8; 1];
    let nothing = tokio::time::timeout(Duration::from_millis(100), held.read(&mut probe)).await;
    assert!(nothing.is_err(), "a blackholed connection delivered or closed: {nothing:?}");
    proxy.set(0, Mode::Pass);
    let mut got = vec![0; 40_000];
    tokio::time::timeout(STEP, held.read_exact(&mut got)).await.expect("released").unwrap();
    assert_eq!(got, pattern(40_000));
}

#[tokio::test]
async fn reset_ends_both_sides_with_an_rst() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let proxy = Proxy::start(echo().await).await;
    let mut c = TcpStream::connect(proxy.addr).await.unwrap();
    assert_eq!(round_trip(&mut c, b"hello").await, b"hello");
    proxy.set(0, Mode::Reset);
    let mut buf = [0u8; 16];
    let got = tokio::time::timeout(STEP, c.read(&mut buf)).await.expect("the reset arrives");
    match got {
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
        Ok(n) => panic!("read {n} bytes instead of a reset"),
    }
}
