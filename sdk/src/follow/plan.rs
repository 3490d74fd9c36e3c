//! The retry plan: after a stream ended, how it is counted, how long to
//! wait and whether to move to the next endpoint. Pure but for the jitter,
//! and unit-tested here.

use std::time::Duration;

use rand::Rng;

use super::end::End;
use super::sink::EndKind;
use crate::backoff::Backoff;

/// Refusals with a hint in a row that are retried at the hint alone; the
/// next ones also wait the backoff.
const REFUSALS_BEFORE_BACKOFF: u32 = 3;

/// The shortest wait after a refusal with a hint: a tiny hint cannot make
/// a client spin.
pub const MIN_RETRY_AFTER: Duration = Duration::from_millis(100);

/// What to do after a stream ended: how it is counted, how long to wait,
/// whether to move to the next endpoint, and why (for the log and the
/// status).
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) kind: EndKind,
    pub(super) delay: Duration,
    pub(super) switch: bool,
    pub(super) reason: String,
}

/// The retry decision for `end` (pure but for the jitter): failures back
/// off with full jitter and move on; a retry-after hint is honoured with
/// up to a quarter more of jitter (at least 100 ms); a stall reconnects elsewhere after a
/// short jitter; a relay's reconnect request waits what it suggests; the
/// first resync in a row retries at once on the same endpoint, the next
/// ones back off and move on, so data this client cannot apply never
/// becomes a snapshot storm.
pub(super) fn plan(
    end: End,
    endpoint: &str,
    backoff: &mut Backoff,
    (resyncs_in_row, refusals_in_row): (u32, u32),
    stall_jitter: Duration,
) -> Plan {
    let (kind, delay, switch, reason) = match end {
        End::Connect(e) => (EndKind::Connect, backoff.fail(), true, format!("{endpoint}: {e}")),
        End::RetryAfter(e, hint) => {
            // The relay says when (a subscription refusal is the caller's
            // turn in its queue): come then, spread by up to a quarter
            // more, never sooner than 100 ms. From the fourth refusal in a
            // row (a full quota, not a passing storm, where a turn is
            // rarely missed more than once) it also waits the backoff.
            let base = hint.max(MIN_RETRY_AFTER);
            let turn = base + jitter_up_to(base / 4);
            let backoff = backoff.fail();
            let delay = if refusals_in_row > REFUSALS_BEFORE_BACKOFF { turn.max(backoff) } else { turn };
            let reason = format!("{endpoint}: {e} (relay asks to retry after {hint:?})");
            (EndKind::RetryAfter, delay, true, reason)
        }
        End::Broken(e) => (EndKind::Broken, backoff.fail(), true, format!("{endpoint}: {e}")),
        End::Stalled(after, cause) => {
            // A watchdog stall has no transport error: no suffix then.
            let cause = cause.map(|c| format!(": {c}")).unwrap_or_default();
            let reason = format!("{endpoint}: no message for {after:?} (stalled connection dropped){cause}");
            // The first stall after a healthy stream moves on within the
            // jitter; stalls in a row back off like any failure.
            let delay = if backoff.is_fresh() {
                backoff.fail();
                jitter_up_to(stall_jitter)
            } else {
                backoff.fail().max(jitter_up_to(stall_jitter))
            };
            (EndKind::Stalled, delay, true, reason)
        }
        End::Reconnect(delay, why) => (
            EndKind::Reconnect,
            delay + jitter_up_to(Duration::from_secs(1)),
            true,
            format!("{endpoint}: relay asked to reconnect: {why}"),
        ),
        // `run` returns on a close before planning; planned, it is an end
        // like any other.
        End::Closed(_) => (EndKind::Broken, Duration::ZERO, false, format!("{endpoint}: closed")),
        End::Resync(e) => {
            let reason = format!("{endpoint}: resync after: {e}");
            if resyncs_in_row > 1 {
                (EndKind::Resync, backoff.fail(), true, reason)
            } else {
                (EndKind::Resync, jitter_up_to(Duration::from_millis(200)), false, reason)
            }
        }
    };
    Plan { kind, delay, switch, reason }
}

/// Uniformly random in `[0, max)`.
pub fn jitter_up_to(max: Duration) -> Duration {
    let ms = max.as_millis() as u64;
    Duration::from_millis(if ms == 0 { 0 } else { rand::rng().random_range(0..ms) })
}

#[cfg(test)]
mod tests {
    use flagstream_proto::v1 as pb;

    use super::super::config::FollowConfig;
    use super::super::end::{MAX_RETRY_AFTER, reconnect_delay};
    use super::*;
    use crate::error::ApplyError;

    fn resync() -> End {
        End::Resync(ApplyError::ChunkOrder { got: 1, want: 0 })
    }

