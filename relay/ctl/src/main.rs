//! `flagctl`: the operator CLI (all logic in the `flagctl` library).

#[tokio::main]
async fn main() {
    std::process::exit(flagctl::main_entry().await);
}
