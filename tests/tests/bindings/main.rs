//! The Python and Node packages, built and tested with their own runners.
//!
//! One behaviour per module (`bindings/*.rs`); the fixtures are the
//! `flagstream_tests` library's.

mod node_sdk;
mod python_sdk;
