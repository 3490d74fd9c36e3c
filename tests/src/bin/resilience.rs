//! The full-size runs of docs/RESILIENCE.md: each subcommand runs one
//! scenario of `flagstream_tests::fault` (the same code the CI-size tests
//! run) at the size the document reports, and prints its figures as
//! Markdown. Real relay processes on 127.0.0.1, real SDK clients, the
//! fault proxy; nothing leaves the machine.
//!
//! ```sh
//! cargo build --release -p flagstream-tests --bins   # the tool starts the `relay` next to it
//! target/release/resilience stall --runs 5
//! target/release/resilience restart --sdks 1000
//! target/release/resilience storm --streams 10000
//! target/release/resilience slow-reader
//! target/release/resilience large --flags 50000
//! target/release/resilience sled-floor --flags 20000 [--replica]
//! target/release/resilience ping-cost
//! tests/side-by-side.sh        # installs redis-server, then runs `side-by-side`
//! ```

use std::time::Duration;

use clap::{Parser, Subcommand};
use flagstream_tests::fault::{self, ms};

#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Scenario 1: a blackholed relay, then a blackholed replica uplink.
    Stall {
        /// Runs per hop.
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// Scenario 2: relay killed and restarted; replica killed.
    Restart {
        /// SDK clients.
        #[arg(long, default_value_t = 1_000)]
        sdks: usize,
    },
    /// Scenario 3: reconnect storm.
    Storm {
        /// SDK streams.
        #[arg(long, default_value_t = 10_000)]
        streams: usize,
    },
    /// Scenario 4: a slow reader among fast ones.
    SlowReader {
        /// Fast SDK clients.
        #[arg(long, default_value_t = 100)]
        fast: usize,
        /// The slow reader's rate, bytes/s.
        #[arg(long, default_value_t = 1024)]
        rate: u32,
        /// Least number of writes.
        #[arg(long, default_value_t = 200)]
        writes: usize,
        /// Milliseconds between writes.
        #[arg(long, default_value_t = 50)]
        interval_ms: u64,
        /// Description bytes of each written flag.
        #[arg(long, default_value_t = 60_000)]
        flag_bytes: usize,
        /// Seconds of writes at most (if the slow stream is not cut first).
        #[arg(long, default_value_t = 120)]
        seconds: u64,
        /// Extra relay arguments (e.g. `--send-deadline=5s`).
        #[arg(long, allow_hyphen_values = true)]
        relay_arg: Vec<String>,
    },
    /// Scenario 5: a large flag set.
    Large {
        /// Flags.
        #[arg(long, default_value_t = 50_000)]
        flags: usize,
        /// Description bytes per flag.
        #[arg(long, default_value_t = 1_024)]
        bytes: usize,
        /// A command each SDK run is started under, its words split at
        /// white space (e.g. `heaptrack -o /tmp/sdk` for a heap profile).
        #[arg(long, env = "FLAGSTREAM_SDK_WRAP", default_value = "")]
        sdk_wrap: String,
    },
    /// Scenario 5's floor: sled alone, written as a relay fills an
    /// environment (batches of 1,000 flags with their audit records), in
    /// this process; its memory.
    SledFloor {
        /// Flags.
        #[arg(long, default_value_t = 20_000)]
        flags: usize,
        /// Description bytes per flag.
        #[arg(long, default_value_t = 1_024)]
        bytes: usize,
        /// sled's page cache, bytes (the relay's default).
        #[arg(long, default_value_t = 16 << 20)]
        cache_bytes: u64,
        /// Write as a replica taking the environment whole (a new
        /// generation in batches, no audit records) instead.
        #[arg(long)]
        replica: bool,
    },
    /// (Run by `large`.) One SDK client in this process: syncs from `url`
    /// (or, with `--cold`, starts from its cache), then prints its figures.
    #[command(hide = true)]
    SdkPeak {
        /// The relay.
        #[arg(long)]
        url: String,
        /// The SDK key.
        #[arg(long, env = "FLAGSTREAM_SDK_KEY", hide_env_values = true)]
        key: String,
        /// The client's cache directory.
        #[arg(long)]
        cache: std::path::PathBuf,
        /// The relay is down: serve from the cache.
        #[arg(long)]
        cold: bool,
    },
    /// The relay CPU cost of the SDK's default keepalive pings at scale.
    PingCost {
        /// HTTP/2 connections.
        #[arg(long, default_value_t = 2_000)]
        connections: usize,
        /// Pings per second in all (default: 50,000 idle streams × 4 pings
        /// per 15 s heartbeat interval).
        #[arg(long, default_value_t = 13_333.0)]
        rate: f64,
        /// Seconds measured idle, then pinging.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
    },
    /// Scenario 9: flags in Redis behind a 30 s TTL cache versus
    /// flagstream, under the same blackhole.
    SideBySide(fault::redis::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let dir = tempfile::tempdir()?;
        let guard = Duration::from_secs(300);
        match cli.cmd {
            Cmd::Stall { runs } => stall(dir.path(), runs, guard).await,
            Cmd::Restart { sdks } => restart(dir.path(), sdks, guard).await,
            Cmd::Storm { streams } => storm(dir.path(), streams, guard).await,
            Cmd::SlowReader { fast, rate, writes, interval_ms, flag_bytes, seconds, relay_arg } => {
                let interval = Duration::from_millis(interval_ms);
                let max_time = Duration::from_secs(seconds);
                let load = fault::slow::Load { fast, writes, interval, flag_bytes, rate, max_time };
                let args: Vec<&str> = relay_arg.iter().map(String::as_str).collect();
                let r = fault::slow::run(dir.path(), load, &args, max_time + guard).await;
                println!("| slow reader | writes | cut off after | relay RSS before → peak | fast SDKs commit → visible p50 / p99 / max |");
                println!("|---|---|---|---|---|");
                println!(
                    "| {} B/s, read {} B | {} × {} B every {interval_ms} ms | {} ({} stream) | {} → {} MiB | {} / {} / {} ({fast} SDKs) |",
                    r.rate,
                    r.slow_bytes,
                    r.writes,
                    r.flag_bytes,
                    r.cut_after.map_or("not cut".to_owned(), |d| format!("{:.1} s", d.as_secs_f64())),
                    r.cut_off,
                    r.relay_rss_before_kib / 1024,
                    r.relay_peak_rss_kib / 1024,
                    ms(r.fast_p50),
                    ms(r.fast_p99),
                    ms(r.fast_max)
                );
                println!();
                println!("| writing for | relay RSS |");
                println!("|---|---|");
                for (at, kib) in &r.rss_curve {
                    println!("| {:.0} s | {} MiB |", at.as_secs_f64(), kib / 1024);
                }
            }
            Cmd::Large { flags, bytes, sdk_wrap } => {
                let bin = std::env::current_exe()?;
                let sdk = fault::large::SdkBin { path: &bin, wrap: &sdk_wrap };
                let r = fault::large::run(dir.path(), flags, bytes, &sdk, guard).await;
                let snapshot_mib = r.snapshot_bytes as f64 / (1 << 20) as f64;
                let times = |kib: u64| kib as f64 / 1024.0 / snapshot_mib;
                let [first, cold] = r.sdk;
                println!("| flags | snapshot | chunks | relay peak RSS | relay restarted: peak RSS | replica: peak RSS | SDK first sync | SDK first-sync process: serving / peak | SDK cold start (cache) | SDK cold-start process: serving / peak |");
                println!("|---|---|---|---|---|---|---|---|---|---|");
                println!(
                    "| {} | {snapshot_mib:.1} MiB | {} | {} MiB | {} MiB | {} MiB | {} | {} / {} MiB (from {} MiB) | {} ({} flags) | {} / {} MiB (from {} MiB) |",
                    r.flags,
                    r.chunks,
                    r.relay_peak_rss_kib / 1024,
                    r.relay_restart_peak_rss_kib / 1024,
                    r.replica_peak_rss_kib / 1024,
                    ms(first.elapsed),
                    first.held_kib / 1024,
                    first.peak_kib / 1024,
                    first.start_kib / 1024,
                    ms(cold.elapsed),
                    cold.flags,
                    cold.held_kib / 1024,
                    cold.peak_kib / 1024,
                    cold.start_kib / 1024,
                );
                println!();
                println!(
                    "relay peak {} MiB = {:.1}× the snapshot, restarted {} MiB = {:.1}×, replica {} MiB = {:.1}×; SDK peak {} MiB = {:.1}× (first sync), {} MiB = {:.1}× (cold start)",
                    r.relay_peak_rss_kib / 1024,
                    times(r.relay_peak_rss_kib),
                    r.relay_restart_peak_rss_kib / 1024,
                    times(r.relay_restart_peak_rss_kib),
                    r.replica_peak_rss_kib / 1024,
                    times(r.replica_peak_rss_kib),
                    first.peak_kib / 1024,
                    times(first.peak_kib),
                    cold.peak_kib / 1024,
                    times(cold.peak_kib),
                );
            }
            Cmd::SledFloor { flags, bytes, cache_bytes, replica } => {
                let writes =
                    if replica { fault::large::FloorWrites::Replica } else { fault::large::FloorWrites::Fill };
                let r = fault::large::sled_floor(dir.path(), flags, bytes, cache_bytes, writes);
                let mib = |kib: u64| kib as f64 / 1024.0;
                println!("| flags | items written | anonymous memory before → peak (growth) | peak RSS | code (file-backed) |");
                println!("|---|---|---|---|---|");
                println!(
                    "| {} | {:.1} MiB | {:.1} → {:.1} MiB ({:.1} MiB = {:.2}× the items) | {:.1} MiB | {:.1} MiB |",
                    r.flags,
                    mib(r.data_kib),
                    mib(r.start_anon_kib),
                    mib(r.peak_anon_kib),
                    mib(r.peak_anon_kib - r.start_anon_kib),
                    (r.peak_anon_kib - r.start_anon_kib) as f64 / r.data_kib as f64,
                    mib(r.peak_kib),
                    mib(r.file_kib),
                );
            }
            Cmd::SdkPeak { url, key, cache, cold } => fault::large::sdk_peak(&url, &key, &cache, cold, guard).await,
            Cmd::PingCost { connections, rate, seconds } => {
                let r = fault::ping::run(dir.path(), connections, rate, Duration::from_secs(seconds)).await;
                println!("| connections | pings answered/s | relay CPU idle | relay CPU pinging | cost |");
                println!("|---|---|---|---|---|");
                println!(
                    "| {} | {:.0} | {:.1} % | {:.1} % | {:.1} % of a core per {:.0} pings/s |",
                    r.connections,
                    r.pings_per_sec,
                    r.idle_cpu,
                    r.pinging_cpu,
                    r.pinging_cpu - r.idle_cpu,
                    r.pings_per_sec
                );
            }
            Cmd::SideBySide(args) => fault::redis::side_by_side(dir.path(), args).await?,
        }
        Ok(())
    })
}

