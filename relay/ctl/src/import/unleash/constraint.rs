//! Unleash constraints as flagstream clauses, exactly or not at all
//! (docs/MIGRATION.md "From Unleash"). An Unleash context becomes one
//! flagstream context whose attributes are its fields (`userId`,
//! `sessionId`, `remoteAddress`, `environment`, `appName`, `currentTime`)
//! and its properties, by name, as strings — except the attributes a
//! `NUM_*` constraint reads, which are numbers (a flagstream attribute has
//! one type; the import lists them).
//!
//! Where Unleash's answer for a context without the field differs from a
//! flagstream clause's (`NOT_IN`, and any `inverted` constraint, are true
//! for such a context in Unleash; a flagstream clause on a missing
//! attribute is false whatever `negate` says), the positive test goes into
//! a generated segment and the clause is its negated `segment_match`,
//! which has no missing case.

use std::collections::BTreeSet;

use flagstream::model::{Clause, Operator, Segment, SegmentRule};
use serde_json::Value as Json;

use super::Why;

/// Unleash's context fields, as the attribute names the import reads.
const FIELDS: [&str; 6] = ["userId", "sessionId", "remoteAddress", "environment", "appName", "currentTime"];

/// A constraint in flagstream's terms.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Test {
    /// True when this clause is.
    Clause(Clause),
    /// True for every context (`NOT_IN` an empty list).
    Always,
    /// True for none (`IN` an empty list).
    Never,
}

/// What converting constraints accumulates across a document.
#[derive(Debug, Default)]
pub(super) struct Scope {
    /// Attributes some `NUM_*` constraint reads: passed as numbers.
    pub numeric: BTreeSet<String>,
    /// Segments written for negations and alternatives (`<owner>.c<n>`).
    pub segments: Vec<Segment>,
}

/// The flagstream attribute an Unleash context field or property is read
/// from.
pub(super) fn attribute(name: &str) -> Result<String, Why> {
    if FIELDS.contains(&name) {
        return Ok(name.to_owned());
    }
    if name.is_empty() {
        return Err("a constraint without its contextName".into());
    }
    if name == "key" || name == "kind" || name.starts_with('/') {
        return Err(format!(
            "context property {name:?}: flagstream reads `key`, `kind` and names starting with '/' otherwise (the context's key, its kinds, a reference)"
        ));
    }
    Ok(name.to_owned())
}

/// A clause on the context's own kind.
pub(super) fn clause(attribute: String, op: Operator, values: Vec<Json>, negate: bool) -> Clause {
    Clause { context_kind: String::new(), attribute, op, values, negate }
}

/// True for a context that has `attribute` as a string (an Unleash field
/// is present): `starts_with ""`.
pub(super) fn present(attribute: &str) -> Clause {
    clause(attribute.to_owned(), Operator::StartsWith, vec![Json::from("")], false)
}

/// True for every context (a rule needs a clause): the key, always
/// present, starts with "".
pub(super) fn always() -> Clause {
    present("key")
}

/// `segment_match` of `key`, negated or not.
pub(super) fn in_segment(key: &str, negate: bool) -> Clause {
    clause("key".into(), Operator::SegmentMatch, vec![Json::from(key)], negate)
}

