//! Compiled clauses: each operator's values pre-parsed once per snapshot
//! (regexes compiled, `in` lists hashed, versions and dates parsed, all by
//! `operand.rs`) and the matching rules of `docs/EVALUATION.md` "Clauses".
//! Matching allocates nothing; a `segment_match` asks the caller (the
//! evaluator) through a callback, so this module knows nothing of
//! snapshots.

use std::collections::HashSet;

use arrayvec::ArrayVec;
use regex_automata::meta::Regex;
use serde_json::Value as Json;

use crate::context::{AttrValue, Context, Scalar, ScalarRef, found};
use crate::error::{ErrorKind, Uncompilable};
use crate::limit::Limits;
use crate::model::{Clause, Operator};
use crate::operand::{RegexBudget, compile_regex, json_instant, parse_semver, scalar_instant};
use crate::reference::{Attr, KindSel, parse_attr};
use crate::short::ShortStr;

/// `in` lists up to this long are scanned; longer ones are hashed. A scan
/// of a few short strings beats hashing the attribute.
const SCAN_MAX: usize = 8;

type FastSet = HashSet<Box<str>, foldhash::fast::RandomState>;

/// A set of strings, scanned when small and hashed when large. Up to two
/// short values (the common `in [US, CA]`) sit inline in the clause: no
/// pointer to follow on a cold cache.
#[derive(Debug)]
pub(crate) enum StrSet {
    Inline(ArrayVec<ShortStr, 2>),
    Small(Box<[ShortStr]>),
    Large(FastSet),
}

impl StrSet {
    pub(crate) fn new(items: Vec<Box<str>>) -> StrSet {
        if items.len() <= 2 {
            StrSet::Inline(items.into_iter().map(ShortStr::from).collect())
        } else if items.len() <= SCAN_MAX {
            StrSet::Small(items.into_iter().map(ShortStr::from).collect())
        } else {
            StrSet::Large(items.into_iter().collect())
        }
    }

    #[inline(always)]
    pub(crate) fn contains(&self, s: &str) -> bool {
        match self {
            StrSet::Inline(items) => contains(items, s),
            StrSet::Small(items) => contains(items, s),
            StrSet::Large(set) => set.contains(s),
        }
    }
}

/// A scan (a plain loop: the iterator form was left out of line).
#[inline(always)]
fn contains(items: &[ShortStr], s: &str) -> bool {
    for i in items {
        if i.is(s) {
            return true;
        }
    }
    false
}

