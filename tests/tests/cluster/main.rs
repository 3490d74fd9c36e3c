//! Relays together: replicas and the relay tree, and relays sharing a PostgreSQL database.
//!
//! One behaviour per module (`cluster/*.rs`); the fixtures are the
//! `flagstream_tests` library's.

mod postgres_audit;
mod postgres_freshness;
mod postgres_ofrep;
mod postgres_privileges;
mod postgres_pruning;
mod postgres_recovery;
mod postgres_revoke;
mod postgres_tls;
mod postgres_usage;
mod postgres_writers;
mod replica_ahead;
mod replica_chain;
mod replica_failover;
mod replica_follow;
mod replica_ofrep;
mod replica_outage;
mod replica_promotion;
mod replica_report_counts;
mod replica_stream_cap;
mod status_tree;
