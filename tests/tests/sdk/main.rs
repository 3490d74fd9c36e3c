//! The Rust SDK: its stream, cache, failover, offline sources, OpenFeature, and the evaluation contract.
//!
//! One behaviour per module (`sdk/*.rs`); the fixtures are the
//! `flagstream_tests` library's.

mod evaluation;
mod evaluation_properties;
mod evaluation_reference;
mod mirror_checksum;
mod regex_budget_order;
mod sdk_acks;
mod sdk_cache;
mod sdk_failover;
mod sdk_offline;
mod sdk_openfeature;
mod sdk_reconnect_cap;
mod sdk_resync;
mod sdk_retry_after;
mod sdk_stream;
mod sdk_without_cache;
