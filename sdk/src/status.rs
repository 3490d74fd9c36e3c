//! The client's health as users see it: what data it serves, from where,
//! and, when it is not current, why.

use std::time::SystemTime;

/// Where the served flags came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A relay stream.
    Stream,
    /// The on-disk cache of a previous run.
    Cache,
    /// A flag file (offline mode).
    File,
    /// Test data set in code.
    Test,
}

/// One failed attempt to reach a relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The endpoint.
    pub endpoint: String,
    /// What went wrong.
    pub error: String,
    /// How long the client waits before its next attempt (backoff with
    /// jitter, or at least the relay's retry-after hint).
    pub retry_in: std::time::Duration,
}

/// Client status.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// No data yet. `attempts` lists the most recent failures (bounded).
    Initializing {
        /// Recent failed attempts, oldest first.
        attempts: Vec<Attempt>,
    },
    /// Serving current data.
    Ready {
        /// Where the data came from.
        source: Source,
        /// Its revision.
        revision: u64,
        /// Since when this status holds.
        since: SystemTime,
    },
    /// Serving data that may be out of date.
    Stale {
        /// Where the data came from.
        source: Source,
        /// Its revision.
        revision: u64,
        /// Since when.
        since: SystemTime,
        /// Why (e.g. the relay stalled, every endpoint down).
        reason: String,
    },
    /// Cannot work at all (e.g. bad configuration); no data.
    Failed {
        /// Why.
        reason: String,
    },
}

impl Status {
    /// Whether flags are being served (ready or stale).
    pub fn has_data(&self) -> bool {
        matches!(self, Status::Ready { .. } | Status::Stale { .. })
    }

    /// Whether the data is marked stale.
    pub fn is_stale(&self) -> bool {
        matches!(self, Status::Stale { .. })
    }
}

/// How many recent attempts [`Status::Initializing`] keeps.
pub(crate) const MAX_ATTEMPTS: usize = 16;
