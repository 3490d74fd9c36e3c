//! Load tool: starts a relay process, opens N subscribers over M HTTP/2
//! connections, writes at a chosen rate, and reports commit → receive
//! latency (p50 / p99 / max over every subscriber and revision), the time
//! until all subscribers had each revision, relay RSS per idle subscriber,
//! relay CPU, and encodings per revision. Bounded in count and time; talks
//! only to 127.0.0.1.
//!
//! The tool shares the machine with the relay, so each simulated subscriber
//! does the least a subscriber must on the wire, on `h2` directly: the same
//! gRPC request and frames as the SDK (Hello, then acks of the applied
//! revisions on the request stream, coalesced as the SDK does: at most one
//! per second per stream; `--ack-each` acks every revision), without
//! tonic's per-message channel,
//! encoder task and body layers. It decodes the response envelope (cursor
//! and commit time; flag bodies are skipped, not decoded), records the
//! latency in its own buffer, and acks. What an SDK does after that
//! (decoding and compiling the flag) is the SDK's cost, not the relay's,
//! and is measured by the SDK's benchmarks.
//!
//! With `--floor` the same clients first measure a minimal tonic server
//! that pushes one pre-encoded delta per write (no acks, no store), and the
//! tool prints `p99 … ms, floor p99 … ms, ratio …` with the relay's CPU per
//! delivery and RSS per connection and per stream (docs/BENCHMARKS.md,
//! "Fan-out").
//!
//! ```sh
//! cargo build --release -p flagstream-tests --bin relay   # the relay it starts
//! cargo run --release -p flagstream-tools --bin loadgen -- --subscribers 10000 --connections 100
//! cargo run --release -p flagstream-tools --bin loadgen -- --subscribers 10000 --connections 10000 --writes 30 --floor
//! cargo run --release -p flagstream-tools --bin loadgen -- --subscribers 10000 --connections 100 --ofrep-streams 10000
//! cargo run --release -p flagstream-tools --bin loadgen -- --ofrep-bulk --ofrep-concurrency 32 --throughput-secs 10
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use flagstream_proto::v1 as pb;
use flagstream_tests::relay::{Relay, bool_flag, put};
use std::sync::Mutex;

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use tokio::sync::mpsc;

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
    /// Event-loop threads of the load generator (0 = one per core). Each
    /// runs a single-threaded runtime owning whole connections and their
    /// subscribers, so a delivery never crosses threads inside the tool.
    #[arg(long, default_value_t = 0)]
    client_threads: usize,
    /// `RUST_LOG` of the relays the tool starts: the relay's own default
    /// unless told (the test suite's `info,flagstream_relay=debug` logs
    /// every delivery, which costs more than the delivery).
    #[arg(long, default_value = "info")]
    relay_log: String,
    /// Do not acknowledge deltas (isolates the cost of acks).
    #[arg(long, conflicts_with = "ack_each")]
    no_ack: bool,
    /// Acknowledge every applied revision at once, as SDKs before
    /// coalesced acks did (the SDK's way, the default: the first revision
    /// after a quiet second at once, then at most one ack per second
    /// naming the newest and how long it was held).
    #[arg(long)]
    ack_each: bool,
    /// Heavy writes to another environment during the second half of the
    /// measured writes: a 50,000-flag environment rewritten 10,000 flags
    /// per batch, alternating with 100,000-key segment patches. The first
    /// half is the baseline of the same run; both are reported (latency
    /// and the longest gap between messages a subscriber saw, with a 1 s
    /// heartbeat).
    #[arg(long)]
    heavy: bool,
    /// A noisy neighbour during the second half of the measured writes:
    /// environment `noisy` floods writes and new subscriptions at 10× its
    /// quotas (the relay runs with 20 writes/s and 50 subscriptions/s per
    /// environment); the first half is the baseline of the same run. The
    /// measured subscribers connect through the same quota, retrying on
    /// its hint like SDKs.
    #[arg(long, conflicts_with = "heavy")]
    noisy: bool,
    /// Replica relays following the primary; the subscribers connect to
    /// them (connections round-robin), so latency is the primary's commit
    /// to the SDK's receive across the tree. RSS and CPU are then the
    /// replicas' (summed); 0: subscribers connect to the primary.
    #[arg(long, default_value_t = 0, conflicts_with_all = ["heavy", "noisy"])]
    replicas: usize,
    /// Run on PostgreSQL: a server this tool starts (the tests' fixture),
    /// two relays on it; the subscribers split between them and the writes
    /// go to the first, so latency is commit → the other relay's feed →
    /// the SDK as well as the local path.
    #[arg(long, conflicts_with_all = ["heavy", "noisy", "replicas"])]
    postgres: bool,
    /// Instead of propagation, measure admin write throughput: this many
    /// concurrent writers for `--throughput-secs`, against a sled relay and
    /// then two relays on PostgreSQL, in the same run.
    #[arg(long, default_value_t = 0)]
    throughput_writers: usize,
    /// Seconds each throughput phase runs.
    #[arg(long, default_value_t = 10)]
    throughput_secs: u64,
    /// With `--throughput-writers`: the writers write to an environment of
    /// this many flags (each with a 200-byte description), filled before
    /// the phase, instead of the demo environment.
    #[arg(long, default_value_t = 0)]
    throughput_flags: usize,
    /// First run the floor: a minimal tonic server (a child process of this
    /// tool, on the relay's runtime settings) that pushes one pre-encoded
    /// delta per write to the same connections and streams (no acks read,
    /// no store), measured by the same clients; then the relay run. Prints
    /// `p99 … ms, floor p99 … ms, ratio …`.
    #[arg(long, conflicts_with_all = ["heavy", "noisy", "replicas", "postgres"])]
    floor: bool,
    /// Internal: be the floor server (prints its port, pushes a delta for
    /// each revision number read from stdin, exits at stdin's end).
    #[arg(long, hide = true)]
    serve_floor: bool,
    /// Also open this many OFREP change streams (server-sent events, one
    /// HTTP/1.1 connection each) and report when each write reached them,
    /// beside the gRPC subscribers' numbers, and the relay's RSS per stream.
    #[arg(long, default_value_t = 0, conflicts_with_all = ["heavy", "noisy", "replicas", "postgres", "floor"])]
    ofrep_streams: usize,
    /// With `--ofrep-streams`: the relay's `ofrep-event-spread`, ms.
    #[arg(long, default_value_t = 500)]
    ofrep_spread_ms: u64,
    /// Instead of propagation, measure OFREP's bulk endpoint (50 flags
    /// visible to clients, a client key) for `--throughput-secs`, then its
    /// `304` path.
    #[arg(long)]
    ofrep_bulk: bool,
    /// With `--ofrep-bulk`: keep-alive connections, each one request at a
    /// time.
    #[arg(long, default_value_t = 32)]
    ofrep_concurrency: usize,
    /// Internal, with `--serve-floor`: HTTP/2 streams per connection.
    #[arg(long, hide = true, default_value_t = 1_000)]
    floor_streams: u32,
}