/// The values of an `in` clause that lists numbers or bools too.
#[derive(Debug)]
pub(crate) struct InValues {
    strs: StrSet,
    nums: Box<[f64]>,
    bools: [bool; 2],
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Cmp {
    Lt,
    Lte,
    Gt,
    Gte,
    Eq,
}

/// An operator with its values in evaluation form.
#[derive(Debug)]
pub(crate) enum Op {
    /// `in` with string values only (the common case).
    InStr(StrSet),
    /// `in` listing numbers or bools.
    In(Box<InValues>),
    StartsWith(Box<[Box<str>]>),
    EndsWith(Box<[Box<str>]>),
    Contains(Box<[Box<str>]>),
    Matches(Box<[Regex]>),
    Num(Cmp, Box<[f64]>),
    Semver(Cmp, Box<[semver::Version]>),
    /// `true` = before, `false` = after; instants in Unix milliseconds.
    Date(bool, Box<[f64]>),
    /// Segment keys, resolved against the snapshot at evaluation time.
    Segment(Box<[Box<str>]>),
}

/// A clause ready to evaluate.
#[derive(Debug)]
pub(crate) enum CompiledClause {
    /// The shape most rules are made of — a named attribute of the default
    /// kind `in` a list of strings — matched without the general dispatch
    /// on kinds, references and operators.
    NameIn { name: ShortStr, set: StrSet, negate: bool },
    /// Any clause (boxed: the common form stays small, so a rule's
    /// clauses span fewer cache lines).
    General(Box<General>),
}

/// A clause of any shape.
#[derive(Debug)]
pub(crate) struct General {
    kind: KindSel,
    attr: Attr,
    op: Op,
    negate: bool,
}

impl CompiledClause {
    /// Compiles `clause`.
    pub(crate) fn compile(
        clause: &Clause,
        limits: &Limits,
        budget: &mut RegexBudget,
    ) -> Result<CompiledClause, Uncompilable> {
        let strs = || -> Result<Box<[Box<str>]>, Uncompilable> {
            clause.values.iter().map(|v| v.as_str().map(Box::from).ok_or(Uncompilable)).collect()
        };
        let nums = || -> Result<Box<[f64]>, Uncompilable> {
            clause.values.iter().map(|v| v.as_f64().ok_or(Uncompilable)).collect()
        };
        let versions = || -> Result<Box<[semver::Version]>, Uncompilable> {
            clause.values.iter().map(|v| v.as_str().and_then(parse_semver).ok_or(Uncompilable)).collect()
        };
        let dates = || -> Result<Box<[f64]>, Uncompilable> {
            clause.values.iter().map(|v| json_instant(v).ok_or(Uncompilable)).collect()
        };
        let op = match clause.op {
            Operator::In => {
                let (mut strs, mut nums, mut bools) = (Vec::new(), Vec::new(), [false; 2]);
                for v in &clause.values {
                    match v {
                        Json::String(s) => strs.push(Box::from(s.as_str())),
                        Json::Number(n) => nums.push(n.as_f64().ok_or(Uncompilable)?),
                        Json::Bool(b) => bools[usize::from(*b)] = true,
                        _ => return Err(Uncompilable),
                    }
                }
                if nums.is_empty() && bools == [false; 2] {
                    Op::InStr(StrSet::new(strs))
                } else {
                    Op::In(Box::new(InValues { strs: StrSet::new(strs), nums: nums.into(), bools }))
                }
            }
            Operator::StartsWith => Op::StartsWith(strs()?),
            Operator::EndsWith => Op::EndsWith(strs()?),
            Operator::Contains => Op::Contains(strs()?),
            Operator::Matches => Op::Matches(
                strs()?
                    .iter()
                    .map(|p| compile_regex(p, limits, budget).map_err(|_| Uncompilable))
                    .collect::<Result<_, _>>()?,
            ),
            Operator::Lt => Op::Num(Cmp::Lt, nums()?),
            Operator::Lte => Op::Num(Cmp::Lte, nums()?),
            Operator::Gt => Op::Num(Cmp::Gt, nums()?),
            Operator::Gte => Op::Num(Cmp::Gte, nums()?),
            Operator::Eq => Op::Num(Cmp::Eq, nums()?),
            Operator::SemverEq => Op::Semver(Cmp::Eq, versions()?),
            Operator::SemverLt => Op::Semver(Cmp::Lt, versions()?),
            Operator::SemverGt => Op::Semver(Cmp::Gt, versions()?),
            Operator::Before => Op::Date(true, dates()?),
            Operator::After => Op::Date(false, dates()?),
            Operator::SegmentMatch => Op::Segment(strs()?),
        };
        let attr = match clause.op {
            // Ignored: `segment_match` reads no attribute.
            Operator::SegmentMatch => Attr::Key,
            // Empty names the key only for `bucket_by`; a clause must name
            // what it reads (validation: "must not be empty").
            _ if clause.attribute.is_empty() => return Err(Uncompilable),
            _ => parse_attr(&clause.attribute).map_err(|_| Uncompilable)?,
        };
        let kind = KindSel::parse(&clause.context_kind);
        Ok(match (kind, attr, op) {
            (KindSel::Default, Attr::Name(name), Op::InStr(set)) => {
                CompiledClause::NameIn { name, set, negate: clause.negate }
            }
            (kind, attr, op) => {
                CompiledClause::General(Box::new(General { kind, attr, op, negate: clause.negate }))
            }
        })
    }

