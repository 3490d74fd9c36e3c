//! The Python, Node, Go and Java packages, built and tested with their own
//! runners (pytest, `node --test`, `go test`, JUnit), and the C ABI
//! (`sdk/ffi`) they (Go, Java) are built on, from a C program.
//!
//! One behaviour per module (`bindings/*.rs`); the fixtures are the
//! `flagstream_tests` library's.

mod c_abi;
mod go_sdk;
mod java_sdk;
mod node_sdk;
mod ofrep_clients;
mod python_sdk;
mod toolchain;
