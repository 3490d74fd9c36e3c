//! The evaluation algorithm of `docs/EVALUATION.md`: off → prerequisites →
//! targets → rules → fallthrough, over a compiled [`Snapshot`].
//!
//! Everything here is synchronous and allocation-free for bool, string and
//! number flags: results borrow from the snapshot (rule ids, prerequisite
//! keys, string values). No I/O, no locks, no panics on any input. The
//! result types are `result.rs`.

use std::borrow::Cow;

use serde_json::Value as Json;

use crate::bucket;
use crate::clause::{StrSet, all_match};
use crate::compiled::{CompiledFlag, CompiledServe, Constant};
use crate::context::Context;
use crate::error::ErrorKind;
use crate::model::FlagType;
use crate::reference::KindSel;
use crate::result::{Detail, Evaluation, Reason};
use crate::schedule::Clock;
use crate::short::Name;
use crate::snapshot::{Cell, Found, Head, Snapshot};
use crate::usage::FlagUsage;
use crate::value::FromValue;

/// What evaluating a flag decided: a variation and why, or an error.
///
/// Packed into two words so it is returned in registers: a `Result` of a
/// [`Reason`] (with its borrowed id and optional step at odd offsets) went
/// through the stack, and reading it back cost store-forwarding stalls on
/// every evaluation. The rule id and prerequisite key are looked up from
/// the indexes only when the [`Reason`] is built.
#[derive(Clone, Copy)]
struct Outcome {
    /// Bits 0..32: the variation (for an error: the `ErrorKind`);
    /// 32..40: the tag; bit 40: a rollout or schedule chose it.
    word: u64,
    /// Bits 0..32: the rule or prerequisite index; 32..64: schedule step
    /// + 1 (0: no schedule).
    at: u64,
}

const OFF: u64 = 0;
const TARGET: u64 = 1;
const RULE: u64 = 2;
const FALLTHROUGH: u64 = 3;
const PREREQUISITE: u64 = 4;
const ERROR: u64 = 5;

impl Outcome {
    #[inline(always)]
    fn new(tag: u64, variation: u32, rollout: bool, index: u32, step: Option<u32>) -> Outcome {
        let step = step.map_or(0, |s| u64::from(s) + 1);
        Outcome {
            word: u64::from(variation) | tag << 32 | u64::from(rollout) << 40,
            at: u64::from(index) | step << 32,
        }
    }

    #[inline(always)]
    fn error(kind: ErrorKind) -> Outcome {
        Outcome::new(ERROR, kind as u32, false, 0, None)
    }

    #[inline(always)]
    fn tag(self) -> u64 {
        (self.word >> 32) & 0xff
    }

    #[inline(always)]
    fn variation(self) -> u32 {
        self.word as u32
    }

    #[inline(always)]
    fn error_kind(self) -> Option<ErrorKind> {
        if self.tag() != ERROR {
            return None;
        }
        Some(match self.word as u32 {
            x if x == ErrorKind::FlagNotFound as u32 => ErrorKind::FlagNotFound,
            x if x == ErrorKind::WrongType as u32 => ErrorKind::WrongType,
            x if x == ErrorKind::NotReady as u32 => ErrorKind::NotReady,
            _ => ErrorKind::MalformedFlag,
        })
    }

    #[inline(always)]
    fn step(self) -> Option<u32> {
        match (self.at >> 32) as u32 {
            0 => None,
            s => Some(s - 1),
        }
    }

    /// The reason, borrowing names from `flag`.
    #[inline(always)]
    fn reason(self, flag: &CompiledFlag) -> Reason<'_> {
        let index = self.at as u32;
        match self.tag() {
            OFF => Reason::Off,
            TARGET => Reason::TargetMatch,
            RULE => Reason::RuleMatch {
                index,
                id: flag.rules.get(index as usize).map_or("", |r| &r.id),
                step: self.step(),
            },
            FALLTHROUGH => Reason::Fallthrough { rollout: self.word >> 40 & 1 == 1, step: self.step() },
            PREREQUISITE => Reason::PrerequisiteFailed {
                key: flag.prerequisites.get(index as usize).map_or("", |p| &p.0),
            },
            _ => Reason::Error(self.error_kind().unwrap_or(ErrorKind::MalformedFlag)),
        }
    }
}

impl Snapshot {
    /// Evaluates a flag without a type: the variation index, its value and
    /// the reason.
    pub fn evaluate<'s>(&'s self, key: &str, ctx: &Context<'_>) -> Evaluation<'s> {
        self.evaluate_with(key, ctx, &Clock::system())
    }

