//! `--floor`: the baseline server (a minimal tonic server pushing one
//! pre-encoded delta per write) and its measurement.

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

use super::{Acking, Args, EventLoops, Recorder, Summary, connection, grpc_frame, now_ms, proc_stats};

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

    let rec = Arc::new(Recorder::new(args.writes + 1, Acking::of(args)));
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
    Ok(Summary::new(&lat, ticks_end - ticks_idle, write_time, rss_idle.saturating_sub(rss_before), complete))
}
