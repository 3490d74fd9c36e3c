//! Compiled clauses: each operator's values pre-parsed once per snapshot
//! (regexes compiled, `in` lists hashed, versions and dates parsed) and the
//! matching rules of `docs/EVALUATION.md` "Clauses". Matching allocates
//! nothing.

use std::collections::HashSet;

use arrayvec::ArrayVec;
use regex_automata::meta::Regex;
use serde_json::Value as Json;

use crate::context::{AttrValue, Context, Scalar, ScalarRef, found};
use crate::eval::ErrorKind;
use crate::limit::Limits;
use crate::model::{Clause, Operator};
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

/// Why a clause could not be compiled (only reachable with unvalidated data;
/// validation reports the same problems with a path).
#[derive(Debug)]
pub(crate) struct Uncompilable;

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

/// What compiling `matches` patterns may still use: patterns and compiled
/// bytes of the flag or segment being compiled and, in validation, compiled
/// bytes of the whole environment (EVALUATION.md, "Regular expressions").
#[derive(Debug, Clone)]
pub(crate) struct RegexBudget {
    /// Patterns the item may still compile.
    pub(crate) patterns: usize,
    /// Compiled bytes left to the item.
    pub(crate) item_bytes: usize,
    /// Compiled bytes left to the environment (`usize::MAX`: not tracked).
    pub(crate) env_bytes: usize,
}

impl RegexBudget {
    /// A fresh budget for one item under `limits`, the environment's
    /// remaining bytes carried over.
    pub(crate) fn item(limits: &Limits, env_bytes: usize) -> RegexBudget {
        RegexBudget {
            patterns: limits.max_regex_patterns,
            item_bytes: limits.max_regex_item_compiled,
            env_bytes,
        }
    }
}

/// Which bound refused a pattern's compiled size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RegexBound {
    /// One pattern's own limit (`max_regex_compiled`).
    Pattern,
    /// What was left of the flag's or segment's budget.
    Item,
    /// What was left of the environment's budget.
    Env,
}

/// Why a pattern was not compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RegexError {
    /// The item already compiled `max_regex_patterns` patterns.
    Patterns,
    /// The pattern does not parse.
    Syntax(String),
    /// Compiling it would take more than `limit` bytes (`bound` set it).
    TooBig { limit: usize, bound: RegexBound },
}

/// Compiles a `matches` pattern with its compiled size limited to the
/// smallest of its own limit and what is left of `budget`, so an oversized
/// pattern fails while it compiles (never compiled first and measured
/// after); then charges the budget with the compiled regex's heap size.
/// The lazy DFA's cache, grown while matching, is capped by
/// `max_regex_dfa` per thread.
pub(crate) fn compile_regex(
    pattern: &str,
    limits: &Limits,
    budget: &mut RegexBudget,
) -> Result<Regex, RegexError> {
    if budget.patterns == 0 {
        return Err(RegexError::Patterns);
    }
    budget.patterns -= 1;
    let (limit, bound) = [
        (limits.max_regex_compiled, RegexBound::Pattern),
        (budget.item_bytes, RegexBound::Item),
        (budget.env_bytes, RegexBound::Env),
    ]
    .into_iter()
    .min_by_key(|(limit, _)| *limit)
    .expect("three bounds");
    // As `regex::RegexBuilder::size_limit` / `dfa_size_limit` configure the
    // same engine; the meta regex also reports its heap size.
    let config = regex_automata::meta::Config::new()
        .match_kind(regex_automata::MatchKind::LeftmostFirst)
        .utf8_empty(true)
        .nfa_size_limit(Some(limit))
        .hybrid_cache_capacity(limits.max_regex_dfa);
    let re = regex_automata::meta::Builder::new()
        .configure(config)
        .syntax(regex_automata::util::syntax::Config::new().utf8(true))
        .build(pattern)
        .map_err(|e| match e.size_limit() {
            Some(_) => RegexError::TooBig { limit, bound },
            None => RegexError::Syntax(e.to_string()),
        })?;
    let used = re.memory_usage();
    budget.item_bytes = budget.item_bytes.saturating_sub(used);
    budget.env_bytes = budget.env_bytes.saturating_sub(used);
    Ok(re)
}

/// `matches` patterns in `clauses` (every value of every `matches` clause).
pub(crate) fn regex_patterns<'c>(clauses: impl IntoIterator<Item = &'c Clause>) -> usize {
    clauses.into_iter().filter(|c| c.op == Operator::Matches).map(|c| c.values.len()).sum()
}

