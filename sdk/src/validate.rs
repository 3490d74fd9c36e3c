//! Validation of flags and segments against `docs/EVALUATION.md` and the
//! [`Limits`]. The relay runs it on every write and the SDK on every received
//! change, so both hold the same guarantees. Every error carries the path of
//! the offending field and, where one applies, the limit:
//! `flags["checkout"].rules[2].clauses[0].values: 10001 values, limit 10000`.

use std::collections::{HashMap, HashSet};
use std::fmt;

use prost::Message;
use serde_json::Value as Json;

use crate::clause::{compile_regex, json_instant, parse_semver};
use crate::limit::Limits;
use crate::model::{Clause, Flag, FlagSet, Operator, Rollout, Segment, Serve, WEIGHT_TOTAL};
use crate::value::Value;
use crate::wire;

/// One problem, with the path of the field it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// Where: `flags["checkout"].rules[2].clauses[0].op`.
    pub path: String,
    /// What is wrong, naming the limit when one applies.
    pub message: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in one validation run (never empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", display_all(.0))]
pub struct ValidationErrors(pub Vec<ValidationError>);

fn display_all(errors: &[ValidationError]) -> String {
    let mut out = String::new();
    for (i, e) in errors.iter().enumerate() {
        if i > 0 {
            out.push_str("; ");
        }
        out.push_str(&e.to_string());
    }
    out
}

impl ValidationErrors {
    /// The first problem (there always is one).
    pub fn first(&self) -> Option<&ValidationError> {
        self.0.first()
    }
}

/// Collects errors under a path prefix.
struct Report {
    errors: Vec<ValidationError>,
}

impl Report {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ValidationError { path: path.into(), message: message.into() });
    }

    fn max(&mut self, path: &str, what: &str, n: usize, limit: usize) {
        if n > limit {
            self.err(path, format!("{n} {what}, limit {limit}"));
        }
    }
}

/// Validates a whole environment: every flag and segment, plus the rules
/// that cross items (unique keys, prerequisites, segment references, sizes).
pub fn flag_set(set: &FlagSet, limits: &Limits) -> Result<(), ValidationErrors> {
    let mut r = Report { errors: Vec::new() };
    r.max("flags", "flags", set.flags.len(), limits.max_flags);
    r.max("segments", "segments", set.segments.len(), limits.max_segments);

    let mut segment_keys = HashSet::new();
    let mut bytes = 0usize;
    for s in &set.segments {
        let path = format!("segments[{:?}]", s.key);
        if !segment_keys.insert(s.key.as_str()) {
            r.err(&path, "duplicate segment key");
        }
        bytes += segment(&mut r, &path, s, limits);
    }
    let flags: HashMap<&str, &Flag> = set.flags.iter().map(|f| (f.key.as_str(), f)).collect();
    let mut seen = HashSet::new();
    for f in &set.flags {
        let path = format!("flags[{:?}]", f.key);
        if !seen.insert(f.key.as_str()) {
            r.err(&path, "duplicate flag key");
        }
        bytes += flag(&mut r, &path, f, limits);
        for (i, p) in f.prerequisites.iter().enumerate() {
            let ppath = format!("{path}.prerequisites[{i}]");
            match flags.get(p.key.as_str()) {
                None => r.err(format!("{ppath}.key"), format!("unknown flag {:?}", p.key)),
                Some(_) if p.key == f.key => {
                    r.err(format!("{ppath}.key"), "a flag cannot be its own prerequisite")
                }
                Some(pre) if p.variation as usize >= pre.variations.len() => r.err(
                    format!("{ppath}.variation"),
                    format!(
                        "index {} out of range: {:?} has {} variations",
                        p.variation,
                        p.key,
                        pre.variations.len()
                    ),
                ),
                Some(_) => {}
            }
        }
        for (ri, rule) in f.rules.iter().enumerate() {
            for (ci, c) in rule.clauses.iter().enumerate() {
                if c.op == Operator::SegmentMatch {
                    for (vi, v) in c.values.iter().enumerate() {
                        if let Some(k) = v.as_str()
                            && !segment_keys.contains(k)
                        {
                            r.err(
                                format!("{path}.rules[{ri}].clauses[{ci}].values[{vi}]"),
                                format!("unknown segment {k:?}"),
                            );
                        }
                    }
                }
            }
        }
    }
    prerequisite_depths(&mut r, &flags, limits);
    r.max("snapshot", "encoded bytes", bytes, limits.max_snapshot_bytes);
    if r.errors.is_empty() { Ok(()) } else { Err(ValidationErrors(r.errors)) }
}

