//! Load tool: starts a relay process, opens N subscribers over M HTTP/2
//! connections, writes at a chosen rate, and reports commit → receive
//! latency (p50 / p99 / max over every subscriber and revision), the time
//! until all subscribers had each revision, relay RSS per idle subscriber,
//! relay CPU, and encodings per revision. Bounded in count and time; talks
//! only to 127.0.0.1.
//!
//! ```sh
//! cargo run --release -p flagstream-tests --bin loadgen -- --subscribers 10000 --connections 100
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use flagstream_proto::v1 as pb;
use flagstream_proto::v1::sync_client::SyncClient;
use flagstream_tests::relay::{Relay, bool_flag, put};
use std::sync::Mutex;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Load tool options.
#[derive(Debug, Parser)]
struct Args {
    /// Subscribers to open.
    #[arg(long, default_value_t = 1_000)]
    subscribers: usize,
    /// HTTP/2 connections to spread them over.
    #[arg(long, default_value_t = 20)]
    connections: usize,
    /// Writes per second during the measured phase.
    #[arg(long, default_value_t = 5.0)]
    writes_per_sec: f64,
    /// Writes to make.
    #[arg(long, default_value_t = 50)]
    writes: usize,
    /// Extra flags in the environment (snapshot size).
    #[arg(long, default_value_t = 100)]
    flags: usize,
    /// Worker threads of the load generator's own runtime (0 = one per
    /// core). With relay and clients on one machine, fewer client threads
    /// leave the relay more CPU.
    #[arg(long, default_value_t = 0)]
    client_threads: usize,
    /// Do not acknowledge deltas (isolates the cost of acks).
    #[arg(long)]
    no_ack: bool,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// (utime + stime) in clock ticks, and RSS in KiB, of a process.
fn proc_stats(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = fields.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    (ticks, rss)
}

#[derive(Default)]
struct Recorder {
    latencies_ms: Mutex<Vec<u64>>,
    /// Per revision: how many subscribers have it, and when the last did.
    received: Mutex<std::collections::HashMap<u64, (usize, u64, u64)>>,
    snapshots: AtomicU64,
    errors: AtomicU64,
}

async fn subscriber(
    channel: tonic::transport::Channel,
    key: String,
    rec: Arc<Recorder>,
    ready: mpsc::Sender<()>,
) {
    let (tx, rx) = mpsc::channel(4);
    let hello = pb::Hello { sdk_key: key, sdk_name: "loadgen".into(), ..Default::default() };
    if tx.send(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(hello)) }).await.is_err()
    {
        return;
    }
    let mut client = SyncClient::new(channel).max_decoding_message_size(16 << 20);
    let mut stream = match client.subscribe(ReceiverStream::new(rx)).await {
        Ok(s) => s.into_inner(),
        Err(e) => {
            eprintln!("subscribe failed: {e}");
            rec.errors.fetch_add(1, Ordering::Relaxed);
            let _ = ready.send(()).await; // unblock the starter; error counted above
            return;
        }
    };
    let mut epoch = String::new();
    let mut signalled = false;
    loop {
        let msg = match stream.message().await {
            Ok(Some(m)) => m,
            Ok(None) => return,
            Err(_) => {
                // Counted; streams also fail when the tool stops the relay.
                rec.errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let applied = match msg.kind {
            Some(pb::subscribe_response::Kind::SnapshotChunk(c)) if c.last_chunk => {
                rec.snapshots.fetch_add(1, Ordering::Relaxed);
                epoch = c.epoch;
                Some(c.revision)
            }
            Some(pb::subscribe_response::Kind::Delta(d)) => {
                let now = now_ms();
                let lat = now.saturating_sub(d.committed_unix_ms);
                rec.latencies_ms.lock().expect("recorder lock").push(lat);
                let mut r = rec.received.lock().expect("recorder lock");
                let e = r.entry(d.to_revision).or_insert((0, d.committed_unix_ms, 0));
                e.0 += 1;
                e.2 = e.2.max(now);
                Some(d.to_revision)
            }
            _ => None,
        };
        if let Some(revision) = applied {
            let ack = pb::Ack { epoch: epoch.clone(), revision, apply_duration_us: 0 };
            if tx
                .send(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Ack(ack)) })
                .await
                .is_err()
            {
                return;
            }
            if !signalled {
                signalled = true;
                let _ = ready.send(()).await; // the starter may have stopped counting
            }
        }
    }
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if args.client_threads > 0 {
        rt.worker_threads(args.client_threads);
    }
    rt.enable_all().build()?.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let relay = Relay::start(
        dir.path(),
        &[
            "--max-concurrent-streams",
            &(args.subscribers / args.connections + 16).to_string(),
            "--max-subscribers",
            &(args.subscribers + 100).to_string(),
            "--max-subscribers-per-env",
            &(args.subscribers + 100).to_string(),
        ],
    )
    .await;
    let pid = relay.pid();
    let key = relay.demo_key();
    let mut admin = relay.admin().await;
    for i in 0..args.flags {
        put(&mut admin, "demo", bool_flag(&format!("bulk-{i}"), i % 2 == 0)).await?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, rss_before) = proc_stats(pid);

    let rec = Arc::new(Recorder::default());
    let mut channels = Vec::new();
    for _ in 0..args.connections {
        channels.push(
            tonic::transport::Endpoint::from_shared(relay.url())?
                .http2_keep_alive_interval(Duration::from_secs(10))
                .keep_alive_while_idle(true)
                .connect()
                .await?,
        );
    }
    let (ready_tx, mut ready_rx) = mpsc::channel(args.subscribers.max(1));
    let started = Instant::now();
    for i in 0..args.subscribers {
        tokio::spawn(subscriber(
            channels[i % channels.len()].clone(),
            key.clone(),
            rec.clone(),
            ready_tx.clone(),
        ));
    }
    for _ in 0..args.subscribers {
        ready_rx.recv().await;
    }
    let connect_time = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (ticks_idle, rss_idle) = proc_stats(pid);
    let encodes_before = relay.metric("flagstream_encodes_total{kind=\"delta\"}").await;

    let write_started = Instant::now();
    let period = Duration::from_secs_f64(1.0 / args.writes_per_sec);
    let mut revisions = Vec::new();
    let mut next = tokio::time::Instant::now();
    for i in 0..args.writes {
        next += period;
        tokio::time::sleep_until(next).await;
        revisions.push(put(&mut admin, "demo", bool_flag("load-toggle", i % 2 == 0)).await?);
    }
    // Wait (bounded) for every subscriber to have the last revision.
    let last = *revisions.last().unwrap_or(&0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if rec.received.lock().expect("recorder lock").get(&last).map_or(0, |e| e.0) >= args.subscribers {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let write_time = write_started.elapsed();
    let (ticks_end, rss_end) = proc_stats(pid);
    let encodes = relay.metric("flagstream_encodes_total{kind=\"delta\"}").await - encodes_before;
    let errors = rec.errors.load(Ordering::Relaxed);

    let mut lat = rec.latencies_ms.lock().expect("recorder lock").clone();
    lat.sort_unstable();
    let received = rec.received.lock().expect("recorder lock").clone();
    let mut all_by: Vec<u64> = revisions
        .iter()
        .filter_map(|r| received.get(r).filter(|e| e.0 >= args.subscribers).map(|e| e.2.saturating_sub(e.1)))
        .collect();
    all_by.sort_unstable();
    let complete = all_by.len();
    let ticks_per_sec = 100.0; // USER_HZ on Linux
    let cpu = (ticks_end - ticks_idle) as f64 / ticks_per_sec / write_time.as_secs_f64() * 100.0;
    println!(
        "subscribers            {} over {} connections (all connected in {:.2?})",
        args.subscribers, args.connections, connect_time
    );
    println!(
        "environment            {} flags; {} writes at {}/s",
        args.flags + 5,
        args.writes,
        args.writes_per_sec
    );
    println!(
        "deliveries             {} (expected {}), stream errors {}",
        lat.len(),
        args.writes * args.subscribers,
        errors
    );
    println!(
        "commit->receive        p50 {} ms, p99 {} ms, max {} ms",
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        lat.last().unwrap_or(&0)
    );
    println!(
        "commit->all received   p50 {} ms, p99 {} ms, max {} ms ({complete} of {} revisions reached everyone)",
        pct(&all_by, 0.5),
        pct(&all_by, 0.99),
        all_by.last().unwrap_or(&0),
        revisions.len()
    );
    println!(
        "relay RSS              {} KiB before subscribers, {} KiB idle with them, {} KiB after writes",
        rss_before, rss_idle, rss_end
    );
    println!(
        "relay RSS / subscriber {:.1} KiB",
        (rss_idle.saturating_sub(rss_before)) as f64 / args.subscribers as f64
    );
    let (own_ticks, _) = proc_stats(std::process::id());
    println!(
        "relay CPU during writes {cpu:.1} % of one core (load tool: {:.1} s CPU in total)",
        own_ticks as f64 / ticks_per_sec
    );
    println!("delta encodings        {encodes} for {} revisions", revisions.len());
    drop(relay);
    Ok(())
}
