//! Connects to a relay and prints flag values and status as they change.
//!
//! ```sh
//! cargo run -p flagstream --example watch -- http://127.0.0.1:7070 "$(cat flagstream-data/demo-sdk-key)"
//! ```
//! Then change a flag (flagctl, or the relay's Admin API) and watch it move.
//! Ctrl-C (or SIGTERM) closes the client, which sends the relay the usage
//! counted since its last summary before the process ends.

use std::collections::HashMap;
use std::time::Duration;

use flagstream::{Client, Context, Flag};
use serde_json::{Value as Json, json};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let endpoint = args.next().unwrap_or_else(|| "http://127.0.0.1:7070".into());
    let key = match args.next() {
        Some(k) => k,
        None => std::fs::read_to_string("flagstream-data/demo-sdk-key")?.trim().to_owned(),
    };
    let client = Client::builder()
        // Several relays, comma-separated: the SDK fails over between them.
        .endpoints(endpoint.split(',').map(str::to_owned))
        .sdk_key(key)
        .cache_dir(std::env::temp_dir().join("flagstream-watch-cache"))
        .build()?;
    let status = client.wait_ready(Duration::from_secs(5)).await;
    println!("status: {status:?}");
    let ctx = Context::new("user-42").with("country", "US").with("plan", "enterprise");
    let mut status_rx = client.status_watch();
    let mut changes = client.changes();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let defaults = defaults();
    print_flags(&client, &ctx, &defaults);
    loop {
        tokio::select! {
            change = changes.recv() => match change {
                Ok(c) => {
                    println!("revision {} changed {:?}", c.revision, c.flags);
                    print_flags(&client, &ctx, &defaults);
                }
                Err(e) => println!("change stream: {e}"),
            },
            changed = status_rx.changed() => {
                if changed.is_err() {
                    break;
                }
                println!("status: {:?}", *status_rx.borrow_and_update());
            }
            _ = tokio::signal::ctrl_c() => break,
            _ = terminate.recv() => break,
        }
    }
    // The evaluations since the last usage summary reach the relay.
    let confirmed = client.close(Duration::from_secs(2)).await;
    println!("closed (final usage summary {})", if confirmed { "confirmed" } else { "not confirmed" });
    Ok(())
}

/// What this program falls back to when a flag is missing or the client
/// has no data: for the demo flags, the value each serves when switched
/// off (what the app did before the flag existed). A default is part of
/// the program: the relay warns when callers pass one that differs from
/// what the flag serves (`flagctl flag usage`).
fn defaults() -> HashMap<&'static str, Json> {
    HashMap::from([
        ("new-checkout", json!(false)),
        ("theme", json!("light")),
        ("beta-banner", json!(false)),
        ("max-upload-mb", json!(10)),
        ("search-ranking", json!({"model": "bm25"})),
    ])
}

/// A flag this program has no default for: the value it serves when off.
fn off_value(flag: &Flag) -> Json {
    flag.variations.get(flag.off_variation as usize).cloned().unwrap_or(Json::Null)
}

fn print_flags(client: &Client, ctx: &Context<'_>, defaults: &HashMap<&'static str, Json>) {
    let snap = client.snapshot();
    let mut flags: Vec<Flag> = snap.flags().collect();
    flags.sort_unstable_by(|a, b| a.key.cmp(&b.key));
    for flag in &flags {
        let key = flag.key.as_str();
        let default = defaults.get(key).cloned().unwrap_or_else(|| off_value(flag));
        let d = client.json_detail(key, ctx, default);
        println!(
            "  {key:<20} = {:<30} {}{}",
            d.value.to_string(),
            d.reason,
            if d.stale { " (stale)" } else { "" }
        );
    }
}
