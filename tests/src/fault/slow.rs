//! Scenario 4, slow reader: one subscriber reads through the fault proxy
//! at a few KiB/s while writes continue. The relay holds no per-subscriber
//! backlog (a stream is encoded when its transport pulls), so its memory
//! stays bounded; once the slow stream's HTTP/2 window and socket buffers
//! are full the transport stops pulling and the send deadline cuts it off;
//! while it keeps pulling but stays behind the head, the behind deadline
//! does;
//! the other subscribers see every write as if nothing happened.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flagstream::Client;
use tonic::transport::Channel;

use crate::proxy::{Mode, Proxy};
use crate::relay::{Relay, bool_flag, put};
use crate::subscriber::Subscriber;

/// What one run measured.
#[derive(Debug, Clone)]
pub struct SlowReport {
    /// Writes made.
    pub writes: usize,
    /// Bytes of each written flag's description.
    pub flag_bytes: usize,
    /// The slow reader's rate, bytes/s.
    pub rate: u32,
    /// Bytes the proxy passed to the slow reader.
    pub slow_bytes: u64,
    /// From the slow reader's connection to the end.
    pub ran_for: Duration,
    /// Streams the relay cut off by the send deadline or the behind
    /// deadline.
    pub cut_off: u64,
    /// Of those, the ones cut by the behind deadline.
    pub cut_behind: u64,
    /// The SDK name (`name/version`, from the relay's log) of every stream
    /// the send or behind deadline cut off: the slow reader is [`SLOW_SDK`], the fast
    /// clients are the SDK.
    pub cut_sdks: Vec<String>,
    /// Streams the fast clients had to reopen (0: none of theirs was cut).
    pub fast_reconnects: u64,
    /// From the first write to the cut being seen (`None`: not cut within
    /// `max_time`: the stream kept pulling, slowly).
    pub cut_after: Option<Duration>,
    /// Relay resident memory every 10 s of writing, KiB.
    pub rss_curve: Vec<(Duration, u64)>,
    /// Relay resident memory before the slow reader joined, KiB.
    pub relay_rss_before_kib: u64,
    /// Relay peak resident memory over the run, KiB.
    pub relay_peak_rss_kib: u64,
    /// Commit → visible on the other (fast) SDKs, every write × client:
    /// median, 99th percentile, slowest.
    pub fast_p50: Duration,
    /// 99th percentile.
    pub fast_p99: Duration,
    /// Slowest.
    pub fast_max: Duration,
}

/// The scenario's size.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// SDK clients connected directly.
    pub fast: usize,
    /// Least number of writes (they go on until the cut is seen).
    pub writes: usize,
    /// Time between writes.
    pub interval: Duration,
    /// Description bytes of each written flag.
    pub flag_bytes: usize,
    /// The slow reader's rate through the proxy, bytes/s.
    pub rate: u32,
    /// Writes stop after this long even if the slow stream was not cut.
    pub max_time: Duration,
}

/// The SDK name the slow reader (the raw test subscriber) gives in its
/// Hello, as the relay logs it.
pub const SLOW_SDK: &str = "flagstream-tests/0";

/// The SDK name of every stream the relay's log says the send deadline
/// or the behind deadline cut off (matched by subscriber id to the stream's `subscribed` line).
fn cut_sdks(log: &str) -> Vec<String> {
    let field = |line: &str, name: &str| {
        line.split_whitespace().find_map(|w| w.strip_prefix(name)).map(str::to_owned)
    };
    let sdk_of: std::collections::HashMap<String, String> = log
        .lines()
        .filter(|l| l.contains(" subscribed "))
        .filter_map(|l| Some((field(l, "subscriber=")?, field(l, "sdk=")?)))
        .collect();
    log.lines()
        .filter(|l| l.contains("send deadline passed") || l.contains("behind deadline passed"))
        .map(|l| {
            let id = field(l, "subscriber=").unwrap_or_else(|| panic!("no subscriber id in {l:?}"));
            sdk_of.get(&id).cloned().unwrap_or_else(|| panic!("subscriber {id} cut off, never subscribed"))
        })
        .collect()
}

/// When each revision reached one client.
type Arrivals = Arc<Mutex<Vec<(u64, Instant)>>>;

