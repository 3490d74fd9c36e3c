//! Unleash's own expectations through the import: each file of
//! `tests/data/migration/unleash/` (Unleash's client specification in this
//! repository's case format, with its provenance) is imported with
//! `flagctl import unleash` into its own environment of a real relay, and
//! the Rust SDK's answers (`<feature>` for `isEnabled`, `<feature>.variant`
//! for `getVariant`) are compared with what the specification expects.
//! Every difference must be listed, with its class and why, in
//! `tests/data/migration/unleash/differences.yaml`, and every listed one
//! must still differ. Cases on a feature the import reports as not
//! imported are counted apart, with the import's reason. The counts and
//! the classified differences are printed (docs/MIGRATION.md quotes
//! them).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use flagstream::Context;
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use serde::Deserialize;
use serde_json::{Value as Json, json};

use crate::{case_files, check_differences, report};

#[derive(Debug, Deserialize)]
struct CaseFile {
    title: String,
    provenance: String,
    document: Json,
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
struct Case {
    name: String,
    feature: String,
    #[serde(default)]
    context: Json,
    expect: Expect,
}

/// One of: what `isEnabled` answers, what `getVariant` answers.
#[derive(Debug, Deserialize)]
struct Expect {
    enabled: Option<bool>,
    variant: Option<Json>,
}

/// A listed difference.
#[derive(Debug, Deserialize)]
struct Difference {
    file: String,
    /// The case's position in its file, 0-based (names repeat).
    index: usize,
    case: String,
    class: String,
    why: String,
}

/// Unleash's context fields, read from the field or, without it, from the
/// property of that name (as Unleash's specification reads them).
const FIELDS: [&str; 6] = ["userId", "sessionId", "remoteAddress", "environment", "appName", "currentTime"];

/// An Unleash context as docs/MIGRATION.md says to build it: each field
/// and property an attribute of the same name, strings, except those the
/// import names as numbers (left out when not a number); the key is the
/// userId (any key would do: the imported flags read only attributes).
fn context(unleash: &Json, numeric: &BTreeSet<String>) -> Context<'static> {
    let mut attrs: BTreeMap<String, String> = BTreeMap::new();
    if let Some(props) = unleash.get("properties").and_then(Json::as_object) {
        for (k, v) in props {
            if let Some(s) = v.as_str() {
                attrs.insert(k.clone(), s.to_owned());
            }
        }
    }
    for f in FIELDS {
        if let Some(s) = unleash.get(f).and_then(Json::as_str) {
            attrs.insert(f.to_owned(), s.to_owned());
        }
    }
    // Without a userId, the empty key (the flags read only attributes).
    let key = attrs.get("userId").cloned().unwrap_or_default(); // none: the empty key
    let mut ctx = Context::new(key);
    for (k, v) in attrs {
        if numeric.contains(&k) {
            if let Ok(n) = v.trim().parse::<f64>() {
                ctx = ctx.with(k, n);
            }
        } else {
            ctx = ctx.with(k, v);
        }
    }
    ctx
}

/// Whether `got` says what `want` does (fields the expectation leaves out
/// are not compared: older files have no `feature_enabled`).
fn same_variant(want: &Json, got: &Json) -> bool {
    let Some(w) = want.as_object() else { return false };
    w.iter().all(|(k, v)| match (k.as_str(), got.get(k)) {
        // An absent payload and a null one are the same answer.
        ("payload", None) => v.is_null(),
        (_, Some(g)) => g == v,
        (_, None) => false,
    })
}

