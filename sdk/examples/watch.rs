//! Connects to a relay and prints flag values and status as they change.
//!
//! ```sh
//! cargo run -p flagstream --example watch -- http://127.0.0.1:7070 "$(cat flagstream-data/demo-sdk-key)"
//! ```
//! Then change a flag (flagctl, or the relay's Admin API) and watch it move.

use std::time::Duration;

use flagstream::{Client, Context};

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
    print_flags(&client, &ctx);
    loop {
        tokio::select! {
            change = changes.recv() => match change {
                Ok(c) => {
                    println!("revision {} changed {:?}", c.revision, c.flags);
                    print_flags(&client, &ctx);
                }
                Err(e) => println!("change stream: {e}"),
            },
            changed = status_rx.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                println!("status: {:?}", *status_rx.borrow_and_update());
            }
        }
    }
}

fn print_flags(client: &Client, ctx: &Context<'_>) {
    let snap = client.snapshot();
    let mut keys: Vec<&str> = snap.flags().map(|f| f.key.as_str()).collect();
    keys.sort_unstable();
    for key in keys {
        let d = client.json_detail(key, ctx, serde_json::Value::Null);
        println!(
            "  {key:<20} = {:<30} {}{}",
            d.value.to_string(),
            d.reason,
            if d.stale { " (stale)" } else { "" }
        );
    }
}
