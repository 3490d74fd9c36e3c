//! OFREP under load: `--ofrep-streams N` opens N change streams (server-
//! sent events, one HTTP/1.1 connection each, as browsers hold them) next
//! to the gRPC subscribers of the same run, and reports when each write
//! reached them (commit → event received, per stream and write: the first
//! event at or past the write's revision) beside the gRPC numbers, and the
//! relay's RSS per open stream. `--ofrep-bulk` measures the bulk endpoint
//! (`POST /ofrep/v1/evaluate/flags`, 50 flags visible to clients, a client
//! key): requests per second per relay core and latency at
//! `--ofrep-concurrency` keep-alive connections, then the `304` path (the
//! same requests with `If-None-Match`).

use std::net::SocketAddr;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::*;

/// The relay options OFREP runs need: the listener, and limits above what
/// the tool asks for (it measures the relay, not its admission limits).
pub(super) const RELAY_ARGS: &[&str] = &[
    "--ofrep-listen",
    "127.0.0.1:0",
    "--ofrep-requests-per-sec-per-key",
    "100000000",
    "--ofrep-requests-per-sec-per-address",
    "100000000",
    "--ofrep-max-connections",
    "200000",
    "--ofrep-max-connections-per-address",
    "200000",
    "--ofrep-max-event-streams",
    "150000",
];

/// What the change streams saw: per stream, `(revision, received Unix ms)`
/// of each event.
#[derive(Default)]
pub(super) struct Streams {
    pub(super) events: Mutex<Vec<Vec<(u64, u64)>>>,
    pub(super) failed: AtomicU64,
}