    /// [`Snapshot::evaluate`] as of `unix_ms` (schedules take the step
    /// current then): for tests and what-if tools.
    pub fn evaluate_at<'s>(&'s self, key: &str, ctx: &Context<'_>, unix_ms: i64) -> Evaluation<'s> {
        self.evaluate_with(key, ctx, &Clock::at(unix_ms))
    }

    fn evaluate_with<'s>(&'s self, key: &str, ctx: &Context<'_>, clock: &Clock) -> Evaluation<'s> {
        match self.index.get(key) {
            Some(slot) => self.evaluate_flag(slot.cell.get(), ctx, clock),
            None => {
                Evaluation { served: None, reason: Reason::Error(ErrorKind::FlagNotFound), flag_version: 0 }
            }
        }
    }

    /// Evaluates a compiled flag of this snapshot.
    #[inline]
    fn evaluate_flag<'s>(
        &'s self,
        flag: &'s CompiledFlag,
        ctx: &Context<'_>,
        clock: &Clock,
    ) -> Evaluation<'s> {
        let outcome = self.eval_flag(flag, ctx, 0, clock);
        served(flag, outcome)
    }

    /// Evaluates a flag as type `T`, returning `default` with an `ERROR`
    /// reason when the flag is missing, of another type, or malformed.
    #[inline]
    pub fn detail<'s, T: FromValue<'s>>(&'s self, key: &str, ctx: &Context<'_>, default: T) -> Detail<'s, T> {
        self.detail_with(key, ctx, default, &Clock::system())
    }

    /// [`Snapshot::detail`] as of `unix_ms` (schedules take the step
    /// current then): for tests and what-if tools.
    pub fn detail_at<'s, T: FromValue<'s>>(
        &'s self,
        key: &str,
        ctx: &Context<'_>,
        default: T,
        unix_ms: i64,
    ) -> Detail<'s, T> {
        self.detail_with(key, ctx, default, &Clock::at(unix_ms))
    }

    #[inline]
    fn detail_with<'s, T: FromValue<'s>>(
        &'s self,
        key: &str,
        ctx: &Context<'_>,
        default: T,
        clock: &Clock,
    ) -> Detail<'s, T> {
        match self.index.get(key) {
            Some(slot) => self.detail_slot(slot, ctx, default, clock),
            None => self.error(default, ErrorKind::FlagNotFound, 0),
        }
    }

    #[inline(always)]
    fn detail_slot<'s, T: FromValue<'s>>(
        &'s self,
        slot: Found<'s>,
        ctx: &Context<'_>,
        default: T,
        clock: &Clock,
    ) -> Detail<'s, T> {
        self.detail_slot_as::<T, false>(slot, ctx, default, clock)
    }

    /// [`Snapshot::detail_slot`], counting in the flag's usage when
    /// `COUNT` (a constant: the uncounted path has no trace of it).
    #[inline(always)]
    fn detail_slot_as<'s, T: FromValue<'s>, const COUNT: bool>(
        &'s self,
        slot: Found<'s>,
        ctx: &Context<'_>,
        default: T,
        clock: &Clock,
    ) -> Detail<'s, T> {
        match slot {
            Found { cell, head: Some(Head { flag_type, version, constant }), .. } => {
                self.detail_of::<T, COUNT>(*flag_type, *version, constant.as_ref(), cell, ctx, default, clock)
            }
            Found { cell, head: None, .. } => self.detail_cell_as::<T, COUNT>(cell, ctx, default, clock),
        }
    }

    /// [`Snapshot::detail`], with the name its reason borrows — the matched
    /// rule's id (when it has one) or the failed prerequisite's key — as a
    /// [`Name`], for a result that outlives the snapshot. Allocation-free:
    /// one key lookup, as for [`Snapshot::detail`].
    #[inline]
    pub fn detail_named<'s, T: FromValue<'s>>(
        &'s self,
        key: &str,
        ctx: &Context<'_>,
        default: T,
    ) -> (Detail<'s, T>, Option<Name>) {
        let Some(slot) = self.index.get(key) else {
            return (self.error(default, ErrorKind::FlagNotFound, 0), None);
        };
        let d = self.detail_slot(slot, ctx, default, &Clock::system());
        let name = match d.reason {
            Reason::RuleMatch { index, id, .. } if !id.is_empty() => {
                slot.cell.get().rules.get(index as usize).map(|r| Name::of(&r.id))
            }
            Reason::PrerequisiteFailed { key } => {
                slot.cell.get().prerequisites.iter().find(|p| &*p.0 == key).map(|p| Name::of(&p.0))
            }
            _ => None,
        };
        (d, name)
    }

    /// [`Snapshot::detail`], counted in the flag's usage counters
    /// ([`FlagUsage`]: the caller's default noted, the served variation or
    /// the fallback counted) for usage summaries. A flag not in the
    /// snapshot has no counters: the caller counts that fallback. Still
    /// lock- and allocation-free (a new distinct default takes a lock once).
    #[inline]
    pub fn detail_counted<'s, T: FromValue<'s>>(
        &'s self,
        key: &str,
        ctx: &Context<'_>,
        default: T,
    ) -> Detail<'s, T> {
        match self.index.get(key) {
            Some(slot) => self.detail_slot_counted(slot, ctx, default),
            None => self.error(default, ErrorKind::FlagNotFound, 0),
        }
    }

    /// [`Snapshot::detail_named`], counted like [`Snapshot::detail_counted`].
    #[inline]
    pub fn detail_named_counted<'s, T: FromValue<'s>>(
        &'s self,
        key: &str,
        ctx: &Context<'_>,
        default: T,
    ) -> (Detail<'s, T>, Option<Name>) {
        let Some(slot) = self.index.get(key) else {
            return (self.error(default, ErrorKind::FlagNotFound, 0), None);
        };
        let d = self.detail_slot_counted(slot, ctx, default);
        let name = match d.reason {
            Reason::RuleMatch { index, id, .. } if !id.is_empty() => {
                slot.cell.get().rules.get(index as usize).map(|r| Name::of(&r.id))
            }
            Reason::PrerequisiteFailed { key } => {
                slot.cell.get().prerequisites.iter().find(|p| &*p.0 == key).map(|p| Name::of(&p.0))
            }
            _ => None,
        };
        (d, name)
    }

    #[inline(always)]
    fn detail_slot_counted<'s, T: FromValue<'s>>(
        &'s self,
        slot: Found<'s>,
        ctx: &Context<'_>,
        default: T,
    ) -> Detail<'s, T> {
        slot.cell.usage().note_default(&default);
        self.detail_slot_as::<T, true>(slot, ctx, default, &Clock::system())
    }

    /// [`Snapshot::detail_index`], counted like [`Snapshot::detail_counted`].
    #[inline]
    pub(crate) fn detail_index_counted<'s, T: FromValue<'s>>(
        &'s self,
        i: u32,
        ctx: &Context<'_>,
        default: T,
    ) -> Detail<'s, T> {
        let cell = self.flags.get(i as usize);
        cell.usage().note_default(&default);
        self.detail_cell_as::<T, true>(cell, ctx, default, &Clock::system())
    }

    /// The usage counters of the flag with this key, if it is here (on a
    /// snapshot compiling on use, asking compiles the flag).
    pub fn flag_usage(&self, key: &str) -> Option<&FlagUsage> {
        self.index.get(key).map(|slot| slot.cell.usage())
    }

    /// Every flag's key and usage counters (on a snapshot compiling on use,
    /// asking compiles every flag).
    pub fn usage(&self) -> impl Iterator<Item = (&str, &FlagUsage)> {
        self.flags.iter().map(|f| (f.key(), f.usage()))
    }

    /// [`Snapshot::detail`] for the flag at a resolved index.
    #[inline]
    pub(crate) fn detail_index<'s, T: FromValue<'s>>(
        &'s self,
        i: u32,
        ctx: &Context<'_>,
        default: T,
        clock: &Clock,
    ) -> Detail<'s, T> {
        self.detail_cell(self.flags.get(i as usize), ctx, default, clock)
    }

    #[inline]
    fn detail_cell<'s, T: FromValue<'s>>(
        &'s self,
        cell: &'s Cell,
        ctx: &Context<'_>,
        default: T,
        clock: &Clock,
    ) -> Detail<'s, T> {
        self.detail_cell_as::<T, false>(cell, ctx, default, clock)
    }

    #[inline]
    fn detail_cell_as<'s, T: FromValue<'s>, const COUNT: bool>(
        &'s self,
        cell: &'s Cell,
        ctx: &Context<'_>,
        default: T,
        clock: &Clock,
    ) -> Detail<'s, T> {
        let flag = cell.get();
        self.detail_of::<T, COUNT>(
            flag.flag_type,
            flag.version,
            flag.constant.as_ref(),
            cell,
            ctx,
            default,
            clock,
        )
    }

    /// The typed result, from the constant answer when there is one.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn detail_of<'s, T: FromValue<'s>, const COUNT: bool>(
        &'s self,
        flag_type: FlagType,
        version: u64,
        constant: Option<&'s Constant>,
        cell: &'s Cell,
        ctx: &Context<'_>,
        default: T,
        clock: &Clock,
    ) -> Detail<'s, T> {
        // Counting where the outcome is in registers (reading it back out
        // of the returned `Detail` costs a store-forwarding round trip).
        let fail = |kind: ErrorKind| {
            if COUNT {
                cell.usage().fallback(kind);
            }
            kind
        };
        if !T::accepts(flag_type) {
            return self.error(default, fail(ErrorKind::WrongType), version);
        }
        let (variation, value, reason) = match constant {
            Some(c) => (
                c.variation,
                &c.value,
                if c.off { Reason::Off } else { Reason::Fallthrough { rollout: false, step: None } },
            ),
            None => {
                let flag = cell.get();
                let outcome = self.eval_flag(flag, ctx, 0, clock);
                if let Some(kind) = outcome.error_kind() {
                    return self.error(default, fail(kind), version);
                }
                match flag.variations.get(outcome.variation() as usize) {
                    Some(value) => (outcome.variation(), value, outcome.reason(flag)),
                    None => return self.error(default, fail(ErrorKind::MalformedFlag), version),
                }
            }
        };
        match T::from_value(value) {
            Some(value) => {
                if COUNT {
                    cell.usage().served(variation, || cell.get().variations.len());
                }
                Detail {
                    value,
                    variation: Some(variation),
                    reason,
                    flag_version: version,
                    revision: self.revision(),
                    stale: false,
                }
            }
            None => self.error(default, fail(ErrorKind::MalformedFlag), version),
        }
    }

    fn error<'s, T>(&self, default: T, kind: ErrorKind, flag_version: u64) -> Detail<'s, T> {
        Detail {
            value: default,
            variation: None,
            reason: Reason::Error(kind),
            flag_version,
            revision: self.revision(),
            stale: false,
        }
    }

    /// A bool flag's value, or `default`.
    #[inline]
    pub fn bool(&self, key: &str, ctx: &Context<'_>, default: bool) -> bool {
        self.detail(key, ctx, default).value
    }

    /// A string flag's value, or `default`.
    #[inline]
    pub fn string<'s>(&'s self, key: &str, ctx: &Context<'_>, default: &'s str) -> &'s str {
        self.detail(key, ctx, default).value
    }

    /// An int flag's value, or `default`.
    #[inline]
    pub fn int(&self, key: &str, ctx: &Context<'_>, default: i64) -> i64 {
        self.detail(key, ctx, default).value
    }

    /// A float (or int) flag's value, or `default`.
    #[inline]
    pub fn float(&self, key: &str, ctx: &Context<'_>, default: f64) -> f64 {
        self.detail(key, ctx, default).value
    }

    /// Any flag's value as JSON, or `default`. Borrowed for JSON flags.
    pub fn json<'s>(&'s self, key: &str, ctx: &Context<'_>, default: Cow<'s, Json>) -> Cow<'s, Json> {
        self.detail(key, ctx, default).value
    }

    /// Is the context in the segment with this key? Unknown → false; a
    /// malformed segment, or nesting deeper than the limit (a cycle that
    /// bypassed validation), → `MALFORMED_FLAG`.
    fn in_segment(&self, key: &str, ctx: &Context<'_>, depth: usize) -> Result<bool, ErrorKind> {
        if depth >= self.max_segment_depth {
            return Err(ErrorKind::MalformedFlag);
        }
        let Some(seg) = self.segments.get(key) else {
            return Ok(false);
        };
        if seg.malformed {
            return Err(ErrorKind::MalformedFlag);
        }
        if listed(ctx, &seg.included, &seg.included_kinds) {
            return Ok(true);
        }
        if listed(ctx, &seg.excluded, &seg.excluded_kinds) {
            return Ok(false);
        }
        let nested = |k: &str| self.in_segment(k, ctx, depth + 1);
        for rule in seg.rules.iter() {
            if !all_match(&rule.clauses, ctx, &nested)? {
                continue;
            }
            match &rule.weight {
                None => return Ok(true),
                Some((weight, kind, by, mode)) => {
                    if bucket::inside(mode, ctx, kind, by, *weight) {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }

    fn eval_flag<'s>(
        &'s self,
        flag: &'s CompiledFlag,
        ctx: &Context<'_>,
        depth: usize,
        clock: &Clock,
    ) -> Outcome {
        if flag.malformed {
            return Outcome::error(ErrorKind::MalformedFlag);
        }
        if !flag.on {
            return Outcome::new(OFF, flag.off_variation, false, 0, None);
        }
        for (i, (key, want)) in flag.prerequisites.iter().enumerate() {
            match self.prerequisite_passes(key, *want, ctx, depth, clock) {
                Ok(true) => {}
                Ok(false) => return Outcome::new(PREREQUISITE, flag.off_variation, false, i as u32, None),
                Err(kind) => return Outcome::error(kind),
            }
        }
        if let Some(groups) = &flag.targets {
            let mut first: Option<(u32, u32)> = None;
            for g in groups.iter() {
                if let Some(kind) = ctx.select(&g.kind)
                    && let Some(&(at, v)) = g.keys.get(kind.key())
                    && first.is_none_or(|(f, _)| at < f)
                {
                    first = Some((at, v));
                }
            }
            if let Some((_, v)) = first {
                return Outcome::new(TARGET, v, false, 0, None);
            }
        }
        let in_segment = |key: &str| self.in_segment(key, ctx, 0);
        for (i, rule) in flag.rules.iter().enumerate() {
            // Compilation makes every range valid; one that is not (a bug)
            // is a malformed flag, never an empty rule that matches.
            let Some(clauses) = flag.clauses.get(rule.clauses.0 as usize..rule.clauses.1 as usize) else {
                return Outcome::error(ErrorKind::MalformedFlag);
            };
            match all_match(clauses, ctx, &in_segment) {
                Ok(false) => {}
                Ok(true) => {
                    return match serve(&rule.serve, ctx, clock) {
                        Ok((v, _, step)) => Outcome::new(RULE, v, false, i as u32, step),
                        Err(kind) => Outcome::error(kind),
                    };
                }
                Err(kind) => return Outcome::error(kind),
            }
        }
        match serve(&flag.fallthrough, ctx, clock) {
            Ok((v, rollout, step)) => Outcome::new(FALLTHROUGH, v, rollout, 0, step),
            Err(kind) => Outcome::error(kind),
        }
    }

    fn prerequisite_passes(
        &self,
        key: &str,
        want: u32,
        ctx: &Context<'_>,
        depth: usize,
        clock: &Clock,
    ) -> Result<bool, ErrorKind> {
        if depth >= self.max_depth {
            // Deeper than allowed, or a cycle that bypassed validation.
            return Err(ErrorKind::MalformedFlag);
        }
        let Some(slot) = self.index.get(key) else {
            return Ok(false);
        };
        let pre = slot.cell.get();
        let outcome = self.eval_flag(pre, ctx, depth + 1, clock);
        match outcome.error_kind() {
            Some(kind) => Err(kind),
            None => Ok(pre.on && outcome.variation() == want),
        }
    }
}

/// Whether the context's key of the default kind is in `default`, or a
/// named kind's key in its list.
#[inline(always)]
fn listed(ctx: &Context<'_>, default: &StrSet, by_kind: &[(KindSel, StrSet)]) -> bool {
    if let Some(k) = ctx.select(&KindSel::Default)
        && default.contains(k.key())
    {
        return true;
    }
    by_kind.iter().any(|(kind, keys)| ctx.select(kind).is_some_and(|k| keys.contains(k.key())))
}

/// The variation a serve picks, whether a rollout or schedule picked it,
/// and a schedule's current step.
#[inline]
fn serve(s: &CompiledServe, ctx: &Context<'_>, clock: &Clock) -> Result<(u32, bool, Option<u32>), ErrorKind> {
    match s {
        CompiledServe::Variation(v) => Ok((*v, false, None)),
        CompiledServe::Rollout(r) => bucket::pick(&r.mode, ctx, &r.kind, &r.bucket_by, &r.thresholds)
            .map(|v| (v, true, None))
            .ok_or(ErrorKind::MalformedFlag),
        CompiledServe::Schedule(schedule) => {
            let (v, step) = schedule.serve(ctx, clock.now_ms());
            Ok((v, true, Some(step)))
        }
    }
}

/// Attaches the variation's value, turning an out-of-range index into an
/// error rather than a panic.
#[inline]
fn served(flag: &CompiledFlag, outcome: Outcome) -> Evaluation<'_> {
    if outcome.tag() == ERROR {
        return Evaluation { served: None, reason: outcome.reason(flag), flag_version: flag.version };
    }
    let v = outcome.variation();
    match flag.variations.get(v as usize) {
        Some(value) => {
            Evaluation { served: Some((v, value)), reason: outcome.reason(flag), flag_version: flag.version }
        }
        None => Evaluation {
            served: None,
            reason: Reason::Error(ErrorKind::MalformedFlag),
            flag_version: flag.version,
        },
    }
}
