//! `flagctl`, built inside the tests package so integration tests can run
//! the real binary (see `relay/ctl/src/main.rs`).

#[tokio::main]
async fn main() {
    std::process::exit(flagctl::main_entry().await);
}