mod wire;
use wire::*;

/// The noisy neighbour of `--noisy`.
mod noisy;

/// The heavy writer of `--heavy`.
mod heavy;

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.serve_floor {
        return floor::serve(args.floor_streams);
    }
    // Set once, first: nothing was started yet.
    let _first = flagstream_tests::relay::set_default_log(&args.relay_log);
    // The coordinator (relay process, writes, reports) mostly sleeps.
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async move {
        if args.ofrep_bulk {
            return ofrep::bulk(&args).await;
        }
        if !args.floor {
            return run(&args).await.map(drop);
        }
        // The floor first, then the relay, with the same clients.
        let floor = floor::measure(&args, client_threads(&args)).await?;
        println!("{}", floor.line("floor", &args));
        let Some(relay) = run(&args).await? else {
            anyhow::bail!("the relay run measured nothing");
        };
        println!("{}", relay.line("relay", &args));
        println!(
            "{} subscribers over {} connections: p99 {} ms, floor p99 {} ms, ratio {:.2}; relay CPU {:.2} us per delivery (floor {:.2}), relay RSS {:.1} KiB per connection, {:.2} KiB per stream",
            args.subscribers,
            args.connections,
            relay.p99_ms,
            floor.p99_ms,
            relay.p99_ms as f64 / floor.p99_ms.max(1) as f64,
            relay.cpu_us_per_delivery,
            floor.cpu_us_per_delivery,
            relay.rss_delta_kib as f64 / args.connections.max(1) as f64,
            relay.rss_delta_kib as f64 / args.subscribers.max(1) as f64,
        );
        Ok(())
    })
}

/// The load generator's event loops: `--client-threads`, or one per core.
fn client_threads(args: &Args) -> usize {
    match args.client_threads {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
        n => n,
    }
}

/// Single-threaded runtimes, each driven by its own thread until dropped.
struct EventLoops {
    handles: Vec<tokio::runtime::Handle>,
    stops: Vec<tokio::sync::oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl EventLoops {
    fn start(n: usize) -> anyhow::Result<EventLoops> {
        let mut loops = EventLoops { handles: Vec::new(), stops: Vec::new(), threads: Vec::new() };
        for i in 0..n {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            loops.handles.push(rt.handle().clone());
            loops.stops.push(stop);
            loops.threads.push(std::thread::Builder::new().name(format!("loadgen-{i}")).spawn(
                move || {
                    // Runs until the stop sender fires or is dropped; the
                    // dropped-sender error *is* the stop signal.
                    let _stopped_or_dropped = rt.block_on(stopped);
                },
            )?);
        }
        Ok(loops)
    }
}

impl Drop for EventLoops {
    fn drop(&mut self) {
        self.stops.clear(); // dropping the senders stops every loop
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                eprintln!(
                    "warning: a load generator event loop panicked; its subscribers' samples are missing"
                );
            }
        }
    }
}

/// Opens one HTTP/2 connection and its subscribers, on the calling runtime.
async fn connection(
    addr: String,
    url: String,
    key: String,
    subscribers: usize,
    rec: Arc<Recorder>,
    ready: mpsc::Sender<()>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let tcp = tokio::net::TcpStream::connect(&addr).await?;
    tcp.set_nodelay(true)?;
    let (h2, conn) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(64 << 20)
        .handshake::<_, Bytes>(tcp)
        .await?;
    let rec_conn = rec.clone();
    tokio::spawn(async move {
        // Ends with an error when the tool stops the relay; an earlier
        // failure ends this connection's streams, and each subscriber counts
        // its own failure (`stream errors` in the report).
        if let Err(e) = conn.await
            && !rec_conn.stopping.load(Ordering::Relaxed)
        {
            eprintln!("connection failed: {e}");
        }
    });
    Ok((0..subscribers)
        .map(|_| tokio::spawn(subscriber(h2.clone(), url.clone(), key.clone(), rec.clone(), ready.clone())))
        .collect())
}

mod fanout;
use fanout::{Summary, run};

/// `--throughput-writers`: admin write throughput, sled and PostgreSQL in
/// one run.
mod throughput;

/// `--floor`: the baseline server and its measurement.
mod floor;

/// `--ofrep-streams` and `--ofrep-bulk`.
mod ofrep;
