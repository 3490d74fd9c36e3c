//! The workspace itself: crate boundaries, deploy artifacts, the flagctl CLI.
//!
//! One behaviour per module (`tooling/*.rs`); the fixtures are the
//! `flagstream_tests` library's.

mod cli;
mod core_dependencies;
mod deploy_artifacts;
