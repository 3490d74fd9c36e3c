//! `flagctl watch`: follows an environment's changes live through the SDK
//! client (subscribing like an SDK, with an SDK key).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::conn::{ConnArgs, profile, read_pem};
use crate::failure::{CmdResult, Failure, exit};

/// `watch` options.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// SDK key of the environment (watch subscribes like an SDK). Prefer
    /// --sdk-key-file or FLAGSTREAM_SDK_KEY: a value given here is visible
    /// to other users in the process list.
    #[arg(
        long,
        env = "FLAGSTREAM_SDK_KEY",
        hide_env_values = true,
        required_unless_present = "sdk_key_file"
    )]
    pub sdk_key: Option<flagstream::Secret>,
    /// File holding the SDK key (e.g. flagstream-data/demo-sdk-key); used
    /// instead of --sdk-key or FLAGSTREAM_SDK_KEY when given.
    #[arg(long, env = "FLAGSTREAM_SDK_KEY_FILE")]
    pub sdk_key_file: Option<PathBuf>,
    /// Stop after this many changes (default: run until interrupted).
    #[arg(long)]
    pub count: Option<u64>,
}

pub(crate) async fn watch(args: &ConnArgs, w: WatchArgs) -> CmdResult {
    let p = profile(args)?;
    let relay = args.relay.clone().or(p.relay).unwrap_or_else(|| "http://127.0.0.1:7070".into());
    let key = match (&w.sdk_key_file, w.sdk_key) {
        (Some(file), _) => {
            let key = std::fs::read_to_string(file)
                .map_err(|e| Failure::new(exit::USAGE, format!("--sdk-key-file {}: {e}", file.display())))?;
            if key.trim().is_empty() {
                let msg = format!("--sdk-key-file {}: the file is empty", file.display());
                return Err(Failure::new(exit::USAGE, msg));
            }
            flagstream::Secret::new(key.trim())
        }
        (None, Some(key)) => key,
        (None, None) => return Err(Failure::new(exit::USAGE, "watch needs --sdk-key-file or --sdk-key")),
    };
    let mut builder = flagstream::Client::builder().endpoints([relay.clone()]).sdk_key(key.expose());
    if let Some(ca) = args.ca_cert.as_deref().or(p.ca_cert.as_deref()) {
        builder = builder.tls_ca_pem(read_pem("--ca-cert", ca)?);
    }
    match (
        args.client_cert.as_deref().or(p.client_cert.as_deref()),
        args.client_key.as_deref().or(p.client_key.as_deref()),
    ) {
        (Some(cert), Some(key)) => {
            builder =
                builder.tls_identity_pem(read_pem("--client-cert", cert)?, read_pem("--client-key", key)?);
        }
        (None, None) => {}
        _ => return Err(Failure::new(exit::USAGE, "--client-cert and --client-key: set both or neither")),
    }
    let client = builder.build().map_err(|e| Failure::new(exit::USAGE, e.to_string()))?;
    // Listening before the first data: no change between the first
    // snapshot and the loop below is missed (what the first line states is
    // skipped below).
    let mut changes = client.changes();
    let status = client.wait_ready(args.connect_timeout.max(Duration::from_secs(1))).await;
    if !status.has_data() {
        return Err(Failure::new(exit::ERROR, format!("cannot subscribe to {relay}: {status:?}")));
    }
    let start = client.snapshot();
    println!("watching {relay} at revision {} ({} flags)", start.revision(), start.len());
    let mut seen = 0;
    while w.count.is_none_or(|c| seen < c) {
        match changes.recv().await {
            Ok(c) if c.revision <= start.revision() => {}
            Ok(c) => {
                seen += 1;
                let snap = client.snapshot();
                for key in c.flags.iter() {
                    match snap.flag(key) {
                        Some(f) => println!(
                            "revision {}: {key} version {} {}",
                            c.revision,
                            f.version,
                            if f.on { "on" } else { "off" }
                        ),
                        None => println!("revision {}: {key} deleted", c.revision),
                    }
                }
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => println!("(skipped {n} revisions)"),
            Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
        }
    }
    Ok(())
}
