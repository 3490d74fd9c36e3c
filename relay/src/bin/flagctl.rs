//! `flagctl`: the operator CLI (all logic in `flagstream_relay::ctl`).

#[tokio::main]
async fn main() {
    std::process::exit(flagstream_relay::ctl::main_entry().await);
}
