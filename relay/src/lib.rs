//! flagstream relay: the server that holds the authoritative flags (sled on
//! the primary), accepts edits over the Admin API, and keeps every
//! subscriber current over the Subscribe stream.
//!
//! Data flow: Admin request → [`admin`] → [`store`] (validate, one sled
//! transaction, flush) → new in-memory `EnvState` → [`subscribe`] streams
//! pull deltas/snapshots from it (encoded once, [`encoded`]) → acks →
//! [`hub`] propagation stats. [`server`] wires it together; [`config`] reads
//! the options.

mod access;
mod admin;
mod cluster;
pub mod config;
mod error;
#[doc(hidden)]
pub mod fuzz;
mod ofrep;
pub mod ops;
mod server;
mod store;
mod stream;
mod usage;

pub use ops::{allocator, metrics};
pub use server::{LIFO_SLOT, runtime, scrape};

/// Runs the `flagstream-relay` command on the relay's runtime.
pub fn main_blocking() {
    allocator::tune();
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(71); // EX_OSERR
        }
    };
    runtime.block_on(main_entry());
}

/// The `flagstream-relay` command: parse the configuration (exit 64 with
/// one line when it is bad), set up logging, run until SIGTERM.
pub async fn main_entry() {
    use clap::Parser;
    let cli = match config::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            let msg = e.to_string();
            let first = msg.lines().next().unwrap_or("invalid arguments").trim_start_matches("error: ");
            eprintln!("flagstream-relay: bad configuration: {first} (see --help)");
            std::process::exit(config::EXIT_CONFIG);
        }
    };
    let resolve = |options: config::Options| match options.resolve() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("flagstream-relay: bad configuration: {e}");
            std::process::exit(config::EXIT_CONFIG);
        }
    };
    let outcome = match cli.action() {
        config::Action::Serve(options, demo) => {
            let cfg = resolve(options);
            let telemetry = match ops::telemetry::init(cfg.log.json, cfg.log.otlp_endpoint.as_deref()) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("flagstream-relay: bad configuration: {e:#}");
                    std::process::exit(config::EXIT_CONFIG);
                }
            };
            match allocator::applied() {
                Some(allocator::Tuning::Set { arenas, threshold }) => {
                    tracing::info!(arenas, threshold, "allocator: glibc arenas and mmap/trim threshold set")
                }
                Some(allocator::Tuning::Operator) => {
                    tracing::info!("allocator: settings from the environment (MALLOC_*, GLIBC_TUNABLES) kept")
                }
                Some(allocator::Tuning::Refused(params)) => {
                    tracing::warn!(
                        ?params,
                        "allocator: glibc refused these settings; its defaults apply to them"
                    )
                }
                Some(allocator::Tuning::Unsupported) | None => {}
            }
            let outcome = server::run(cfg, demo).await;
            // The last spans out before the process ends (blocking: off the
            // async workers).
            if let Err(e) = tokio::task::spawn_blocking(move || telemetry.shutdown()).await {
                eprintln!("flagstream-relay: flushing spans failed: {e}");
            }
            outcome
        }
        config::Action::Check(options) => {
            let cfg = resolve(options);
            let role = match (&cfg.cluster.upstream, &cfg.store.url) {
                (Some(_), _) => "replica",
                (None, config::StoreUrl::Postgres(_)) => "shared (PostgreSQL store)",
                (None, config::StoreUrl::Sled) => "primary",
            };
            println!("configuration ok ({role}, grpc {}, data {})", cfg.listen.grpc, cfg.data_dir.display());
            Ok(())
        }
        config::Action::Promote(args) => cluster::promote::promote(&args.data_dir).await,
        config::Action::Probe(args) => {
            let serving = server::probe::probe(&args).await;
            std::process::exit(if serving { 0 } else { 1 });
        }
    };
    if let Err(e) = outcome {
        eprintln!("flagstream-relay: {e:#}");
        std::process::exit(1);
    }
}
