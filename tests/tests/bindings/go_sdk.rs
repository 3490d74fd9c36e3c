//! The Go package (`sdk/go`) built and tested with its own runner: the
//! static library built with cargo into `<target>/bindings`, the
//! conformance files (`tests/data/eval/*.yaml`, which Go cannot read
//! without a YAML package) converted to JSON, then `go vet` and `go test
//! -v ./...` in `sdk/go` against that library, this build's `relay` and
//! `flagctl`: the whole conformance suite through the Go API, the
//! real-relay tests (a change arriving, failover by delta, the blackhole
//! stall, the cache with every relay down, a use after close, a process
//! that exits after Close) and the zero-allocation check.
//!
//! Go's build cache does not notice a changed `flagstream.h` (it hashes
//! only the package's own files): the header's hash goes into
//! `CGO_CFLAGS`, so a new header rebuilds the package. The library itself
//! is linked afresh by every `go test`.
//!
//! Without go the test fails, saying what to install; a Go test that
//! skips, or a test function that did not pass, fails it too.

use std::collections::BTreeSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::process::Command;

use crate::toolchain::{bindings_target, eval_files_as_json, ffi_static_library, repo, run, show};

/// The top-level test functions of the package's `*_test.go` files.
fn go_test_names(dir: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(dir).expect("sdk/go exists") {
        let path = entry.expect("a directory entry").path();
        if !path.to_string_lossy().ends_with("_test.go") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a readable Go file");
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("func Test")
                && let Some((name, _)) = rest.split_once("(t *testing.T)")
            {
                names.insert(format!("Test{name}"));
            }
        }
    }
    names
}

#[test]
fn go_package_passes_its_tests() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let version = Command::new("go").arg("version").output();
    assert!(
        version.as_ref().is_ok_and(|o| o.status.success()),
        "`go version` failed ({version:?}): the Go package tests need Go 1.19 or later (Debian: apt-get install golang-go)"
    );

    let lib_dir = ffi_static_library();
    let target = bindings_target();

    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("go-sdk");
    let eval_json = tmp.join("eval-json");
    let files = eval_files_as_json(&eval_json);
    assert!(files >= 20, "only {files} conformance files");

    let header = std::fs::read(repo().join("sdk/ffi/include/flagstream.h")).expect("the header");
    let mut hasher = DefaultHasher::new();
    header.hash(&mut hasher);
    let stamp = hasher.finish();
    // Go's caches live in the target directory, never in $HOME; no module
    // is downloaded (the package uses the standard library only).
    let go_dir = target.parent().expect("the bindings directory is in the target directory").join("go");
    let go = |args: &[&str]| {
        let mut cmd = Command::new("go");
        cmd.args(args)
            .current_dir(repo().join("sdk/go"))
            .env("GOCACHE", go_dir.join("cache"))
            .env("GOPATH", go_dir.join("path"))
            .env("GOFLAGS", "-mod=mod")
            .env("GOPROXY", "off")
            .env("GOTOOLCHAIN", "local")
            .env("CGO_ENABLED", "1")
            .env("CGO_CFLAGS", format!("-g -O2 -DFLAGSTREAM_HEADER_STAMP={stamp:x}"))
            // Searched before the package's own -L (target/release).
            .env("CGO_LDFLAGS", format!("-L{}", lib_dir.display()))
            .env("FLAGSTREAM_RELAY_BIN", env!("CARGO_BIN_EXE_relay"))
            .env("FLAGSTREAM_FLAGCTL_BIN", env!("CARGO_BIN_EXE_flagctl"))
            .env("FLAGSTREAM_EVAL_JSON", &eval_json);
        cmd
    };
    run("go vet ./...", &mut go(&["vet", "./..."]));
    let out = run("gofmt -l .", Command::new("gofmt").args(["-l", "."]).current_dir(repo().join("sdk/go")));
    assert!(out.stdout.is_empty(), "gofmt would change: {}", String::from_utf8_lossy(&out.stdout));

    let out = go(&["test", "-count=1", "-v", "./..."]).output().expect("go test runs");
    let text = show(&out);
    println!("{text}");
    assert!(out.status.success(), "go test failed ({}):\n{text}", out.status);
    assert!(!text.contains("SKIP"), "a Go test skipped:\n{text}");
    assert!(!text.contains("--- FAIL"), "a Go test failed:\n{text}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let names = go_test_names(&repo().join("sdk/go"));
    assert!(names.len() >= 15, "too few Go tests found: {names:?}");
    for name in &names {
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!("--- PASS: {name} ("))),
            "{name} did not pass (did it run?):\n{text}"
        );
    }
    for part in
        ["TestConformance", "TestRelayFailoverByDelta", "TestRelayBlackholeStallRecoveredWithDefaultSettings"]
    {
        assert!(names.contains(part), "{part} is missing from sdk/go");
    }
    assert!(
        stdout.contains(&format!("{files} files, ")),
        "the conformance suite did not read every file:\n{text}"
    );

    // A service ships one file: the library is linked in statically, and
    // with `-static-libgcc` the binary needs no libgcc_s either (the
    // shared library slim and musl images lack).
    let exe = tmp.join("closeexit");
    let exe_arg = exe.to_str().expect("a UTF-8 path");
    run("go build ./internal/closeexit", &mut go(&["build", "-o", exe_arg, "./internal/closeexit"]));
    let out = run("ldd", Command::new("ldd").arg(&exe));
    let libs = String::from_utf8_lossy(&out.stdout);
    assert!(
        !libs.contains("libflagstream") && !libs.contains("libgcc_s"),
        "a Go binary depends on a shared library it should not:\n{libs}"
    );
}
