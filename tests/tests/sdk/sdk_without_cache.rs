//! The SDK's `cache` feature as a checked fact: without it
//! (`default-features = false`, as `flagctl watch` uses the SDK) the
//! `flagstream` crate links no sled and builds on its own; with the default
//! features it has the sled cache. Resolved by cargo for the SDK alone, so
//! no feature another workspace member enables can leak in.

use std::path::Path;
use std::process::Command;

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root"));
    c
}

/// The crate names of `flagstream`'s normal dependency tree, with `extra`
/// arguments (feature selection).
fn tree(extra: &[&str]) -> Vec<String> {
    let out = cargo()
        .args(["tree", "--locked", "--offline", "-p", "flagstream", "-e", "normal"])
        .args(extra)
        .args(["--prefix", "none", "--format", "{p}"])
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let tree = String::from_utf8(out.stdout).expect("utf-8");
    tree.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_owned).collect()
}

#[test]
fn without_the_cache_feature_the_sdk_links_no_sled() {
    let lean = tree(&["--no-default-features"]);
    // The tree is the SDK's: it names the SDK, its core and its transport.
    for name in ["flagstream", "flagstream-core", "tonic"] {
        assert!(lean.iter().any(|n| n == name), "{name} missing from {lean:?}");
    }
    assert!(!lean.iter().any(|n| n == "sled"), "sled in the tree without the cache feature: {lean:?}");
    let default = tree(&[]);
    assert!(default.iter().any(|n| n == "sled"), "the default features lost the cache: {default:?}");
}

#[test]
fn without_the_cache_feature_the_sdk_builds_on_its_own() {
    // A target directory of its own: the workspace's build directory is
    // locked by the `cargo test` running this, and its features are the
    // whole workspace's. It stays between runs, so only the first builds
    // the SDK's dependencies.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sdk-without-cache");
    let out = cargo()
        .args(["check", "--locked", "--offline", "-p", "flagstream", "--no-default-features", "--lib"])
        .arg("--target-dir")
        .arg(&target)
        .output()
        .expect("cargo check runs");
    assert!(
        out.status.success(),
        "flagstream does not build without its cache feature: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