/// Rejects prerequisite cycles and chains deeper than the limit.
fn prerequisite_depths(r: &mut Report, flags: &HashMap<&str, &Flag>, limits: &Limits) {
    // Longest chain of prerequisite edges below each flag, memoised.
    // `None` marks "in progress" to detect cycles.
    fn depth<'a>(
        key: &'a str,
        flags: &HashMap<&'a str, &'a Flag>,
        memo: &mut HashMap<&'a str, Option<usize>>,
        cap: usize,
    ) -> Result<usize, Vec<&'a str>> {
        match memo.get(key) {
            Some(Some(d)) => return Ok(*d),
            Some(None) => return Err(vec![key]),
            None => {}
        }
        let Some(f) = flags.get(key) else {
            return Ok(0);
        };
        memo.insert(key, None);
        let mut deepest = 0;
        for p in &f.prerequisites {
            if p.key == key {
                continue; // reported as a self-reference already
            }
            match depth(&p.key, flags, memo, cap) {
                Ok(d) => deepest = deepest.max(d + 1),
                Err(mut cycle) => {
                    cycle.push(key);
                    return Err(cycle);
                }
            }
            if deepest > cap {
                break; // deep enough to report; stop walking
            }
        }
        memo.insert(key, Some(deepest));
        Ok(deepest)
    }
    let mut memo = HashMap::new();
    let mut keys: Vec<&str> = flags.keys().copied().collect();
    keys.sort_unstable();
    let mut reported_cycle = false;
    for key in keys {
        match depth(key, flags, &mut memo, limits.max_prerequisite_depth) {
            Ok(d) if d > limits.max_prerequisite_depth => r.err(
                format!("flags[{key:?}].prerequisites"),
                format!("prerequisite chain {d} deep, limit {}", limits.max_prerequisite_depth),
            ),
            Ok(_) => {}
            Err(cycle) if !reported_cycle => {
                reported_cycle = true;
                let mut names: Vec<&str> = cycle.into_iter().rev().collect();
                names.dedup();
                r.err(
                    format!("flags[{key:?}].prerequisites"),
                    format!("prerequisite cycle: {}", names.join(" -> ")),
                );
                // Mark everything on the cycle as done so one cycle is one error.
                for n in names {
                    memo.insert(n, Some(0));
                }
            }
            Err(_) => {}
        }
    }
}

fn key(r: &mut Report, path: &str, k: &str, limits: &Limits) {
    if k.is_empty() {
        r.err(path, "must not be empty");
        return;
    }
    r.max(path, "bytes", k.len(), limits.max_key_len);
    let first_ok = k.as_bytes()[0].is_ascii_alphanumeric();
    let rest_ok = k.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !first_ok || !rest_ok {
        r.err(path, format!("{k:?}: use A-Z a-z 0-9 . _ - and start with a letter or digit"));
    }
}

