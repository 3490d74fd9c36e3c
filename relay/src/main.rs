//! `flagstream-relay`: the relay server binary.

#[tokio::main]
async fn main() {
    flagstream_relay::main_entry().await;
}
