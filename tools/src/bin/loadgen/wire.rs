//! The subscriber side on the wire: each simulated subscriber on `h2`
//! directly (Hello, envelope decoding, acks coalesced as the SDK does), the
//! latency recorder and process statistics.

use super::*;

pub(super) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// (utime + stime) in clock ticks, and RSS in KiB, of a process.
pub(super) fn proc_stats(pid: u32) -> (u64, u64) {
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

/// How simulated subscribers acknowledge what they applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Acking {
    /// Never (`--no-ack`).
    Never,
    /// Every revision at once (`--ack-each`: SDKs before coalesced acks).
    Each,
    /// As the SDK does: the first revision after a quiet [`ACK_INTERVAL`]
    /// at once, later ones held until the interval since the last ack is
    /// over, the newest replacing the older, with `held_us` set.
    Coalesced,
}

/// The SDK's shortest time between two acks of one stream
/// (`sdk/src/follow/ack.rs`).
const ACK_INTERVAL: Duration = Duration::from_secs(1);

impl Acking {
    pub(super) fn of(args: &Args) -> Acking {
        match (args.no_ack, args.ack_each) {
            (true, _) => Acking::Never,
            (false, true) => Acking::Each,
            (false, false) => Acking::Coalesced,
        }
    }
}

/// What the subscribers report. Per-delivery updates are relaxed atomics;
/// each subscriber keeps its latency samples and hands them over once,
/// when its stream ends.
pub(super) struct Recorder {
    /// `(revision, commit → receive ms)`.
    pub(super) latencies_ms: Mutex<Vec<(u64, u64)>>,
    /// The measured phase now (0 = baseline, 1 = with heavy writes).
    pub(super) phase: std::sync::atomic::AtomicUsize,
    /// Per phase: the longest wait between two messages (any kind, heartbeats
    /// included) one subscriber saw, ms.
    pub(super) max_gap_ms: [AtomicU64; 2],
    /// Per revision (the index): subscribers that have it.
    pub(super) received: Vec<AtomicU64>,
    /// Per revision: when the last subscriber got it (Unix ms).
    pub(super) last_at_ms: Vec<AtomicU64>,
    /// Per revision: its commit time (Unix ms), as the relay stated it.
    pub(super) committed_ms: Vec<AtomicU64>,
    pub(super) snapshots: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) ack: Acking,
    /// Set when the tool stops the relay: stream errors are expected then.
    pub(super) stopping: std::sync::atomic::AtomicBool,
}

impl Recorder {
    pub(super) fn new(max_revision: usize, ack: Acking) -> Recorder {
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

    pub(super) fn count(&self, revision: u64) -> u64 {
        self.received.get(revision as usize).map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

/// The parts of `SubscribeResponse` a subscriber needs to ack and measure;
/// prost skips the rest (heartbeats, flag bodies) without decoding it.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Envelope {
    #[prost(oneof = "EnvelopeKind", tags = "1, 2")]
    pub(super) kind: Option<EnvelopeKind>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub(super) enum EnvelopeKind {
    #[prost(message, tag = "1")]
    Chunk(ChunkHead),
    #[prost(message, tag = "2")]
    Delta(DeltaHead),
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct ChunkHead {
    #[prost(string, tag = "1")]
    pub(super) epoch: String,
    #[prost(uint64, tag = "2")]
    pub(super) revision: u64,
    #[prost(bool, tag = "5")]
    pub(super) last_chunk: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct DeltaHead {
    #[prost(uint64, tag = "3")]
    pub(super) to_revision: u64,
    #[prost(uint64, tag = "9")]
    pub(super) committed_unix_ms: u64,
}

/// One gRPC message: the 5-byte length prefix (uncompressed) and the body.
pub(super) fn grpc_frame(msg: &impl prost::Message) -> Bytes {
    let len = msg.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(len as u32);
    msg.encode(&mut buf).expect("buffer has room");
    buf.freeze()
}

/// A refusal with a retry hint (ms): the subscriber waits and tries again.
#[derive(Debug)]
pub(super) struct RetryAfter(u64);

impl std::fmt::Display for RetryAfter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused; retry in {} ms", self.0)
    }
}

impl std::error::Error for RetryAfter {}

pub(super) async fn subscriber(
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

pub(super) async fn subscribe(
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
    // The SDK's Hello: it announces every evaluation feature it implements.
    let features = flagstream::feature::IMPLEMENTED.iter().map(|f| (*f).to_owned()).collect();
    let hello = pb::Hello { sdk_key: key, sdk_name: "loadgen".into(), features, ..Default::default() };
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
    // The last ack sent, and the newest applied revision held for the next.
    let mut last_ack: Option<Instant> = None;
    let mut held: Option<(u64, Instant)> = None;
    loop {
        let due = last_ack.map_or_else(Instant::now, |at| at + ACK_INTERVAL);
        let data = tokio::select! {
            biased;
            data = body.data() => match data {
                Some(data) => data?,
                None => break,
            },
            () = tokio::time::sleep_until(due.into()), if held.is_some() => {
                if let Some((revision, applied)) = held.take() {
                    last_ack = Some(Instant::now());
                    send_ack(&mut send, &epoch, revision, applied.elapsed())?;
                }
                continue;
            }
        };
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
                match rec.ack {
                    Acking::Never => {}
                    Acking::Each => send_ack(&mut send, &epoch, revision, Duration::ZERO)?,
                    Acking::Coalesced if last_ack.is_none_or(|at| at.elapsed() >= ACK_INTERVAL) => {
                        held = None;
                        last_ack = Some(Instant::now());
                        send_ack(&mut send, &epoch, revision, Duration::ZERO)?;
                    }
                    Acking::Coalesced => held = Some((revision, Instant::now())),
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

/// Sends an ack of `revision`, held `held` since it was applied.
fn send_ack(
    send: &mut h2::SendStream<Bytes>,
    epoch: &str,
    revision: u64,
    held: Duration,
) -> anyhow::Result<()> {
    let ack =
        pb::Ack { epoch: epoch.to_owned(), revision, apply_duration_us: 0, held_us: held.as_micros() as u64 };
    send.send_data(
        grpc_frame(&pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Ack(ack)) }),
        false,
    )?;
    Ok(())
}

/// `Err` unless `grpc-status` is absent (more to come) or 0.
pub(super) fn grpc_ok(headers: &http::HeaderMap) -> anyhow::Result<()> {
    match headers.get("grpc-status").map(|v| v.to_str().unwrap_or("?")) {
        None | Some("0") => Ok(()),
        Some(code) => {
            let message = headers.get("grpc-message").and_then(|v| v.to_str().ok()).unwrap_or("");
            anyhow::bail!("grpc-status {code}: {message}")
        }
    }
}
