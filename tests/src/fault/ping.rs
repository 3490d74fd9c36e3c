//! The cost of the SDK's default stall detection at scale: an idle SDK
//! stream is pinged (HTTP/2 PING, answered by the relay's HTTP/2 layer)
//! when nothing has arrived for the keepalive interval (3 s); with a
//! heartbeat every 15 s that is four pings per 15 s, 0.27 pings/s per
//! stream, 13,300/s for 50,000 streams. This scenario opens `connections`
//! HTTP/2 connections to a relay and makes them ping at that aggregate
//! rate, then measures the relay's CPU time against the same connections
//! idle, in the same run.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::relay::Relay;

/// What one run measured.
#[derive(Debug, Clone)]
pub struct PingReport {
    /// Connections open.
    pub connections: usize,
    /// Pings answered per second while pinging.
    pub pings_per_sec: f64,
    /// Relay CPU (user + system) while idle, % of one core.
    pub idle_cpu: f64,
    /// Relay CPU while answering the pings, % of one core.
    pub pinging_cpu: f64,
}

/// The relay's CPU seconds so far (utime + stime).
fn cpu_secs(pid: u32) -> f64 {
    // A figure from a missing or odd file would be a false 0: fail instead.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the relay's /proc stat");
    // Fields after the command name (which may hold spaces) start at ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).expect("a /proc stat line");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based), 11 and 12 after ')'.
    (ticks(11) + ticks(12)) / 100.0
}

/// Opens `connections` connections; pings at `rate` per second in all for
/// `window`, after the same `window` idle.
pub async fn run(dir: &Path, connections: usize, rate: f64, window: Duration) -> PingReport {
    let relay = Relay::start(dir, &[]).await;
    let pinging = Arc::new(AtomicBool::new(false));
    let pongs = Arc::new(AtomicU64::new(0));
    let per_conn = Duration::from_secs_f64(connections as f64 / rate);
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let tcp = tokio::net::TcpStream::connect(relay.grpc).await.expect("connect");
        let (h2, mut conn) =
            h2::client::Builder::new().handshake::<_, Bytes>(tcp).await.expect("HTTP/2 handshake");
        let mut ping_pong = conn.ping_pong().expect("ping handle");
        tasks.push(tokio::spawn(async move {
            let _keep = h2;
            let _ = conn.await;
        }));
        let (pinging, pongs) = (pinging.clone(), pongs.clone());
        tasks.push(tokio::spawn(async move {
            // Spread the connections' phases over one interval (load
            // shaping in a benchmark tool, not a wait for a condition).
            tokio::time::sleep(per_conn.mul_f64(rand::random::<f64>())).await;
            let mut tick = tokio::time::interval(per_conn);
            loop {
                tick.tick().await;
                if pinging.load(Ordering::Relaxed) {
                    if ping_pong.ping(h2::Ping::opaque()).await.is_err() {
                        return;
                    }
                    pongs.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let pid = relay.pid();
    let measure = |window: Duration| async move {
        let (c0, t0) = (cpu_secs(pid), Instant::now());
        tokio::time::sleep(window).await; // the measurement window
        100.0 * (cpu_secs(pid) - c0) / t0.elapsed().as_secs_f64()
    };
    let idle_cpu = measure(window).await;
    pinging.store(true, Ordering::Relaxed);
    let before = pongs.load(Ordering::Relaxed);
    let t = Instant::now();
    let pinging_cpu = measure(window).await;
    let pings_per_sec = (pongs.load(Ordering::Relaxed) - before) as f64 / t.elapsed().as_secs_f64();
    for t in tasks {
        t.abort();
    }
    PingReport { connections, pings_per_sec, idle_cpu, pinging_cpu }
}
