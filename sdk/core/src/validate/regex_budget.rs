//! The regex budget in validation: patterns per flag or segment, compiled
//! bytes per flag or segment and per environment (EVALUATION.md, "Regular
//! expressions"), and the messages naming the limit a pattern or an item
//! ran into. The environment's budget is the sum of what its items were
//! charged: whether it fits does not depend on any order; when it does not,
//! the item that crosses it with segments, then flags, each in key order,
//! is named ([`env_budget`]).

use super::report::Report;
use crate::error::{RegexBound, RegexError};
use crate::limit::Limits;
use crate::operand::RegexBudget;

/// Starts the regex budget of a flag or segment with `patterns` patterns:
/// over `max_regex_patterns` it is refused here, once, and none of its
/// patterns is compiled.
pub(super) fn regex_item(r: &mut Report, path: &str, item: &'static str, patterns: usize, limits: &Limits) {
    r.item = item;
    r.regex = RegexBudget::item(limits);
    if patterns > limits.max_regex_patterns {
        r.err(
            path,
            format!("{patterns} regex patterns, limit {} (max_regex_patterns)", limits.max_regex_patterns),
        );
        r.regex.patterns = 0;
    }
}

/// The message for a pattern that did not compile (`None`: the item's
/// pattern count, already reported).
pub(super) fn regex_problem(item: &str, e: RegexError, limits: &Limits) -> Option<String> {
    Some(match e {
        RegexError::Patterns => return None,
        RegexError::Syntax(e) => format!("invalid regex: {}", one_line(&e)),
        RegexError::TooBig { limit, bound: RegexBound::Pattern } => {
            format!("compiled regex over {limit} bytes (max_regex_compiled)")
        }
        RegexError::TooBig { limit, bound: RegexBound::Item } => format!(
            "compiled regex over the {item}'s regex budget: {limit} of {} bytes left (max_regex_item_compiled)",
            limits.max_regex_item_compiled
        ),
    })
}

/// One item's compiled regex bytes, for the environment's budget.
pub(super) struct Charge<'a> {
    /// Segments sort before flags.
    pub(super) segment: bool,
    pub(super) key: &'a str,
    pub(super) bytes: usize,
}

