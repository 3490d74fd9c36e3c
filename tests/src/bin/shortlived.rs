//! A short-lived process using flags, as a cron job, CLI or serverless
//! handler would: connects, evaluates one flag for `--seconds`, closes its
//! client (unless `--no-close`) and exits, printing `evaluations N`.
//!
//! ```sh
//! cargo run -p flagstream-tests --bin shortlived -- --endpoint http://127.0.0.1:7070 \
//!     --sdk-key "$(cat flagstream-data/demo-sdk-key)" --flag new-checkout --seconds 2
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use flagstream::{Client, Context};

/// Options.
#[derive(Debug, Parser)]
struct Args {
    /// Relay URL.
    #[arg(long)]
    endpoint: String,
    /// SDK key.
    #[arg(long)]
    sdk_key: String,
    /// The bool flag to evaluate.
    #[arg(long)]
    flag: String,
    /// How long to evaluate, seconds.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Exit at once without closing the client (`std::process::exit`).
    #[arg(long)]
    no_close: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = Client::builder().endpoints([args.endpoint]).sdk_key(args.sdk_key).build()?;
    anyhow::ensure!(client.wait_ready(Duration::from_secs(20)).await.has_data(), "no data from the relay");
    let ctx = Context::new("user-1");
    let until = Instant::now() + Duration::from_secs_f64(args.seconds);
    let mut evaluations = 0u64;
    while Instant::now() < until {
        std::hint::black_box(client.bool(&args.flag, &ctx, false));
        evaluations += 1;
        // A job doing other work between evaluations.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if args.no_close {
        // Ends at once, as a process killed or exiting without cleanup
        // would: nothing runs after this.
        println!("evaluations {evaluations}");
        std::process::exit(0);
    }
    let confirmed = client.close(Duration::from_secs(2)).await;
    println!("closed confirmed={confirmed}");
    println!("evaluations {evaluations}");
    Ok(())
}
