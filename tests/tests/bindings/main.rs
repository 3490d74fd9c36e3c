//! The Python and Node packages, built and tested with their own runners,
//! and the C ABI (`sdk/ffi`) from a C program.
//!
//! One behaviour per module (`bindings/*.rs`); the fixtures are the
//! `flagstream_tests` library's.

mod c_abi;
mod node_sdk;
mod python_sdk;