#[tokio::test]
async fn unleash_specification_through_the_import() {
    let (files, differences) = case_files("unleash");
    assert!(files.len() >= 15, "{files:?}");
    let listed: Vec<Difference> = serde_yaml_ng::from_str(&differences).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let (mut total, mut passed, mut not_imported) = (0, 0, Vec::new());
    // (file, case) → what flagstream answered instead.
    let mut differing: BTreeMap<(String, usize, String), String> = BTreeMap::new();
    for (i, path) in files.iter().enumerate() {
        let stem = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let file: CaseFile = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap())
            .unwrap_or_else(|e| panic!("{stem}: {e}"));
        assert!(file.provenance.contains("client-specification"), "{stem}: {}", file.provenance);
        let env = format!("unleash-{i}");
        let key = relay.create_env(&env).await;
        let doc = dir.path().join(format!("{stem}.json"));
        std::fs::write(&doc, file.document.to_string()).unwrap();
        let out = relay.flagctl(&env, &["import", "unleash", doc.to_str().unwrap(), "--yes", "-o", "json"]);
        let lines = report(&out);
        // Features the import reports as not imported: their cases are
        // counted apart (the import said so; no answer is claimed).
        let skipped: BTreeMap<String, String> = lines
            .iter()
            .filter(|l| l["kind"] == "feature" && l["result"] == "skipped")
            .map(|l| (l["key"].as_str().unwrap().to_owned(), l["reason"].as_str().unwrap().to_owned()))
            .collect();
        let numeric: BTreeSet<String> = lines
            .iter()
            .filter(|l| l["kind"] == "attribute")
            .filter_map(|l| l["key"].as_str().map(str::to_owned))
            .collect();
        let sdk = relay.sdk_for(key).build().unwrap();
        assert!(sdk.wait_ready(STEP).await.has_data(), "{stem}");
        let snap = sdk.snapshot();
        let in_document: BTreeSet<&str> = file.document["features"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["name"].as_str())
            .collect();
        for (ci, case) in file.cases.iter().enumerate() {
            total += 1;
            if let Some(why) = skipped.get(&case.feature) {
                not_imported.push(format!("{stem}: {}: {why}", case.name));
                continue;
            }
            // An imported feature's flag is there (a missing one would
            // pass every case that expects the default).
            if in_document.contains(case.feature.as_str()) {
                assert!(snap.flag(&case.feature).is_some(), "{stem}: {} was not written", case.feature);
            }
            let ctx = context(&case.context, &numeric);
            let enabled = snap.detail(&case.feature, &ctx, false).value;
            let got = match (&case.expect.enabled, &case.expect.variant) {
                (Some(want), None) => (enabled != *want).then(|| format!("isEnabled {enabled}")),
                (None, Some(want)) => {
                    // A feature without variants has no variant flag: its
                    // answer is Unleash's "disabled" variant.
                    let fallback = json!({"name": "disabled", "enabled": false, "feature_enabled": enabled});
                    let variant_key = format!("{}.variant", case.feature);
                    let got = match snap.flag(&variant_key) {
                        Some(_) => snap.detail(&variant_key, &ctx, Cow::Owned(Json::Null)).value.into_owned(),
                        None => fallback,
                    };
                    (!same_variant(want, &got)).then(|| format!("getVariant {got}"))
                }
                _ => panic!("{stem}: {}: expect one of `enabled` and `variant`", case.name),
            };
            match got {
                None => passed += 1,
                Some(got) => {
                    differing.insert((stem.clone(), ci, case.name.clone()), got);
                }
            }
        }
        eprintln!("{stem} ({}): {} cases", file.title, file.cases.len());
        drop(sdk);
    }

    for line in &not_imported {
        eprintln!("not imported: {line}");
    }
    // Every difference is listed with its class, and every listed one
    // still differs.
    let classes = check_differences(
        &differing,
        listed.into_iter().map(|d| ((d.file, d.index, d.case), d.class, d.why)),
    );
    eprintln!(
        "unleash: {total} cases: {passed} give Unleash's answer, {} differ (by class: {classes:?}), {} are on features the import reports as not imported",
        differing.len(),
        not_imported.len()
    );
    // The counts docs/MIGRATION.md gives: a change in what is imported
    // shows here.
    assert_eq!(
        (total, passed, differing.len(), not_imported.len()),
        EXPECTED,
        "(cases, Unleash's answer, differences, not imported): update docs/MIGRATION.md"
    );
}

/// (cases, Unleash's answer, differences, not imported), as
/// docs/MIGRATION.md reports them.
const EXPECTED: (usize, usize, usize, usize) = (292, 236, 6, 50);