/// A regular expression matching `s` literally.
fn literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for ch in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(ch) {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

fn strings(c: &Json) -> Result<Vec<String>, Why> {
    let values = c.get("values").and_then(Json::as_array).map_or(&[][..], Vec::as_slice);
    values
        .iter()
        .map(|v| v.as_str().map(str::to_owned).ok_or_else(|| format!("values: {v} is not a string")))
        .collect()
}

fn single(c: &Json) -> Result<String, Why> {
    match c.get("value") {
        Some(Json::String(s)) => Ok(s.clone()),
        Some(Json::Number(n)) => Ok(n.to_string()),
        _ => Err("no `value` (this operator compares one value)".into()),
    }
}

impl Scope {
    /// Collects the attributes `NUM_*` constraints read, before any
    /// conversion (so a string test of the same attribute anywhere is
    /// known to conflict).
    pub(super) fn note_numeric(&mut self, constraints: &[Json]) {
        for c in constraints {
            let op = c.get("operator").and_then(Json::as_str).unwrap_or("");
            let name = c.get("contextName").and_then(Json::as_str).unwrap_or("");
            if op.starts_with("NUM_") && !name.is_empty() {
                self.numeric.insert(name.to_owned());
            }
        }
    }

    /// Fails when `attribute` is read as a number elsewhere.
    pub(super) fn as_string(&self, attribute: &str) -> Result<(), Why> {
        if self.numeric.contains(attribute) {
            return Err(format!(
                "{attribute:?} is compared as a number (NUM_*) elsewhere in this file and as a string here: a flagstream attribute has one type"
            ));
        }
        Ok(())
    }

    /// One constraint as one test. A segment it needs is `<owner>.c<n>`
    /// (`n`: the constraint's 1-based position in its list).
    pub(super) fn constraint(&mut self, c: &Json, owner: &str, n: usize) -> Result<Test, Why> {
        let name = c.get("contextName").and_then(Json::as_str).unwrap_or("");
        let attr = attribute(name)?;
        let op = c.get("operator").and_then(Json::as_str).unwrap_or("");
        let inverted = c.get("inverted").and_then(Json::as_bool).unwrap_or(false);
        let fold = c.get("caseInsensitive").and_then(Json::as_bool).unwrap_or(false);
        let number = |s: String| -> Result<Json, Why> {
            s.trim()
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map(Json::from)
                .ok_or_else(|| format!("value {s:?} is not a number"))
        };
        // The positive test (any of these clauses), and whether Unleash
        // negates it.
        let (positive, negated) = match op {
            "IN" | "NOT_IN" => {
                self.as_string(&attr)?;
                let values = strings(c)?;
                if values.is_empty() {
                    // Nothing is in an empty list.
                    return Ok(if (op == "NOT_IN") == inverted { Test::Never } else { Test::Always });
                }
                let test = if fold {
                    let alts: Vec<String> = values.iter().map(|v| literal(v)).collect();
                    let pattern = format!("(?i)^(?:{})$", alts.join("|"));
                    clause(attr, Operator::Matches, vec![Json::from(pattern)], false)
                } else {
                    clause(attr, Operator::In, values.into_iter().map(Json::from).collect(), false)
                };
                (vec![test], op == "NOT_IN")
            }
            "STR_STARTS_WITH" | "STR_ENDS_WITH" | "STR_CONTAINS" => {
                self.as_string(&attr)?;
                let values = strings(c)?;
                if values.is_empty() {
                    // No value to find: never true, unless inverted.
                    return Ok(if inverted { Test::Always } else { Test::Never });
                }
                let test = if fold {
                    let pattern = |v: &String| match op {
                        "STR_STARTS_WITH" => format!("(?i)^{}", literal(v)),
                        "STR_ENDS_WITH" => format!("(?i){}$", literal(v)),
                        _ => format!("(?i){}", literal(v)),
                    };
                    let patterns = values.iter().map(|v| Json::from(pattern(v))).collect();
                    clause(attr, Operator::Matches, patterns, false)
                } else {
                    let op = match op {
                        "STR_STARTS_WITH" => Operator::StartsWith,
                        "STR_ENDS_WITH" => Operator::EndsWith,
                        _ => Operator::Contains,
                    };
                    clause(attr, op, values.into_iter().map(Json::from).collect(), false)
                };
                (vec![test], false)
            }
            "NUM_EQ" | "NUM_GT" | "NUM_GTE" | "NUM_LT" | "NUM_LTE" => {
                let op = match op {
                    "NUM_EQ" => Operator::Eq,
                    "NUM_GT" => Operator::Gt,
                    "NUM_GTE" => Operator::Gte,
                    "NUM_LT" => Operator::Lt,
                    _ => Operator::Lte,
                };
                (vec![clause(attr, op, vec![number(single(c)?)?], false)], false)
            }
            "DATE_AFTER" | "DATE_BEFORE" => {
                return Err(format!(
                    "{op}: Unleash compares with the evaluation's clock when the context has no currentTime (and some of its SDKs always do); a flagstream clause reads only the context (a change at a set time is `flagctl flag schedule`)"
                ));
            }
            "SEMVER_EQ" | "SEMVER_GT" | "SEMVER_LT" | "SEMVER_GTE" | "SEMVER_LTE" => {
                self.as_string(&attr)?;
                let v = vec![Json::from(single(c)?)];
                let one = |op| clause(attr.clone(), op, v.clone(), false);
                let tests = match op {
                    "SEMVER_EQ" => vec![one(Operator::SemverEq)],
                    "SEMVER_GT" => vec![one(Operator::SemverGt)],
                    "SEMVER_LT" => vec![one(Operator::SemverLt)],
                    // At least (at most): either clause.
                    "SEMVER_GTE" => vec![one(Operator::SemverGt), one(Operator::SemverEq)],
                    _ => vec![one(Operator::SemverLt), one(Operator::SemverEq)],
                };
                (tests, false)
            }
            "REGEX" => {
                self.as_string(&attr)?;
                let pattern = single(c)?;
                let pattern = if fold { format!("(?i){pattern}") } else { pattern };
                (vec![clause(attr, Operator::Matches, vec![Json::from(pattern)], false)], false)
            }
            other => {
                return Err(format!("constraint operator {other:?}: not one flagstream can express"));
            }
        };
        let negate = negated != inverted;
        if let ([one], false) = (positive.as_slice(), negate) {
            return Ok(Test::Clause(one.clone()));
        }
        // Either of several clauses: a segment with a rule for each.
        // Unleash's negation is true for a context without the field: the
        // negated membership of a segment holding the positive test.
        let key = format!("{owner}.c{n}");
        let rules = positive.into_iter().map(|c| SegmentRule { clauses: vec![c], ..SegmentRule::default() });
        self.segments.push(segment(&key, rules.collect()));
        Ok(Test::Clause(in_segment(&key, negate)))
    }
}

/// A segment written by the import.
pub(super) fn segment(key: &str, rules: Vec<SegmentRule>) -> Segment {
    Segment {
        key: key.to_owned(),
        included: Vec::new(),
        excluded: Vec::new(),
        included_contexts: Vec::new(),
        excluded_contexts: Vec::new(),
        rules,
        salt: String::new(),
        version: 0,
        revision: 0,
        description: "written by flagctl import unleash".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(c: Json) -> (Result<Clause, Why>, Scope) {
        let mut scope = Scope::default();
        scope.note_numeric(std::slice::from_ref(&c));
        let r = scope.constraint(&c, "f", 1).map(|t| match t {
            Test::Clause(c) => c,
            other => panic!("{other:?}"),
        });
        (r, scope)
    }

    #[test]
    fn operators_and_negations() {
        let (c, s) = one(json!({"contextName": "environment", "operator": "IN", "values": ["prod"]}));
        assert_eq!(c.unwrap(), clause("environment".into(), Operator::In, vec![json!("prod")], false));
        assert!(s.segments.is_empty());
        // NOT_IN: a negated segment, true for a context without the field.
        let (c, s) = one(json!({"contextName": "environment", "operator": "NOT_IN", "values": ["prod"]}));
        assert_eq!(c.unwrap(), in_segment("f.c1", true));
        assert_eq!(s.segments[0].rules[0].clauses[0].op, Operator::In);
        // Inverted NOT_IN is IN.
        let (c, _) =
            one(json!({"contextName": "userId", "operator": "NOT_IN", "values": ["a"], "inverted": true}));
        assert_eq!(c.unwrap().op, Operator::In);
        let (c, _) = one(
            json!({"contextName": "email", "operator": "STR_ENDS_WITH", "values": ["@A.com"], "caseInsensitive": true}),
        );
        assert_eq!(c.unwrap().values, vec![json!("(?i)@A\\.com$")]);
        // At least a version: greater or equal, a segment of two rules.
        let (c, s) = one(json!({"contextName": "version", "operator": "SEMVER_GTE", "value": "1.2.2"}));
        assert_eq!(c.unwrap(), in_segment("f.c1", false));
        assert_eq!(s.segments[0].rules.len(), 2);
        // An empty list: nothing is in it.
        let mut scope = Scope::default();
        let empty = |op: &str, inverted: bool| json!({"contextName": "a", "operator": op, "values": [], "inverted": inverted});
        assert_eq!(scope.constraint(&empty("IN", false), "f", 1), Ok(Test::Never));
        assert_eq!(scope.constraint(&empty("NOT_IN", false), "f", 1), Ok(Test::Always));
        assert_eq!(scope.constraint(&empty("IN", true), "f", 1), Ok(Test::Always));
        let (c, s) = one(json!({"contextName": "age", "operator": "NUM_GTE", "value": "18"}));
        assert_eq!(c.unwrap(), clause("age".into(), Operator::Gte, vec![json!(18.0)], false));
        assert!(s.numeric.contains("age"));
    }

    #[test]
    fn what_is_not_carried_says_why() {
        let (c, _) = one(
            json!({"contextName": "currentTime", "operator": "DATE_AFTER", "value": "2024-01-01T00:00:00Z"}),
        );
        assert!(c.unwrap_err().contains("clock"));
        let (c, _) =
            one(json!({"contextName": "remoteAddress", "operator": "IN_CIDR", "values": ["10.0.0.0/8"]}));
        assert!(c.unwrap_err().contains("IN_CIDR"));
        let (c, _) = one(json!({"contextName": "key", "operator": "IN", "values": ["x"]}));
        assert!(c.unwrap_err().contains("\"key\""));
        let (c, _) = one(json!({"contextName": "age", "operator": "NUM_EQ", "value": "many"}));
        assert!(c.unwrap_err().contains("not a number"));
        let mut scope = Scope::default();
        scope.numeric.insert("age".into());
        let r = scope.constraint(&json!({"contextName": "age", "operator": "IN", "values": ["1"]}), "f", 1);
        assert!(r.unwrap_err().contains("one type"));
    }
}