    /// Does the context satisfy this clause? `in_segment` answers
    /// `segment_match` for a segment key (false for an unknown one; an
    /// error for a malformed or too deeply nested segment).
    #[inline(always)]
    pub(crate) fn matches(
        &self,
        ctx: &Context<'_>,
        in_segment: &dyn Fn(&str) -> Result<bool, ErrorKind>,
    ) -> Result<bool, ErrorKind> {
        match self {
            CompiledClause::NameIn { name, set, negate } => Ok(match ctx.default_attribute(name) {
                Some(AttrValue::Scalar(Scalar::Str(s))) => set.contains(s) != *negate,
                // A missing attribute (or kind) never matches, negated or
                // not; lists and JSON test each of their strings.
                Some(v) => found(v)
                    .is_some_and(|f| f.any(|x| matches!(x, ScalarRef::Str(s) if set.contains(s))) != *negate),
                None => false,
            }),
            CompiledClause::General(g) => g.matches(ctx, in_segment),
        }
    }
}

impl General {
    #[inline]
    fn matches(
        &self,
        ctx: &Context<'_>,
        in_segment: &dyn Fn(&str) -> Result<bool, ErrorKind>,
    ) -> Result<bool, ErrorKind> {
        if let Op::Segment(segs) = &self.op {
            for s in segs.iter() {
                if in_segment(s)? {
                    return Ok(!self.negate);
                }
            }
            return Ok(self.negate);
        }
        if let Attr::Kind = self.attr {
            // Every kind the context has, whatever `context_kind` says.
            return Ok(ctx.kinds().any(|k| self.op.test(ScalarRef::Str(k.context_kind()))) != self.negate);
        }
        Ok(match ctx.lookup(&self.kind, &self.attr) {
            // A missing attribute (or kind) never matches, negated or not.
            None => false,
            Some(found) => {
                // The common shape, without the general per-value dispatch:
                // a string attribute against an `in` list of strings.
                if let (Op::InStr(set), Some(s)) = (&self.op, found.as_str()) {
                    return Ok(set.contains(s) != self.negate);
                }
                found.any(|v| self.op.test(v)) != self.negate
            }
        })
    }
}

/// Whether every clause matches (AND), stopping at the first that does not.
#[inline(always)]
pub(crate) fn all_match(
    clauses: &[CompiledClause],
    ctx: &Context<'_>,
    in_segment: &dyn Fn(&str) -> Result<bool, ErrorKind>,
) -> Result<bool, ErrorKind> {
    for c in clauses {
        if !c.matches(ctx, in_segment)? {
            return Ok(false);
        }
    }
    Ok(true)
}

impl Op {
    #[inline]
    fn test(&self, v: ScalarRef<'_>) -> bool {
        match (self, v) {
            (Op::InStr(strs), ScalarRef::Str(s)) => strs.contains(s),
            (Op::In(values), ScalarRef::Str(s)) => values.strs.contains(s),
            (Op::In(values), ScalarRef::Num(n)) => values.nums.contains(&n),
            (Op::In(values), ScalarRef::Bool(b)) => values.bools[usize::from(b)],
            (Op::StartsWith(vals), ScalarRef::Str(s)) => vals.iter().any(|p| s.starts_with(&**p)),
            (Op::EndsWith(vals), ScalarRef::Str(s)) => vals.iter().any(|p| s.ends_with(&**p)),
            (Op::Contains(vals), ScalarRef::Str(s)) => vals.iter().any(|p| s.contains(&**p)),
            (Op::Matches(res), ScalarRef::Str(s)) => res.iter().any(|r| r.is_match(s)),
            (Op::Num(cmp, vals), ScalarRef::Num(n)) => vals.iter().any(|v| compare(*cmp, &n, v)),
            (Op::Semver(cmp, vals), ScalarRef::Str(s)) => match parse_semver(s) {
                Some(ver) => vals.iter().any(|v| compare(*cmp, &ver, v)),
                None => false,
            },
            (Op::Date(before, vals), v) => match scalar_instant(v) {
                Some(t) => vals.iter().any(|&d| if *before { t < d } else { t > d }),
                None => false,
            },
            _ => false,
        }
    }
}

#[inline]
fn compare<T: PartialOrd + ?Sized>(cmp: Cmp, a: &T, b: &T) -> bool {
    match cmp {
        Cmp::Lt => a < b,
        Cmp::Lte => a <= b,
        Cmp::Gt => a > b,
        Cmp::Gte => a >= b,
        Cmp::Eq => a == b,
    }
}