async fn stall(dir: &std::path::Path, runs: usize, guard: Duration) {
    use fault::stall::Hop;
    println!(
        "| stalled hop | run | recovered (blackhole → SDK has the next write) | stalls counted | evaluations | defaults returned | eval p50 / p99 / p99.99 / max |"
    );
    println!("|---|---|---|---|---|---|---|");
    for hop in [Hop::Relay, Hop::Replica] {
        for i in 0..runs {
            let sub = dir.join(format!("{hop:?}-{i}"));
            let r = fault::stall::run(&sub, hop, guard).await;
            println!(
                "| {hop:?} | {} | {} | {} | {} | {} | {} / {} / {} / {} ns |",
                i + 1,
                ms(r.recovered),
                r.stalls,
                r.eval.evaluations,
                r.eval.defaults,
                r.eval.p50_ns,
                r.eval.p99_ns,
                r.eval.p9999_ns,
                r.eval.max_ns
            );
        }
    }
}

async fn restart(dir: &std::path::Path, sdks: usize, guard: Duration) {
    println!(
        "| event | SDKs | resumed (kill → every SDK has the next write) | snapshots sent | SDK snapshots / deltas applied |"
    );
    println!("|---|---|---|---|---|");
    let r = fault::restart::relay_restart(&dir.join("restart"), sdks, guard).await;
    println!(
        "| relay `kill -9` + restart | {} | {} | {} | {} / {} |",
        r.sdks,
        ms(r.resumed),
        r.snapshots_sent,
        r.sdk_snapshots,
        r.sdk_deltas
    );
    let r = fault::restart::replica_kill(&dir.join("replica"), sdks, guard).await;
    println!(
        "| replica `kill -9` (SDKs move to the other) | {} | {} | {} | {} / {} |",
        r.sdks,
        ms(r.resumed),
        r.snapshots_sent,
        r.sdk_snapshots,
        r.sdk_deltas
    );
}

async fn storm(dir: &std::path::Path, streams: usize, guard: Duration) {
    // Every SDK connects from 127.0.0.1.
    let caps = ["--max-connections", "1000000", "--max-connections-per-address", "1000000"];
    let r = fault::storm::run(dir, streams, &caps, guard).await;
    println!(
        "| streams | all back after | refused by admission control | snapshots sent | relay peak RSS | relay alive |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| {} | {:.1} s | {} | {} | {} MiB | {} |",
        r.streams,
        r.back.as_secs_f64(),
        r.refused,
        r.snapshots_sent,
        r.relay_peak_rss_kib / 1024,
        r.relay_alive
    );
    println!();
    println!("| since the kill | streams connected | refused so far |");
    println!("|---|---|---|");
    let mut next = Duration::ZERO;
    for p in &r.curve {
        if p.at >= next {
            println!("| {:.1} s | {} | {} |", p.at.as_secs_f64(), p.connected, p.refused);
            next = p.at + Duration::from_millis(999);
        }
    }
    if let Some(p) = r.curve.last() {
        println!("| {:.1} s | {} | {} |", p.at.as_secs_f64(), p.connected, p.refused);
    }
}