/// Parses a version, reading `1` and `1.2` as `1.0.0` and `1.2.0`.
/// Comparison ignores build metadata, as SemVer precedence requires.
pub(crate) fn parse_semver(s: &str) -> Option<semver::Version> {
    let mut v = match semver::Version::parse(s) {
        Ok(v) => v,
        Err(_) => {
            // Pad a short core ("1", "1.2", optionally with -pre/+build).
            let end = s.find(['-', '+']).unwrap_or(s.len());
            let (core, rest) = s.split_at(end);
            let dots = core.matches('.').count();
            if dots >= 2 || core.is_empty() || !core.split('.').all(is_numeric) {
                return None;
            }
            // Built in place (no padded copy): what `Version::parse` would
            // make of `core` + ".0"s + `rest`, leading zeros refused alike.
            let mut nums = core
                .split('.')
                .map(|p| if p.len() > 1 && p.starts_with('0') { None } else { p.parse::<u64>().ok() });
            let major = nums.next().flatten()?;
            let minor = match nums.next() {
                Some(m) => m?,
                None => 0,
            };
            let (pre, build) = match rest.split_once('+') {
                Some((pre, build)) => (pre, Some(build)),
                None => (rest, None),
            };
            let pre = match pre.strip_prefix('-') {
                Some(p) if !p.is_empty() => semver::Prerelease::new(p).ok()?,
                Some(_) => return None,
                None => semver::Prerelease::EMPTY,
            };
            if let Some(b) = build
                && (b.is_empty() || semver::BuildMetadata::new(b).is_err())
            {
                return None;
            }
            semver::Version { major, minor, patch: 0, pre, build: semver::BuildMetadata::EMPTY }
        }
    };
    v.build = semver::BuildMetadata::EMPTY;
    Some(v)
}

fn is_numeric(part: &str) -> bool {
    !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit())
}

/// An instant in Unix milliseconds from a number or an RFC 3339 string.
fn scalar_instant(v: ScalarRef<'_>) -> Option<f64> {
    match v {
        ScalarRef::Num(n) if n.is_finite() => Some(n),
        ScalarRef::Str(s) => {
            let t = chrono::DateTime::parse_from_rfc3339(s).ok()?;
            Some(t.timestamp_millis() as f64 + f64::from(t.timestamp_subsec_nanos() % 1_000_000) / 1e6)
        }
        _ => None,
    }
}

pub(crate) fn json_instant(v: &Json) -> Option<f64> {
    match v {
        Json::Number(n) => scalar_instant(ScalarRef::Num(n.as_f64()?)),
        Json::String(s) => scalar_instant(ScalarRef::Str(s)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Short versions are padded; garbage is rejected, not guessed at.
    #[test]
    fn semver_parsing() {
        assert_eq!(parse_semver("1").unwrap(), semver::Version::new(1, 0, 0));
        assert_eq!(parse_semver("1.2").unwrap(), semver::Version::new(1, 2, 0));
        assert_eq!(parse_semver("1.2-beta").unwrap().pre.as_str(), "beta");
        assert!(parse_semver("1.2.3+build").unwrap().build.is_empty());
        // The short forms read exactly as their padded forms would.
        for short in [
            "1",
            "1.2",
            "0.9",
            "1.2-rc.1",
            "1-alpha+b.7",
            "1.2+exp.sha",
            "1.2-",
            "1.2+",
            "01.2",
            "1.02",
            "1.2-01",
        ] {
            let end = short.find(['-', '+']).unwrap_or(short.len());
            let (core, rest) = short.split_at(end);
            let padded = format!("{core}{}{rest}", ".0".repeat(2 - core.matches('.').count()));
            let want = semver::Version::parse(&padded).ok().map(|mut v| {
                v.build = semver::BuildMetadata::EMPTY;
                v
            });
            assert_eq!(parse_semver(short), want, "{short:?} (padded {padded:?})");
        }
        for bad in ["", "v1", "1.x", "1..2", "a.b.c", "1.2.3.4"] {
            assert!(parse_semver(bad).is_none(), "{bad:?}");
        }
    }

    /// Dates compare across numbers and RFC 3339 strings with offsets.
    #[test]
    fn instants() {
        let a = json_instant(&Json::from("2026-01-01T00:00:00Z")).unwrap();
        let b = json_instant(&Json::from("2026-01-01T01:00:00+01:00")).unwrap();
        assert_eq!(a, b);
        assert_eq!(a, 1_767_225_600_000.0);
        assert!(json_instant(&Json::from("yesterday")).is_none());
    }
}
