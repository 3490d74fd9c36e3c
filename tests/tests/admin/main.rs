//! The Admin API of one relay: access and tokens, audit, quotas and limits, writes and their propagation.
//!
//! One behaviour per module (`admin/*.rs`); the fixtures are the
//! `flagstream_tests` library's.

mod access;
mod access_quotas;
mod admin_errors;
mod admin_garbage;
mod audit_chain;
mod audit_retention;
mod env_delete;
mod evaluate_limits;
mod memory_budget;
mod memory_budget_fair;
mod quotas;
mod regex_limits;
mod sdk_keys;
mod trace_write;
mod watch_limits;
mod write_cancel;
mod write_propagation;
