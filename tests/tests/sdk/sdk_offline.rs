//! Offline sources: a flag file (the `flagctl export` format) and in-code
//! test data, for running without a relay and for users' unit tests.

use flagstream::{Client, Context, FlagSet, Source, Status};

const FLAGS: &str = r#"
flags:
  - key: dark-mode
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    targets: [{variation: 0, values: [alice]}]
    fallthrough: {variation: 1}
"#;

/// A YAML flag file serves its flags, with status Ready{File}.
#[tokio::test]
async fn offline_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flags.yaml");
    std::fs::write(&path, FLAGS).unwrap();
    let c = Client::builder().offline_file(&path).build().unwrap();
    assert!(matches!(c.status(), Status::Ready { source: Source::File, .. }));
    assert!(c.bool("dark-mode", &Context::new("alice"), false));
    assert!(!c.bool("dark-mode", &Context::new("bob"), true));
}

/// A bad flag file is an error naming the file and the field.
#[tokio::test]
async fn bad_offline_file_names_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flags.yaml");
    std::fs::write(&path, FLAGS.replace("off_variation: 1", "off_variation: 9")).unwrap();
    let err = Client::builder().offline_file(&path).build().unwrap_err();
    let msg = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(msg.contains("flags.yaml"), "{msg}");
    assert!(msg.contains(r#"flags["dark-mode"].off_variation"#), "{msg}");
}

/// Test data set in code drives the same evaluation.
#[tokio::test]
async fn test_data() {
    let set: FlagSet = serde_yaml_ng::from_str(FLAGS).unwrap();
    let c = Client::builder().test_data(set).build().unwrap();
    assert!(matches!(c.status(), Status::Ready { source: Source::Test, .. }));
    assert!(c.bool("dark-mode", &Context::new("alice"), false));
}
