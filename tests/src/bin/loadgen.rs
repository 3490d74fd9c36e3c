//! Load tool: starts a relay process, opens N subscribers over M HTTP/2
//! connections, writes at a chosen rate, and reports commit → receive
//! latency (p50 / p99 / max over every subscriber and revision), the time
//! until all subscribers had each revision, relay RSS per idle subscriber,
//! relay CPU, and encodings per revision. Bounded in count and time; talks
//! only to 127.0.0.1.
//!
//! The tool shares the machine with the relay, so each simulated subscriber
//! does the least a subscriber must on the wire, on `h2` directly: the same
//! gRPC request and frames as the SDK (Hello, then one Ack per applied
//! revision on the request stream), without tonic's per-message channel,
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
//! cargo run --release -p flagstream-tests --bin loadgen -- --subscribers 10000 --connections 100
//! cargo run --release -p flagstream-tests --bin loadgen -- --subscribers 10000 --connections 10000 --writes 30 --floor
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
    /// Do not acknowledge deltas (isolates the cost of acks).
    #[arg(long)]
    no_ack: bool,
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
    /// Internal, with `--serve-floor`: HTTP/2 streams per connection.
    #[arg(long, hide = true, default_value_t = 1_000)]
    floor_streams: u32,
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

/// What the subscribers report. Per-delivery updates are relaxed atomics;
/// each subscriber keeps its latency samples and hands them over once,
/// when its stream ends.
struct Recorder {
    /// `(revision, commit → receive ms)`.
    latencies_ms: Mutex<Vec<(u64, u64)>>,
    /// The measured phase now (0 = baseline, 1 = with heavy writes).
    phase: std::sync::atomic::AtomicUsize,
    /// Per phase: the longest wait between two messages (any kind, heartbeats
    /// included) one subscriber saw, ms.
    max_gap_ms: [AtomicU64; 2],
    /// Per revision (the index): subscribers that have it.
    received: Vec<AtomicU64>,
    /// Per revision: when the last subscriber got it (Unix ms).
    last_at_ms: Vec<AtomicU64>,
    /// Per revision: its commit time (Unix ms), as the relay stated it.
    committed_ms: Vec<AtomicU64>,
    snapshots: AtomicU64,
    errors: AtomicU64,
    ack: bool,
    /// Set when the tool stops the relay: stream errors are expected then.
    stopping: std::sync::atomic::AtomicBool,
}

impl Recorder {
    fn new(max_revision: usize, ack: bool) -> Recorder {
        let zeros = || (0..=max_revision).map(|_| AtomicU64::new(0)).collect();
        Recorder {
            latencies_ms: Mutex::default(),
            phase: Default::default(),
            max_gap_ms: Default::default(),
            received: zeros(),
            last_at_ms: zeros(),
            committed_ms: zeros(),
            snapshots: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            ack,
            stopping: Default::default(),
        }
    }

