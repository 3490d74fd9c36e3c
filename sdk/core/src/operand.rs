//! The values clause operators compare against, parsed the one way that
//! validation (which reports what does not parse) and compilation (which
//! keeps what does) both read them: versions (`1` and `1.2` padded),
//! instants (Unix milliseconds or RFC 3339), and `matches` patterns
//! compiled under the regex budget of EVALUATION.md, "Regular expressions".

use regex_automata::meta::Regex;
use serde_json::Value as Json;

use crate::context::ScalarRef;
use crate::error::{RegexBound, RegexError};
use crate::limit::Limits;
use crate::model::{Clause, Operator};

/// What compiling `matches` patterns may still use: patterns and compiled
/// bytes of the flag or segment being compiled (EVALUATION.md, "Regular
/// expressions"). The environment's budget is a sum of what each item was
/// charged, checked by validation over all items (`validate.rs`): whether
/// an environment fits never depends on the order its items are looked at.
#[derive(Debug, Clone)]
pub(crate) struct RegexBudget {
    /// Patterns the item may still compile.
    pub(crate) patterns: usize,
    /// Compiled bytes left to the item.
    pub(crate) item_bytes: usize,
    /// Compiled bytes charged to the item so far: the heap size of every
    /// pattern it compiled.
    pub(crate) charged: usize,
}

impl RegexBudget {
    /// A fresh budget for one item under `limits`.
    pub(crate) fn item(limits: &Limits) -> RegexBudget {
        RegexBudget {
            patterns: limits.max_regex_patterns,
            item_bytes: limits.max_regex_item_compiled,
            charged: 0,
        }
    }
}

/// Compiles a `matches` pattern with its NFA limited to `max_regex_compiled`
/// (so an oversized pattern fails while it compiles, never compiled first
/// and measured after), then charges the item's budget with the compiled
/// regex's heap size: a pattern whose heap size is more than the item has
/// left is refused (and not charged). What is checked is what is charged,
/// and a pattern's verdict depends only on its item. The lazy DFA's cache,
/// grown while matching, is capped by `max_regex_dfa` per thread.
pub(crate) fn compile_regex(
    pattern: &str,
    limits: &Limits,
    budget: &mut RegexBudget,
) -> Result<Regex, RegexError> {
    if budget.patterns == 0 {
        return Err(RegexError::Patterns);
    }
    budget.patterns -= 1;
    let (limit, bound) = (limits.max_regex_compiled, RegexBound::Pattern);
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
    if used > budget.item_bytes {
        return Err(RegexError::TooBig { limit: budget.item_bytes, bound: RegexBound::Item });
    }
    budget.item_bytes -= used;
    budget.charged += used;
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
pub(crate) fn scalar_instant(v: ScalarRef<'_>) -> Option<f64> {
    match v {
        ScalarRef::Num(n) if n.is_finite() => Some(n),
        ScalarRef::Str(s) => {
            let t = chrono::DateTime::parse_from_rfc3339(s).ok()?;
            Some(t.timestamp_millis() as f64 + f64::from(t.timestamp_subsec_nanos() % 1_000_000) / 1e6)
        }
        _ => None,
    }
}

/// An instant in Unix milliseconds from a JSON number or RFC 3339 string.
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
