//! Scenario 3, reconnect storm: many SDK streams on one relay; the relay is
//! killed (`kill -9`: no drain, no reconnect hints) and started again on
//! its address. Every stream must come back; the curve of connected
//! streams and admission refusals shows the SDKs' jittered backoff and
//! the relay's subscribe rate limit spreading the load.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flagstream::Client;

use crate::fault::wait_change;
use crate::relay::{Relay, bool_flag, put};

/// The clients' `healthy_after`.
const HEALTHY_AFTER: Duration = Duration::from_secs(1);

/// One sample of the curve.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    /// Since the kill.
    pub at: Duration,
    /// Streams connected to the restarted relay (`flagstream_subscribers`).
    pub connected: u64,
    /// Subscriptions refused so far by admission control
    /// (`flagstream_quota_refusals_total`).
    pub refused: u64,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct StormReport {
    /// SDK streams.
    pub streams: usize,
    /// From the kill to every SDK holding the write made after the restart.
    pub back: Duration,
    /// Peak resident memory of the restarted relay, KiB.
    pub relay_peak_rss_kib: u64,
    /// Subscriptions the restarted relay refused (admission control).
    pub refused: u64,
    /// Snapshots it sent (`flagstream_resyncs_total`): zero when every
    /// stream resumed with a delta.
    pub snapshots_sent: u64,
    /// Whether the relay was still running at the end.
    pub relay_alive: bool,
    /// Connected streams and refusals every 250 ms after the kill.
    pub curve: Vec<Point>,
}

/// Runs the storm with `streams` SDK clients; `relay_args` go to both relay
/// starts. In production the streams have been up far longer than the
/// SDK's `healthy_after` (60 s) when a relay restarts, so their backoff has
/// been reset; the scenario gives its clients a `healthy_after` of 1 s and
/// lets the streams age that long before the kill instead of a minute.
pub async fn run(dir: &Path, streams: usize, relay_args: &[&str], guard: Duration) -> StormReport {
    let data = dir.join("relay");
    let mut relay = Relay::start(&data, relay_args).await;
    let addr = relay.grpc.to_string();
    let key = relay.demo_key();
    let clients: Vec<Client> = (0..streams)
        .map(|_| {
            Client::builder()
                .endpoints([relay.url()])
                .sdk_key(key.clone())
                .healthy_after(HEALTHY_AFTER)
                .build()
                .expect("client builds")
        })
        .collect();
    for c in &clients {
        c.wait_ready(guard).await;
    }
    // Every stream has now been up for `HEALTHY_AFTER` (see above).
    tokio::time::sleep(HEALTHY_AFTER).await;
    let mut changes: Vec<_> = clients.iter().map(Client::changes).collect();
    relay.kill9();
    relay.wait(guard).await;
    let killed_at = Instant::now();
    let relay = Arc::new(Relay::start_on(&data, &addr, relay_args).await);

    let curve = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let (relay, curve) = (relay.clone(), curve.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let connected = relay.metric_sum("flagstream_subscribers").await as u64;
                let refused = relay.metric_sum("flagstream_quota_refusals_total").await as u64;
                curve.lock().unwrap().push(Point { at: killed_at.elapsed(), connected, refused });
            }
        })
    };
    put(&mut relay.admin().await, "demo", bool_flag("after-storm", true)).await.expect("write");
    for ch in &mut changes {
        wait_change(ch, "after-storm", guard).await;
    }
    let back = killed_at.elapsed();
    sampler.abort();
    let _ = sampler.await; // aborted: its clone of the relay is dropped
    let mut relay = Arc::try_unwrap(relay).expect("the sampler is gone");
    let refused = relay.metric_sum("flagstream_quota_refusals_total").await as u64;
    let snapshots_sent = relay.metric_sum("flagstream_resyncs_total").await as u64;
    let connected = relay.metric_sum("flagstream_subscribers").await as u64;
    let mut curve = curve.lock().unwrap().clone();
    curve.push(Point { at: back, connected, refused });
    let relay_alive = relay.running();
    let relay_peak_rss_kib = relay.rss_kib().1;
    StormReport { streams, back, relay_peak_rss_kib, refused, snapshots_sent, relay_alive, curve }
}
