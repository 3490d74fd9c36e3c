//! Coalesced acks: what a stream tells the relay about the revisions it
//! applied, at most once per [`ACK_INTERVAL`].
//!
//! An ack only feeds the relay's propagation statistics (it never changes
//! what the relay sends), and reading one costs the relay about as much as
//! sending the delta it answers. So the first revision applied after a
//! quiet interval is acked at once (a single write's propagation is seen
//! as soon as it happens) and those applied within the interval after an
//! ack are held, the newest replacing the older (acks are cumulative), and
//! sent when the interval is over, saying how long the ack was held
//! (`Ack.held_us`): the relay records the revision as reached when it was
//! applied, not when the ack arrived. A revision is never reported reached
//! before it was applied; one covered by a later revision's ack is
//! reported reached when that later one was applied (up to an interval
//! late, never early).

use std::time::Duration;

use flagstream_proto::v1 as pb;
use tokio::time::Instant;

/// Shortest time between two acks of one stream.
pub(super) const ACK_INTERVAL: Duration = Duration::from_secs(1);

/// One stream's acks: when the last went, and the newest applied revision
/// not yet acked.
#[derive(Debug)]
pub(super) struct Acks {
    interval: Duration,
    last_sent: Option<Instant>,
    /// The newest applied cursor not acked yet, and when it was applied.
    held: Option<(pb::Cursor, Instant)>,
}

impl Acks {
    /// A new stream's acks: its first is sent at once.
    pub(super) fn new(interval: Duration) -> Acks {
        Acks { interval, last_sent: None, held: None }
    }

    /// `cursor` was applied at `now`: the ack to send now, or `None` when
    /// it is held until [`due`](Self::due).
    pub(super) fn applied(&mut self, cursor: pb::Cursor, now: Instant) -> Option<pb::Ack> {
        self.held = Some((cursor, now));
        match self.last_sent {
            Some(last) if now.saturating_duration_since(last) < self.interval => None,
            _ => self.take(now),
        }
    }

    /// When the held ack is to be sent; `None` when none is held.
    pub(super) fn due(&self) -> Option<Instant> {
        self.held.as_ref()?;
        Some(self.last_sent.map_or_else(Instant::now, |last| last + self.interval))
    }

    /// The held ack, sent at `now` (when it is due, or when the stream
    /// closes); `None` when none is held.
    pub(super) fn take(&mut self, now: Instant) -> Option<pb::Ack> {
        let (cursor, applied) = self.held.take()?;
        self.last_sent = Some(now);
        Some(pb::Ack {
            epoch: cursor.epoch,
            revision: cursor.revision,
            apply_duration_us: 0,
            held_us: now.saturating_duration_since(applied).as_micros() as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor(revision: u64) -> pb::Cursor {
        pb::Cursor { epoch: "e".into(), revision }
    }

    #[test]
    fn the_first_ack_goes_at_once_and_later_ones_within_the_interval_are_held_newest_first() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut acks = Acks::new(Duration::from_secs(1));
        let first = acks.applied(cursor(1), t0).expect("the first ack is not held");
        assert_eq!((first.revision, first.held_us), (1, 0));
        assert_eq!(acks.due(), None);
        // Three more revisions within the second: none sent, the newest kept.
        for (revision, at) in [(2, 200), (3, 400), (4, 600)] {
            assert!(acks.applied(cursor(revision), ms(at)).is_none(), "revision {revision} held");
        }
        assert_eq!(acks.due(), Some(ms(1_000)));
        let held = acks.take(ms(1_000)).expect("a held ack");
        // Revision 4 was applied 400 ms before the ack went.
        assert_eq!((held.epoch.as_str(), held.revision, held.held_us), ("e", 4, 400_000));
        assert_eq!(acks.due(), None);
        assert!(acks.take(ms(1_001)).is_none(), "nothing left to ack");
        // A revision a whole interval after the last ack goes at once.
        let next = acks.applied(cursor(5), ms(2_000)).expect("not held after a quiet interval");
        assert_eq!((next.revision, next.held_us), (5, 0));
    }

    #[test]
    fn a_held_ack_is_sent_when_the_stream_closes() {
        let t0 = Instant::now();
        let mut acks = Acks::new(Duration::from_secs(1));
        assert!(acks.applied(cursor(1), t0).is_some());
        assert!(acks.applied(cursor(2), t0 + Duration::from_millis(10)).is_none());
        let last = acks.take(t0 + Duration::from_millis(30)).expect("the held ack");
        assert_eq!((last.revision, last.held_us), (2, 20_000));
    }
}
