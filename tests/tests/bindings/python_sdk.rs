//! The Python package (`sdk/python`): builds its wheel with maturin,
//! installs it under the build directory and runs its pytest suite (the
//! whole conformance suite through the Python API, and the real-relay
//! tests against this build's `relay` and `flagctl` binaries). Missing
//! python3, pip or a pinned package fails the test, never skips it.

use std::path::Path;
use std::process::Command;

use flagstream_tests::python;

use crate::toolchain::{repo, show};

#[test]
fn python_package_passes_its_pytest_suite() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-sdk");
    let packages = python::packages(
        &tmp.join("packages"),
        &["maturin==1.16.0", "pytest==9.2.0", "openfeature-sdk==0.10.0", "PyYAML==6.0.2"],
        &["pytest", "openfeature", "yaml", "maturin"],
    );
    let maturin = packages.join("bin").join("maturin");
    assert!(
        maturin.exists(),
        "{} is missing: install maturin==1.16.0 there with pip --target",
        maturin.display()
    );

    // The wheel, built by a cargo of its own in a target directory of its
    // own (`target/bindings`, shared with the Node package): the outer
    // `cargo test` may still hold the lock of this build's directory.
    let bindings = repo().join("target").join("bindings");
    let wheels = tmp.join("wheels");
    // A wheel of an earlier run is replaced.
    let _cleared = std::fs::remove_dir_all(&wheels);
    let out = Command::new(&maturin)
        .args(["build", "--profile", "dev", "--manifest-path"])
        .arg(repo().join("sdk/python/Cargo.toml"))
        .arg("--out")
        .arg(&wheels)
        .env("CARGO_TARGET_DIR", &bindings)
        .env("PYTHONPATH", &packages)
        .output()
        .expect("maturin runs");
    assert!(out.status.success(), "maturin build failed:\n{}", show(&out));
    let wheel = std::fs::read_dir(&wheels)
        .expect("the wheel directory")
        .map(|e| e.expect("a directory entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("maturin wrote a wheel");

    let site = tmp.join("site");
    // A fresh install each run.
    let _cleared = std::fs::remove_dir_all(&site);
    let out = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "--no-index"])
        .arg("--target")
        .arg(&site)
        .arg(&wheel)
        .output()
        .expect("python3 runs (python3 with pip is required)");
    assert!(out.status.success(), "installing {} failed:\n{}", wheel.display(), show(&out));

    let pythonpath = std::env::join_paths([&site, &packages]).expect("paths join");
    let out = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "sdk/python/tests"])
        .current_dir(repo())
        .env("PYTHONPATH", pythonpath)
        .env("FLAGSTREAM_RELAY_BIN", env!("CARGO_BIN_EXE_relay"))
        .env("FLAGSTREAM_FLAGCTL_BIN", env!("CARGO_BIN_EXE_flagctl"))
        .output()
        .expect("python3 runs");
    let text = show(&out);
    assert!(out.status.success(), "pytest failed:\n{text}");
    // Every test ran: pytest's summary names no skipped, xfailed or
    // deselected test (a run of no test exits 5, failing above).
    let summary = text.lines().rev().find(|l| l.contains(" passed")).unwrap_or_default();
    for not_run in ["skipped", "xfailed", "xpassed", "deselected", "error"] {
        assert!(!summary.contains(not_run), "pytest did not run everything: {summary}\n{text}");
    }
    println!("{text}");
}
