//! Scenario 2: a relay killed (`kill -9`) and restarted on its address,
//! and a replica killed with its SDKs moving to the other replica. SDKs
//! resume with deltas: the scenario counts the snapshots the serving
//! relay sent (zero when its change log covers the gap) and what the SDKs
//! applied.

use std::path::Path;
use std::time::{Duration, Instant};

use flagstream::Client;

use crate::cluster::Cluster;
use crate::fault::wait_change;
use crate::relay::{Relay, bool_flag, put};

/// What one run measured.
#[derive(Debug, Clone)]
pub struct RestartReport {
    /// SDK clients.
    pub sdks: usize,
    /// From the kill to every SDK holding the write made after it.
    pub resumed: Duration,
    /// Full snapshots the serving relay sent after the kill
    /// (`flagstream_resyncs_total`, every cause).
    pub snapshots_sent: u64,
    /// Snapshots the SDKs applied after their first one.
    pub sdk_snapshots: u64,
    /// Deltas the SDKs applied after the kill.
    pub sdk_deltas: u64,
}

fn clients(endpoints: &[String], key: &str, n: usize) -> Vec<Client> {
    (0..n)
        .map(|_| {
            Client::builder()
                .endpoints(endpoints.to_vec())
                .keep_endpoint_order()
                .sdk_key(key)
                .build()
                .expect("client builds")
        })
        .collect()
}

async fn all_ready(clients: &[Client], guard: Duration) {
    for c in clients {
        c.wait_ready(guard).await;
    }
}

async fn settle(
    clients: &[Client],
    mut changes: Vec<tokio::sync::broadcast::Receiver<flagstream::Change>>,
    flag: &str,
    guard: Duration,
) {
    for ch in &mut changes {
        wait_change(ch, flag, guard).await;
    }
    debug_assert_eq!(changes.len(), clients.len());
}

fn sdk_counts(clients: &[Client], deltas_before: u64) -> (u64, u64) {
    let (mut snaps, mut deltas) = (0, 0);
    for c in clients {
        let s = c.stats();
        snaps += s.snapshots_applied.saturating_sub(1);
        deltas += s.deltas_applied;
    }
    (snaps, deltas - deltas_before)
}

/// The single relay of `sdks` SDKs is killed and started again on the
/// same address and data directory; a write is made once it is up.
pub async fn relay_restart(dir: &Path, sdks: usize, guard: Duration) -> RestartReport {
    let data = dir.join("relay");
    let mut relay = Relay::start(&data, &[]).await;
    let addr = relay.grpc.to_string();
    let cs = clients(&[relay.url()], &relay.demo_key(), sdks);
    all_ready(&cs, guard).await;
    let changes = cs.iter().map(Client::changes).collect();
    let deltas_before: u64 = cs.iter().map(|c| c.stats().deltas_applied).sum();
    relay.kill9();
    relay.wait(guard).await;
    let killed_at = Instant::now();
    let relay = Relay::start_on(&data, &addr, &[]).await;
    put(&mut relay.admin().await, "demo", bool_flag("after-restart", true)).await.expect("write");
    settle(&cs, changes, "after-restart", guard).await;
    let resumed = killed_at.elapsed();
    let snapshots_sent = relay.metric_sum("flagstream_resyncs_total").await as u64;
    let (sdk_snapshots, sdk_deltas) = sdk_counts(&cs, deltas_before);
    RestartReport { sdks, resumed, snapshots_sent, sdk_snapshots, sdk_deltas }
}

/// Two replicas; the SDKs use the first and list the second. The first is
/// killed and a write is made at the primary.
pub async fn replica_kill(dir: &Path, sdks: usize, guard: Duration) -> RestartReport {
    let mut c = Cluster::start(dir, 2, &[], &[]).await;
    let endpoints = [c.replicas[0].url(), c.replicas[1].url()];
    let cs = clients(&endpoints, &c.primary.demo_key(), sdks);
    all_ready(&cs, guard).await;
    let changes = cs.iter().map(Client::changes).collect();
    let deltas_before: u64 = cs.iter().map(|c| c.stats().deltas_applied).sum();
    let sent_before = c.replicas[1].metric_sum("flagstream_resyncs_total").await as u64;
    c.replicas[0].kill9();
    c.replicas[0].wait(guard).await;
    let killed_at = Instant::now();
    put(&mut c.primary.admin().await, "demo", bool_flag("after-kill", true)).await.expect("write");
    settle(&cs, changes, "after-kill", guard).await;
    let resumed = killed_at.elapsed();
    let snapshots_sent = c.replicas[1].metric_sum("flagstream_resyncs_total").await as u64 - sent_before;
    let (sdk_snapshots, sdk_deltas) = sdk_counts(&cs, deltas_before);
    RestartReport { sdks, resumed, snapshots_sent, sdk_snapshots, sdk_deltas }
}
