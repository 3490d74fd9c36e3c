//! The follower's side of the contract: where what arrives goes ([`Sink`]),
//! what the sink is told ([`Event`]s) and how a stream ended ([`EndKind`]).

use std::time::Duration;

use flagstream_proto::v1 as pb;

use crate::error::ApplyError;
use crate::raw::{RawChunk, RawDelta};

/// How a stream ended (for counters and status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndKind {
    /// Connecting or subscribing failed.
    Connect,
    /// The relay refused or ended the stream with a retry-after hint.
    RetryAfter,
    /// No message within the watchdog interval, or the connection broke
    /// under a stream silent past the HTTP/2 keepalive interval plus
    /// timeout (the keepalive ping went unanswered).
    Stalled,
    /// The stream failed or closed.
    Broken,
    /// The relay asked the client to reconnect.
    Reconnect,
    /// Received data could not be applied; a snapshot is requested.
    Resync,
}

/// Something the sink may want to know.
#[derive(Debug)]
pub enum Event<'a> {
    /// A stream is open at `endpoint` (its first message arrived).
    Connected {
        /// The endpoint.
        endpoint: &'a str,
    },
    /// A heartbeat arrived.
    Heartbeat(&'a pb::Heartbeat),
    /// A snapshot (`snapshot: true`) or delta was applied.
    Applied {
        /// Whether it was a full snapshot.
        snapshot: bool,
    },
    /// Received data could not be applied; the next Hello asks for a
    /// snapshot.
    Resync(&'a ApplyError),
    /// The stream ended; the next attempt starts after `retry_in`.
    Ended {
        /// The endpoint.
        endpoint: &'a str,
        /// Why, in one line.
        reason: &'a str,
        /// The kind of end.
        kind: EndKind,
        /// The wait before the next attempt.
        retry_in: Duration,
        /// Whether the next attempt goes to another endpoint.
        switched: bool,
    },
    /// No stream has delivered anything for `stale_after`: the data the
    /// sink holds may be out of date. Raised once per outage.
    Stale {
        /// The last stream end's reason.
        reason: &'a str,
    },
}

/// Where a follower puts what it receives. Called from the follow task,
/// one call at a time, in stream order; `apply_*` run on tokio's blocking
/// pool (decoding and compiling thousands of items takes milliseconds and
/// must not hold a runtime worker).
pub trait Sink: Send + Sync + 'static {
    /// The cursor to resume from (`None`: no data yet).
    fn cursor(&self) -> Option<pb::Cursor>;
    /// The checksum (PROTOCOL.md §3.1) of the state [`Sink::cursor`] names
    /// (`None` with it). A heartbeat naming that cursor as the head with
    /// another checksum ends the stream with a resync.
    fn checksum(&self) -> Option<u64>;
    /// Applies a complete snapshot (chunks in order, `chunk_index` 0..n).
    /// Verifies the checksum; on success the data is served.
    fn apply_snapshot(&self, chunks: Vec<RawChunk>) -> Result<pb::Cursor, ApplyError>;
    /// Applies a delta and verifies the checksum.
    fn apply_delta(&self, delta: RawDelta) -> Result<pb::Cursor, ApplyError>;
    /// After a failed apply: the next Hello asks for a full snapshot, while
    /// the data held keeps being served.
    fn forget_cursor(&self);
    /// Something happened (status, counters, logs).
    fn event(&self, event: Event<'_>);
    /// A relay follower's propagation report for its upstream, offered
    /// every `report_interval`; `None`: nothing new to report.
    fn report(&self) -> Option<pb::PropagationReport> {
        None
    }
    /// Usage summaries for the relay (PROTOCOL.md "Usage summaries"),
    /// offered every `usage_interval`: what was counted since the previous
    /// call (each call moves the counts out); empty: nothing to send.
    fn usage(&self) -> Vec<pb::UsageSummary> {
        Vec::new()
    }
}
