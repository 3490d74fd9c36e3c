//! The demo environment seeded on first start, so the README's first
//! command shows real flags: a rollout, a rule, a segment, several types.

use flagstream::FlagSet;

use crate::store::{Op, Store, StoreError};

/// The demo flags and segment, in the export file format.
pub const DEMO: &str = r#"
segments:
  - key: beta-testers
    description: People who asked for early features
    included: [user-1, user-2, user-3]
    rules:
      - id: staff
        clauses: [{attribute: email, op: ends_with, values: ["@example.com"]}]
flags:
  - key: new-checkout
    description: The redesigned checkout flow
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    rules:
      - id: us-enterprise
        clauses:
          - {attribute: country, op: in, values: [US, CA]}
          - {attribute: plan, op: in, values: [enterprise]}
        serve: {variation: 0}
    fallthrough: {rollout: {variations: [{variation: 0, weight: 10000}, {variation: 1, weight: 90000}]}}
    tags: [checkout]
  - key: theme
    description: Default UI theme
    type: string
    variations: [light, dark, system]
    on: true
    off_variation: 0
    targets: [{variation: 1, values: [user-42]}]
    fallthrough: {variation: 2}
  - key: beta-banner
    description: Show the beta banner to beta testers
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    rules:
      - id: beta
        clauses: [{attribute: key, op: segment_match, values: [beta-testers]}]
        serve: {variation: 0}
    fallthrough: {variation: 1}
  - key: max-upload-mb
    type: int
    variations: [10, 100]
    on: true
    off_variation: 0
    rules:
      - id: paid
        clauses: [{attribute: plan, op: in, values: [pro, enterprise]}]
        serve: {variation: 1}
    fallthrough: {variation: 0}
  - key: search-ranking
    type: json
    variations: [{"model": "bm25"}, {"model": "hybrid", "weight": 0.3}]
    on: false
    off_variation: 0
    fallthrough: {variation: 1}
"#;

/// Creates the `demo` environment with the demo flags; returns its SDK key.
pub async fn seed(store: &Store) -> Result<String, StoreError> {
    let (_, key) = store.create_env("demo", "Demo environment seeded on first start").await?;
    let set: FlagSet = serde_yaml_ng::from_str(DEMO)
        .map_err(|e| StoreError::Corrupt { what: "built-in demo flags".into(), source: Box::new(e) })?;
    let ops = set
        .segments
        .into_iter()
        .map(|segment| Op::PutSegment { segment, expected: Some(0) })
        .chain(set.flags.into_iter().map(|flag| Op::PutFlag { flag, expected: Some(0) }))
        .collect();
    store.write("demo", ops, None, "flagstream-relay", "demo seed").await?;
    Ok(key)
}
