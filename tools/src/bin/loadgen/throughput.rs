//! `--throughput-writers` and `--throughput-flags`: admin write
//! throughput and commit time, sled and PostgreSQL in one run.

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
