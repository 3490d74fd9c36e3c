//! Full-jitter exponential backoff: the n-th consecutive failure waits a
//! uniformly random time in `[0, min(cap, base · 2^n))`, so a fleet that
//! lost its relay at the same instant does not come back at the same
//! instant. A healthy period resets it.

use std::time::Duration;

use rand::Rng;

/// Backoff state.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    base: Duration,
    cap: Duration,
    failures: u32,
}

impl Backoff {
    pub(crate) fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff { base, cap, failures: 0 }
    }

    /// The upper bound of the next delay.
    pub(crate) fn ceiling(&self) -> Duration {
        let exp = self.base.saturating_mul(1u32.checked_shl(self.failures.min(20)).unwrap_or(u32::MAX));
        exp.min(self.cap)
    }

    /// Records a failure and returns how long to wait.
    pub(crate) fn fail(&mut self) -> Duration {
        let ceiling = self.ceiling();
        self.failures = self.failures.saturating_add(1);
        let ms = ceiling.as_millis() as u64;
        Duration::from_millis(if ms == 0 { 0 } else { rand::rng().random_range(0..ms) })
    }

    /// Whether no failure was recorded since the last reset.
    pub(crate) fn is_fresh(&self) -> bool {
        self.failures == 0
    }

    /// Forgets past failures (after a healthy period).
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Delays stay under a ceiling that doubles up to the cap, and a reset
    /// starts over.
    #[test]
    fn doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        let ceilings: Vec<u64> = (0..8)
            .map(|_| {
                let c = b.ceiling();
                let d = b.fail();
                assert!(d < c, "{d:?} >= {c:?}");
                c.as_secs()
            })
            .collect();
        assert_eq!(ceilings, vec![1, 2, 4, 8, 16, 30, 30, 30]);
        b.reset();
        assert_eq!(b.ceiling(), Duration::from_secs(1));
    }

    /// Delays are spread, not all equal (the point of jitter).
    #[test]
    fn jittered() {
        let delays: std::collections::HashSet<Duration> = (0..50)
            .map(|_| {
                let mut b = Backoff::new(Duration::from_secs(10), Duration::from_secs(30));
                b.fail()
            })
            .collect();
        assert!(delays.len() > 10);
    }
}