    fn count(&self, revision: u64) -> u64 {
        self.received.get(revision as usize).map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

/// The parts of `SubscribeResponse` a subscriber needs to ack and measure;
/// prost skips the rest (heartbeats, flag bodies) without decoding it.
#[derive(Clone, PartialEq, prost::Message)]
struct Envelope {
    #[prost(oneof = "EnvelopeKind", tags = "1, 2")]
    kind: Option<EnvelopeKind>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum EnvelopeKind {
    #[prost(message, tag = "1")]
    Chunk(ChunkHead),
    #[prost(message, tag = "2")]
    Delta(DeltaHead),
}

#[derive(Clone, PartialEq, prost::Message)]
struct ChunkHead {
    #[prost(string, tag = "1")]
    epoch: String,
    #[prost(uint64, tag = "2")]
    revision: u64,
    #[prost(bool, tag = "5")]
    last_chunk: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct DeltaHead {
    #[prost(uint64, tag = "3")]
    to_revision: u64,
    #[prost(uint64, tag = "9")]
    committed_unix_ms: u64,
}

/// One gRPC message: the 5-byte length prefix (uncompressed) and the body.
fn grpc_frame(msg: &impl prost::Message) -> Bytes {
    let len = msg.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(len as u32);
    msg.encode(&mut buf).expect("buffer has room");
    buf.freeze()
}

/// A refusal with a retry hint (ms): the subscriber waits and tries again.
#[derive(Debug)]
struct RetryAfter(u64);

impl std::fmt::Display for RetryAfter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused; retry in {} ms", self.0)
    }
}

impl std::error::Error for RetryAfter {}

async fn subscriber(
    h2: h2::client::SendRequest<Bytes>,
    url: String,
    key: String,
    rec: Arc<Recorder>,
    ready: mpsc::Sender<()>,
) {
    let (mut latencies, mut signalled) = (Vec::new(), false);
    let mut result = Ok(());
    // Like an SDK: a refusal with a hint is retried after hint + jitter
    // (for up to two minutes), e.g. while a subscription-rate quota admits
    // the fleet.
    let give_up = Instant::now() + Duration::from_secs(120);
    while Instant::now() < give_up {
        result = subscribe(h2.clone(), &url, key.clone(), &rec, &ready, &mut latencies, &mut signalled).await;
        match result.as_ref().err().and_then(|e| e.downcast_ref::<RetryAfter>()) {
            Some(RetryAfter(ms)) if !signalled => {
                // At least 10 ms: a bucket's "next token" hint can be 1 ms.
                let ms = (*ms).max(10);
                let wait = ms + rand::Rng::random_range(&mut rand::rng(), 0..=ms);
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            _ => break,
        }
    }
    if let Err(e) = result {
        // Counted; streams also fail when the tool stops the relay.
        rec.errors.fetch_add(1, Ordering::Relaxed);
        if !rec.stopping.load(Ordering::Relaxed) {
            eprintln!("subscriber failed: {e}");
        }
    }
    if !signalled {
        let _ = ready.try_send(()); // unblock the starter; the failure is counted
    }
    rec.latencies_ms.lock().expect("recorder lock").extend(latencies);
}

async fn subscribe(
    h2: h2::client::SendRequest<Bytes>,
    url: &str,
    key: String,
    rec: &Recorder,
    ready: &mpsc::Sender<()>,
    latencies: &mut Vec<(u64, u64)>,
    signalled: &mut bool,
) -> anyhow::Result<()> {
    let request = http::Request::post(format!("{url}/flagstream.v1.Sync/Subscribe"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())?;
    let mut h2 = h2.ready().await?;
    let (response, mut send) = h2.send_request(request, false)?;
    let hello = pb::Hello { sdk_key: key, sdk_name: "loadgen".into(), ..Default::default() };
    send.send_data(
        grpc_frame(&pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(hello)) }),
        false,
    )?;
    let response = response.await?;
    anyhow::ensure!(response.status() == 200, "HTTP status {}", response.status());
    // A refusal is a trailers-only response: the status is in the headers.
    if let Some(ms) =
        response.headers().get("flagstream-retry-after-ms").and_then(|v| v.to_str().ok()?.parse().ok())
    {
        return Err(RetryAfter(ms).into());
    }
    grpc_ok(response.headers())?;
    let mut body = response.into_body();
    let mut buf = BytesMut::new();
    let mut epoch = String::new();
    let mut last_message = Instant::now();
    // Received bytes not yet returned to the flow-control window: returned
    // in small batches (fewer h2 locks), small enough that thousands of
    // streams on one connection never hold its window.
    let mut unreleased = 0;
    while let Some(data) = body.data().await {
        let data = data?;
        unreleased += data.len();
        if unreleased >= 4 << 10 {
            body.flow_control().release_capacity(unreleased)?;
            unreleased = 0;
        }
        buf.extend_from_slice(&data);
        while buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if buf.len() < 5 + len {
                break;
            }
            let frame = buf.split_to(5 + len);
            if *signalled {
                let gap = last_message.elapsed().as_millis() as u64;
                rec.max_gap_ms[rec.phase.load(Ordering::Relaxed).min(1)].fetch_max(gap, Ordering::Relaxed);
            }
            last_message = Instant::now();
            let applied = match Envelope::decode(&frame[5..])?.kind {
                Some(EnvelopeKind::Chunk(c)) if c.last_chunk => {
                    rec.snapshots.fetch_add(1, Ordering::Relaxed);
                    epoch = c.epoch;
                    Some(c.revision)
                }
                Some(EnvelopeKind::Delta(d)) => {
                    let now = now_ms();
                    latencies.push((d.to_revision, now.saturating_sub(d.committed_unix_ms)));
                    let i = d.to_revision as usize;
                    if let (Some(n), Some(at), Some(c)) =
                        (rec.received.get(i), rec.last_at_ms.get(i), rec.committed_ms.get(i))
                    {
                        n.fetch_add(1, Ordering::Relaxed);
                        at.fetch_max(now, Ordering::Relaxed);
                        if c.load(Ordering::Relaxed) == 0 {
                            c.store(d.committed_unix_ms, Ordering::Relaxed);
                        }
                    }
                    Some(d.to_revision)
                }
                _ => None,
            };
            if let Some(revision) = applied {
                if rec.ack {
                    let ack = pb::Ack { epoch: epoch.clone(), revision, apply_duration_us: 0 };
                    send.send_data(
                        grpc_frame(&pb::SubscribeRequest {
                            kind: Some(pb::subscribe_request::Kind::Ack(ack)),
                        }),
                        false,
                    )?;
                }
                if !*signalled {
                    *signalled = true;
                    let _ = ready.send(()).await; // the starter may have stopped counting
                }
            }
        }
    }
    // The stream's end: its trailers carry the status.
    match body.trailers().await? {
        Some(trailers) => grpc_ok(&trailers),
        None => anyhow::bail!("stream ended without a status"),
    }
}

/// `Err` unless `grpc-status` is absent (more to come) or 0.
fn grpc_ok(headers: &http::HeaderMap) -> anyhow::Result<()> {
    match headers.get("grpc-status").map(|v| v.to_str().unwrap_or("?")) {
        None | Some("0") => Ok(()),
        Some(code) => {
            let message = headers.get("grpc-message").and_then(|v| v.to_str().ok()).unwrap_or("");
            anyhow::bail!("grpc-status {code}: {message}")
        }
    }
}

/// The noisy neighbour of `--noisy`.
mod noisy {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use flagstream_proto::v1 as pb;
    use flagstream_proto::v1::admin_client::AdminClient;
    use flagstream_proto::v1::sync_client::SyncClient;
    use flagstream_tests::relay::{Relay, Token, bool_flag, put};
    use tokio::sync::watch;

    /// The relay's write quota per environment in this mode, per second.
    pub(super) const WRITE_QUOTA: &str = "20";
    /// Its new-subscription quota per environment, per second.
    pub(super) const SUBSCRIBE_QUOTA: &str = "50";

    /// Creates the noisy tenant: environment `noisy` and a write token
    /// scoped to it. Returns (token secret, SDK key).
    pub(super) async fn setup(
        admin: &mut flagstream_tests::relay::Admin,
    ) -> anyhow::Result<(String, String)> {
        let env = pb::CreateEnvironmentRequest { name: "noisy".into(), description: String::new() };
        let key = admin.create_environment(env).await?.into_inner().sdk_key;
        let token = pb::CreateTokenRequest {
            name: "noisy-tenant".into(),
            role: pb::TokenRole::Write as i32,
            environments: vec!["noisy".into()],
            replicate: false,
        };
        Ok((admin.create_token(token).await?.into_inner().secret, key))
    }

