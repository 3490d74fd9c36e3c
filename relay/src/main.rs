//! `flagstream-relay`: parse the configuration, set up logging, run.

use clap::Parser;
use flagstream_relay::config::{Cli, EXIT_CONFIG};

#[tokio::main]
async fn main() {
    let cfg = match Cli::parse().options().resolve() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("flagstream-relay: bad configuration: {e}");
            std::process::exit(EXIT_CONFIG);
        }
    };
    flagstream_relay::init_tracing(cfg.log_json);
    if let Err(e) = flagstream_relay::server::run(cfg).await {
        eprintln!("flagstream-relay: {e:#}");
        std::process::exit(1);
    }
}