    /// The first resync in a row retries at once on the same endpoint; the
    /// following ones take the backoff, whose ceiling doubles, and move on.
    #[test]
    fn resyncs_after_the_first_back_off_and_move_on() {
        let mut b = Backoff::new(Duration::from_millis(400), Duration::from_secs(30));
        let first = plan(resync(), "e", &mut b, (1, 0), Duration::ZERO);
        assert!(!first.switch && first.delay < Duration::from_millis(200), "{first:?}");
        assert_eq!(b.ceiling(), Duration::from_millis(400), "the first resync costs no backoff");
        for (n, ceiling) in [(2, 400), (3, 800), (4, 1_600)] {
            let p = plan(resync(), "e", &mut b, (n, 0), Duration::ZERO);
            assert!(p.switch && p.kind == EndKind::Resync, "{p:?}");
            assert!(p.delay < Duration::from_millis(ceiling), "resync {n}: {p:?}");
            assert_eq!(b.ceiling(), Duration::from_millis(ceiling * 2), "resync {n} grew the backoff");
        }
    }

    /// A relay's reconnect request cannot park a client: whatever it
    /// suggests, the wait is at most [`MAX_RETRY_AFTER`] plus the
    /// client's own jitter of up to a second.
    #[test]
    fn a_reconnect_request_is_capped_like_a_retry_hint() {
        let asked = |suggested_delay_ms, jitter_ms| pb::Reconnect {
            suggested_delay_ms,
            jitter_ms,
            ..Default::default()
        };
        assert_eq!(reconnect_delay(&asked(250, 500)), Duration::from_millis(750));
        assert_eq!(reconnect_delay(&asked(u32::MAX, u32::MAX)), MAX_RETRY_AFTER);
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        let end = End::Reconnect(reconnect_delay(&asked(u32::MAX, 0)), "parked".into());
        let p = plan(end, "e", &mut b, (0, 0), Duration::ZERO);
        assert!(p.delay >= MAX_RETRY_AFTER && p.delay < MAX_RETRY_AFTER + Duration::from_secs(1), "{p:?}");
    }

    /// A retry-after hint is a floor: never sooner, at most a quarter
    /// later, whatever the backoff, for the first refusals in a row; past
    /// them it also waits the backoff; a tiny hint still waits 100 ms,
    /// jittered.
    #[test]
    fn a_retry_after_hint_is_never_undercut() {
        let hint = Duration::from_millis(2_500);
        let refused = || End::RetryAfter("refused".into(), hint);
        for _ in 0..200 {
            let mut b = Backoff::new(Duration::from_secs(10), Duration::from_secs(30));
            let p = plan(refused(), "e", &mut b, (0, REFUSALS_BEFORE_BACKOFF), Duration::ZERO);
            assert!(p.delay >= hint && p.delay <= hint + hint / 4, "{p:?}");
            assert!(p.switch && p.kind == EndKind::RetryAfter && p.reason.contains("retry after"), "{p:?}");
        }
        // In a row, with a backoff ceiling of 30 s: the longer of the two.
        let (mut longer, mut b) = (0, Backoff::new(Duration::from_secs(30), Duration::from_secs(30)));
        for _ in 0..200 {
            let p = plan(refused(), "e", &mut b, (0, REFUSALS_BEFORE_BACKOFF + 1), Duration::ZERO);
            assert!(p.delay >= hint, "{p:?}");
            longer += usize::from(p.delay > hint + hint / 4);
        }
        assert!(longer > 100, "repeated refusals did not take the backoff: {longer} of 200");
        let mut b = Backoff::new(Duration::from_millis(1), Duration::from_millis(1));
        let tiny = Duration::from_millis(1);
        let delays: Vec<Duration> = (0..50)
            .map(|_| plan(End::RetryAfter("x".into(), tiny), "e", &mut b, (0, 1), Duration::ZERO).delay)
            .collect();
        assert!(delays.iter().all(|d| *d >= MIN_RETRY_AFTER && *d <= MIN_RETRY_AFTER * 5 / 4), "{delays:?}");
        assert!(delays.iter().any(|d| *d != delays[0]), "tiny hints are still spread: {delays:?}");
    }

    /// The first stall after a healthy period reconnects elsewhere within
    /// the stall jitter; stalls in a row back off; the default budget
    /// (keepalive interval + timeout + stall jitter) stays within 10 s.
    #[test]
    fn a_stall_moves_on_within_the_default_budget_and_repeats_back_off() {
        let cfg = FollowConfig::default();
        for _ in 0..200 {
            let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
            let p = plan(End::Stalled(Duration::from_secs(5), None), "e", &mut b, (0, 0), cfg.stall_jitter);
            assert!(p.switch && p.kind == EndKind::Stalled && p.delay < cfg.stall_jitter, "{p:?}");
            assert_eq!(b.ceiling(), Duration::from_secs(2), "the stall counts as a failure");
        }
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        for _ in 0..5 {
            plan(End::Stalled(Duration::from_secs(5), None), "e", &mut b, (0, 0), cfg.stall_jitter);
        }
        assert_eq!(b.ceiling(), Duration::from_secs(30), "stalls in a row back off");
        let budget = cfg.keepalive_interval + cfg.keepalive_timeout + cfg.stall_jitter;
        assert!(budget <= Duration::from_secs(10), "default stall budget {budget:?}");
    }
}
