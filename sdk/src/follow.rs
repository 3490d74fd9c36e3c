//! Following one environment over the Subscribe stream: the machinery the
//! SDK client and replica relays share (DESIGN: "replica relays reuse the
//! SDK's sync machinery rather than a second copy").
//!
//! [`run`] keeps one stream open to one of the configured endpoints and
//! hands what arrives to a [`Sink`]: complete snapshots (chunks assembled
//! and checked as they arrive, within the snapshot size limit), deltas, and
//! [`Event`]s (connected, heartbeat, applied, ended, stale). It owns
//! everything about staying connected, built against the transport facts
//! the product rests on: every attempt builds a new `Channel` (tonic would
//! otherwise reuse a dead connection); HTTP/2 keepalive and
//! `TCP_USER_TIMEOUT` are set on the client; a watchdog tears the stream
//! down when no message arrives within `watchdog_misses` heartbeat
//! intervals (sized from the interval the relay states); failures back off
//! with full jitter and rotate through the endpoints; a relay's
//! retry-after hint is honoured with jitter; data that cannot be applied
//! makes the next Hello ask for a snapshot. What the data *means* (compiled
//! flags for an SDK, a persisted store for a relay) is the sink's business.
//!
//! The parts, bottom up: `config.rs` (how to follow), `sink.rs` (where
//! data goes, what the sink hears), `transport.rs` (a new channel per
//! attempt), `end.rs` (why a stream ended; the one reading of a gRPC
//! status), `plan.rs` (the retry decision), `stream.rs` (one stream); the
//! loop over streams is here.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::error::ApplyError;

mod ack;
mod config;
mod end;
mod plan;
mod sink;
mod stream;
mod transport;

pub use crate::raw::{RawChunk, RawDelta};
pub use config::{FollowConfig, Tls};
use end::End;
pub use end::{MAX_RETRY_AFTER, retry_after};
pub use plan::{MIN_RETRY_AFTER, jitter_up_to};
use plan::{Plan, plan};
pub use sink::{EndKind, Event, Sink};
use stream::{Follower, Progress};
pub use transport::{connect, error_chain};

/// Follows until the task is aborted (or the returned future dropped).
pub async fn run<S: Sink>(sink: Arc<S>, cfg: FollowConfig) {
    let (_never, closing) = watch::channel(false);
    run_until_closed(sink, cfg, closing).await;
}

/// Follows until `closing` turns true (or its sender is dropped). Then, on
/// an open stream, sends the usage counted since the last summary and a
/// Goodbye, and waits for the relay to end the stream, which says it has
/// read them all: returns `true` then. Returns `false` when the close found
/// no open stream, or the stream failed first. The wait for the relay is at
/// most 30 s (a relay that predates the Goodbye never ends the stream for
/// it); the caller may bound it further.
pub async fn run_until_closed<S: Sink>(
    sink: Arc<S>,
    cfg: FollowConfig,
    mut closing: watch::Receiver<bool>,
) -> bool {
    if cfg.endpoints.is_empty() {
        tracing::error!("follow: no endpoints configured");
        stream::closed(&mut closing).await;
        return false;
    }
    let mut f = Follower { sink, cfg, mismatches: 0 };
    let mut backoff = Backoff::new(f.cfg.backoff_base, f.cfg.backoff_cap);
    let mut idx = 0usize;
    let mut down_since = Instant::now();
    // Resyncs since the last successful apply: the second in a row backs
    // off and moves on, so data this client cannot apply never becomes a
    // fleet-wide snapshot storm.
    let mut resyncs_in_row = 0u32;
    // Refusals with a retry hint since the last stream that delivered a
    // message: past `REFUSALS_BEFORE_BACKOFF` they wait the backoff too.
    let mut refusals_in_row = 0u32;
    let mut stale_raised = false;
    loop {
        if closing.has_changed().is_err() || *closing.borrow() {
            return false;
        }
        let endpoint = f.cfg.endpoints[idx % f.cfg.endpoints.len()].clone();
        let started = Instant::now();
        let mut progress = Progress::default();
        let end = f.stream_once(&endpoint, &mut progress, &mut closing).await;
        if let End::Closed(confirmed) = end {
            return confirmed;
        }
        if started.elapsed() >= f.cfg.healthy_after {
            backoff.reset();
        }
        if progress.applied > 0 {
            resyncs_in_row = 0;
        }
        if progress.messages > 0 {
            refusals_in_row = 0;
        }
        // The outage starts when a stream that worked (delivered at least
        // one message) ends, not at each failed attempt to get one back.
        if progress.messages > 0 {
            down_since = Instant::now();
            stale_raised = false;
        }
        if let End::Resync(e) = &end {
            if matches!(e, ApplyError::Checksum { .. } | ApplyError::Diverged { .. }) {
                f.mismatches += 1;
            }
            tracing::warn!(error = %e, endpoint = %endpoint, "could not apply received data; requesting a full snapshot");
            f.sink.event(Event::Resync(e));
            // Keep serving what we have; ask for everything again.
            f.sink.forget_cursor();
            resyncs_in_row += 1;
        }
        if matches!(end, End::RetryAfter(..)) {
            refusals_in_row += 1;
        }
        let Plan { kind, delay, switch, reason } =
            plan(end, &endpoint, &mut backoff, (resyncs_in_row, refusals_in_row), f.cfg.stall_jitter);
        tracing::info!(endpoint = %endpoint, reason = %reason, retry_in = ?delay, "relay stream ended");
        let switched = switch && f.cfg.endpoints.len() > 1;
        f.sink.event(Event::Ended { endpoint: &endpoint, reason: &reason, kind, retry_in: delay, switched });
        if switched {
            idx += 1;
        }
        // Wait, raising `Stale` once the outage passes the threshold.
        let wake = Instant::now() + delay;
        loop {
            let stale_at = down_since + f.cfg.stale_after;
            if !stale_raised && Instant::now() >= stale_at {
                stale_raised = true;
                f.sink.event(Event::Stale { reason: &reason });
            }
            let next = if stale_raised { wake } else { wake.min(stale_at) };
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                // Closed between streams: nothing open to send usage on.
                () = stream::closed(&mut closing) => return false,
            }
            if Instant::now() >= wake {
                break;
            }
        }
    }
}
