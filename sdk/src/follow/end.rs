//! Why a stream ended ([`End`]), and the one place the follower reads a
//! gRPC status: a relay's refusal and its retry-after hint, a broken stream,
//! and the keepalive's signature that makes a break a stall. Also the cap
//! on what a relay may ask a follower to wait.

use std::time::Duration;

use flagstream_proto::v1 as pb;

use super::config::FollowConfig;
use super::transport::error_chain;
use crate::error::ApplyError;

/// The longest retry-after hint honoured: a relay cannot park clients.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Why a stream ended.
#[derive(Debug)]
pub(super) enum End {
    Connect(String),
    /// Refused or ended with a retry-after hint (PROTOCOL.md §6).
    RetryAfter(String, Duration),
    /// No message for this long; the transport's error, if it reported one.
    Stalled(Duration, Option<String>),
    Broken(String),
    /// The relay asked us to go elsewhere after `delay`.
    Reconnect(Duration, String),
    Resync(ApplyError),
    /// The owner asked to close: the final usage and a Goodbye were sent;
    /// whether the relay then ended the stream (it had read them all).
    Closed(bool),
}

/// Whether a stream error is the keepalive's signature: a transport error
/// (no status from the relay) ending a connection broken from under the
/// stream, after a silence longer than the keepalive interval plus half its
/// timeout (hyper's timer starts at the last frame read, a little before
/// the last message; the margin keeps a real timeout from reading as
/// "broken").
pub(super) fn silent_break(status: &tonic::Status, silent_for: Duration, cfg: &FollowConfig) -> bool {
    let Some(cause) = std::error::Error::source(status) else { return false };
    let broken_pipe = std::iter::successors(Some(cause), |e| e.source()).any(|e| {
        e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    }) || error_chain(cause).contains("broken pipe");
    broken_pipe && silent_for >= cfg.keepalive_interval + cfg.keepalive_timeout / 2
}

/// How a failed call or stream ends: with the relay's retry-after hint
/// (`flagstream-retry-after-ms`, PROTOCOL.md §6) when it sent one.
pub(super) fn ended(what: &str, status: &tonic::Status) -> End {
    let mut error = format!("{what}: {} {}", status.code(), status.message());
    if let Some(cause) = std::error::Error::source(status) {
        error.push_str(": ");
        error.push_str(&error_chain(cause));
    }
    match retry_after(status) {
        Some(hint) => End::RetryAfter(error, hint),
        None => End::Broken(error),
    }
}

/// The `flagstream-retry-after-ms` hint of a status, capped at
/// [`MAX_RETRY_AFTER`].
pub fn retry_after(status: &tonic::Status) -> Option<Duration> {
    status
        .metadata()
        .get("flagstream-retry-after-ms")
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .map(|ms| Duration::from_millis(ms).min(MAX_RETRY_AFTER))
}

/// The wait a relay's `reconnect` asks for (`suggested_delay_ms +
/// jitter_ms`), capped at [`MAX_RETRY_AFTER`] like a retry-after hint: a
/// misbehaving or hostile relay cannot park its clients for 49 days.
pub(super) fn reconnect_delay(r: &pb::Reconnect) -> Duration {
    Duration::from_millis(u64::from(r.suggested_delay_ms) + u64::from(r.jitter_ms)).min(MAX_RETRY_AFTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a broken pipe after a silence past the keepalive is a stall:
    /// not a status the relay sent, not an early break, not a reset.
    #[test]
    fn only_a_broken_pipe_after_the_keepalive_silence_is_a_stall() {
        let cfg = FollowConfig::default();
        let transport = |kind| tonic::Status::from_error(Box::new(std::io::Error::new(kind, "x")));
        let pipe = transport(std::io::ErrorKind::BrokenPipe);
        assert!(silent_break(&pipe, Duration::from_secs(5), &cfg));
        assert!(
            silent_break(&pipe, Duration::from_millis(4_100), &cfg),
            "hyper's timer starts a little earlier"
        );
        assert!(!silent_break(&pipe, Duration::from_secs(2), &cfg), "a break soon after a message");
        assert!(!silent_break(&transport(std::io::ErrorKind::ConnectionReset), Duration::from_secs(9), &cfg));
        assert!(!silent_break(&tonic::Status::unavailable("draining"), Duration::from_secs(9), &cfg));
    }
}
