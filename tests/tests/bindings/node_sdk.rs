//! The Node package (`sdk/node`) built and tested from `cargo test`: `npm
//! ci` there builds the addon with the debug profile (its install script
//! runs cargo), then `node --test test/` runs the whole conformance suite
//! and the real-relay tests with this build's `relay` and `flagctl`.
//!
//! The nested cargo builds into `<target>/bindings`, not the workspace's
//! target directory: it resolves features for the addon alone (no
//! `openfeature` on `flagstream`, unlike `cargo test --workspace`), so its
//! artifacts differ from the workspace's and are kept apart from them; the
//! Python package's build shares the directory. The first run builds the
//! addon's dependencies there once; later runs reuse them.
//!
//! Without node or npm the test fails, saying what to install.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/node")
}

/// The directory the nested cargo builds in.
fn bindings_target() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().expect("CARGO_TARGET_TMPDIR is inside the target directory").join("bindings")
}

/// Runs `cmd`; panics with its output unless it succeeds.
fn run(what: &str, cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("{what}: could not start ({e}); the Node package tests need Node.js >= 18 and npm on PATH")
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    out
}

fn require(tool: &str) {
    let out = Command::new(tool).arg("--version").output().unwrap_or_else(|e| {
        panic!("`{tool} --version` could not run ({e}): the Node package tests need Node.js >= 18 and npm on PATH (Debian: apt-get install nodejs npm)")
    });
    assert!(out.status.success(), "`{tool} --version` failed: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn node_package_passes_the_conformance_suite_and_the_relay_tests() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    require("node");
    require("npm");
    let dir = package_dir();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run(
        "npm ci (builds the addon)",
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .env("FLAGSTREAM_NODE_PROFILE", "debug")
            .env("CARGO_TARGET_DIR", bindings_target())
            .env("CARGO", cargo),
    );
    let out = run(
        "node --test test/",
        Command::new("node")
            .args(["--test", "--test-reporter=spec", "test/"])
            .current_dir(&dir)
            .env("FLAGSTREAM_RELAY_BIN", env!("CARGO_BIN_EXE_relay"))
            .env("FLAGSTREAM_FLAGCTL_BIN", env!("CARGO_BIN_EXE_flagctl")),
    );
    let report = String::from_utf8_lossy(&out.stdout);
    println!("{report}");
    // The runner exited 0; make sure it ran the suites, not nothing.
    assert!(report.contains("at least 1,000 cases ran"), "the conformance suite did not run:\n{report}");
    assert!(report.contains("failover between two relays"), "the relay tests did not run:\n{report}");
    for zero in ["fail 0", "skipped 0", "cancelled 0", "todo 0"] {
        assert!(report.contains(zero), "expected `{zero}` in the summary:\n{report}");
    }
}
