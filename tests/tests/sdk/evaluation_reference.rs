//! The independent Python reference evaluator (`tests/data/eval/ref_eval.py`,
//! a reading of docs/EVALUATION.md) re-derives every expectation of the
//! data-driven suite, so the YAML cannot drift toward whatever the engine
//! does. Its two packages (PyYAML, xxhash) come from
//! `FLAGSTREAM_PYTHON_PACKAGES`, or are installed from PyPI into the build
//! directory on first run (`flagstream_tests::python`); without python3
//! and pip (or the network, when they are not there) this test fails,
//! never skips.

use std::path::Path;
use std::process::Command;

#[test]
fn the_reference_evaluator_agrees_with_every_case() {
    let target = flagstream_tests::python::packages(
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("ref-eval-python"),
        &["PyYAML==6.0.2", "xxhash==3.5.0"],
        &["yaml", "xxhash"],
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/eval");
    let out = Command::new("python3")
        .env("PYTHONPATH", &target)
        .current_dir(&dir)
        .args(["check_cases.py", "--evaluate"])
        .output()
        .expect("python3 runs");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the reference evaluator disagrees:\n{said}");
    // It really evaluated: check_cases prints how many cases it re-derived.
    let evaluated = said
        .lines()
        .find_map(|l| l.strip_prefix("evaluated ")?.split(' ').next()?.parse::<usize>().ok())
        .unwrap_or_else(|| panic!("no evaluation summary:\n{said}"));
    assert!(evaluated >= 1_000, "only {evaluated} cases evaluated:\n{said}");
}
