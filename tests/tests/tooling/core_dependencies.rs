//! The layout invariant "the evaluation core does no I/O" as a checked
//! fact: `flagstream-core`'s dependency tree (as cargo resolves it for the
//! core alone, so no feature another workspace member enables can leak in)
//! holds no async runtime, network, TLS or storage crate, and the core
//! builds on its own that way. Likewise `flagctl`, a client of the Admin
//! API, links none of the relay's storage (sled, PostgreSQL) nor the
//! relay itself. And the packages used in processes that fork link tokio
//! without `parking_lot`.

use std::path::Path;
use std::process::Command;

/// Crates (by name prefix) that would let the core block, do I/O or run
/// tasks: async runtimes and futures plumbing, HTTP/2 and gRPC, sockets,
/// TLS, databases.
const FORBIDDEN: &[&str] = &[
    "tokio", "tonic", "hyper", "h2", "http", "tower", "mio", "socket2", "futures", "async-", "rustls",
    "sled", "postgres", "deadpool", "sqlx",
];

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root"));
    c
}

#[test]
fn the_core_links_no_async_network_or_storage_crate() {
    let tree = tree_of("flagstream-core");
    let names: Vec<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
    // The tree is the core's: it names the core and its message crate.
    assert!(names.contains(&"flagstream-core") && names.contains(&"flagstream-proto"), "{tree}");
    assert!(names.contains(&"prost"), "{tree}");
    let bad: Vec<&str> =
        names.iter().copied().filter(|n| FORBIDDEN.iter().any(|f| n.starts_with(f))).collect();
    assert!(bad.is_empty(), "flagstream-core depends on {bad:?}:\n{tree}");
}

/// The dependency names of `package` as cargo resolves it alone.
fn tree_of(package: &str) -> String {
    let out = cargo()
        .args(["tree", "--locked", "--offline", "-p", package, "-e", "normal"])
        .args(["--prefix", "none", "--format", "{p}"])
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn flagctl_links_no_storage_crate_nor_the_relay() {
    let tree = tree_of("flagctl");
    let names: Vec<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
    // The tree is flagctl's: the CLI, its client crates and tonic.
    for want in ["flagctl", "flagstream", "flagstream-core", "flagstream-proto", "tonic"] {
        assert!(names.contains(&want), "{want} missing from flagctl's tree:\n{tree}");
    }
    let bad: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| {
            ["sled", "tokio-postgres", "postgres", "deadpool", "sqlx", "flagstream-relay"]
                .iter()
                .any(|f| n.starts_with(f))
        })
        .collect();
    assert!(bad.is_empty(), "flagctl depends on {bad:?}:\n{tree}");
}

#[test]
fn the_core_builds_on_its_own() {
    // A target directory of its own: the workspace's build directory is
    // locked by the `cargo test` running this, and its features are the
    // whole workspace's.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("core-alone");
    let out = cargo()
        .args(["check", "--locked", "--offline", "-p", "flagstream-core", "--lib", "--target-dir"])
        .arg(&target)
        .output()
        .expect("cargo check runs");
    assert!(
        out.status.success(),
        "flagstream-core does not build alone: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The packages linked into processes that fork (the C ABI behind Go and
/// Java, the Python package) link tokio without `parking_lot`: its global
/// table of parked threads keeps the parent's threads in a child, which
/// crashed a forked child's runtime. Each is resolved alone, as its build
/// (`cargo build -p flagstream-ffi`, maturin) resolves it.
#[test]
fn the_forking_bindings_link_no_parking_lot_in_tokio() {
    for package in ["flagstream-ffi", "flagstream-python"] {
        let tree = tree_of(package);
        let names: Vec<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
        assert!(names.contains(&"tokio") && names.contains(&"flagstream-binding"), "{package}:\n{tree}");
        // sled brings parking_lot 0.11 (its own table, never used in a
        // child: a child's client has no cache); tokio's would be 0.12.
        let bad: Vec<&str> = tree
            .lines()
            .filter(|l| l.starts_with("parking_lot ") && !l.starts_with("parking_lot v0.11"))
            .collect();
        assert!(bad.is_empty(), "{package} links {bad:?} (tokio's `parking_lot` feature):\n{tree}");
    }
}
