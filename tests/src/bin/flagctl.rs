//! `flagctl`, built inside the tests package so integration tests can run
//! the real binary (see `relay/src/bin/flagctl.rs`).

#[tokio::main]
async fn main() {
    std::process::exit(flagstream_relay::ctl::main_entry().await);
}
