//! Operating one relay: configuration, files, crash and restore, metrics, the status page, shutdown.
//!
//! One behaviour per module (`ops/*.rs`); the fixtures are the
//! `flagstream_tests` library's.

mod crash_consistency;
mod file_modes;
mod metrics_listener;
mod otlp_spans;
mod relay_config;
mod shutdown_finishes;
mod status_page;
mod status_page_tls;
mod store_restore;
