//! The evaluation algorithm of `docs/EVALUATION.md`: off → prerequisites →
//! targets → rules → fallthrough, over a compiled [`Snapshot`].
//!
//! Everything here is synchronous and allocation-free for bool, string and
//! number flags: results borrow from the snapshot (rule ids, prerequisite
//! keys, string values). No I/O, no locks, no panics on any input.

use std::borrow::Cow;

use serde_json::Value as Json;

use crate::bucket;
use crate::clause::all_match;
use crate::context::Context;
use crate::model::FlagType;
use crate::reference::KindSel;
use crate::schedule::Clock;
use crate::snapshot::{CompiledFlag, CompiledServe, Constant, Head, Slot, Snapshot};
use crate::value::{FromValue, Value};

/// Why an evaluation returned what it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason<'s> {
    /// The flag is off; its off variation was served.
    Off,
    /// The context key is individually targeted.
    TargetMatch,
    /// A rule matched.
    RuleMatch {
        /// 0-based rule index.
        index: u32,
        /// The rule's id (may be empty).
        id: &'s str,
        /// When the rule serves a schedule: its current step, 1-based
        /// (0 before the first step starts).
        step: Option<u32>,
    },
    /// Nothing matched; the fallthrough was served.
    Fallthrough {
        /// Whether a percentage rollout or a schedule chose the variation.
        rollout: bool,
        /// When the fallthrough is a schedule: its current step, 1-based
        /// (0 before the first step starts).
        step: Option<u32>,
    },
    /// A prerequisite did not return its required variation; the off
    /// variation was served.
    PrerequisiteFailed {
        /// The first prerequisite that failed.
        key: &'s str,
    },
    /// The caller's default was returned.
    Error(ErrorKind),
}

impl Reason<'_> {
    /// The reason's upper-case name as used on the wire and in docs.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Reason::Off => "OFF",
            Reason::TargetMatch => "TARGET_MATCH",
            Reason::RuleMatch { .. } => "RULE_MATCH",
            Reason::Fallthrough { .. } => "FALLTHROUGH",
            Reason::PrerequisiteFailed { .. } => "PREREQUISITE_FAILED",
            Reason::Error(_) => "ERROR",
        }
    }
}

/// What went wrong when the caller's default was returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// No flag with that key.
    FlagNotFound,
    /// The flag's type does not fit the requested type.
    WrongType,
    /// The flag's data is inconsistent (bypassed validation: too-deep or
    /// cyclic prerequisites or segments, a malformed attribute reference).
    MalformedFlag,
    /// The SDK holds no data yet.
    NotReady,
}

impl ErrorKind {
    /// The upper-case name as used on the wire and in docs.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::FlagNotFound => "FLAG_NOT_FOUND",
            ErrorKind::WrongType => "WRONG_TYPE",
            ErrorKind::MalformedFlag => "MALFORMED_FLAG",
            ErrorKind::NotReady => "NOT_READY",
        }
    }
}

/// A typed evaluation result.
#[derive(Debug, Clone, PartialEq)]
pub struct Detail<'s, T> {
    /// The served value, or the caller's default on error.
    pub value: T,
    /// Index of the served variation; `None` when the default was returned.
    pub variation: Option<u32>,
    /// Why.
    pub reason: Reason<'s>,
    /// Version of the evaluated flag (0 when not found).
    pub flag_version: u64,
    /// Revision of the snapshot evaluated against.
    pub revision: u64,
    /// Whether the SDK's data was stale (set by the client, never here).
    pub stale: bool,
}

/// An untyped result: the variation served (if any) and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evaluation<'s> {
    /// Index and value of the served variation; `None` on error.
    pub served: Option<(u32, &'s Value)>,
    /// Why.
    pub reason: Reason<'s>,
    /// Version of the evaluated flag (0 when not found).
    pub flag_version: u64,
}

