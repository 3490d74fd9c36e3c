//! Progressive rollouts that advance on the evaluator's own clock: a
//! [`Schedule`](crate::model::Schedule) compiled into sorted steps, the
//! step current at an instant, and the variation it serves a context.
//!
//! A step's weight is the share of buckets `[0, weight)` that get the
//! schedule's variation. Validation keeps weights non-decreasing, so the
//! share only grows: a context that got the variation keeps it at every
//! later step, on every SDK, with no write and no connection to any relay.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::bucket;
use crate::context::Context;
use crate::error::Uncompilable;
use crate::model::{Schedule, WEIGHT_TOTAL};
use crate::reference::{Attr, KindSel, parse_attr};

/// A schedule ready to evaluate.
#[derive(Debug)]
pub(crate) struct CompiledSchedule {
    pub(crate) variation: u32,
    pub(crate) otherwise: u32,
    kind: KindSel,
    bucket_by: Attr,
    seed: u64,
    /// `(start, weight)` by increasing start.
    steps: Box<[(i64, u32)]>,
}

impl CompiledSchedule {
    /// Compiles `s` for a flag bucketing with `salt`.
    pub(crate) fn compile(s: &Schedule, salt: &str) -> Result<CompiledSchedule, Uncompilable> {
        let ordered =
            s.steps.windows(2).all(|w| w[0].start_unix_ms < w[1].start_unix_ms && w[0].weight <= w[1].weight);
        if s.steps.is_empty() || !ordered || s.steps.iter().any(|st| st.weight > WEIGHT_TOTAL) {
            return Err(Uncompilable);
        }
        Ok(CompiledSchedule {
            variation: s.variation,
            otherwise: s.otherwise,
            kind: KindSel::parse(&s.context_kind),
            bucket_by: parse_attr(&s.bucket_by).map_err(|_| Uncompilable)?,
            seed: bucket::seed_for(s.seed, salt),
            steps: s.steps.iter().map(|st| (st.start_unix_ms, st.weight)).collect(),
        })
    }

    /// The step number current at `now` (1-based; 0 before the first step
    /// starts) and its weight.
    #[inline]
    pub(crate) fn step_at(&self, now_ms: i64) -> (u32, u32) {
        let started = self.steps.partition_point(|(start, _)| *start <= now_ms);
        match started {
            0 => (0, 0),
            n => (n as u32, self.steps[n - 1].1),
        }
    }

    /// The variation served to `ctx` at `now`, and the step number.
    /// A context that cannot be bucketed gets the variation only at 100%.
    #[inline]
    pub(crate) fn serve(&self, ctx: &Context<'_>, now_ms: i64) -> (u32, u32) {
        let (step, weight) = self.step_at(now_ms);
        let inside = match bucket::bucket_if_any(ctx, &self.kind, &self.bucket_by, self.seed) {
            Some(b) => b < weight,
            None => weight >= WEIGHT_TOTAL,
        };
        (if inside { self.variation } else { self.otherwise }, step)
    }
}

/// The evaluator's clock: read at most once per evaluation, and only when
/// a schedule is reached (most evaluations never read it).
#[derive(Debug)]
pub(crate) struct Clock {
    now: Cell<Option<i64>>,
}

impl Clock {
    /// The system clock.
    #[inline]
    pub(crate) fn system() -> Clock {
        Clock { now: Cell::new(None) }
    }

    /// A fixed instant (tests, `Snapshot::evaluate_at`, what-if tools).
    #[inline]
    pub(crate) fn at(unix_ms: i64) -> Clock {
        Clock { now: Cell::new(Some(unix_ms)) }
    }

    /// Now, in Unix milliseconds.
    #[inline]
    pub(crate) fn now_ms(&self) -> i64 {
        if let Some(t) = self.now.get() {
            return t;
        }
        // A clock before 1970 reads as 1970: every step with a real start
        // is then still ahead, the safe direction.
        let t = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        self.now.set(Some(t));
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Step;

    fn schedule(steps: &[(i64, u32)]) -> Schedule {
        Schedule {
            variation: 0,
            otherwise: 1,
            bucket_by: String::new(),
            context_kind: String::new(),
            seed: Some(7),
            steps: steps.iter().map(|&(start_unix_ms, weight)| Step { start_unix_ms, weight }).collect(),
        }
    }

    #[test]
    fn the_current_step_is_the_last_one_started() {
        let s =
            CompiledSchedule::compile(&schedule(&[(100, 1_000), (200, 5_000), (300, 100_000)]), "f").unwrap();
        assert_eq!(s.step_at(99), (0, 0));
        assert_eq!(s.step_at(100), (1, 1_000));
        assert_eq!(s.step_at(250), (2, 5_000));
        assert_eq!(s.step_at(i64::MAX), (3, 100_000));
    }

    #[test]
    fn unordered_or_shrinking_steps_do_not_compile() {
        for bad in [&[(200, 1), (100, 2)][..], &[(100, 5), (200, 4)], &[], &[(1, 100_001)], &[(1, 1), (1, 2)]]
        {
            assert!(CompiledSchedule::compile(&schedule(bad), "f").is_err(), "{bad:?}");
        }
    }

    /// Buckets only grow: whoever has the variation at one instant has it
    /// at every later one, over many contexts and a dense ramp.
    #[test]
    fn a_context_that_got_the_variation_keeps_it() {
        let steps: Vec<(i64, u32)> = (0..20).map(|i| (i * 10, (i as u32 + 1) * 5_000)).collect();
        let s = CompiledSchedule::compile(&schedule(&steps), "f").unwrap();
        for k in 0..2_000 {
            let key = format!("user-{k}");
            let ctx = Context::new(key.as_str());
            let mut had = false;
            for t in (-5..205).step_by(5) {
                let got = s.serve(&ctx, t).0 == 0;
                assert!(!had || got, "{key} lost the variation at {t}");
                had = got;
            }
            assert!(had, "{key} never got it at 100%");
        }
    }

    #[test]
    fn an_unbucketable_context_waits_for_100_percent() {
        let mut sched = schedule(&[(0, 99_999), (10, 100_000)]);
        sched.bucket_by = "missing".into();
        let s = CompiledSchedule::compile(&sched, "f").unwrap();
        let ctx = Context::new("u");
        assert_eq!(s.serve(&ctx, 5), (1, 1));
        assert_eq!(s.serve(&ctx, 10), (0, 2));
    }
}