/// The environment's regex budget: when the items' charges sum to more
/// than `max_regex_env_compiled`, the item that crosses it, segments then
/// flags each in key order, is refused, naming the running total. Sorts
/// only when the budget is passed.
pub(super) fn env_budget(r: &mut Report, mut charges: Vec<Charge<'_>>, limits: &Limits) {
    let limit = limits.max_regex_env_compiled;
    let total: usize = charges.iter().map(|c| c.bytes).sum();
    if total <= limit {
        return;
    }
    charges.sort_unstable_by(|a, b| (!a.segment, a.key).cmp(&(!b.segment, b.key)));
    let mut sum = 0usize;
    for c in charges {
        sum += c.bytes;
        if sum > limit {
            let (kind, item) = if c.segment { ("segments", "segment") } else { ("flags", "flag") };
            r.err(
                format!("{kind}[{:?}]", c.key),
                format!(
                    "compiled regexes over the environment's regex budget: {sum} bytes with this {item} (segments, then flags, in key order; {total} bytes in all), limit {limit} (max_regex_env_compiled)"
                ),
            );
            return;
        }
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use serde_json::Value as Json;

    use crate::limit::Limits;
    use crate::model::{Clause, Flag, FlagSet, Operator, Rule, Segment, Serve};
    use crate::operand::{RegexBudget, compile_regex};
    use crate::validate::flag_set;
    use crate::{Context, Snapshot};

    fn flag(key: &str, patterns: &[&str]) -> Flag {
        Flag {
            key: key.into(),
            flag_type: crate::FlagType::Bool,
            variations: vec![Json::Bool(true), Json::Bool(false)],
            on: true,
            off_variation: 1,
            targets: vec![],
            rules: vec![Rule {
                id: String::new(),
                clauses: vec![Clause {
                    context_kind: String::new(),
                    attribute: "plan".into(),
                    op: Operator::Matches,
                    values: patterns.iter().map(|p| Json::from(*p)).collect(),
                    negate: false,
                }],
                serve: Serve::variation(0),
            }],
            fallthrough: Serve::variation(1),
            prerequisites: vec![],
            salt: String::new(),
            version: 1,
            revision: 0,
            description: String::new(),
            tags: vec![],
            owner: String::new(),
            client_visible: false,
        }
    }

    fn errors(flags: Vec<Flag>, limits: &Limits) -> Vec<String> {
        match flag_set(&FlagSet { flags, segments: vec![] }, limits) {
            Ok(()) => vec![],
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    /// The heap size of one compiled pattern, as the budget charges it.
    fn cost(pattern: &str) -> usize {
        let limits = Limits::default();
        let mut budget = RegexBudget::item(&limits);
        compile_regex(pattern, &limits, &mut budget).unwrap();
        limits.max_regex_item_compiled - budget.item_bytes
    }

    /// Over the pattern count, the flag is refused once, at the flag, and
    /// none of its patterns is compiled (an invalid one is not reported);
    /// a segment too. The limit is counted by name.
    #[test]
    fn too_many_patterns() {
        let mut many: Vec<String> = (0..100).map(|i| format!("^p{i}$")).collect();
        assert_eq!(
            errors(vec![flag("f", &many.iter().map(String::as_str).collect::<Vec<_>>())], &Limits::default()),
            Vec::<String>::new()
        );
        many.push("(unclosed".into());
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let errs = errors(vec![flag("f", &refs)], &Limits::default());
        assert_eq!(
            errs,
            vec![r#"flags["f"]: 101 regex patterns, limit 100 (max_regex_patterns)"#.to_owned()]
        );
        let f = flag("f", &refs);
        let segment = Segment {
            key: "s".into(),
            rules: vec![crate::model::SegmentRule {
                clauses: f.rules[0].clauses.clone(),
                ..Default::default()
            }],
            ..Segment::default()
        };
        let e =
            flag_set(&FlagSet { flags: vec![], segments: vec![segment] }, &Limits::default()).unwrap_err();
        assert_eq!(e.to_string(), r#"segments["s"]: 101 regex patterns, limit 100 (max_regex_patterns)"#);
        assert_eq!(e.limits().into_iter().collect::<Vec<_>>(), vec!["max_regex_patterns"]);
    }

    /// One pattern over its own limit fails while it compiles, naming it.
    #[test]
    fn pattern_over_its_limit() {
        let limits = Limits { max_regex_compiled: 10_000, ..Limits::default() };
        let errs = errors(vec![flag("f", &[r"\w{50}"])], &limits);
        assert_eq!(
            errs,
            vec![r#"flags["f"].rules[0].clauses[0].values[0]: compiled regex over 10000 bytes (max_regex_compiled)"#.to_owned()]
        );
    }

    /// The flag's budget: patterns compile until it is spent, the next
    /// ones are refused naming it; another flag has its own.
    #[test]
    fn flag_budget() {
        let p = "^[a-z]+@example\\.com$";
        let limits = Limits { max_regex_item_compiled: 2 * cost(p), ..Limits::default() };
        let errs = errors(vec![flag("f", &[p, p, p]), flag("g", &[p, p])], &limits);
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(
            errs[0].starts_with(r#"flags["f"].rules[0].clauses[0].values[2]: compiled regex over the flag's regex budget: 0 of "#)
                && errs[0].ends_with("bytes left (max_regex_item_compiled)"),
            "{errs:#?}"
        );
    }

    /// The environment's budget spans flags and segments: the sum of what
    /// each was charged. Past it, the item that crosses it (segments, then
    /// flags, each in key order) is named, in whatever order they come.
    #[test]
    fn environment_budget() {
        let p = "^[a-z]+@example\\.com$";
        let c = cost(p);
        let limits = Limits { max_regex_env_compiled: 3 * c, ..Limits::default() };
        let want = format!(
            r#"flags["g"]: compiled regexes over the environment's regex budget: {} bytes with this flag (segments, then flags, in key order; {} bytes in all), limit {} (max_regex_env_compiled)"#,
            4 * c,
            4 * c,
            3 * c
        );
        assert_eq!(errors(vec![flag("f", &[p, p]), flag("g", &[p, p])], &limits), vec![want.clone()]);
        assert_eq!(errors(vec![flag("g", &[p, p]), flag("f", &[p, p])], &limits), vec![want]);
        assert!(
            errors(vec![flag("f", &[p, p]), flag("g", &[p])], &limits).is_empty(),
            "exactly the budget fits"
        );
        // A segment is counted before every flag.
        let f = flag("a", &[p, p]);
        let segment = Segment {
            key: "z".into(),
            rules: vec![crate::model::SegmentRule {
                clauses: f.rules[0].clauses.clone(),
                ..Default::default()
            }],
            ..Segment::default()
        };
        let e =
            flag_set(&FlagSet { flags: vec![f.clone(), flag("b", &[p])], segments: vec![segment] }, &limits)
                .unwrap_err();
        // Without the segment the flags fit (3 of 3); with it, "a" crosses.
        assert!(
            e.to_string().starts_with(r#"flags["a"]: compiled regexes over the environment's regex budget"#),
            "{e}"
        );
        assert_eq!(e.limits().into_iter().collect::<Vec<_>>(), vec!["max_regex_env_compiled"]);
    }

    /// Unvalidated data over a flag's budget or pattern count compiles to
    /// a malformed flag (MALFORMED_FLAG), never a partial one.
    #[test]
    fn unvalidated_over_budget_is_malformed() {
        let p = "^[a-z]+@example\\.com$";
        let limits = Limits { max_regex_item_compiled: cost(p), ..Limits::default() };
        let set = FlagSet { flags: vec![flag("one", &[p]), flag("two", &[p, p])], segments: vec![] };
        let snap = Snapshot::compile_unvalidated(&set, &limits);
        let ctx = Context::new("u").with("plan", "a@example.com");
        assert!(snap.detail("one", &ctx, false).value);
        let d = snap.detail("two", &ctx, false);
        assert_eq!(d.reason, crate::Reason::Error(crate::ErrorKind::MalformedFlag));
    }
}
