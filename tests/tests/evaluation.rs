//! The data-driven evaluation suite: every case under `tests/data/eval/`
//! evaluates to exactly the value, variation and reason it expects.

use flagstream_tests::case;

/// Every case in every file passes; all failures are listed at once.
#[test]
fn every_case_matches_its_expectation() {
    let mut failures = Vec::new();
    let mut count = 0;
    for (file_name, file) in case::load_all() {
        let snap = match case::snapshot(&file) {
            Ok(s) => s,
            Err(e) => {
                failures.push(format!("{file_name}: flags do not validate: {e}"));
                continue;
            }
        };
        for c in &file.cases {
            count += 1;
            if let Err(diff) = case::run(&snap, c) {
                failures.push(format!("{file_name}: {}:\n        {diff}", c.name));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {count} cases failed:\n{}", failures.len(), failures.join("\n"));
    assert!(count >= 200, "the suite should hold at least 200 cases, found {count}");
}

/// Case names are unique across files, so a failure report names one case.
#[test]
fn case_names_are_unique() {
    let mut seen = std::collections::HashSet::new();
    for (file_name, file) in case::load_all() {
        for c in &file.cases {
            assert!(seen.insert(c.name.clone()), "{file_name}: duplicate case name {:?}", c.name);
        }
    }
}
