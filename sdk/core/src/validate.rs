//! Validation of flags and segments against `docs/EVALUATION.md` and the
//! [`Limits`]. The relay runs it on every write and the SDK on every received
//! change, so both hold the same guarantees. Every error carries the path of
//! the offending field and, where one applies, the limit:
//! `flags["checkout"].rules[2].clauses[0].values: 10001 values, limit 10000`.

use prost::Message;
use serde_json::Value as Json;

pub use crate::error::{ValidationError, ValidationErrors};
use crate::limit::Limits;
use crate::model::{Clause, Flag, FlagSet, Operator, Rollout, Schedule, Segment, Serve, WEIGHT_TOTAL};
use crate::operand::{RegexBudget, compile_regex, json_instant, parse_semver, regex_patterns};
use crate::reference::{kind_problem, parse_attr};
use crate::value::Value;
use crate::wire;

/// Hash maps and sets of item keys: foldhash's quality hasher, seeded per
/// process (less DoS-resistant than std's SipHash with its per-map OS-random
/// keys, which took most of a change's validation time on an environment of
/// 50,000 flags; the keys come from authenticated writes and the relay, are
/// short and of a narrow alphabet, and the walks that report are sorted).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::quality::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::quality::RandomState>;

mod cost;
mod delta;
mod depth;
mod links;
mod regex_budget;
mod report;
#[cfg(test)]
mod tests;

pub(crate) use cost::{ItemCost, Passed, Totals};
use depth::{prerequisite_depths, segment_depths};
pub(crate) use links::{Facts, Links};
use regex_budget::{Charge, env_budget, regex_item, regex_problem};
use report::Report;

/// Validates a whole environment: every flag and segment, plus the rules
/// that cross items (unique keys, prerequisites, segment references, sizes).
pub fn flag_set(set: &FlagSet, limits: &Limits) -> Result<(), ValidationErrors> {
    flag_set_costs(set, limits).map(drop)
}

/// [`flag_set`], returning each flag's [`ItemCost`] in order and the
/// environment's [`Totals`].
pub(crate) fn flag_set_costs(set: &FlagSet, limits: &Limits) -> Result<Passed, ValidationErrors> {
    let flags: Vec<&Flag> = set.flags.iter().collect();
    let segments: Vec<&Segment> = set.segments.iter().collect();
    change(&[], &flags, &segments, limits)
}

/// [`flag_set`] over borrowed items: an environment assembled from another
/// one's items and a change validates with nothing cloned (a write to a
/// large environment must not copy every item to check it).
pub fn items(flags: &[&Flag], segments: &[&Segment], limits: &Limits) -> Result<(), ValidationErrors> {
    change(&[], flags, segments, limits).map(drop)
}

/// One flag validated on its own, as [`change`] validates a fresh flag
/// before the checks that cross items: its [`ItemCost`] (what validating
/// it charged) and its problems, each with its path (`flags["key"]...`).
pub(crate) fn own(f: &Flag, limits: &Limits) -> (ItemCost, Vec<ValidationError>) {
    let mut r = Report { errors: Vec::new(), regex: RegexBudget::item(limits), item: "flag" };
    let size = flag(&mut r, &format!("flags[{:?}]", f.key), f, limits);
    (ItemCost::new(size, r.regex.charged), r.errors)
}

