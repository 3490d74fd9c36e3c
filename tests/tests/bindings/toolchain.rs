//! What the binding tests share: the repository, the target directory of
//! the nested builds, running a command and showing its output, and the
//! conformance files as JSON for runners without a YAML parser (Go, Java).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's root.
pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the tests crate is in the repo").to_owned()
}

/// Where the nested cargo builds (shared by the bindings): a cargo of its
/// own in a target directory of its own, since the outer `cargo test` may
/// still hold the lock of this build's directory.
pub(crate) fn bindings_target() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().expect("CARGO_TARGET_TMPDIR is inside the target directory").join("bindings")
}

/// A command's stdout and stderr, for a failure message.
pub(crate) fn show(out: &Output) -> String {
    format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `cmd`, failing the test (with its output) unless it succeeds.
pub(crate) fn run(what: &str, cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: could not start ({e})"));
    assert!(out.status.success(), "{what} failed ({}):\n{}", out.status, show(&out));
    out
}

/// Builds the C ABI's static library (debug) with a nested cargo into
/// [`bindings_target`]; returns the directory that holds
/// `libflagstream_ffi.a`.
pub(crate) fn ffi_static_library() -> PathBuf {
    let target = bindings_target();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run(
        "cargo build -p flagstream-ffi (the static library)",
        Command::new(cargo)
            .args(["build", "-p", "flagstream-ffi", "--lib"])
            .env("CARGO_TARGET_DIR", &target)
            .current_dir(repo()),
    );
    let dir = target.join("debug");
    assert!(dir.join("libflagstream_ffi.a").exists(), "no libflagstream_ffi.a in {}", dir.display());
    dir
}

/// Writes every `tests/data/eval/*.yaml` as `<dir>/<name>.json` (the same
/// values: YAML 1.2 as serde reads it, numbers keeping their integer or
/// float type); returns how many files.
pub(crate) fn eval_files_as_json(dir: &Path) -> usize {
    // The files of an earlier run are replaced.
    let _cleared = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("the JSON directory");
    let mut count = 0;
    for entry in std::fs::read_dir(flagstream_tests::case::case_dir()).expect("tests/data/eval exists") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a readable case file");
        let value: serde_json::Value =
            serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let stem = path.file_stem().expect("a file name").to_string_lossy().into_owned();
        let json = serde_json::to_vec(&value).expect("JSON values serialize");
        std::fs::write(dir.join(format!("{stem}.json")), json).expect("the JSON file is written");
        count += 1;
    }
    count
}
