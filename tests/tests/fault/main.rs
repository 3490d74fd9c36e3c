//! The fault suite (docs/RESILIENCE.md) and the inbound fuzz bodies against a real relay.
//!
//! One behaviour per module (`fault/*.rs`); the fixtures are the
//! `flagstream_tests` library's.

mod fault_large;
mod fault_proxy;
mod fault_restart;
mod fault_slow_reader;
mod fault_stall;
mod fault_storm;
mod inbound_fuzz;
mod inbound_relay;
