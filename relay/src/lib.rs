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
pub mod allocator;
mod auth;
mod catalog;
pub mod config;
mod demo;
mod encoded;
mod error;
mod feed;
#[doc(hidden)]
pub mod fuzz;
mod grpc;
mod hub;
mod inbound;
mod limit;
pub mod metrics;
mod node;
mod permission;
mod probe;
mod process;
mod promote;
mod propagation;
mod quota;
mod refusal;
mod replica;
mod replication;
pub mod scrape;
mod secret;
mod server;
mod status_page;
mod store;
mod subscribe;
mod transport;
mod tree;
mod usage;

/// Installs the tracing subscriber (`RUST_LOG` filters; default `info`).
/// Colours only on a terminal: a log file or journal gets plain text.
pub fn init_tracing(json: bool) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

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

/// Whether this build's runtime runs a woken task next (tokio's "LIFO
/// slot"). Built with `--cfg tokio_unstable` (the workspace's
/// `.cargo/config.toml` sets it) the relay turns it off.
pub const LIFO_SLOT: bool = !cfg!(tokio_unstable);

/// The relay's multi-threaded runtime.
///
/// Without the LIFO slot, a connection task woken by a stream that queued
/// a message runs after the other woken streams rather than right away, so
/// one write carries many streams' messages: for a revision fanned out to
/// 10,000 subscribers, hundreds of socket writes instead of one per
/// subscriber (docs/BENCHMARKS.md).
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    #[cfg(tokio_unstable)]
    builder.disable_lifo_slot();
    builder.build()
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
            init_tracing(cfg.log_json);
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
            server::run(cfg, demo).await
        }
        config::Action::Check(options) => {
            let cfg = resolve(options);
            let role = match (&cfg.upstream, &cfg.store) {
                (Some(_), _) => "replica",
                (None, config::StoreUrl::Postgres(_)) => "shared (PostgreSQL store)",
                (None, config::StoreUrl::Sled) => "primary",
            };
            println!("configuration ok ({role}, grpc {}, data {})", cfg.listen, cfg.data_dir.display());
            Ok(())
        }
        config::Action::Promote(args) => promote::promote(&args.data_dir).await,
        config::Action::Probe(args) => {
            let serving = probe::probe(&args).await;
            std::process::exit(if serving { 0 } else { 1 });
        }
    };
    if let Err(e) = outcome {
        eprintln!("flagstream-relay: {e:#}");
        std::process::exit(1);
    }
}