    #[derive(Default)]
    struct Counts {
        writes: AtomicU64,
        writes_refused: AtomicU64,
        subscribes: AtomicU64,
        subscribes_refused: AtomicU64,
        other_errors: AtomicU64,
    }

    /// Floods at 10× the quotas until stopped.
    pub(super) struct Flood {
        stop: watch::Sender<bool>,
        tasks: Vec<tokio::task::JoinHandle<()>>,
        counts: Arc<Counts>,
        started: std::time::Instant,
    }

    fn per_sec(quota: &str) -> f64 {
        quota.parse::<f64>().unwrap_or(1.0) * 10.0
    }

    impl Flood {
        pub(super) async fn start(relay: &Relay, token: &str, key: &str) -> Flood {
            let (stop, stopped) = watch::channel(false);
            let counts = Arc::new(Counts::default());
            let channel = relay.channel().await;
            let mut admin = AdminClient::with_interceptor(channel.clone(), Token(token.to_owned()));
            let (c, mut s) = (counts.clone(), stopped.clone());
            let writes = tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_sec(WRITE_QUOTA)));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                for i in 0u64.. {
                    tokio::select! {
                        _ = s.changed() => return,
                        _ = tick.tick() => {}
                    }
                    c.writes.fetch_add(1, Ordering::Relaxed);
                    match put(&mut admin, "noisy", bool_flag(&format!("n{}", i % 100), i % 2 == 0)).await {
                        Ok(_) => {}
                        Err(e) if e.code() == tonic::Code::ResourceExhausted => {
                            c.writes_refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            c.other_errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
            let (c, mut s, key) = (counts.clone(), stopped, key.to_owned());
            let subscribes = tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_sec(SUBSCRIBE_QUOTA)));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    tokio::select! {
                        _ = s.changed() => return,
                        _ = tick.tick() => {}
                    }
                    c.subscribes.fetch_add(1, Ordering::Relaxed);
                    let (mut client, c, key) = (SyncClient::new(channel.clone()), c.clone(), key.clone());
                    // Each attempt opens a stream, reads its first message
                    // (or the refusal) and hangs up: a reconnect storm.
                    tokio::spawn(async move {
                        let hello =
                            pb::Hello { sdk_key: key, sdk_name: "noisy".into(), ..Default::default() };
                        let first =
                            pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(hello)) };
                        let outcome = match client.subscribe(tokio_stream::iter([first])).await {
                            Ok(r) => r.into_inner().message().await.map(|_| ()),
                            Err(e) => Err(e),
                        };
                        match outcome {
                            Ok(()) => {}
                            Err(e) if e.code() == tonic::Code::ResourceExhausted => {
                                c.subscribes_refused.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => {
                                c.other_errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                }
            });
            Flood { stop, tasks: vec![writes, subscribes], counts, started: std::time::Instant::now() }
        }

        pub(super) async fn stop(self) -> anyhow::Result<String> {
            // The tasks check between attempts; a send error means they ended.
            let _ = self.stop.send(true);
            for t in self.tasks {
                t.await?;
            }
            let secs = self.started.elapsed().as_secs_f64();
            let c = &self.counts;
            let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
            Ok(format!(
                "noisy neighbour             {:.0} write attempts/s ({} of {} refused by quota-writes-per-sec {WRITE_QUOTA}/s), {:.0} subscription attempts/s ({} of {} refused by quota-subscribes-per-sec {SUBSCRIBE_QUOTA}/s), {} other errors",
                get(&c.writes) as f64 / secs,
                get(&c.writes_refused),
                get(&c.writes),
                get(&c.subscribes) as f64 / secs,
                get(&c.subscribes_refused),
                get(&c.subscribes),
                get(&c.other_errors)
            ))
        }
    }
}

/// The heavy writer of `--heavy`.
mod heavy {
    use std::time::{Duration, Instant};

    use flagstream_proto::v1 as pb;
    use flagstream_tests::relay::{Admin, bool_flag};
    use tokio::sync::watch;

    /// Flags in the heavy environment.
    const FLAGS: usize = 50_000;
    /// Flags per batch (the Batch op limit).
    const BATCH: usize = 10_000;
    /// Keys per segment patch (the segment key limit).
    const KEYS: usize = 100_000;

