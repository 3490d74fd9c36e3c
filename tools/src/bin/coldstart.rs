//! SDK cold start from the cache and memory for N flags: fills a relay with
//! N flags, lets a client cache them, stops the relay, then builds clients
//! from the cache alone (every relay down) and reports time to serving
//! flags, and the process RSS a client with N flags adds.
//!
//! ```sh
//! cargo build --release -p flagstream-tests --bin relay   # the relay it starts
//! cargo run --release -p flagstream-tools --bin coldstart -- --flags 10000
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use flagstream::{Client, Context};
use flagstream_proto::v1 as pb;
use flagstream_tests::relay::{Relay, bool_flag};

/// Options.
#[derive(Debug, Parser)]
struct Args {
    /// Flags in the environment.
    #[arg(long, default_value_t = 10_000)]
    flags: usize,
    /// Cold starts to time.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Internal: measure one client's memory in this fresh process, from
    /// the cache in this directory (`--key` is its SDK key).
    #[arg(long, hide = true)]
    rss_child: Option<std::path::PathBuf>,
    /// Internal: the SDK key for `--rss-child`.
    #[arg(long, hide = true, default_value = "")]
    key: String,
}

/// In a fresh process (no allocator state from filling the cache): RSS
/// before `build()`, at ready, and after the warm-up compiled every flag.
async fn rss_child(cache: &std::path::Path, key: &str) -> anyhow::Result<()> {
    let before = rss_kib();
    let c = Client::builder().endpoints(["http://127.0.0.1:9"]).sdk_key(key).cache_dir(cache).build()?;
    anyhow::ensure!(c.status().has_data(), "cache not served: {:?}", c.status());
    let ready = rss_kib();
    tokio::time::sleep(Duration::from_millis(1_000)).await; // the warm-up
    let warm = rss_kib();
    println!("{} {}", ready.saturating_sub(before), warm.saturating_sub(before));
    Ok(())
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(cache) = &args.rss_child {
        return rss_child(cache, &args.key).await;
    }
    let dir = tempfile::tempdir()?;
    let cache = dir.path().join("cache");
    let mut relay = Relay::start(dir.path(), &["--demo", "false"]).await;
    let key = relay.create_env("cold").await;
    let mut admin = relay.admin().await;
    for chunk in (0..args.flags).collect::<Vec<_>>().chunks(5_000) {
        let ops = chunk
            .iter()
            .map(|i| {
                let mut f = bool_flag(&format!("flag-{i:05}"), i % 2 == 0);
                f.rules.push(pb::Rule {
                    id: "r".into(),
                    clauses: vec![pb::Clause {
                        attribute: "country".into(),
                        op: pb::Operator::In as i32,
                        values: vec![pb::Scalar { value: Some(pb::scalar::Value::StringValue("US".into())) }],
                        negate: false,
                        ..Default::default()
                    }],
                    serve: Some(pb::Serve { kind: Some(pb::serve::Kind::Variation(1)) }),
                });
                pb::BatchOp {
                    op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp {
                        flag: Some(f),
                        expected_version: None,
                    })),
                }
            })
            .collect();
        admin
            .batch(pb::BatchRequest {
                environment: "cold".into(),
                ops,
                expected_revision: None,
                comment: String::new(),
            })
            .await?;
    }
    {
        let c = Client::builder().endpoints([relay.url()]).sdk_key(key.clone()).cache_dir(&cache).build()?;
        c.wait_ready(Duration::from_secs(60)).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while c.stats().cache_writes == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // Where a cold start's time goes, phase by phase, on the same flags.
    let listed = admin
        .list_flags(pb::ListFlagsRequest { environment: "cold".into(), page_size: 0, ..Default::default() })
        .await?
        .into_inner();
    let mut bytes: Vec<Vec<u8>> = listed.flags.iter().map(prost::Message::encode_to_vec).collect();
    let mut token = listed.next_page_token;
    while !token.is_empty() {
        let page = admin
            .list_flags(pb::ListFlagsRequest {
                environment: "cold".into(),
                page_token: token,
                ..Default::default()
            })
            .await?
            .into_inner();
        bytes.extend(page.flags.iter().map(prost::Message::encode_to_vec));
        token = page.next_page_token;
    }
    let t = Instant::now();
    let decoded: Vec<pb::Flag> =
        bytes.iter().map(|b| <pb::Flag as prost::Message>::decode(b.as_slice())).collect::<Result<_, _>>()?;
    let t_decode = t.elapsed();
    let t = Instant::now();
    let hashes: u64 =
        bytes.iter().map(|b| flagstream::checksum::item_hash(1, "k", b)).fold(0, u64::wrapping_add);
    let t_hash = t.elapsed();
    let t = Instant::now();
    let models: Vec<flagstream::Flag> =
        decoded.iter().map(flagstream::wire::flag_from_proto).collect::<Result<_, _>>()?;
    let t_model = t.elapsed();
    let t = Instant::now();
    let snap = flagstream::Snapshot::compile_owned(
        flagstream::FlagSet { flags: models, segments: vec![] },
        &flagstream::Limits::default(),
    );
    let t_compile = t.elapsed();
    println!(
        "phases ({} flags)      decode {t_decode:.2?}, checksum {t_hash:.2?} ({hashes:x}), to model {t_model:.2?}, compile {t_compile:.2?} ({} compiled)",
        bytes.len(),
        snap.len()
    );
    relay.kill9();
    relay.wait(Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // How much of a cold start is opening sled itself.
    let mut opens = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let db = sled::Config::new().path(&cache).open()?;
        // The header and its parts (the SDK's cache format 2): every value.
        let mut blob = db.get("snapshot")?.map_or(0, |v| v.len());
        for part in db.scan_prefix("part/").values() {
            blob += part?.len();
        }
        opens.push((t.elapsed(), blob));
        drop(db);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    opens.sort();
    println!("sled open + read cache p50 {:.2?} ({} KiB header and parts)", opens[2].0, opens[2].1 / 1024);
    let ctx = Context::new("u").with("country", "US");
    let mut times = Vec::new();
    for _ in 0..args.runs {
        let t = Instant::now();
        let c = Client::builder()
            .endpoints(["http://127.0.0.1:9"])
            .sdk_key(key.clone())
            .cache_dir(&cache)
            .build()?;
        let served = c.status().has_data() && !c.bool("flag-00000", &ctx, true);
        let took = t.elapsed();
        anyhow::ensure!(served, "cache not served: {:?}", c.status());
        times.push(took);
        drop(c);
        tokio::time::sleep(Duration::from_millis(100)).await; // let sled release its lock
    }
    times.sort();
    println!("flags                  {}", args.flags);
    println!(
        "cold start from cache  p50 {:.2?}, max {:.2?} over {} runs (build() until flags serve)",
        times[times.len() / 2],
        times[times.len() - 1],
        times.len()
    );
    // Memory, in a fresh process so that nothing allocated (and freed) while
    // filling the cache hides a client's own growth.
    let out = std::process::Command::new(std::env::current_exe()?)
        .arg("--rss-child")
        .arg(&cache)
        .args(["--key", &key])
        .output()?;
    anyhow::ensure!(out.status.success(), "rss child failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout)?;
    let mut kib = text.split_whitespace().map(str::parse::<u64>);
    let (ready, warm) = (kib.next().transpose()?.unwrap_or(0), kib.next().transpose()?.unwrap_or(0));
    println!("RSS added by a client  {ready} KiB at ready (raw flags indexed, sled), fresh process");
    println!("                       {warm} KiB after the warm-up compiled every flag");
    Ok(())
}