/// Validates one flag on its own (no cross-item checks); returns its
/// encoded size.
fn flag(r: &mut Report, path: &str, f: &Flag, limits: &Limits) -> usize {
    key(r, &format!("{path}.key"), &f.key, limits);
    let n = f.variations.len();
    if n == 0 {
        r.err(format!("{path}.variations"), "at least one variation is required");
    }
    r.max(&format!("{path}.variations"), "variations", n, limits.max_variations);
    for (i, v) in f.variations.iter().enumerate() {
        let vpath = format!("{path}.variations[{i}]");
        if Value::from_json(f.flag_type, v).is_none() {
            r.err(&vpath, format!("{} is not a {} value", short(v), f.flag_type.name()));
        } else {
            let len = match v {
                Json::String(s) => s.len(),
                Json::Array(_) | Json::Object(_) => v.to_string().len(),
                _ => 0,
            };
            r.max(&vpath, "bytes", len, limits.max_value_len);
        }
    }
    let variation = |r: &mut Report, p: String, idx: u32| {
        if idx as usize >= n {
            r.err(p, format!("variation index {idx} out of range: the flag has {n} variations"));
        }
    };
    variation(r, format!("{path}.off_variation"), f.off_variation);
    let mut target_values = 0;
    for (i, t) in f.targets.iter().enumerate() {
        variation(r, format!("{path}.targets[{i}].variation"), t.variation);
        target_values += t.values.len();
        for (j, v) in t.values.iter().enumerate() {
            r.max(&format!("{path}.targets[{i}].values[{j}]"), "bytes", v.len(), limits.max_value_len);
        }
    }
    r.max(&format!("{path}.targets"), "target values", target_values, limits.max_target_values);
    r.max(&format!("{path}.rules"), "rules", f.rules.len(), limits.max_rules);
    let mut ids = HashSet::new();
    for (i, rule) in f.rules.iter().enumerate() {
        let rpath = format!("{path}.rules[{i}]");
        if !rule.id.is_empty() && !ids.insert(rule.id.as_str()) {
            r.err(format!("{rpath}.id"), format!("duplicate rule id {:?}", rule.id));
        }
        clauses(r, &rpath, &rule.clauses, limits, true);
        serve(r, &format!("{rpath}.serve"), &rule.serve, n);
    }
    serve(r, &format!("{path}.fallthrough"), &f.fallthrough, n);
    r.max(&format!("{path}.prerequisites"), "prerequisites", f.prerequisites.len(), limits.max_prerequisites);
    let size = wire::flag_to_proto(f).encoded_len();
    r.max(path, "encoded bytes", size, limits.max_flag_bytes);
    size
}

fn serve(r: &mut Report, path: &str, s: &Serve, n: usize) {
    match (s.variation, &s.rollout) {
        (Some(v), None) => {
            if v as usize >= n {
                r.err(
                    format!("{path}.variation"),
                    format!("variation index {v} out of range: the flag has {n} variations"),
                );
            }
        }
        (None, Some(ro)) => rollout(r, &format!("{path}.rollout"), ro, n),
        (Some(_), Some(_)) => r.err(path, "set either variation or rollout, not both"),
        (None, None) => r.err(path, "set variation or rollout"),
    }
}

fn rollout(r: &mut Report, path: &str, ro: &Rollout, n: usize) {
    if ro.variations.is_empty() {
        r.err(format!("{path}.variations"), "a rollout needs at least one variation");
    }
    let mut total: u64 = 0;
    for (i, wv) in ro.variations.iter().enumerate() {
        if wv.variation as usize >= n {
            r.err(
                format!("{path}.variations[{i}].variation"),
                format!("variation index {} out of range: the flag has {n} variations", wv.variation),
            );
        }
        total += u64::from(wv.weight);
    }
    if !ro.variations.is_empty() && total != u64::from(WEIGHT_TOTAL) {
        r.err(
            format!("{path}.variations"),
            format!("weights sum to {total}, must be {WEIGHT_TOTAL} (units of 1/100000)"),
        );
    }
}

fn clauses(r: &mut Report, path: &str, cs: &[Clause], limits: &Limits, segments_allowed: bool) {
    if cs.is_empty() {
        r.err(format!("{path}.clauses"), "at least one clause is required");
    }
    r.max(&format!("{path}.clauses"), "clauses", cs.len(), limits.max_clauses);
    for (i, c) in cs.iter().enumerate() {
        clause(r, &format!("{path}.clauses[{i}]"), c, limits, segments_allowed);
    }
}

