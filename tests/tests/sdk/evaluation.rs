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
    assert!(count >= 1_000, "the suite should hold at least 1,000 cases, found {count}");
}

/// The same cases through a snapshot of encoded flags compiled on first use
/// (how a client serves from its cache): identical answers. Only files whose
/// flags validate, as only validated data is ever cached.
#[test]
fn every_case_matches_through_flags_compiled_on_first_use() {
    let mut count = 0;
    for (file_name, file) in case::load_all().into_iter().filter(|(_, f)| f.validate) {
        let flags = file
            .flags
            .iter()
            .map(|f| bytes::Bytes::from(prost::Message::encode_to_vec(&flagstream::wire::flag_to_proto(f))));
        let snap = flagstream::Snapshot::from_encoded(flags, file.segments.clone(), &Default::default())
            .unwrap_or_else(|e| panic!("{file_name}: {e}"));
        for c in &file.cases {
            count += 1;
            if let Err(diff) = case::run(&snap, c) {
                panic!("{file_name}: {}: {diff}", c.name);
            }
        }
    }
    assert!(count >= 900, "only {count} cases ran");
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
