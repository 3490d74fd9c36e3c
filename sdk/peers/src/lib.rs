//! A benchmark only: `benches/peers.rs` runs flagstream's evaluation next
//! to Unleash's and LaunchDarkly's Rust engines on the same flags and
//! contexts (`cargo bench -p flagstream-peer-bench --features peers`;
//! results in docs/BENCHMARKS.md). The library is empty: the peers are
//! dependencies of the benchmark alone, behind the `peers` feature, so no
//! other build compiles them.