fn clause(r: &mut Report, path: &str, c: &Clause, limits: &Limits, segments_allowed: bool) {
    let op = c.op;
    if op == Operator::SegmentMatch && !segments_allowed {
        r.err(format!("{path}.op"), "segment_match is not allowed in segment rules");
    }
    if op != Operator::SegmentMatch && c.attribute.is_empty() {
        r.err(format!("{path}.attribute"), "must not be empty");
    }
    r.max(&format!("{path}.attribute"), "bytes", c.attribute.len(), limits.max_attribute_len);
    if c.values.is_empty() {
        r.err(format!("{path}.values"), "at least one value is required");
    }
    r.max(&format!("{path}.values"), "values", c.values.len(), limits.max_clause_values);
    for (i, v) in c.values.iter().enumerate() {
        let vpath = format!("{path}.values[{i}]");
        if let Json::String(s) = v {
            let limit = if op == Operator::Matches { limits.max_regex_len } else { limits.max_value_len };
            if s.len() > limit {
                r.err(&vpath, format!("{} bytes, limit {limit}", s.len()));
                continue;
            }
        }
        let problem = match op {
            Operator::In => (!matches!(v, Json::String(_) | Json::Number(_) | Json::Bool(_)))
                .then(|| format!("{}: `in` takes strings, numbers or bools", short(v))),
            Operator::StartsWith | Operator::EndsWith | Operator::Contains | Operator::SegmentMatch => {
                (!v.is_string()).then(|| format!("{}: `{}` takes strings", short(v), op.name()))
            }
            Operator::Matches => match v.as_str() {
                None => Some(format!("{}: `matches` takes regex strings", short(v))),
                Some(p) => compile_regex(p, limits)
                    .err()
                    .map(|e| format!("invalid regex: {}", one_line(&e.to_string()))),
            },
            Operator::Lt | Operator::Lte | Operator::Gt | Operator::Gte | Operator::Eq => {
                (!v.as_f64().is_some_and(f64::is_finite))
                    .then(|| format!("{}: `{}` takes numbers", short(v), op.name()))
            }
            Operator::SemverEq | Operator::SemverLt | Operator::SemverGt => match v.as_str() {
                Some(s) if parse_semver(s).is_some() => None,
                _ => Some(format!("{}: `{}` takes versions like \"1.2.3\"", short(v), op.name())),
            },
            Operator::Before | Operator::After => json_instant(v)
                .is_none()
                .then(|| format!("{}: `{}` takes Unix milliseconds or RFC 3339 times", short(v), op.name())),
        };
        if let Some(msg) = problem {
            r.err(vpath, msg);
        }
    }
}

/// Validates one segment; returns its encoded size.
fn segment(r: &mut Report, path: &str, s: &Segment, limits: &Limits) -> usize {
    key(r, &format!("{path}.key"), &s.key, limits);
    r.max(
        &format!("{path}.included"),
        "keys in included + excluded",
        s.included.len() + s.excluded.len(),
        limits.max_segment_keys,
    );
    for (field, keys) in [("included", &s.included), ("excluded", &s.excluded)] {
        for (i, k) in keys.iter().enumerate() {
            r.max(&format!("{path}.{field}[{i}]"), "bytes", k.len(), limits.max_value_len);
        }
    }
    r.max(&format!("{path}.rules"), "rules", s.rules.len(), limits.max_segment_rules);
    for (i, rule) in s.rules.iter().enumerate() {
        clauses(r, &format!("{path}.rules[{i}]"), &rule.clauses, limits, false);
    }
    let size = wire::segment_to_proto(s).encoded_len();
    r.max(path, "encoded bytes", size, limits.max_segment_bytes);
    size
}

/// A JSON value shortened for an error message.
fn short(v: &Json) -> String {
    let s = v.to_string();
    if s.len() > 40 {
        let cut = (0..=40).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
        format!("{}…", &s[..cut])
    } else {
        s
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests;
