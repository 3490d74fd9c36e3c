//! Scenario 9, side by side with the design that failed: flags kept in
//! Redis and read through a local cache whose entries live 30 s, with a
//! 2 s deadline on each Redis read that returns the fallback (and, as in
//! the incident, neither cancels the command nor replaces the
//! connection), against a flagstream SDK. Both sit behind the fault proxy;
//! a few seconds in, every established connection through both proxies is
//! blackholed (new connections pass, as after a failover). Request
//! handlers keep reading flags; the report gives, per phase, how many
//! reads waited, how many returned the fallback, their latency, and when
//! a change made during the outage was first seen.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flagstream::{Client, Context};
use hdrhistogram::Histogram;
use redis::AsyncCommands;

use crate::fault::ms;
use crate::proxy::Proxy;
use crate::relay::{Relay, bool_flag, put};

/// Options of the side-by-side run.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The `redis-server` binary (Debian's; `tests/side-by-side.sh`
    /// installs it).
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Length of the run, seconds.
    #[arg(long, default_value_t = 75)]
    pub seconds: u64,
    /// When the blackhole starts, seconds into the run.
    #[arg(long, default_value_t = 5)]
    pub blackhole_at: u64,
    /// Concurrent request handlers reading flags, per design.
    #[arg(long, default_value_t = 16)]
    pub handlers: usize,
    /// Flags read (round robin).
    #[arg(long, default_value_t = 50)]
    pub flags: usize,
    /// The local cache's entry lifetime, seconds (the incident's 30 s).
    #[arg(long, default_value_t = 30)]
    pub ttl: u64,
    /// The deadline on a Redis read before the fallback, milliseconds.
    #[arg(long, default_value_t = 2_000)]
    pub deadline_ms: u64,
}

/// A read that took longer than this "waited".
const WAITED: Duration = Duration::from_millis(1);

/// The failed design's flag read: a local cache in front of Redis.
struct CachedRedis {
    conn: redis::aio::MultiplexedConnection,
    entries: Mutex<HashMap<String, (bool, Instant)>>,
    ttl: Duration,
    deadline: Duration,
}

impl CachedRedis {
    /// The flag's value and whether it is the fallback.
    async fn read(&self, key: &str, fallback: bool) -> (bool, bool) {
        if let Some((v, at)) = self.entries.lock().unwrap().get(key).copied()
            && at.elapsed() < self.ttl
        {
            return (v, false);
        }
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.deadline, conn.get::<_, Option<String>>(key)).await {
            Ok(Ok(Some(v))) => {
                let v = v == "true";
                self.entries.lock().unwrap().insert(key.to_owned(), (v, Instant::now()));
                (v, false)
            }
            // Missing, failed or too slow: the fallback, nothing cached.
            _ => (fallback, true),
        }
    }
}

/// Per phase of one design.
#[derive(Debug)]
struct Tally {
    reads: u64,
    waited: u64,
    fallbacks: u64,
    latency: Histogram<u64>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            reads: 0,
            waited: 0,
            fallbacks: 0,
            latency: Histogram::new_with_bounds(1, 120_000_000_000, 3).unwrap(),
        }
    }
}

/// Phases: before the blackhole, blackholed with the cache still valid,
/// blackholed after the entries loaded before it expired.
const PHASES: [&str; 3] =
    ["before the blackhole", "blackholed, cache entries still valid", "blackholed, cache entries expired"];

fn phase(at: Duration, blackhole_at: Duration, ttl: Duration) -> usize {
    if at < blackhole_at {
        0
    } else if at < ttl {
        1
    } else {
        2
    }
}

