//! The Java package (`sdk/java`) built with the JDK and a C compiler and
//! tested with the JUnit 5 console launcher: the static C ABI library
//! built by a nested cargo (into `<target>/bindings`, as `c_abi.rs`), the
//! conformance files converted from YAML to JSON here (the JDK reads no
//! YAML), `sdk/java/build.sh` (JNI glue, jar with the native library in
//! it, tests), then every JUnit test: the whole conformance suite through
//! the Java API, the real-relay tests against this build's `relay` and
//! `flagctl`, the lifecycle, loader, zero-allocation and many-threads
//! tests.
//!
//! Without a JDK, a C compiler or Debian's junit5 jar the test fails,
//! saying what to install; it never skips.

use std::path::Path;
use std::process::Command;

use crate::toolchain::{eval_files_as_json, ffi_static_library, repo, run, show};

/// The JUnit tests `sdk/java` has (`@Test` methods): JsonTest 6,
/// ConformanceTest 3, LifecycleTest 8, RelayTest 5, AllocationTest 1,
/// ConcurrencyTest 1. A test added there is added here.
const JAVA_TESTS: u64 = 24;

/// Debian's junit5 package: the console launcher with the Jupiter engine.
const JUNIT: &str = "/usr/share/java/junit-platform-console-standalone.jar";

/// Fails unless `tool -version` runs.
fn require(tool: &str) {
    let ok = Command::new(tool).arg("-version").output().is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "`{tool} -version` failed: the Java package test needs a JDK 17 or newer, a C compiler and JUnit 5 \
         (Debian: apt-get install openjdk-17-jdk-headless gcc junit5)"
    );
}

/// The number in the JUnit summary line `[ N <what> ]`.
fn summary(report: &str, what: &str) -> u64 {
    report
        .lines()
        .find_map(|l| {
            let inner = l.trim().strip_prefix('[')?.strip_suffix(']')?.trim();
            let (n, rest) = inner.split_once(' ')?;
            (rest.trim() == what).then(|| n.parse().ok()).flatten()
        })
        .unwrap_or_else(|| panic!("no `{what}` in the JUnit summary:\n{report}"))
}

#[test]
fn java_package_passes_its_junit_suite() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    require("javac");
    require("java");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    assert!(
        Command::new(&cc).arg("--version").output().is_ok_and(|o| o.status.success()),
        "`{cc} --version` failed: the Java package's JNI glue needs a C compiler (Debian: apt-get install gcc)"
    );
    assert!(
        Path::new(JUNIT).is_file(),
        "{JUNIT} is missing: the Java package tests need JUnit 5 (Debian: apt-get install junit5)"
    );

    let lib_dir = ffi_static_library();

    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("java-sdk");
    let eval_json = tmp.join("eval-json");
    let files = eval_files_as_json(&eval_json);
    assert!(files >= 20, "only {files} conformance files in tests/data/eval");

    let build = tmp.join("build");
    run(
        "sdk/java/build.sh",
        Command::new("bash")
            .arg(repo().join("sdk/java/build.sh"))
            .arg("--out")
            .arg(&build)
            .env("FLAGSTREAM_FFI_LIB", lib_dir.join("libflagstream_ffi.a"))
            .current_dir(repo()),
    );

    // The library is extracted here, not into the user's cache; a fresh
    // directory each run (each build's library has a new name).
    let native = tmp.join("native");
    let _cleared = std::fs::remove_dir_all(&native);
    let class_path =
        std::env::join_paths([build.join("flagstream.jar"), build.join("test-classes")]).expect("paths join");
    let out = Command::new("java")
        .arg("-jar")
        .arg(JUNIT)
        .arg("--class-path")
        .arg(&class_path)
        .args(["--scan-classpath", "--fail-if-no-tests", "--disable-banner", "--disable-ansi-colors"])
        .args(["--details=tree"])
        .current_dir(repo())
        .env("FLAGSTREAM_RELAY_BIN", env!("CARGO_BIN_EXE_relay"))
        .env("FLAGSTREAM_FLAGCTL_BIN", env!("CARGO_BIN_EXE_flagctl"))
        .env("FLAGSTREAM_EVAL_JSON", &eval_json)
        .env("FLAGSTREAM_NATIVE_DIR", &native)
        .output()
        .expect("java runs");
    let report = show(&out);
    assert!(out.status.success(), "the JUnit suite failed ({}):\n{report}", out.status);
    // Every test ran and passed: none skipped, aborted or failed, and all
    // of them were found (a class that stopped compiling in is missed).
    assert_eq!(summary(&report, "tests found"), JAVA_TESTS, "{report}");
    assert_eq!(summary(&report, "tests successful"), JAVA_TESTS, "{report}");
    for zero in ["tests skipped", "tests aborted", "tests failed", "containers failed", "containers aborted"]
    {
        assert_eq!(summary(&report, zero), 0, "`{zero}` is not 0:\n{report}");
    }
    println!("{report}");
}