/// A change of flags judged by its own items ([`delta::judge`]): `Some`
/// when the environment with `prior` totals, valid under `limits`, is
/// certainly valid with `fresh` written and the `deleted` flags gone;
/// `None` when the whole-set validation ([`change`]) must decide. `old`
/// gives an existing flag and its cost by key, `has_segment` whether a
/// segment exists.
pub(crate) fn delta<'a>(
    prior: &Totals,
    fresh: &[&'a Flag],
    deleted: &[String],
    old: &dyn Fn(&str) -> Option<(Links<'a>, ItemCost)>,
    has_segment: &dyn Fn(&str) -> bool,
    limits: &Limits,
) -> Option<Passed> {
    let check = |f: &Flag| {
        let (cost, problems) = own(f, limits);
        problems.is_empty().then_some(cost)
    };
    delta::judge(&delta::Env { prior, old, has_segment, check: &check }, fresh, deleted, limits)
}

/// [`items`] for an environment whose flags are `kept` ones, each validated
/// before and given with its [`ItemCost`], and `fresh` ones (new or
/// changed). Only the fresh flags are validated on their own; the kept ones
/// count in the totals (flags, encoded bytes, the environment's regex
/// budget: sums, so their order is no matter) and take part in every
/// check that crosses items (prerequisites and their variations, segment
/// references, cycles, depths), which still runs over all flags but
/// allocates nothing for a flag without a problem. Segments are validated
/// in full. So a one-flag change to an environment of 50,000 costs one
/// flag's validation plus a walk of the others' references, not 50,000
/// validations. Returns the fresh flags' costs, in order, and the totals.
pub(crate) fn change<'a>(
    kept: &[(Links<'a>, ItemCost)],
    fresh: &[&'a Flag],
    segments: &[&Segment],
    limits: &Limits,
) -> Result<Passed, ValidationErrors> {
    let mut r = Report { errors: Vec::new(), regex: RegexBudget::item(limits), item: "flag" };
    r.max("flags", "flags", kept.len() + fresh.len(), limits.max_flags);
    r.max("segments", "segments", segments.len(), limits.max_segments);

    let mut segment_keys = HashSet::default();
    let mut bytes = 0usize;
    // What each item's regexes were charged, for the environment's budget.
    let mut charges = Vec::with_capacity(segments.len() + kept.len() + fresh.len());
    for &s in segments {
        let path = format!("segments[{:?}]", s.key);
        if !segment_keys.insert(s.key.as_str()) {
            r.err(&path, "duplicate segment key");
        }
        bytes += segment(&mut r, &path, s, limits);
        charges.push(Charge { segment: true, key: &s.key, bytes: r.regex.charged });
    }
    for &s in segments {
        for (ri, rule) in s.rules.iter().enumerate() {
            check_segment_refs(
                &mut r,
                || format!("segments[{:?}].rules[{ri}]", s.key),
                &rule.clauses,
                &segment_keys,
            );
        }
    }
    segment_depths(&mut r, segments, limits);
    let all = || kept.iter().map(|&(f, _)| f).chain(fresh.iter().map(|&f| Links::Model(f)));
    let by_key: HashMap<&str, Links<'a>> = all().map(|f| (f.key(), f)).collect();
    // The kept flags count what they were charged when validated: what
    // validating them again would charge (an item's charge depends on the
    // item alone).
    bytes += kept.iter().map(|(_, c)| c.encoded_bytes as usize).sum::<usize>();
    charges.extend(kept.iter().map(|(f, c)| Charge {
        segment: false,
        key: f.key(),
        bytes: c.regex_bytes as usize,
    }));
    let mut costs = Vec::with_capacity(fresh.len());
    // Keys are looked for twice only when some key is there twice.
    let mut seen = (by_key.len() < kept.len() + fresh.len())
        .then(|| HashSet::with_capacity_and_hasher(by_key.len(), Default::default()));
    for (i, f) in all().enumerate() {
        let key = f.key();
        let path = || format!("flags[{key:?}]");
        if let Some(seen) = &mut seen
            && !seen.insert(key)
        {
            r.err(path(), "duplicate flag key");
        }
        if let Some(&model) = i.checked_sub(kept.len()).and_then(|i| fresh.get(i)) {
            let size = flag(&mut r, &path(), model, limits);
            bytes += size;
            costs.push(ItemCost::new(size, r.regex.charged));
            charges.push(Charge { segment: false, key, bytes: r.regex.charged });
        }
        for (i, (pkey, variation)) in f.prerequisites().enumerate() {
            let ppath = || format!("{}.prerequisites[{i}]", path());
            match by_key.get(pkey) {
                None => r.err(format!("{}.key", ppath()), format!("unknown flag {pkey:?}")),
                Some(_) if pkey == key => {
                    r.err(format!("{}.key", ppath()), "a flag cannot be its own prerequisite")
                }
                Some(pre) if variation as usize >= pre.variations() => r.err(
                    format!("{}.variation", ppath()),
                    format!("index {variation} out of range: {pkey:?} has {} variations", pre.variations()),
                ),
                Some(_) => {}
            }
        }
        for (ri, ci, vi, segment) in f.segment_refs() {
            if !segment_keys.contains(segment) {
                r.err(
                    format!("{}.rules[{ri}].clauses[{ci}].values[{vi}]", path()),
                    format!("unknown segment {segment:?}"),
                );
            }
        }
    }
    prerequisite_depths(&mut r, &by_key, limits);
    let totals = Totals {
        flags: kept.len() + fresh.len(),
        segments: segments.len(),
        bytes,
        regex: charges.iter().map(|c| c.bytes).sum(),
        linked: all().filter(|f| f.has_prerequisites()).count(),
    };
    env_budget(&mut r, charges, limits);
    r.max("snapshot", "encoded bytes", bytes, limits.max_snapshot_bytes);
    if r.errors.is_empty() { Ok(Passed { costs, totals }) } else { Err(ValidationErrors(r.errors)) }
}

/// Reports `segment_match` values naming no segment (`path`: the rule's,
/// formatted only for a problem).
fn check_segment_refs(
    r: &mut Report,
    path: impl Fn() -> String,
    clauses: &[Clause],
    segment_keys: &HashSet<&str>,
) {
    for (ci, c) in clauses.iter().enumerate() {
        if c.op != Operator::SegmentMatch {
            continue;
        }
        for (vi, v) in c.values.iter().enumerate() {
            if let Some(k) = v.as_str()
                && !segment_keys.contains(k)
            {
                r.err(format!("{}.clauses[{ci}].values[{vi}]", path()), format!("unknown segment {k:?}"));
            }
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
    regex_item(r, path, "flag", regex_patterns(f.rules.iter().flat_map(|x| &x.clauses)), limits);
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
        context_kind(r, &format!("{path}.targets[{i}].context_kind"), &t.context_kind);
        target_values += t.values.len();
        for (j, v) in t.values.iter().enumerate() {
            r.max(&format!("{path}.targets[{i}].values[{j}]"), "bytes", v.len(), limits.max_value_len);
        }
    }
    r.max(&format!("{path}.targets"), "target values", target_values, limits.max_target_values);
    r.max(&format!("{path}.rules"), "rules", f.rules.len(), limits.max_rules);
    let mut ids = HashSet::default();
    for (i, rule) in f.rules.iter().enumerate() {
        let rpath = format!("{path}.rules[{i}]");
        if !rule.id.is_empty() && !ids.insert(rule.id.as_str()) {
            r.err(format!("{rpath}.id"), format!("duplicate rule id {:?}", rule.id));
        }
        clauses(r, &rpath, &rule.clauses, limits, false);
        serve(r, &format!("{rpath}.serve"), &rule.serve, n, limits);
    }
    serve(r, &format!("{path}.fallthrough"), &f.fallthrough, n, limits);
    r.max(&format!("{path}.prerequisites"), "prerequisites", f.prerequisites.len(), limits.max_prerequisites);
    let size = wire::flag_to_proto(f).encoded_len();
    r.max(path, "encoded bytes", size, limits.max_flag_bytes);
    size
}

fn serve(r: &mut Report, path: &str, s: &Serve, n: usize, limits: &Limits) {
    match (s.variation, &s.rollout, &s.schedule) {
        (Some(v), None, None) => {
            if v as usize >= n {
                r.err(
                    format!("{path}.variation"),
                    format!("variation index {v} out of range: the flag has {n} variations"),
                );
            }
        }
        (None, Some(ro), None) => {
            rollout(r, &format!("{path}.rollout"), ro, n);
            attribute(r, &format!("{path}.rollout.bucket_by"), &ro.bucket_by, limits);
            context_kind(r, &format!("{path}.rollout.context_kind"), &ro.context_kind);
        }
        (None, None, Some(sc)) => schedule(r, &format!("{path}.schedule"), sc, n, limits),
        (None, None, None) => r.err(path, "set variation, rollout or schedule"),
        _ => r.err(path, "set exactly one of variation, rollout and schedule"),
    }
}

/// A `context_kind` field: empty (the default kind) or a valid kind name.
fn context_kind(r: &mut Report, path: &str, kind: &str) {
    if !kind.is_empty()
        && let Some(problem) = kind_problem(kind)
    {
        r.err(path, problem);
    }
}

/// A `bucket_by` or clause attribute: a name or a well-formed reference.
fn attribute(r: &mut Report, path: &str, attr: &str, limits: &Limits) {
    r.max(path, "bytes", attr.len(), limits.max_attribute_len);
    if let Err(e) = parse_attr(attr) {
        r.err(path, format!("{attr:?}: {e}"));
    }
}

fn schedule(r: &mut Report, path: &str, sc: &Schedule, n: usize, limits: &Limits) {
    for (field, idx) in [("variation", sc.variation), ("otherwise", sc.otherwise)] {
        if idx as usize >= n {
            r.err(
                format!("{path}.{field}"),
                format!("variation index {idx} out of range: the flag has {n} variations"),
            );
        }
    }
    attribute(r, &format!("{path}.bucket_by"), &sc.bucket_by, limits);
    context_kind(r, &format!("{path}.context_kind"), &sc.context_kind);
    if sc.steps.is_empty() {
        r.err(format!("{path}.steps"), "a schedule needs at least one step");
    }
    r.max(&format!("{path}.steps"), "steps", sc.steps.len(), limits.max_schedule_steps);
    for (i, st) in sc.steps.iter().enumerate() {
        let spath = format!("{path}.steps[{i}]");
        if st.weight > WEIGHT_TOTAL {
            r.err(
                format!("{spath}.weight"),
                format!("{} is over {WEIGHT_TOTAL} (units of 1/100000)", st.weight),
            );
        }
        if i > 0 {
            let prev = sc.steps[i - 1];
            if st.start_unix_ms <= prev.start_unix_ms {
                r.err(format!("{spath}.start"), "starts must strictly increase from step to step");
            }
            if st.weight < prev.weight {
                r.err(
                    format!("{spath}.weight"),
                    format!(
                        "{} is below the previous step's {}: a schedule only grows (lower it with one write instead)",
                        st.weight, prev.weight
                    ),
                );
            }
        }
    }
}

/// Longest imported bucketing prefix or group, bytes.
const MAX_BUCKETING_PREFIX: usize = 512;

fn imported_bucketing(r: &mut Report, path: &str, b: Option<&crate::model::Bucketing>) {
    use crate::model::Bucketing as B;
    match b {
        None => {}
        Some(B::Launchdarkly { prefix }) => {
            if prefix.is_empty() {
                r.err(format!("{path}.launchdarkly.prefix"), "empty: \"<flag key>.<salt>\" or the seed");
            }
            r.max(&format!("{path}.launchdarkly.prefix"), "bytes", prefix.len(), MAX_BUCKETING_PREFIX);
        }
        Some(B::Unleash { group, modulus, .. }) => {
            r.max(&format!("{path}.unleash.group"), "bytes", group.len(), MAX_BUCKETING_PREFIX);
            if *modulus == 0 || !WEIGHT_TOTAL.is_multiple_of(*modulus) {
                r.err(format!("{path}.unleash.modulus"), format!("{modulus} does not divide {WEIGHT_TOTAL}"));
            }
        }
    }
}

fn rollout(r: &mut Report, path: &str, ro: &Rollout, n: usize) {
    if ro.variations.is_empty() {
        r.err(format!("{path}.variations"), "a rollout needs at least one variation");
    }
    imported_bucketing(r, &format!("{path}.bucketing"), ro.bucketing.as_ref());
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

fn clauses(r: &mut Report, path: &str, cs: &[Clause], limits: &Limits, empty_allowed: bool) {
    if cs.is_empty() && !empty_allowed {
        r.err(format!("{path}.clauses"), "at least one clause is required");
    }
    r.max(&format!("{path}.clauses"), "clauses", cs.len(), limits.max_clauses);
    for (i, c) in cs.iter().enumerate() {
        clause(r, &format!("{path}.clauses[{i}]"), c, limits);
    }
}

fn clause(r: &mut Report, path: &str, c: &Clause, limits: &Limits) {
    let op = c.op;
    if op != Operator::SegmentMatch {
        if c.attribute.is_empty() {
            r.err(format!("{path}.attribute"), "must not be empty");
        } else {
            attribute(r, &format!("{path}.attribute"), &c.attribute, limits);
        }
    }
    context_kind(r, &format!("{path}.context_kind"), &c.context_kind);
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
                // Over the item's pattern count (reported once, at the
                // item) nothing is compiled.
                Some(p) => compile_regex(p, limits, &mut r.regex)
                    .err()
                    .and_then(|e| regex_problem(r.item, e, limits)),
            },
            Operator::Lt | Operator::Lte | Operator::Gt | Operator::Gte | Operator::Eq => {
                (!comparable(op, v)).then(|| format!("{}: `{}` takes numbers", short(v), op.name()))
            }
            Operator::SemverEq | Operator::SemverLt | Operator::SemverGt => (!comparable(op, v))
                .then(|| format!("{}: `{}` takes versions like \"1.2.3\"", short(v), op.name())),
            Operator::Before | Operator::After => (!comparable(op, v))
                .then(|| format!("{}: `{}` takes Unix milliseconds or RFC 3339 times", short(v), op.name())),
        };
        if let Some(msg) = problem {
            r.err(vpath, msg);
        }
    }
}

/// Whether `op` can compare a context with the clause value `v`: a finite
/// number for the numeric operators, a version for `semver_*`, an instant
/// for `before`/`after`; any value otherwise (its kind is checked apart).
/// Validation requires it of every value; an importer keeps only these of
/// a source whose clauses let other values never match.
pub fn comparable(op: Operator, v: &Json) -> bool {
    match op {
        Operator::Lt | Operator::Lte | Operator::Gt | Operator::Gte | Operator::Eq => {
            v.as_f64().is_some_and(f64::is_finite)
        }
        Operator::SemverEq | Operator::SemverLt | Operator::SemverGt => {
            v.as_str().is_some_and(|s| parse_semver(s).is_some())
        }
        Operator::Before | Operator::After => json_instant(v).is_some(),
        _ => true,
    }
}

/// Validates one segment; returns its encoded size.
fn segment(r: &mut Report, path: &str, s: &Segment, limits: &Limits) -> usize {
    key(r, &format!("{path}.key"), &s.key, limits);
    regex_item(r, path, "segment", regex_patterns(s.rules.iter().flat_map(|x| &x.clauses)), limits);
    let listed: usize = [&s.included_contexts, &s.excluded_contexts]
        .iter()
        .flat_map(|lists| lists.iter())
        .map(|l| l.values.len())
        .sum();
    r.max(
        &format!("{path}.included"),
        "keys in included + excluded (all kinds)",
        s.included.len() + s.excluded.len() + listed,
        limits.max_segment_keys,
    );
    for (field, keys) in [("included", &s.included), ("excluded", &s.excluded)] {
        for (i, k) in keys.iter().enumerate() {
            r.max(&format!("{path}.{field}[{i}]"), "bytes", k.len(), limits.max_value_len);
        }
    }
    for (field, lists) in
        [("included_contexts", &s.included_contexts), ("excluded_contexts", &s.excluded_contexts)]
    {
        for (i, l) in lists.iter().enumerate() {
            let lpath = format!("{path}.{field}[{i}]");
            if l.context_kind.is_empty() {
                r.err(
                    format!("{lpath}.context_kind"),
                    "must not be empty (use included/excluded for the default kind)",
                );
            } else {
                context_kind(r, &format!("{lpath}.context_kind"), &l.context_kind);
            }
            for (j, k) in l.values.iter().enumerate() {
                r.max(&format!("{lpath}.values[{j}]"), "bytes", k.len(), limits.max_value_len);
            }
        }
    }
    r.max(&format!("{path}.rules"), "rules", s.rules.len(), limits.max_segment_rules);
    for (i, rule) in s.rules.iter().enumerate() {
        let rpath = format!("{path}.rules[{i}]");
        clauses(r, &rpath, &rule.clauses, limits, rule.weight.is_some());
        if let Some(w) = rule.weight
            && w > WEIGHT_TOTAL
        {
            r.err(format!("{rpath}.weight"), format!("{w} is over {WEIGHT_TOTAL} (units of 1/100000)"));
        }
        let bucketing =
            !rule.bucket_by.is_empty() || !rule.rollout_context_kind.is_empty() || rule.bucketing.is_some();
        if bucketing && rule.weight.is_none() {
            r.err(&rpath, "bucket_by, rollout_context_kind and bucketing only apply with a weight");
        }
        imported_bucketing(r, &format!("{rpath}.bucketing"), rule.bucketing.as_ref());
        attribute(r, &format!("{rpath}.bucket_by"), &rule.bucket_by, limits);
        context_kind(r, &format!("{rpath}.rollout_context_kind"), &rule.rollout_context_kind);
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
