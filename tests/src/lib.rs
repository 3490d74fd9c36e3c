//! Shared fixtures for flagstream's integration tests: the data-driven
//! evaluation case format (files under `tests/data/eval/`) and helpers to
//! load and run them. Relay and SDK process fixtures join here as those
//! components land.

pub mod case;
