//! Scenario 1, stalled relay: an SDK with default settings streams through
//! a fault proxy; every connection through it is blackholed (no FIN, no
//! RST, nothing forwarded). The SDK must be streaming from another relay
//! within the default budget, with every evaluation answered from memory.
//! With [`Hop::Replica`] the stalled hop is the replica's link to its
//! upstream instead: the replica must move to its other upstream link and
//! keep its SDKs current.

use std::path::Path;
use std::time::{Duration, Instant};

use flagstream::{Client, Stats};

use crate::cluster::{Cluster, replicate_token};
use crate::fault::probe::{EvalProbe, EvalReport};
use crate::fault::wait_change;
use crate::proxy::Proxy;
use crate::relay::{Relay, bool_flag, put};

/// Which connection stalls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    /// SDK → relay: the SDK's own stream.
    Relay,
    /// Replica → upstream: the replica's stream, SDK → replica stays up.
    Replica,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct StallReport {
    /// The hop that stalled.
    pub hop: Hop,
    /// From the blackhole to the SDK holding a write made right after it.
    pub recovered: Duration,
    /// The SDK's counters at the end.
    pub stats: Stats,
    /// The stalled side's counters (the replica's follow stalls are in its
    /// metrics; for `Hop::Relay` the SDK's).
    pub stalls: u64,
    /// Evaluations during the run.
    pub eval: EvalReport,
}

/// Flags the probe evaluates (all on).
const PROBE_FLAGS: usize = 16;

/// Runs the scenario once under `dir`; `guard` bounds every wait (a
/// failure, not a measurement).
pub async fn run(dir: &Path, hop: Hop, guard: Duration) -> StallReport {
    match hop {
        Hop::Relay => relay_hop(dir, guard).await,
        Hop::Replica => replica_hop(dir, guard).await,
    }
}

/// Writes the probe flags; returns their keys and the head revision.
pub async fn seed(primary: &Relay) -> (Vec<String>, u64) {
    let mut admin = primary.admin().await;
    let (mut keys, mut head) = (Vec::new(), 0);
    for i in 0..PROBE_FLAGS {
        let key = format!("probe-{i}");
        head = put(&mut admin, "demo", bool_flag(&key, true)).await.expect("seed a probe flag");
        keys.push(key);
    }
    (keys, head)
}

/// An SDK with every default but where to connect (in this order).
fn client(endpoints: Vec<String>, key: String) -> Client {
    Client::builder().endpoints(endpoints).keep_endpoint_order().sdk_key(key).build().expect("client builds")
}

async fn relay_hop(dir: &Path, guard: Duration) -> StallReport {
    let c = Cluster::start(dir, 1, &[], &[]).await;
    let (keys, head) = seed(&c.primary).await;
    c.replicas[0].wait_head("demo", head).await;
    let (to_primary, to_replica) =
        (Proxy::start(c.primary.grpc).await, Proxy::start(c.replicas[0].grpc).await);
    let sdk = client(vec![to_primary.url(), to_replica.url()], c.primary.demo_key());
    sdk.wait_ready(guard).await;
    let probe = EvalProbe::start(sdk.clone(), keys);
    let mut changes = sdk.changes();
    // The relay the SDK uses stops answering, for old and new connections.
    to_primary.blackhole_all();
    let stalled_at = Instant::now();
    put(&mut c.primary.admin().await, "demo", bool_flag("after-stall", true)).await.expect("write");
    wait_change(&mut changes, "after-stall", guard).await;
    let recovered = stalled_at.elapsed();
    let eval = probe.finish();
    let stats = sdk.stats();
    StallReport { hop: Hop::Relay, recovered, stalls: stats.stalls, stats, eval }
}

async fn replica_hop(dir: &Path, guard: Duration) -> StallReport {
    let primary = Relay::start(&dir.join("primary"), &[]).await;
    let token = replicate_token(&primary, dir, "replica").await;
    let (keys, _) = seed(&primary).await;
    let (link_a, link_b) = (Proxy::start(primary.grpc).await, Proxy::start(primary.grpc).await);
    let mut replica =
        Relay::start_replica(&dir.join("replica"), &[link_a.url(), link_b.url()], &token, &[]).await;
    replica.admin_secret = Some(primary.admin_token());
    replica.wait_ready().await;
    let sdk = client(vec![replica.url()], primary.demo_key());
    sdk.wait_ready(guard).await;
    let probe = EvalProbe::start(sdk.clone(), keys);
    let mut changes = sdk.changes();
    link_a.blackhole_all();
    let stalled_at = Instant::now();
    put(&mut primary.admin().await, "demo", bool_flag("after-stall", true)).await.expect("write");
    wait_change(&mut changes, "after-stall", guard).await;
    let recovered = stalled_at.elapsed();
    let eval = probe.finish();
    let stalls =
        replica.metric("flagstream_upstream_stream_ends_total{env=\"demo\",kind=\"stalled\"}").await as u64;
    StallReport { hop: Hop::Replica, recovered, stats: sdk.stats(), stalls, eval }
}
