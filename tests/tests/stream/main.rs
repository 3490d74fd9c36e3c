//! The Subscribe stream of one relay: snapshots, deltas, resume, limits, hostile clients, TLS, drain;
//! and OFREP, its HTTP evaluation endpoints.
//!
//! One behaviour per module (`stream/*.rs`); the fixtures are the
//! `flagstream_tests` library's.

mod connection_limits;
mod encode_once;
mod hostile_cursor;
mod hostile_hello;
mod network_posture;
mod ofrep_answers;
mod ofrep_client_keys;
mod ofrep_conformance;
mod ofrep_events;
mod ofrep_limits;
mod refusals;
mod restart_resume;
mod sigterm_drain;
mod snapshot_permits;
mod stream_limits;
mod stream_memory;
mod subscribe_ahead;
mod subscribe_errors;
mod subscribe_features;
mod subscribe_resume;
mod subscribe_snapshot;
mod tls;
