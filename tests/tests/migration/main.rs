//! Moving to flagstream from another flag system: `flagctl import` of
//! LaunchDarkly's and Unleash's data into a real relay, and those
//! systems' own expectations evaluated through the imported flags.
//!
//! One behaviour per module (`migration/*.rs`); the fixtures are the
//! `flagstream_tests` library's.

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
