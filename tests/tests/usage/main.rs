//! Usage summaries: what SDKs report, what the relay keeps, and what it shows.
//!
//! One behaviour per module (`usage/*.rs`); the fixtures are the
//! `flagstream_tests` library's.

mod usage_churn;
mod usage_default_mismatch;
mod usage_fallbacks;
mod usage_ofrep;
mod usage_pages;
mod usage_refused;
mod usage_short_lived;
mod usage_stale;