/// Runs the scenario: `load.fast` SDK clients connect directly, one raw
/// subscriber through a proxy throttled to `load.rate` bytes/s; a write
/// every `load.interval` of a flag with `load.flag_bytes` of description,
/// until the slow stream is cut off and at least `load.writes` were made.
pub async fn run(dir: &Path, load: Load, relay_args: &[&str], guard: Duration) -> SlowReport {
    let Load { fast, writes, interval, flag_bytes, rate, max_time } = load;
    let relay = Relay::start(dir, relay_args).await;
    let key = relay.demo_key();
    let relay_rss_before_kib = relay.rss_kib().0;
    let proxy = Proxy::start(relay.grpc).await;
    proxy.set_new(Mode::Throttle(rate));
    let connected_at = Instant::now();
    let channel = Channel::from_shared(proxy.url()).expect("proxy url").connect().await.expect("connect");
    let mut slow = Subscriber::connect(channel, &key, None).await.expect("slow subscriber");
    let slow_reader = tokio::spawn(async move {
        // Reads for as long as the relay keeps the stream.
        while slow.next(Duration::from_secs(3600)).await.is_ok() {}
    });

    let clients: Vec<Client> = (0..fast)
        .map(|_| {
            Client::builder().endpoints([relay.url()]).sdk_key(key.clone()).build().expect("client builds")
        })
        .collect();
    for c in &clients {
        c.wait_ready(guard).await;
    }
    // Every client's changes with the time they arrived.
    let seen: Vec<Arrivals> = clients.iter().map(|_| Arc::default()).collect();
    let listeners: Vec<_> = clients
        .iter()
        .zip(&seen)
        .map(|(c, log)| {
            let (mut rx, log) = (c.changes(), log.clone());
            tokio::spawn(async move {
                while let Ok(change) = rx.recv().await {
                    log.lock().unwrap().push((change.revision, Instant::now()));
                }
            })
        })
        .collect();

    // Writes go on at a steady pace until the relay has cut the slow
    // stream off (checked every 10 writes), and at least `writes` of them.
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(relay_rss_before_kib));
    let mut admin = relay.admin().await;
    let mut committed = Vec::new();
    let mut pace = tokio::time::interval(interval);
    let mut cut_after = None;
    let began = Instant::now();
    let behind =
        || async { relay.metric("flagstream_stream_ends_total{reason=\"behind_deadline\"}").await as u64 };
    let cut = || async {
        relay.metric("flagstream_stream_ends_total{reason=\"send_deadline\"}").await as u64 + behind().await
    };
    let mut rss_curve = Vec::new();
    for i in 0.. {
        pace.tick().await;
        // Every write changes its flag (a new description), so each is a
        // new revision.
        let mut f = bool_flag(&format!("slow-{}", i % 20), true);
        f.description = format!("{i:08} {}", "d".repeat(flag_bytes));
        let revision = put(&mut admin, "demo", f).await.expect("write");
        committed.push((revision, Instant::now()));
        let rss = relay.rss_kib().0;
        peak.fetch_max(rss, std::sync::atomic::Ordering::Relaxed);
        if rss_curve
            .last()
            .is_none_or(|(at, _): &(Duration, u64)| began.elapsed() >= *at + Duration::from_secs(10))
        {
            rss_curve.push((began.elapsed(), rss));
        }
        if i % 10 == 9 {
            if cut_after.is_none() && cut().await >= 1 {
                cut_after = Some(began.elapsed());
            }
            if (cut_after.is_some() || began.elapsed() >= max_time) && committed.len() >= writes {
                break;
            }
            assert!(began.elapsed() < guard, "the run outlived its guard: {}", relay.log());
        }
    }
    let cut_off = cut().await;
    let head = committed.last().map(|c| c.0).unwrap_or(0);
    for (c, log) in clients.iter().zip(&seen) {
        crate::cluster::eventually("a fast client at the head", || {
            c.snapshot().revision() >= head && log.lock().unwrap().last().is_some_and(|l| l.0 >= head)
        })
        .await;
    }
    let mut lat = Vec::new();
    for log in &seen {
        let log = log.lock().unwrap();
        for (revision, at) in &committed {
            let first = log.iter().find(|(r, _)| r >= revision).expect("every revision arrived");
            lat.push(first.1.saturating_duration_since(*at));
        }
    }
    lat.sort();
    let pct = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    peak.fetch_max(relay.rss_kib().1, std::sync::atomic::Ordering::Relaxed);
    slow_reader.abort();
    for l in listeners {
        l.abort();
    }
    SlowReport {
        writes: committed.len(),
        cut_after,
        rss_curve,
        flag_bytes,
        rate,
        slow_bytes: proxy.bytes_down(),
        ran_for: connected_at.elapsed(),
        cut_off,
        cut_behind: behind().await,
        cut_sdks: cut_sdks(&relay.log()),
        fast_reconnects: clients.iter().map(|c| c.stats().reconnects).sum(),
        relay_rss_before_kib,
        relay_peak_rss_kib: peak.load(std::sync::atomic::Ordering::Relaxed),
        fast_p50: pct(0.5),
        fast_p99: pct(0.99),
        fast_max: *lat.last().expect("latencies"),
    }
}