/// Runs both designs at once and prints the comparison.
pub async fn side_by_side(dir: &Path, args: Args) -> anyhow::Result<()> {
    // Redis, on a free port, behind its proxy.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut redis_server = tokio::process::Command::new(&args.redis_server)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!(
                "starting {}: {e} (run tests/side-by-side.sh, which installs it)",
                args.redis_server.display()
            )
        })?;
    let redis_addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let direct = redis::Client::open(format!("redis://{redis_addr}/"))?;
    let mut admin_conn = loop {
        match direct.get_multiplexed_async_connection().await {
            Ok(c) => break c,
            // Not listening yet (it prints nothing to wait on): retry.
            Err(_) if redis_server.try_wait()?.is_none() => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => anyhow::bail!("redis-server did not start: {e}"),
        }
    };
    let keys: Vec<String> = (0..args.flags).map(|i| format!("probe-{i}")).collect();
    for k in &keys {
        let () = admin_conn.set(k, "true").await?;
    }
    let redis_proxy = Proxy::start(redis_addr).await;
    let via_proxy = redis::Client::open(format!("redis://{}/", redis_proxy.addr))?;
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let cached = Arc::new(CachedRedis {
        conn: via_proxy.get_multiplexed_async_connection_with_config(&config).await?,
        entries: Mutex::default(),
        ttl: Duration::from_secs(args.ttl),
        deadline: Duration::from_millis(args.deadline_ms),
    });

    // flagstream: a relay with the same flags, an SDK behind its proxy.
    let relay = Relay::start(&dir.join("relay"), &[]).await;
    let mut admin = relay.admin().await;
    for k in &keys {
        put(&mut admin, "demo", bool_flag(k, true)).await?;
    }
    let sdk_proxy = Proxy::start(relay.grpc).await;
    let sdk = Client::builder().endpoints([sdk_proxy.url()]).sdk_key(relay.demo_key()).build()?;
    sdk.wait_ready(Duration::from_secs(20)).await;

    let started = Instant::now();
    let run_for = Duration::from_secs(args.seconds);
    let blackhole_at = Duration::from_secs(args.blackhole_at);
    let ttl = Duration::from_secs(args.ttl);
    let redis_tally: Arc<Mutex<Vec<Tally>>> = Arc::new(Mutex::new((0..3).map(|_| Tally::new()).collect()));
    let fs_tally: Arc<Mutex<Vec<Tally>>> = Arc::new(Mutex::new((0..3).map(|_| Tally::new()).collect()));
    // When each design first served the change made during the outage.
    let seen: Arc<Mutex<[Option<Duration>; 2]>> = Arc::default();
    let mut handlers = Vec::new();
    for h in 0..args.handlers {
        let (cached, r_keys, tally, r_seen) =
            (cached.clone(), keys.clone(), redis_tally.clone(), seen.clone());
        handlers.push(tokio::spawn(async move {
            let (keys, seen) = (r_keys, r_seen);
            let mut i = h;
            while started.elapsed() < run_for {
                let key = if i % 10 == 0 { "changed-in-outage" } else { &keys[i % keys.len()] };
                i += 1;
                let t = Instant::now();
                let (v, fallback) = cached.read(key, false).await;
                record(
                    &tally,
                    started.elapsed(),
                    blackhole_at,
                    ttl,
                    t.elapsed(),
                    fallback && key != "changed-in-outage",
                );
                if key == "changed-in-outage" && v {
                    seen.lock().unwrap()[0].get_or_insert(started.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(1)).await; // a request handler's pace
            }
        }));
        let (sdk, keys, tally, seen) = (sdk.clone(), keys.clone(), fs_tally.clone(), seen.clone());
        handlers.push(tokio::spawn(async move {
            let ctx = Context::new("user-1");
            let mut i = h;
            while started.elapsed() < run_for {
                let key = if i % 10 == 0 { "changed-in-outage" } else { &keys[i % keys.len()] };
                i += 1;
                let t = Instant::now();
                let detail = sdk.bool_detail(key, &ctx, false);
                let fallback = detail.error.is_some() && key != "changed-in-outage";
                record(&tally, started.elapsed(), blackhole_at, ttl, t.elapsed(), fallback);
                if key == "changed-in-outage" && detail.value {
                    seen.lock().unwrap()[1].get_or_insert(started.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(1)).await; // a request handler's pace
            }
        }));
    }
    tokio::time::sleep_until((started + blackhole_at).into()).await;
    redis_proxy.blackhole_existing();
    sdk_proxy.blackhole_existing();
    // The change, made where each design takes its writes (new connections
    // pass, like a promoted replica).
    let () = admin_conn.set("changed-in-outage", "true").await?;
    put(&mut admin, "demo", bool_flag("changed-in-outage", true)).await?;
    let changed_at = started.elapsed();
    for h in handlers {
        h.await?;
    }

    println!(
        "Run: {} s, blackhole of every established connection at {} s, {} handlers per design reading {} flags (every 10th read: a flag changed during the outage), cache TTL {} s, Redis deadline {} ms.",
        args.seconds, args.blackhole_at, args.handlers, args.flags, args.ttl, args.deadline_ms
    );
    println!();
    println!("| design | phase | reads | waited > 1 ms | returned the fallback | latency p50 / p99 / max |");
    println!("|---|---|---|---|---|---|");
    for (name, tally) in [("Redis + 30 s cache", &redis_tally), ("flagstream SDK", &fs_tally)] {
        for (p, t) in tally.lock().unwrap().iter().enumerate() {
            let share = |n: u64| if t.reads == 0 { 0.0 } else { 100.0 * n as f64 / t.reads as f64 };
            println!(
                "| {name} | {} | {} | {} ({:.1} %) | {} ({:.1} %) | {} / {} / {} |",
                PHASES[p],
                t.reads,
                t.waited,
                share(t.waited),
                t.fallbacks,
                share(t.fallbacks),
                ns(t.latency.value_at_quantile(0.5)),
                ns(t.latency.value_at_quantile(0.99)),
                ns(t.latency.max())
            );
        }
    }
    let seen = *seen.lock().unwrap();
    println!();
    let when = |s: Option<Duration>| match s {
        Some(at) => format!("{} after the write", ms(at.saturating_sub(changed_at))),
        None => "never, within the run".to_owned(),
    };
    println!(
        "A flag changed during the outage (at {:.1} s): Redis design served it {}; flagstream {}.",
        changed_at.as_secs_f64(),
        when(seen[0]),
        when(seen[1])
    );
    println!("flagstream SDK counters: {:?}", sdk.stats());
    redis_server.kill().await?;
    Ok(())
}

fn record(
    tally: &Mutex<Vec<Tally>>,
    at: Duration,
    blackhole_at: Duration,
    ttl: Duration,
    took: Duration,
    fallback: bool,
) {
    let mut t = tally.lock().unwrap();
    let t = &mut t[phase(at, blackhole_at, ttl)];
    t.reads += 1;
    t.waited += u64::from(took > WAITED);
    t.fallbacks += u64::from(fallback);
    t.latency.saturating_record((took.as_nanos() as u64).max(1));
}

fn ns(v: u64) -> String {
    if v >= 1_000_000 {
        format!("{:.1} ms", v as f64 / 1e6)
    } else if v >= 1_000 {
        format!("{:.1} µs", v as f64 / 1e3)
    } else {
        format!("{v} ns")
    }
}
