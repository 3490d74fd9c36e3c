//! The ground every part stands on: what an operator measures and sets.
//!
//! The metric registry ([`metrics`]), the limits an operator configures
//! (quota settings and connection caps, [`limit`]), facts about this
//! process (resident memory, persistent id, [`process`]), the C
//! allocator's settings ([`allocator`]), owner-only files
//! ([`permission`]), a bounded HTTP listener ([`http`]), how secrets are made, hashed, compared and written
//! ([`secret`]), and the logs and optional OTLP span export
//! ([`telemetry`]).
//!
//! Uses nothing of the relay: every other part may use it. The surfaces
//! that read the other parts (the metrics listener, the status page, the
//! probe command) are the server's.

pub mod allocator;
pub mod http;
pub(crate) mod limit;
pub mod metrics;
pub(crate) mod permission;
pub(crate) mod process;
pub(crate) mod secret;
pub(crate) mod telemetry;
