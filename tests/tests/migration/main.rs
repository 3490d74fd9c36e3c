//! Moving to flagstream from another flag system: `flagctl import` of
//! LaunchDarkly's and Unleash's data into a real relay, and those
//! systems' own expectations evaluated through the imported flags.
//!
//! One behaviour per module (`migration/*.rs`); the fixtures are the
//! `flagstream_tests` library's.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

mod import_launchdarkly;
mod import_unleash;
mod launchdarkly_conformance;
mod unleash_conformance;

/// The report (the first JSON value flagctl printed with `-o json`).
pub(crate) fn report(stdout: &str) -> Vec<Json> {
    let first = serde_json::Deserializer::from_str(stdout).into_iter::<Json>().next();
    let v = first.expect("a report").expect("the report is JSON");
    v.as_array().expect("a list").clone()
}

/// One report line's result and reason (`kind` `key`), or a failed test.
pub(crate) fn outcome(lines: &[Json], kind: &str, key: &str) -> (String, String) {
    let l = lines
        .iter()
        .find(|l| l["kind"] == kind && l["key"] == key)
        .unwrap_or_else(|| panic!("{kind} {key}: {lines:?}"));
    (l["result"].as_str().unwrap().to_owned(), l["reason"].as_str().unwrap_or("").to_owned())
}

/// The case files of `tests/data/migration/<source>/`, sorted, and the
/// text of its `differences.yaml`.
pub(crate) fn case_files(source: &str) -> (Vec<PathBuf>, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/migration").join(source);
    let mut files: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml") && !p.ends_with("differences.yaml"))
        .collect();
    files.sort();
    (files, std::fs::read_to_string(root.join("differences.yaml")).unwrap())
}

/// Fails on a difference `differences.yaml` does not list and on a listed
/// one that no longer differs; returns the listed count per class.
pub(crate) fn check_differences<K: Ord + Debug + Clone>(
    differing: &BTreeMap<K, String>,
    listed: impl IntoIterator<Item = (K, String, String)>,
) -> BTreeMap<String, usize> {
    let mut classes = BTreeMap::new();
    let mut keys = BTreeSet::new();
    for (key, class, why) in listed {
        assert!(!why.is_empty(), "{key:?}: say why");
        *classes.entry(class).or_default() += 1;
        keys.insert(key);
    }
    let unlisted: Vec<_> = differing.iter().filter(|(k, _)| !keys.contains(*k)).collect();
    let stale: Vec<_> = keys.iter().filter(|k| !differing.contains_key(*k)).collect();
    assert!(unlisted.is_empty(), "differences not listed in differences.yaml: {unlisted:#?}");
    assert!(stale.is_empty(), "listed in differences.yaml but no longer differing: {stale:#?}");
    classes
}
