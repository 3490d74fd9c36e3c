//! The pinned Python packages the tests run (`evaluation_reference.rs`:
//! PyYAML and xxhash for the reference evaluator; `deploy_artifacts.rs`:
//! kubernetes-validate for the manifests; `python_sdk.rs`: maturin to build
//! the Python package, pytest and openfeature-sdk to test it, PyYAML for
//! the conformance suite; `ofrep_clients.rs`: OpenFeature's OFREP
//! provider), and where they come from.
//!
//! With `FLAGSTREAM_PYTHON_PACKAGES` set (`tests/run` sets it, after
//! installing every pin of [`PINS`] there) the tests use that directory
//! and never download: a package missing there fails the test, naming the
//! command that installs it. Without it, a test installs its packages from
//! PyPI into the build directory on its first run (`python3 -m pip install
//! --target`; network needed), saying so on the test output, and reuses
//! them afterwards. Without python3 and pip the tests fail, never skip.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Every pinned package: what `tests/run` installs into
/// `FLAGSTREAM_PYTHON_PACKAGES` (keep the two lists equal).
pub const PINS: &[&str] = &[
    "PyYAML==6.0.2",
    "xxhash==3.5.0",
    "kubernetes-validate==1.37.0",
    // The Python package's build and tests (`python_sdk.rs`).
    "maturin==1.16.0",
    "pytest==9.2.0",
    "openfeature-sdk==0.10.0",
    // OpenFeature's OFREP provider against a relay (`ofrep_clients.rs`).
    "openfeature-provider-ofrep==0.3.0",
];

/// A directory (for `PYTHONPATH`) from which `modules` import, holding the
/// packages `pins` (a subset of [`PINS`]). `cache` is where to install them
/// when `FLAGSTREAM_PYTHON_PACKAGES` is not set (under the test's
/// `CARGO_TARGET_TMPDIR`).
pub fn packages(cache: &Path, pins: &[&str], modules: &[&str]) -> PathBuf {
    for pin in pins {
        assert!(PINS.contains(pin), "{pin} is not in python::PINS (which tests/run installs)");
    }
    let importable = |dir: &Path| {
        let import = format!("import {}", modules.join(", "));
        Command::new("python3")
            .env("PYTHONPATH", dir)
            .args(["-c", &import])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if let Some(dir) = std::env::var_os("FLAGSTREAM_PYTHON_PACKAGES") {
        let dir = PathBuf::from(dir);
        assert!(
            importable(&dir),
            "FLAGSTREAM_PYTHON_PACKAGES={} lacks {modules:?}; install them there with \
             `python3 -m pip install --target {} {}` (or unset it to download into the build directory)",
            dir.display(),
            dir.display(),
            PINS.join(" ")
        );
        return dir;
    }
    if importable(cache) {
        return cache.to_owned();
    }
    // Straight to the process's stderr (libtest captures `eprintln!` of a
    // passing test): a download at test time must be seen.
    use std::io::Write as _;
    // A failed write to stderr has nowhere else to be reported.
    let _ignored = writeln!(
        std::io::stderr(),
        "DOWNLOADING from PyPI: {} into {} (set FLAGSTREAM_PYTHON_PACKAGES to a directory holding them to run offline)",
        pins.join(" "),
        cache.display()
    );
    let out = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"])
        .arg(cache)
        .args(pins)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "installing {pins:?} from PyPI failed (needs python3 with pip and network, or \
         FLAGSTREAM_PYTHON_PACKAGES): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(importable(cache), "{modules:?} do not import from {} after installing them", cache.display());
    cache.to_owned()
}

#[cfg(test)]
mod tests {
    /// `tests/run` installs exactly [`super::PINS`]: the two lists cannot
    /// drift apart.
    #[test]
    fn the_test_command_installs_every_pin() {
        let script = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/run")).unwrap();
        let line = script.lines().find_map(|l| l.strip_prefix("pins=\"")).expect("a pins= line in tests/run");
        let listed: Vec<&str> = line.trim_end_matches('"').split_whitespace().collect();
        assert_eq!(listed, super::PINS, "tests/run and python::PINS list the same packages");
    }
}