    fn batch(round: usize, part: usize) -> pb::BatchRequest {
        let ops = (part * BATCH..(part + 1) * BATCH)
            .map(|i| {
                let mut f = bool_flag(&format!("heavy-{i}"), (i + round).is_multiple_of(2));
                f.description = format!("round {round}");
                pb::BatchOp {
                    op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp {
                        flag: Some(f),
                        expected_version: None,
                    })),
                }
            })
            .collect();
        pb::BatchRequest { environment: "heavy".into(), ops, expected_revision: None, comment: String::new() }
    }

    fn keys(round: usize) -> pb::ContextKeys {
        pb::ContextKeys {
            keys: (0..KEYS).map(|i| format!("user-{i:08}-{}", round % 2)).collect(),
            ..Default::default()
        }
    }

    /// Creates the 50,000-flag environment and its (empty) segment.
    pub(super) async fn setup(admin: &mut Admin) -> anyhow::Result<()> {
        admin
            .create_environment(pb::CreateEnvironmentRequest {
                name: "heavy".into(),
                description: String::new(),
            })
            .await?;
        for part in 0..FLAGS / BATCH {
            admin.batch(batch(0, part)).await?;
        }
        let segment = pb::Segment { key: "big".into(), ..Default::default() };
        let put = pb::PutSegmentRequest {
            environment: "heavy".into(),
            segment: Some(segment),
            expected_version: None,
            comment: String::new(),
        };
        admin.put_segment(put).await?;
        Ok(())
    }

    /// Writes flat out until stopped.
    pub(super) struct Writer {
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<anyhow::Result<String>>,
    }

    impl Writer {
        pub(super) fn start(mut admin: Admin) -> Writer {
            let (stop, stopped) = watch::channel(false);
            let task = tokio::spawn(async move {
                let (mut batches, mut patches) = (Vec::new(), Vec::new());
                let mut round = 1;
                while !*stopped.borrow() {
                    let started = Instant::now();
                    admin.batch(batch(round, round % (FLAGS / BATCH))).await?;
                    batches.push(started.elapsed());
                    // Add 100,000 keys, then swap them for 100,000 others.
                    use pb::segment_patch::Op as P;
                    let mut ops = vec![pb::SegmentPatch { op: Some(P::AddIncluded(keys(round))) }];
                    if round > 1 {
                        ops.insert(0, pb::SegmentPatch { op: Some(P::RemoveIncluded(keys(round - 1))) });
                    }
                    let patch = pb::PatchSegmentRequest {
                        environment: "heavy".into(),
                        key: "big".into(),
                        expected_version: None,
                        ops,
                        comment: String::new(),
                    };
                    let started = Instant::now();
                    admin.patch_segment(patch).await?;
                    patches.push(started.elapsed());
                    round += 1;
                }
                let mean = |v: &[Duration]| v.iter().sum::<Duration>() / (v.len().max(1) as u32);
                Ok(format!(
                    "heavy writes               {} batches of {BATCH} flags into a {FLAGS}-flag environment (mean {:.0?} each), {} segment patches of {KEYS} keys (mean {:.0?} each)",
                    batches.len(),
                    mean(&batches),
                    patches.len(),
                    mean(&patches)
                ))
            });
            Writer { stop, task }
        }

        pub(super) async fn stop(self) -> anyhow::Result<String> {
            // The task checks between writes; a send error means it ended.
            let _ = self.stop.send(true);
            self.task.await?
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
    if args.serve_floor {
        return floor::serve(args.floor_streams);
    }
    // The coordinator (relay process, writes, reports) mostly sleeps.
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async move {
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

/// The propagation run (or `--throughput-writers`); `None` for the latter.
async fn run(args: &Args) -> anyhow::Result<Option<Summary>> {
    if args.throughput_writers > 0 {
        throughput::run(
            args.throughput_writers,
            Duration::from_secs(args.throughput_secs),
            args.throughput_flags,
        )
        .await?;
        return Ok(None);
    }
    let dir = tempfile::tempdir()?;
    let pg = match args.postgres {
        true => Some(
            flagstream_tests::postgres::Postgres::start_durable()
                .ok_or_else(|| anyhow::anyhow!("no PostgreSQL server binaries"))?,
        ),
        false => None,
    };
    let pg_url = pg.as_ref().map(|pg| pg.database("loadgen"));
    let (streams, subs) =
        ((args.subscribers / args.connections + 16).to_string(), (args.subscribers + 100).to_string());
    let mut relay_args = vec![
        "--max-concurrent-streams",
        &streams,
        "--max-subscribers",
        &subs,
        "--max-subscribers-per-env",
        &subs,
        // The tool opens its subscribers at once and measures the relay,
        // not its admission quotas (`--noisy` measures those).
        "--max-subscribes-per-sec",
        &subs,
        "--quota-flags",
        "100000",
        "--quota-snapshot-bytes",
        "268435456",
        // Every load connection comes from 127.0.0.1.
        "--max-connections",
        "1000000",
        "--max-connections-per-address",
        "1000000",
    ];
    if args.heavy {
        relay_args.extend(["--heartbeat", "1s", "--quota-subscribes-per-sec", &subs]);
    } else if args.noisy {
        let (w, s) = (noisy::WRITE_QUOTA, noisy::SUBSCRIBE_QUOTA);
        relay_args.extend(["--quota-writes-per-sec", w, "--quota-subscribes-per-sec", s]);
    } else {
        relay_args.extend(["--quota-subscribes-per-sec", &subs]);
    }
    if let Some(url) = &pg_url {
        relay_args.extend(["--store", url.as_str()]);
    }
    let relay = Relay::start(dir.path(), &relay_args).await;
    let key = relay.demo_key();
    let mut admin = relay.admin().await;
    // The extra flags in one batch (one revision).
    let ops = (0..args.flags)
        .map(|i| pb::BatchOp {
            op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp {
                flag: Some(bool_flag(&format!("bulk-{i}"), i % 2 == 0)),
                expected_version: None,
            })),
        })
        .collect();
    admin
        .batch(pb::BatchRequest {
            environment: "demo".into(),
            ops,
            expected_revision: None,
            comment: String::new(),
        })
        .await?;
    if args.heavy {
        heavy::setup(&mut admin).await?;
    }
    let noisy_setup = match args.noisy {
        true => Some(noisy::setup(&mut admin).await?),
        false => None,
    };
    // The relays subscribers connect to: the replicas, else the primary.
    let mut replicas = Vec::new();
    if args.replicas > 0 {
        let token = flagstream_tests::cluster::replicate_token(&relay, dir.path(), "loadgen").await;
        let head = relay.status().await.environments.iter().map(|e| e.head_revision).max().unwrap_or(0);
        for i in 0..args.replicas {
            let r = Relay::start_replica(
                &dir.path().join(format!("replica-{i}")),
                &[relay.url()],
                &token,
                &relay_args,
            )
            .await;
            let mut ready = r;
            ready.admin_secret = Some(relay.admin_token());
            ready.wait_ready().await;
            ready.wait_head("demo", head).await;
            replicas.push(ready);
        }
    }
    if pg_url.is_some() {
        // The second relay on the same database.
        let mut second_args = relay_args.clone();
        second_args.extend(["--demo", "false"]);
        let mut second = Relay::start(&dir.path().join("second"), &second_args).await;
        second.admin_secret = Some(relay.admin_token());
        let head = relay.status().await.environments.iter().map(|e| e.head_revision).max().unwrap_or(0);
        second.wait_head("demo", head).await;
        replicas.push(second);
    }
    let serving: Vec<&Relay> = if replicas.is_empty() {
        vec![&relay]
    } else if pg_url.is_some() {
        vec![&relay, &replicas[0]]
    } else {
        replicas.iter().collect()
    };
    let pids: Vec<u32> = serving.iter().map(|r| r.pid()).collect();
    let sum_stats =
        |pids: &[u32]| pids.iter().map(|p| proc_stats(*p)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, rss_before) = sum_stats(&pids);

    // Revisions: the demo seed's few, one per bulk flag, one per write.
    let rec = Arc::new(Recorder::new(args.flags + args.writes + 64, !args.no_ack));
    let urls: Vec<String> = serving.iter().map(|r| r.url()).collect();
    let threads = client_threads(args);
    let loops = EventLoops::start(threads)?;
    let (ready_tx, mut ready_rx) = mpsc::channel(args.subscribers.max(1));
    let started = Instant::now();
    let connections = args.connections.max(1);
    let mut opening = Vec::new();
    for c in 0..connections {
        // Subscribers i with i % connections == c.
        let n = args.subscribers / connections + usize::from(c < args.subscribers % connections);
        let rt = &loops.handles[c % loops.handles.len()];
        let url = &urls[c % urls.len()];
        opening.push(rt.spawn(connection(
            url.trim_start_matches("http://").to_owned(),
            url.clone(),
            key.clone(),
            n,
            rec.clone(),
            ready_tx.clone(),
        )));
    }
    let mut tasks = Vec::with_capacity(args.subscribers);
    for o in opening {
        tasks.extend(o.await??);
    }
    for _ in 0..args.subscribers {
        ready_rx.recv().await;
    }
    let connect_time = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (ticks_idle, rss_idle) = sum_stats(&pids);
    let metric = |name: &'static str| {
        let serving = serving.clone();
        async move {
            let mut sum = 0.0;
            for r in serving {
                sum += r.metric(name).await;
            }
            sum
        }
    };
    let encodes_before = metric("flagstream_encodes_total{kind=\"delta\"}").await;
    let acks_before = metric("flagstream_ack_latency_seconds_count").await;

    let write_started = Instant::now();
    let period = Duration::from_secs_f64(1.0 / args.writes_per_sec);
    let mut revisions = Vec::new();
    let mut next = tokio::time::Instant::now();
    let mut heavy_writer = None;
    let mut flood = None;
    let mut first_heavy_revision = u64::MAX;
    for i in 0..args.writes {
        if args.heavy && i == args.writes / 2 {
            rec.phase.store(1, Ordering::Relaxed);
            heavy_writer = Some(heavy::Writer::start(relay.admin().await));
        }
        if let Some((token, key)) = noisy_setup.as_ref().filter(|_| i == args.writes / 2) {
            rec.phase.store(1, Ordering::Relaxed);
            flood = Some(noisy::Flood::start(&relay, token, key).await);
        }
        next += period;
        tokio::time::sleep_until(next).await;
        let revision = put(&mut admin, "demo", bool_flag("load-toggle", i % 2 == 0)).await?;
        if heavy_writer.is_some() || flood.is_some() {
            first_heavy_revision = first_heavy_revision.min(revision);
        }
        revisions.push(revision);
    }
    let heavy_report = match (heavy_writer, flood) {
        (Some(w), _) => Some(("heavy writes", w.stop().await?)),
        (None, Some(f)) => Some(("the noisy neighbour", f.stop().await?)),
        (None, None) => None,
    };
    // Wait (bounded) for every subscriber to have the last revision.
    let last = *revisions.last().unwrap_or(&0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if rec.count(last) >= args.subscribers as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let write_time = write_started.elapsed();
    let (ticks_end, rss_end) = sum_stats(&pids);
    let encodes = metric("flagstream_encodes_total{kind=\"delta\"}").await - encodes_before;
    let acks = metric("flagstream_ack_latency_seconds_count").await - acks_before;
    let errors = rec.errors.load(Ordering::Relaxed);
    let (own_ticks, _) = proc_stats(std::process::id());

    // Stopping the relay ends every stream; each subscriber then hands over
    // its latency samples.
    rec.stopping.store(true, Ordering::Relaxed);
    drop(serving);
    drop(replicas);
    drop(relay);
    drop(pg);
    let mut unfinished = 0;
    for t in tasks {
        // A subscriber that does not end (or panicked) gives no samples:
        // say so rather than report latencies over fewer deliveries silently.
        if !matches!(tokio::time::timeout(Duration::from_secs(30), t).await, Ok(Ok(()))) {
            unfinished += 1;
        }
    }
    if unfinished > 0 {
        eprintln!("warning: {unfinished} subscribers did not hand over their samples");
    }
    drop(loops);
    let samples = std::mem::take(&mut *rec.latencies_ms.lock().expect("recorder lock"));
    let phase_of = |revision: u64| usize::from(revision >= first_heavy_revision);
    let mut by_phase: [Vec<u64>; 2] = Default::default();
    for (revision, ms) in &samples {
        by_phase[phase_of(*revision)].push(*ms);
    }
    for p in &mut by_phase {
        p.sort_unstable();
    }
    let mut lat: Vec<u64> = samples.iter().map(|(_, ms)| *ms).collect();
    lat.sort_unstable();
    let mut all_by: Vec<u64> = revisions
        .iter()
        .filter(|r| rec.count(**r) >= args.subscribers as u64)
        .map(|r| {
            let i = *r as usize;
            rec.last_at_ms[i]
                .load(Ordering::Relaxed)
                .saturating_sub(rec.committed_ms[i].load(Ordering::Relaxed))
        })
        .collect();
    all_by.sort_unstable();
    let complete = all_by.len();
    let ticks_per_sec = 100.0; // USER_HZ on Linux
    let cpu = (ticks_end - ticks_idle) as f64 / ticks_per_sec / write_time.as_secs_f64() * 100.0;
    let cpu_per_delivery = (ticks_end - ticks_idle) as f64 / ticks_per_sec * 1e6 / lat.len().max(1) as f64;
    println!(
        "subscribers            {} over {} connections (all connected in {:.2?}){}",
        args.subscribers,
        args.connections,
        connect_time,
        if args.replicas > 0 {
            format!(
                ", spread over {} replicas of the primary (RSS and CPU below: the replicas, summed)",
                args.replicas
            )
        } else {
            String::new()
        }
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
    println!(
        "relay CPU during writes {cpu:.1} % of one core = {cpu_per_delivery:.2} us per delivery (load tool: {:.1} s CPU in total)",
        own_ticks as f64 / ticks_per_sec
    );
    println!(
        "relay RSS / connection  {:.1} KiB (idle with subscribers minus before, over {} connections)",
        rss_idle.saturating_sub(rss_before) as f64 / args.connections.max(1) as f64,
        args.connections
    );
    println!("delta encodings        {encodes} for {} revisions", revisions.len());
    println!("acks the relay timed   {acks} (commit->ack latency samples)");
    if let Some((what, h)) = heavy_report {
        for (phase, name) in [(0, "baseline (quiet)".to_owned()), (1, format!("during {what}"))] {
            let l = &by_phase[phase];
            println!(
                "{name:<27} commit->receive p50 {} ms, p99 {} ms, max {} ms over {} deliveries; longest gap between messages {} ms",
                pct(l, 0.5),
                pct(l, 0.99),
                l.last().unwrap_or(&0),
                l.len(),
                rec.max_gap_ms[phase].load(Ordering::Relaxed)
            );
        }
        println!("{h}");
        let (quiet, loud) = (pct(&by_phase[0], 0.99), pct(&by_phase[1], 0.99));
        // Only the noisy-neighbour run has a target for this ratio.
        let target = if what.contains("heavy") { "" } else { "; the target for --noisy is at most 2x" };
        println!(
            "p99 during / baseline      {:.2}x ({loud} ms / {quiet} ms{target})",
            loud as f64 / quiet.max(1) as f64
        );
    }
    Ok(Some(Summary::new(
        &lat,
        ticks_end - ticks_idle,
        write_time,
        rss_idle.saturating_sub(rss_before),
        complete,
    )))
}

/// `--throughput-writers`: admin write throughput, sled and PostgreSQL in
/// one run.
mod throughput {
    use std::time::{Duration, Instant};

    use flagstream_tests::relay::{Relay, bool_flag, put};

    use super::pct;

    /// `writers` concurrent writers, each toggling its own flag, for `secs`;
    /// commits per second and the commit latency.
    async fn phase(
        name: &str,
        relays: &[&Relay],
        env: &str,
        writers: usize,
        secs: Duration,
    ) -> anyhow::Result<()> {
        let mut tasks = Vec::new();
        for w in 0..writers {
            let relay = relays[w % relays.len()];
            let mut admin = relay.admin().await;
            let env = env.to_owned();
            tasks.push(tokio::spawn(async move {
                let (mut lat, started) = (Vec::new(), Instant::now());
                let mut i = 0u64;
                while started.elapsed() < secs {
                    let t = Instant::now();
                    put(&mut admin, &env, bool_flag(&format!("writer-{w}"), i.is_multiple_of(2))).await?;
                    lat.push(t.elapsed().as_micros() as u64);
                    i += 1;
                }
                Ok::<_, anyhow::Error>(lat)
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await??);
        }
        all.sort_unstable();
        println!(
            "{name:<32} {:>7.0} commits/s over {writers} writers; commit p50 {:.1} ms, p99 {:.1} ms",
            all.len() as f64 / secs.as_secs_f64(),
            pct(&all, 0.5) as f64 / 1000.0,
            pct(&all, 0.99) as f64 / 1000.0
        );
        Ok(())
    }

    /// The environment the writers write to: the demo one, or one of
    /// `flags` flags filled now.
    async fn environment(relay: &Relay, flags: usize) -> &'static str {
        if flags == 0 {
            return "demo";
        }
        relay.create_filled_env("filled", flags, 200).await;
        println!("environment \"filled\": {flags} flags");
        "filled"
    }

    pub(super) async fn run(writers: usize, secs: Duration, flags: usize) -> anyhow::Result<()> {
        // Room for the filled environment and a flag per writer (the
        // relay's default quota is 20,000 flags per environment).
        let quota_flags = (flags + writers + 1_000).max(20_000).to_string();
        let quota = [
            "--quota-writes-per-sec",
            "100000",
            "--quota-token-writes-per-sec",
            "100000",
            "--quota-flags",
            quota_flags.as_str(),
        ];
        let dir = tempfile::tempdir()?;
        let sled = Relay::start(&dir.path().join("sled"), &quota).await;
        let env = environment(&sled, flags).await;
        phase("sled (one relay)", &[&sled], env, writers, secs).await?;
        drop(sled);
        let pg = flagstream_tests::postgres::Postgres::start_durable()
            .ok_or_else(|| anyhow::anyhow!("no PostgreSQL server binaries"))?;
        let url = pg.database("throughput");
        let mut args = quota.to_vec();
        args.extend(["--store", url.as_str()]);
        let a = Relay::start(&dir.path().join("pg-a"), &args).await;
        let env = environment(&a, flags).await;
        phase("postgres (one relay)", &[&a], env, writers, secs).await?;
        let mut args_b = args.clone();
        args_b.extend(["--demo", "false"]);
        let mut b = Relay::start(&dir.path().join("pg-b"), &args_b).await;
        b.admin_secret = Some(a.admin_token());
        phase("postgres (two relays, writers split)", &[&a, &b], env, writers, secs).await?;
        Ok(())
    }
}

/// What one propagation run measured, for the `--floor` comparison.
#[derive(Debug, Clone, Copy)]
struct Summary {
    p50_ms: u64,
    p99_ms: u64,
    max_ms: u64,
    deliveries: usize,
    /// Server CPU during the writes (from /proc), µs per delivery.
    cpu_us_per_delivery: f64,
    /// Server CPU during the writes, % of one core.
    cpu_pct: f64,
    /// Server RSS with the subscribers connected minus before, KiB.
    rss_delta_kib: u64,
    /// Revisions every subscriber received.
    complete: usize,
}

impl Summary {
    fn new(lat: &[u64], ticks: u64, write_time: Duration, rss_delta_kib: u64, complete: usize) -> Summary {
        let cpu_s = ticks as f64 / 100.0; // USER_HZ on Linux
        Summary {
            p50_ms: pct(lat, 0.5),
            p99_ms: pct(lat, 0.99),
            max_ms: lat.last().copied().unwrap_or(0),
            deliveries: lat.len(),
            cpu_us_per_delivery: cpu_s * 1e6 / lat.len().max(1) as f64,
            cpu_pct: cpu_s / write_time.as_secs_f64() * 100.0,
            rss_delta_kib,
            complete,
        }
    }

    /// `name: p50 …, p99 …, CPU …, RSS …` for one server.
    fn line(&self, name: &str, args: &Args) -> String {
        format!(
            "{name:<6} p50 {} ms, p99 {} ms, max {} ms over {} deliveries ({} of {} revisions reached everyone); \
             CPU {:.1} % of a core = {:.2} us per delivery ({:.1} ms of CPU per revision per 1,000 streams); \
             RSS {:.1} KiB per connection = {:.2} KiB per stream",
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            self.deliveries,
            self.complete,
            args.writes,
            self.cpu_pct,
            self.cpu_us_per_delivery,
            self.cpu_us_per_delivery, // µs per delivery × 1,000 streams = ms per revision
            self.rss_delta_kib as f64 / args.connections.max(1) as f64,
            self.rss_delta_kib as f64 / args.subscribers.max(1) as f64,
        )
    }
}

/// `--floor`: the baseline server and its measurement.
mod floor {
    use std::convert::Infallible;
    use std::io::{BufRead, Write};
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::task::{Context, Poll, ready};
    use std::time::{Duration, Instant};

    use bytes::Bytes;
    use flagstream_proto::v1 as pb;
    use flagstream_tests::relay::bool_flag;
    use http_body::Frame;
    use tokio::sync::{broadcast, mpsc};
    use tokio_stream::Stream;
    use tokio_stream::wrappers::BroadcastStream;

    use super::{Args, EventLoops, Recorder, Summary, connection, grpc_frame, now_ms, proc_stats};

    /// The epoch the floor states.
    const EPOCH: &str = "floor";

    /// The delta to `revision`: the same write the relay run makes (the
    /// `load-toggle` flag), committed now.
    fn delta(revision: u64) -> Bytes {
        let delta = pb::Delta {
            epoch: EPOCH.into(),
            from_revision: revision - 1,
            to_revision: revision,
            upserted_flags: vec![bool_flag("load-toggle", revision.is_multiple_of(2))],
            checksum: 0x5eed,
            committed_unix_ms: now_ms(),
            ..Default::default()
        };
        grpc_frame(&pb::SubscribeResponse { kind: Some(pb::subscribe_response::Kind::Delta(delta)) })
    }

    /// The one-chunk snapshot every stream opens with (revision 0).
    fn opening() -> Bytes {
        let chunk =
            pb::SnapshotChunk { epoch: EPOCH.into(), revision: 0, last_chunk: true, ..Default::default() };
        grpc_frame(&pb::SubscribeResponse { kind: Some(pb::subscribe_response::Kind::SnapshotChunk(chunk)) })
    }

    /// The floor's only route: any path gets the pushed messages.
    #[derive(Clone)]
    struct Route {
        pushes: broadcast::Sender<Bytes>,
    }

    impl tonic::server::NamedService for Route {
        const NAME: &'static str = "flagstream.v1.Sync";
    }

    impl tonic::codegen::Service<http::Request<tonic::body::Body>> for Route {
        type Response = http::Response<tonic::body::Body>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
            let body = Push {
                first: Some(opening()),
                pushes: BroadcastStream::new(self.pushes.subscribe()),
                request: Some(req.into_body()),
            };
            let mut res = http::Response::new(tonic::body::Body::new(body));
            res.headers_mut()
                .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
            std::future::ready(Ok(res))
        }
    }

    /// A stream's response: the opening chunk, then every push, in order, as
    /// one DATA frame each (the shared bytes, a reference-count increment):
    /// every stream gets every write, as the relay's streams do unless they
    /// lag (then the relay coalesces). The request side (Hello, acks) is
    /// read and dropped.
    struct Push {
        first: Option<Bytes>,
        pushes: BroadcastStream<Bytes>,
        request: Option<tonic::body::Body>,
    }

    impl http_body::Body for Push {
        type Data = Bytes;
        type Error = tonic::Status;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
            // Drain what the client sent (no acks are processed: the floor
            // only keeps its flow-control window open).
            while let Some(req) = self.request.as_mut() {
                match Pin::new(req).poll_frame(cx) {
                    Poll::Ready(Some(Ok(_))) => {}
                    // Half-closed or failed: nothing more to read.
                    Poll::Ready(None | Some(Err(_))) => self.request = None,
                    Poll::Pending => break,
                }
            }
            if let Some(first) = self.first.take() {
                return Poll::Ready(Some(Ok(Frame::data(first))));
            }
            loop {
                return match ready!(Pin::new(&mut self.pushes).poll_next(cx)) {
                    Some(Ok(b)) => Poll::Ready(Some(Ok(Frame::data(b)))),
                    // More than the channel holds behind: skip to what is
                    // left (the tool sends fewer writes than it holds).
                    Some(Err(_lagged)) => continue,
                    None => Poll::Ready(None),
                };
            }
        }
    }

    /// `--serve-floor`: serves on 127.0.0.1 (port printed on stdout) until
    /// stdin ends; each stdin line is a revision number to push.
    pub(super) fn serve(streams: u32) -> anyhow::Result<()> {
        // The relay's runtime (same threads, same scheduling settings).
        let rt = flagstream_relay::runtime()?;
        rt.block_on(async move {
            // The relay's default listen backlog (tokio's 1,024 overflows
            // when thousands of connections open at once).
            let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            socket.set_nonblocking(true)?;
            socket.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())?;
            socket.listen(4096)?;
            let listener = tokio::net::TcpListener::from_std(socket.into())?;
            println!("{}", listener.local_addr()?.port());
            std::io::stdout().flush()?;
            // Holds every write of a run (the tool makes at most a few hundred).
            let (tx, _) = broadcast::channel(4096);
            let pushes = tx.clone();
            // Revisions from stdin, read on a thread of its own; each is
            // encoded and pushed by a task on the runtime, as the relay
            // publishes a commit (its wake-ups go to a worker's queue, not
            // through the runtime's shared inject queue one by one).
            let (revisions, mut pending) = mpsc::unbounded_channel::<u64>();
            std::thread::spawn(move || {
                for line in std::io::stdin().lock().lines() {
                    let Ok(revision) = line.map_err(drop).and_then(|l| l.trim().parse::<u64>().map_err(drop))
                    else {
                        break;
                    };
                    if revisions.send(revision).is_err() {
                        break;
                    }
                }
                // The tool closed stdin (or died): the floor ends with it.
                std::process::exit(0);
            });
            tokio::spawn(async move {
                while let Some(revision) = pending.recv().await {
                    // An error only means no stream is open: nothing to push to.
                    let _no_streams = tx.send(delta(revision));
                }
            });
            tonic::transport::Server::builder()
                .max_concurrent_streams(Some(streams))
                .tcp_nodelay(true)
                .add_service(Route { pushes })
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await?;
            Ok(())
        })
    }

    /// Runs the floor server as a child process and measures it with the
    /// same clients, connections, streams and write pace as the relay run.
    pub(super) async fn measure(args: &Args, threads: usize) -> anyhow::Result<Summary> {
        let streams = (args.subscribers / args.connections.max(1) + 16).to_string();
        let mut child = std::process::Command::new(std::env::current_exe()?)
            .args(["--serve-floor", "--floor-streams", &streams])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let pid = child.id();
        let mut stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut port = String::new();
        stdout.read_line(&mut port)?;
        let url = format!("http://127.0.0.1:{}", port.trim());
        // A benchmark tool: let the floor server settle before its baseline RSS.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (_, rss_before) = proc_stats(pid);

        let rec = Arc::new(Recorder::new(args.writes + 1, !args.no_ack));
        let loops = EventLoops::start(threads)?;
        let (ready_tx, mut ready_rx) = mpsc::channel(args.subscribers.max(1));
        let connections = args.connections.max(1);
        let mut opening = Vec::new();
        for c in 0..connections {
            let n = args.subscribers / connections + usize::from(c < args.subscribers % connections);
            let rt = &loops.handles[c % loops.handles.len()];
            opening.push(rt.spawn(connection(
                url.trim_start_matches("http://").to_owned(),
                url.clone(),
                "floor".into(),
                n,
                rec.clone(),
                ready_tx.clone(),
            )));
        }
        let mut tasks = Vec::with_capacity(args.subscribers);
        for o in opening {
            tasks.extend(o.await??);
        }
        for _ in 0..args.subscribers {
            ready_rx.recv().await;
        }
        // Idle for 2 s so the idle CPU and RSS sample is not the connects' tail.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (ticks_idle, rss_idle) = proc_stats(pid);

        let write_started = Instant::now();
        let period = Duration::from_secs_f64(1.0 / args.writes_per_sec);
        let mut next = tokio::time::Instant::now();
        for revision in 1..=args.writes as u64 {
            next += period;
            tokio::time::sleep_until(next).await;
            writeln!(stdin, "{revision}")?;
            stdin.flush()?;
        }
        let last = args.writes as u64;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline && rec.count(last) < args.subscribers as u64 {
            // Poll interval for the recorder's count (bounded by `deadline`).
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let write_time = write_started.elapsed();
        let (ticks_end, _) = proc_stats(pid);

        rec.stopping.store(true, Ordering::Relaxed);
        drop(stdin); // the floor server exits
        child.wait()?;
        let mut unfinished = 0;
        for t in tasks {
            if !matches!(tokio::time::timeout(Duration::from_secs(30), t).await, Ok(Ok(()))) {
                unfinished += 1;
            }
        }
        if unfinished > 0 {
            eprintln!("warning (floor): {unfinished} subscribers did not hand over their samples");
        }
        drop(loops);
        let mut lat: Vec<u64> = std::mem::take(&mut *rec.latencies_ms.lock().expect("recorder lock"))
            .into_iter()
            .map(|s| s.1)
            .collect();
        lat.sort_unstable();
        let complete = (1..=last).filter(|r| rec.count(*r) >= args.subscribers as u64).count();
        Ok(Summary::new(
            &lat,
            ticks_end - ticks_idle,
            write_time,
            rss_idle.saturating_sub(rss_before),
            complete,
        ))
    }
}