/// Internal result: a variation index and why, or an error.
type Outcome<'s> = Result<(u32, Reason<'s>), ErrorKind>;

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
            Some(slot) => self.evaluate_index(slot.index, ctx, clock),
            None => {
                Evaluation { served: None, reason: Reason::Error(ErrorKind::FlagNotFound), flag_version: 0 }
            }
        }
    }

    /// Evaluates the flag at a resolved index (see [`crate::FlagHandle`]).
    #[inline]
    pub(crate) fn evaluate_index<'s>(&'s self, i: u32, ctx: &Context<'_>, clock: &Clock) -> Evaluation<'s> {
        let flag = self.flags[i as usize].get();
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
            Some(Slot { index, head: Some(Head { flag_type, version, constant }) }) => {
                self.detail_of(*flag_type, *version, constant.as_ref(), *index, ctx, default, clock)
            }
            Some(Slot { index, head: None }) => self.detail_index(*index, ctx, default, clock),
            None => self.error(default, ErrorKind::FlagNotFound, 0),
        }
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
        let flag = self.flags[i as usize].get();
        self.detail_of(flag.flag_type, flag.version, flag.constant.as_ref(), i, ctx, default, clock)
    }

    /// The typed result, from the constant answer when there is one.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn detail_of<'s, T: FromValue<'s>>(
        &'s self,
        flag_type: FlagType,
        version: u64,
        constant: Option<&'s Constant>,
        i: u32,
        ctx: &Context<'_>,
        default: T,
        clock: &Clock,
    ) -> Detail<'s, T> {
        if !T::accepts(flag_type) {
            return self.error(default, ErrorKind::WrongType, version);
        }
        let ev = match constant {
            Some(c) => Evaluation {
                served: Some((c.variation, &c.value)),
                reason: if c.off { Reason::Off } else { Reason::Fallthrough { rollout: false, step: None } },
                flag_version: version,
            },
            None => self.evaluate_index(i, ctx, clock),
        };
        match ev.served.and_then(|(v, value)| Some((v, T::from_value(value)?))) {
            Some((variation, value)) => Detail {
                value,
                variation: Some(variation),
                reason: ev.reason,
                flag_version: version,
                revision: self.revision(),
                stale: false,
            },
            None => self.error(
                default,
                match ev.reason {
                    Reason::Error(kind) => kind,
                    _ => ErrorKind::MalformedFlag,
                },
                version,
            ),
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
                Some((weight, kind, by, seed)) => {
                    // Not bucketable: outside any share below 100%.
                    let inside = match bucket::bucket_if_any(ctx, kind, by, *seed) {
                        Some(b) => b < *weight,
                        None => *weight >= crate::model::WEIGHT_TOTAL,
                    };
                    if inside {
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
    ) -> Outcome<'s> {
        if flag.malformed {
            return Err(ErrorKind::MalformedFlag);
        }
        if !flag.on {
            return Ok((flag.off_variation, Reason::Off));
        }
        for (key, want) in flag.prerequisites.iter() {
            if !self.prerequisite_passes(key, *want, ctx, depth, clock)? {
                return Ok((flag.off_variation, Reason::PrerequisiteFailed { key }));
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
                return Ok((v, Reason::TargetMatch));
            }
        }
        let in_segment = |key: &str| self.in_segment(key, ctx, 0);
        for (i, rule) in flag.rules.iter().enumerate() {
            if all_match(&rule.clauses, ctx, &in_segment)? {
                let (v, _, step) = serve(&rule.serve, ctx, clock)?;
                return Ok((v, Reason::RuleMatch { index: i as u32, id: &rule.id, step }));
            }
        }
        let (v, rollout, step) = serve(&flag.fallthrough, ctx, clock)?;
        Ok((v, Reason::Fallthrough { rollout, step }))
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
        let Some(&Slot { index: i, .. }) = self.index.get(key) else {
            return Ok(false);
        };
        let pre = self.flags[i as usize].get();
        let (v, _) = self.eval_flag(pre, ctx, depth + 1, clock)?;
        Ok(pre.on && v == want)
    }
}

/// Whether the context's key of the default kind is in `default`, or a
/// named kind's key in its list.
#[inline(always)]
fn listed(
    ctx: &Context<'_>,
    default: &crate::clause::StrSet,
    by_kind: &[(KindSel, crate::clause::StrSet)],
) -> bool {
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
        CompiledServe::Rollout { kind, bucket_by, seed, thresholds } => {
            let b = bucket::bucket(ctx, kind, bucket_by, *seed);
            thresholds
                .iter()
                .find(|(end, _)| b < *end)
                .map(|&(_, v)| (v, true, None))
                .ok_or(ErrorKind::MalformedFlag)
        }
        CompiledServe::Schedule(schedule) => {
            let (v, step) = schedule.serve(ctx, clock.now_ms());
            Ok((v, true, Some(step)))
        }
    }
}

/// Attaches the variation's value, turning an out-of-range index into an
/// error rather than a panic.
#[inline]
fn served<'s>(flag: &'s CompiledFlag, outcome: Outcome<'s>) -> Evaluation<'s> {
    let (served, reason) = match outcome {
        Ok((v, reason)) => match flag.variations.get(v as usize) {
            Some(value) => (Some((v, value)), reason),
            None => (None, Reason::Error(ErrorKind::MalformedFlag)),
        },
        Err(kind) => (None, Reason::Error(kind)),
    };
    Evaluation { served, reason, flag_version: flag.version }
}