/// Opens one change stream at `uri` on `addr`; returns once it started
/// (its first id read), then records its events until the relay goes.
pub(super) async fn stream(addr: SocketAddr, uri: String, rec: Arc<Streams>, ready: mpsc::Sender<()>) {
    let opened = async {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(
            format!("GET {uri} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut lines = BufReader::new(s).lines();
        while let Some(l) = lines.next_line().await? {
            if l.starts_with("id: ") {
                return Ok::<_, std::io::Error>(lines);
            }
        }
        Err(std::io::Error::other("the stream ended before its first id"))
    };
    let mut lines = match opened.await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("an OFREP change stream failed to open: {e}");
            rec.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    if ready.send(()).await.is_err() {
        return;
    }
    let mut seen = Vec::new();
    // Ends when the relay stops (or fails the stream).
    while let Ok(Some(l)) = lines.next_line().await {
        if let Some(rev) = l.strip_prefix("id: ").and_then(|id| id.rsplit(':').next()?.parse::<u64>().ok()) {
            seen.push((rev, now_ms()));
        }
    }
    rec.events.lock().expect("recorder lock").push(seen);
}

/// For each write (`revisions`, committed at `committed_ms`), when each
/// stream got it: commit → the first event at or past it, ms.
pub(super) fn latencies(
    streams: &[Vec<(u64, u64)>],
    revisions: &[u64],
    committed_ms: impl Fn(u64) -> u64,
) -> Vec<u64> {
    let mut out = Vec::new();
    for events in streams {
        for &w in revisions {
            if let Some((_, at)) = events.iter().find(|(rev, _)| *rev >= w) {
                out.push(at.saturating_sub(committed_ms(w)));
            }
        }
    }
    out.sort_unstable();
    out
}

/// A keep-alive HTTP/1.1 connection to the OFREP listener.
struct Conn {
    addr: SocketAddr,
    io: BufReader<TcpStream>,
}

impl Conn {
    async fn open(addr: SocketAddr) -> anyhow::Result<Conn> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(Conn { addr, io: BufReader::new(s) })
    }

    /// One POST; returns the status, the ETag and the body's length.
    async fn post(&mut self, path: &str, headers: &str, body: &str) -> anyhow::Result<(u16, String, usize)> {
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{headers}\r\n{body}",
            self.addr,
            body.len()
        );
        self.io.get_mut().write_all(req.as_bytes()).await?;
        let mut line = String::new();
        self.io.read_line(&mut line).await?;
        let status: u16 = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let (mut len, mut etag) = (0usize, String::new());
        loop {
            line.clear();
            if self.io.read_line(&mut line).await? == 0 {
                anyhow::bail!("the relay closed the connection");
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((n, v)) = l.split_once(':') {
                match n.to_ascii_lowercase().as_str() {
                    "content-length" => len = v.trim().parse()?,
                    "etag" => etag = v.trim().to_owned(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; len];
        self.io.read_exact(&mut body).await?;
        Ok((status, etag, len))
    }
}

/// The 50 flags of the bulk run: a rule on a plan, a 10% rollout, or a
/// fixed value, each visible to clients.
fn bulk_flags() -> Vec<pb::BatchOp> {
    use serde_json::json;
    (0..50)
        .map(|i| {
            let key = format!("web-{i}");
            let doc = match i % 3 {
                0 => json!({"key": key, "type": "bool", "variations": [true, false], "on": true, "off_variation": 1,
                    "client_visible": true, "fallthrough": {"variation": 1},
                    "rules": [{"id": "pro", "clauses": [{"attribute": "plan", "op": "in", "values": ["pro", "enterprise"]}],
                               "serve": {"variation": 0}}]}),
                1 => json!({"key": key, "type": "bool", "variations": [true, false], "on": true, "off_variation": 1,
                    "client_visible": true,
                    "fallthrough": {"rollout": {"variations": [{"variation": 0, "weight": 10000}, {"variation": 1, "weight": 90000}]}}}),
                _ => json!({"key": key, "type": "string", "variations": ["a", "b"], "on": true, "off_variation": 0,
                    "client_visible": true, "fallthrough": {"variation": 1}}),
            };
            let flag: flagstream::Flag = serde_json::from_value(doc).expect("the flags above are valid");
            pb::BatchOp {
                op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp {
                    flag: Some(flagstream::wire::flag_to_proto(&flag)),
                    expected_version: None,
                })),
            }
        })
        .collect()
}

/// `--ofrep-bulk`: the bulk endpoint's throughput and latency, then the
/// `304` path's.
pub(super) async fn bulk(args: &Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let relay = Relay::start(dir.path(), RELAY_ARGS).await;
    let addr = relay.ofrep.ok_or_else(|| anyhow::anyhow!("the relay named no OFREP address"))?;
    let mut admin = relay.admin().await;
    admin
        .batch(pb::BatchRequest {
            environment: "demo".into(),
            ops: bulk_flags(),
            expected_revision: None,
            comment: String::new(),
        })
        .await?;
    let key = admin
        .create_sdk_key(pb::CreateSdkKeyRequest {
            environment: "demo".into(),
            name: "bench".into(),
            client: true,
        })
        .await?
        .into_inner()
        .secret;
    let auth = format!("Authorization: Bearer {key}\r\n");
    let secs = Duration::from_secs(args.throughput_secs);
    let loops = EventLoops::start(client_threads(args))?;
    for not_modified in [false, true] {
        let stop = Instant::now() + secs;
        let (ticks_before, _) = proc_stats(relay.pid());
        let started = Instant::now();
        let mut workers = Vec::new();
        for c in 0..args.ofrep_concurrency {
            let auth = auth.clone();
            workers.push(loops.handles[c % loops.handles.len()].spawn(async move {
                let mut conn = Conn::open(addr).await?;
                let mut lat = Vec::new();
                let (mut items, mut n) = (0usize, 0u64);
                let fixed = format!(r#"{{"context":{{"targetingKey":"user-{c}","plan":"free"}}}}"#);
                let (_, etag, _) = conn.post("/ofrep/v1/evaluate/flags", &auth, &fixed).await?;
                let inm = format!("{auth}If-None-Match: {etag}\r\n");
                while Instant::now() < stop {
                    let t = Instant::now();
                    let (status, bytes) = if not_modified {
                        let (s, _, b) = conn.post("/ofrep/v1/evaluate/flags", &inm, &fixed).await?;
                        (s, b)
                    } else {
                        // Another user each time, a third of them on a
                        // paid plan: no answer is cached anywhere.
                        let plan = if n % 3 == 0 { "pro" } else { "free" };
                        let body =
                            format!(r#"{{"context":{{"targetingKey":"user-{c}-{n}","plan":"{plan}"}}}}"#);
                        let (s, _, b) = conn.post("/ofrep/v1/evaluate/flags", &auth, &body).await?;
                        (s, b)
                    };
                    lat.push(t.elapsed().as_micros() as u64);
                    anyhow::ensure!(status == if not_modified { 304 } else { 200 }, "status {status}");
                    items += bytes;
                    n += 1;
                }
                Ok::<_, anyhow::Error>((lat, items))
            }));
        }
        let mut lat = Vec::new();
        let mut bytes = 0;
        for w in workers {
            let (l, b) = w.await??;
            lat.extend(l);
            bytes += b;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let (ticks_after, _) = proc_stats(relay.pid());
        lat.sort_unstable();
        let cpu_s = (ticks_after - ticks_before) as f64 / 100.0;
        let n = lat.len() as f64;
        println!(
            "{:<22} {} requests in {elapsed:.1} s at {} connections: {:.0}/s; relay CPU {:.2} cores = {:.0} requests/s per relay core ({:.1} us each); latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {:.0} bytes per answer",
            if not_modified { "bulk, 304 (If-None-Match)" } else { "bulk, 50 flags, 200" },
            lat.len(),
            args.ofrep_concurrency,
            n / elapsed,
            cpu_s / elapsed,
            n / cpu_s.max(1e-9),
            cpu_s * 1e6 / n.max(1.0),
            pct(&lat, 0.5) as f64 / 1000.0,
            pct(&lat, 0.99) as f64 / 1000.0,
            lat.last().copied().unwrap_or(0) as f64 / 1000.0,
            bytes as f64 / n.max(1.0),
        );
    }
    drop(loops);
    Ok(())
}
