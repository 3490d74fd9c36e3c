//! LaunchDarkly's server-side SDK data (`{"flags": {...}, "segments":
//! {...}}`, what its SDKs poll from `/sdk/latest-all` and its file data
//! source reads) as flagstream flags and segments, exactly or not at all:
//! each flag or segment is carried with its meaning unchanged (rollouts
//! keep LaunchDarkly's bucketing, docs/EVALUATION.md "Imported
//! bucketing"), or left out with the construct and the reason
//! (docs/MIGRATION.md). Pure: a JSON document in, a flag set and a report
//! out.

use std::collections::BTreeMap;

use flagstream::model::{
    Bucketing, Clause, KindKeys, Operator, Prerequisite, Rollout, Rule, Segment, SegmentRule, Serve, Target,
    WeightedVariation,
};
use flagstream::{Flag, FlagSet, FlagType};
use serde_json::Value as Json;

use super::{Line, Outcome};

/// LaunchDarkly's default context kind (its clauses, targets and rollouts
/// without a kind mean it; flagstream's empty kind means the context's own).
const USER: &str = "user";

/// Why a construct cannot be carried exactly.
type Why = String;

/// The document as flags, segments and the report (sorted by key).
pub(crate) fn convert(doc: &Json, approximate: bool) -> Result<(FlagSet, Vec<Line>), String> {
    let obj = doc.as_object().ok_or("the file is not a JSON object with `flags` and `segments`")?;
    let flags = obj.get("flags").map_or(Ok(BTreeMap::new()), |f| keyed(f, "flags"))?;
    let segments = obj.get("segments").map_or(Ok(BTreeMap::new()), |s| keyed(s, "segments"))?;
    if flags.is_empty() && segments.is_empty() {
        return Err(
            "the file holds no `flags` and no `segments`: is it LaunchDarkly's SDK data (/sdk/latest-all)?"
                .into(),
        );
    }
    let (mut set, mut report) = (FlagSet::default(), Vec::new());
    for (key, s) in &segments {
        match segment(key, s) {
            Ok(Some(seg)) => {
                set.segments.push(seg);
                report.push(Line::new("segment", key, Outcome::Exact));
            }
            Ok(None) => {
                report.push(Line::new("segment", key, Outcome::Skipped("deleted: a tombstone".into())))
            }
            Err(why) => report.push(Line::new("segment", key, Outcome::Skipped(why))),
        }
    }
    for (key, f) in &flags {
        match flag(key, f, approximate) {
            Ok(Some((fl, approximation))) => {
                set.flags.push(fl);
                let outcome = approximation.map_or(Outcome::Exact, Outcome::Approximate);
                report.push(Line::new("flag", key, outcome));
            }
            Ok(None) => report.push(Line::new("flag", key, Outcome::Skipped("deleted: a tombstone".into()))),
            Err(why) => report.push(Line::new("flag", key, Outcome::Skipped(why))),
        }
    }
    Ok((set, report))
}

fn keyed<'a>(v: &'a Json, what: &str) -> Result<BTreeMap<String, &'a Json>, String> {
    let m = v.as_object().ok_or_else(|| format!("`{what}` is not an object keyed by {what} key"))?;
    Ok(m.iter().map(|(k, v)| (k.clone(), v)).collect())
}

fn str_of<'a>(v: &'a Json, field: &str) -> &'a str {
    v.get(field).and_then(Json::as_str).unwrap_or("")
}

fn u32_of(v: &Json, field: &str) -> Result<Option<u32>, Why> {
    match v.get(field) {
        None | Some(Json::Null) => Ok(None),
        Some(n) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| format!("{field}: {n} is not a non-negative integer")),
    }
}

fn array<'a>(v: &'a Json, field: &str) -> &'a [Json] {
    v.get(field).and_then(Json::as_array).map_or(&[], Vec::as_slice)
}

fn strings(v: &Json, field: &str) -> Result<Vec<String>, Why> {
    array(v, field)
        .iter()
        .map(|s| s.as_str().map(str::to_owned).ok_or_else(|| format!("{field}: {s} is not a string")))
        .collect()
}

/// Largest integer LaunchDarkly's SDKs serve exactly (their numbers are
/// doubles).
const MAX_EXACT_INT: f64 = 9_007_199_254_740_992.0;

/// The flag type of LaunchDarkly's variations, and the variations written
/// as that type and as the relay stores them (an int flag's as integers,
/// a float flag's as floats), so the same file imported again is no
/// change.
fn typed_variations(variations: &[Json]) -> (FlagType, Vec<Json>) {
    let integral = |v: &Json| v.as_f64().is_some_and(|f| f.fract() == 0.0 && f.abs() <= MAX_EXACT_INT);
    if variations.iter().all(Json::is_boolean) {
        (FlagType::Bool, variations.to_vec())
    } else if variations.iter().all(Json::is_string) {
        (FlagType::String, variations.to_vec())
    } else if variations.iter().all(integral) {
        let ints =
            variations.iter().map(|v| v.as_f64().map_or(Json::Null, |f| Json::from(f as i64))).collect();
        (FlagType::Int, ints)
    } else if variations.iter().all(Json::is_number) {
        (FlagType::Float, variations.iter().map(|v| v.as_f64().map_or(Json::Null, Json::from)).collect())
    } else {
        (FlagType::Json, variations.to_vec())
    }
}

/// An attribute as flagstream reads it: with a context kind, LaunchDarkly's
/// attribute is a reference (`/a/b`) or a name, as flagstream's; without
/// one (data from before context kinds) it is a literal name, which
/// flagstream would read as a reference if it started with `/`.
fn attribute(attr: &str, has_kind: bool) -> Result<String, Why> {
    if !has_kind && attr.starts_with('/') {
        return Err(format!(
            "attribute {attr:?}: a legacy attribute name starting with '/' (flagstream would read it as a reference)"
        ));
    }
    Ok(attr.to_owned())
}

fn operator(op: &str) -> Result<Operator, Why> {
    Ok(match op {
        "in" => Operator::In,
        "startsWith" => Operator::StartsWith,
        "endsWith" => Operator::EndsWith,
        "contains" => Operator::Contains,
        "matches" => Operator::Matches,
        "lessThan" => Operator::Lt,
        "lessThanOrEqual" => Operator::Lte,
        "greaterThan" => Operator::Gt,
        "greaterThanOrEqual" => Operator::Gte,
        "before" => Operator::Before,
        "after" => Operator::After,
        "semVerEqual" => Operator::SemverEq,
        "semVerLessThan" => Operator::SemverLt,
        "semVerGreaterThan" => Operator::SemverGt,
        "segmentMatch" => Operator::SegmentMatch,
        other => return Err(format!("clause operator {other:?}: not one flagstream has")),
    })
}

/// A pattern no string matches (a word boundary that is not one).
const NO_MATCH: &str = r"\b\B";

fn clause(c: &Json) -> Result<Clause, Why> {
    let kind = str_of(c, "contextKind");
    let op = operator(str_of(c, "op"))?;
    let attr = str_of(c, "attribute");
    let attribute =
        if op == Operator::SegmentMatch { "key".to_owned() } else { attribute(attr, !kind.is_empty())? };
    // Numbers as the relay stores them (floats): the same file imported
    // again is then no change. Values the operator cannot compare (a date
    // that does not parse, a version that is not one) never match in
    // LaunchDarkly: left out.
    let values: Vec<Json> = array(c, "values")
        .iter()
        .map(|v| v.as_f64().filter(|_| v.is_number()).map_or_else(|| v.clone(), Json::from))
        .filter(|v| flagstream::validate::comparable(op, v))
        .collect();
    // Nothing left: a test of the same attribute that no value passes (so
    // a missing attribute is still false whatever `negate` says, as in
    // LaunchDarkly).
    let (op, values) = if values.is_empty() && op != Operator::SegmentMatch {
        (Operator::Matches, vec![Json::from(NO_MATCH)])
    } else {
        (op, values)
    };
    Ok(Clause {
        context_kind: if kind.is_empty() { USER.into() } else { kind.into() },
        attribute,
        op,
        values,
        negate: c.get("negate").and_then(Json::as_bool).unwrap_or(false),
    })
}

fn clauses(v: &Json) -> Result<Vec<Clause>, Why> {
    array(v, "clauses")
        .iter()
        .enumerate()
        .map(|(i, c)| clause(c).map_err(|e| format!("clauses[{i}]: {e}")))
        .collect()
}

/// A rollout's weights as flagstream's (summing to 100,000): LaunchDarkly
/// serves its last variation past the sum, so a shortfall is the last
/// variation's (the same context in the same variation, weight for
/// weight).
fn weights(r: &Json) -> Result<Vec<WeightedVariation>, Why> {
    let mut out = array(r, "variations")
        .iter()
        .map(|wv| {
            Ok(WeightedVariation {
                variation: u32_of(wv, "variation")?.ok_or("a rollout variation without its index")?,
                weight: u32_of(wv, "weight")?.unwrap_or(0),
            })
        })
        .collect::<Result<Vec<_>, Why>>()?;
    let total: u64 = out.iter().map(|w| u64::from(w.weight)).sum();
    match (out.last_mut(), total) {
        (None, _) => Err("a rollout without variations (LaunchDarkly answers MALFORMED_FLAG)".into()),
        (Some(_), t) if t > 100_000 => Err(format!("rollout weights sum to {t}, over 100000")),
        (Some(last), t) => {
            last.weight += (100_000 - t) as u32;
            Ok(out)
        }
    }
}

/// A rule's or the fallthrough's serve. `prefix` is `"<flag key>.<salt>"`.
fn serve(v: &Json, prefix: &str) -> Result<Serve, Why> {
    if let Some(i) = u32_of(v, "variation")? {
        return Ok(Serve::variation(i));
    }
    let Some(r) = v.get("rollout").filter(|r| !r.is_null()) else {
        return Err("neither a variation nor a rollout (LaunchDarkly answers MALFORMED_FLAG)".into());
    };
    let experiment = str_of(r, "kind") == "experiment";
    let kind = str_of(r, "contextKind");
    // Experiments always bucket by key.
    let bucket_by =
        if experiment { String::new() } else { attribute(str_of(r, "bucketBy"), !kind.is_empty())? };
    let prefix = match r.get("seed") {
        None | Some(Json::Null) => prefix.to_owned(),
        Some(seed) => match seed.as_i64() {
            Some(seed) => seed.to_string(),
            None => return Err(format!("rollout seed {seed}: not an integer")),
        },
    };
    Ok(Serve::rollout(Rollout {
        bucket_by,
        context_kind: if kind.is_empty() { USER.into() } else { kind.into() },
        seed: None,
        variations: weights(r)?,
        bucketing: Some(Bucketing::Launchdarkly { prefix }),
    }))
}

/// Individual targets, in LaunchDarkly's order: its `contextTargets` (a
/// user entry without values standing for `targets` of the same
/// variation), or `targets` alone.
fn targets(f: &Json) -> Result<Vec<Target>, Why> {
    let users = array(f, "targets");
    // The first user target of that variation, as LaunchDarkly looks it up.
    let user_values = |variation: u32| -> Result<Vec<String>, Why> {
        for t in users {
            if u32_of(t, "variation")? == Some(variation) {
                return strings(t, "values");
            }
        }
        Ok(Vec::new())
    };
    let contextual = array(f, "contextTargets");
    let mut out = Vec::new();
    if contextual.is_empty() {
        for t in users {
            let variation = u32_of(t, "variation")?.ok_or("a target without its variation")?;
            out.push(Target { variation, values: strings(t, "values")?, context_kind: USER.into() });
        }
        return Ok(out);
    }
    for t in contextual {
        let variation = u32_of(t, "variation")?.ok_or("a target without its variation")?;
        let kind = str_of(t, "contextKind");
        let kind = if kind.is_empty() { USER } else { kind };
        let values = if kind == USER && array(t, "values").is_empty() {
            user_values(variation)?
        } else {
            strings(t, "values")?
        };
        out.push(Target { variation, values, context_kind: kind.into() });
    }
    Ok(out)
}

/// A flag, and what `--approximate` changed in it.
fn flag(key: &str, f: &Json, approximate: bool) -> Result<Option<(Flag, Option<String>)>, Why> {
    if f.get("deleted").and_then(Json::as_bool) == Some(true) {
        return Ok(None);
    }
    let (flag_type, variations) = typed_variations(array(f, "variations"));
    if variations.is_empty() {
        return Err("no variations".into());
    }
    let on = f.get("on").and_then(Json::as_bool).unwrap_or(false);
    let last = variations.len() as u32 - 1;
    let (off_variation, approximation) = match u32_of(f, "offVariation")? {
        Some(v) => (v, None),
        // On without prerequisites (a failed one serves the off
        // variation), every answer is LaunchDarkly's; only switching it off
        // later would differ.
        None if on && approximate && array(f, "prerequisites").is_empty() => (
            last,
            Some(format!(
                "no offVariation: switched off, it serves variation {last} where LaunchDarkly serves the caller's default"
            )),
        ),
        None => {
            let why = "offVariation: none (LaunchDarkly serves the caller's default while the flag is off; a flagstream flag names its off variation";
            return Err(if !on {
                format!("{why}, and this flag is off)")
            } else if !array(f, "prerequisites").is_empty() {
                format!("{why}, which a failed prerequisite serves too)")
            } else {
                format!("{why}; --approximate imports it with its last variation as the off variation)")
            });
        }
    };
    let salt = str_of(f, "salt").to_owned();
    let prefix = format!("{key}.{salt}");
    let rules = array(f, "rules")
        .iter()
        .enumerate()
        .map(|(i, r)| {
            Ok(Rule {
                id: str_of(r, "id").to_owned(),
                clauses: clauses(r).map_err(|e| format!("rules[{i}].{e}"))?,
                serve: serve(r, &prefix).map_err(|e| format!("rules[{i}]: {e}"))?,
            })
        })
        .collect::<Result<Vec<_>, Why>>()?;
    let fallthrough = serve(f.get("fallthrough").unwrap_or(&Json::Null), &prefix)
        .map_err(|e| format!("fallthrough: {e}"))?;
    let prerequisites = array(f, "prerequisites")
        .iter()
        .map(|p| {
            Ok(Prerequisite {
                key: str_of(p, "key").to_owned(),
                variation: u32_of(p, "variation")?.ok_or("a prerequisite without its variation")?,
            })
        })
        .collect::<Result<Vec<_>, Why>>()?;
    let availability = f.get("clientSideAvailability");
    let client_visible = availability.is_some_and(|a| {
        a.get("usingEnvironmentId").and_then(Json::as_bool) == Some(true)
            || a.get("usingMobileKey").and_then(Json::as_bool) == Some(true)
    }) || f.get("clientSide").and_then(Json::as_bool) == Some(true);
    let flag = Flag {
        key: key.to_owned(),
        flag_type,
        variations,
        on,
        off_variation,
        targets: targets(f)?,
        rules,
        fallthrough,
        prerequisites,
        salt,
        version: 0,
        revision: 0,
        description: String::new(),
        tags: vec!["launchdarkly".into()],
        owner: String::new(),
        client_visible,
    };
    Ok(Some((flag, approximation)))
}

fn kind_keys(v: &Json, field: &str) -> Result<Vec<KindKeys>, Why> {
    array(v, field)
        .iter()
        .map(|k| {
            let kind = str_of(k, "contextKind");
            Ok(KindKeys {
                context_kind: if kind.is_empty() { USER.into() } else { kind.into() },
                values: strings(k, "values")?,
            })
        })
        .collect()
}

fn segment(key: &str, s: &Json) -> Result<Option<Segment>, Why> {
    if s.get("deleted").and_then(Json::as_bool) == Some(true) {
        return Ok(None);
    }
    if s.get("unbounded").and_then(Json::as_bool) == Some(true) {
        return Err("a big segment (unbounded): its members live in LaunchDarkly's big-segment store, not in this file".into());
    }
    let salt = str_of(s, "salt").to_owned();
    let prefix = format!("{key}.{salt}");
    // LaunchDarkly's `included`/`excluded` are user keys; flagstream's
    // plain lists mean the context's own kind: carried as user lists.
    let mut included_contexts = kind_keys(s, "includedContexts")?;
    let mut excluded_contexts = kind_keys(s, "excludedContexts")?;
    let (included, excluded) = (strings(s, "included")?, strings(s, "excluded")?);
    if !included.is_empty() {
        included_contexts.push(KindKeys { context_kind: USER.into(), values: included });
    }
    if !excluded.is_empty() {
        excluded_contexts.push(KindKeys { context_kind: USER.into(), values: excluded });
    }
    let rules = array(s, "rules")
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let weight = u32_of(r, "weight")?;
            let kind = str_of(r, "rolloutContextKind");
            Ok(SegmentRule {
                id: str_of(r, "id").to_owned(),
                clauses: clauses(r).map_err(|e| format!("rules[{i}].{e}"))?,
                weight,
                bucket_by: if weight.is_some() {
                    attribute(str_of(r, "bucketBy"), !kind.is_empty())?
                } else {
                    String::new()
                },
                rollout_context_kind: match (weight, kind) {
                    (None, _) => String::new(),
                    (Some(_), "") => USER.into(),
                    (Some(_), k) => k.into(),
                },
                bucketing: weight.map(|_| Bucketing::Launchdarkly { prefix: prefix.clone() }),
            })
        })
        .collect::<Result<Vec<_>, Why>>()?;
    Ok(Some(Segment {
        key: key.to_owned(),
        included: Vec::new(),
        excluded: Vec::new(),
        included_contexts,
        excluded_contexts,
        rules,
        salt,
        version: 0,
        revision: 0,
        description: String::new(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one_flag(f: Json) -> Result<Option<Flag>, Why> {
        flag("f", &f, false).map(|f| f.map(|(f, _)| f))
    }

    #[test]
    fn kinds_default_to_user_and_rollouts_keep_launchdarklys_bucketing() {
        let f = one_flag(json!({
            "on": true, "salt": "s", "variations": [1, 2.5], "offVariation": 0,
            "rules": [{"clauses": [{"attribute": "plan", "op": "in", "values": ["pro", 3]}], "variation": 1}],
            "fallthrough": {"rollout": {"seed": -4, "variations": [{"variation": 0, "weight": 1000}, {"variation": 1, "weight": 2000}]}}
        }))
        .unwrap()
        .unwrap();
        assert_eq!(f.flag_type, FlagType::Float);
        assert_eq!(f.variations, vec![json!(1.0), json!(2.5)], "as the relay stores them");
        let ints = one_flag(
            json!({"on": true, "variations": [2.0, 3], "offVariation": 0, "fallthrough": {"variation": 0}}),
        );
        assert_eq!(ints.unwrap().unwrap().variations, vec![json!(2), json!(3)]);
        assert_eq!(f.rules[0].clauses[0].context_kind, "user");
        assert_eq!(f.rules[0].clauses[0].values, vec![json!("pro"), json!(3.0)]);
        let r = f.fallthrough.rollout.as_ref().unwrap();
        assert_eq!(r.context_kind, "user");
        assert_eq!(r.bucketing, Some(Bucketing::Launchdarkly { prefix: "-4".into() }));
        // Short of 100%: the rest is the last variation's, as LaunchDarkly serves it.
        assert_eq!(r.variations[1].weight, 99_000);
    }

    #[test]
    fn what_is_not_carried_says_why() {
        let no_off = json!({"on": true, "variations": [true, false], "fallthrough": {"variation": 0}});
        assert!(one_flag(no_off.clone()).unwrap_err().contains("--approximate"));
        // Asked for: the last variation as the off variation, said so.
        let (approx, how) = flag("f", &no_off, true).unwrap().unwrap();
        assert_eq!(approx.off_variation, 1);
        assert!(how.unwrap().contains("caller's default"));
        // Switched off, no variation stands for the caller's default.
        let off = json!({"on": false, "variations": [true], "fallthrough": {"variation": 0}});
        assert!(flag("f", &off, true).unwrap_err().contains("this flag is off"));
        // A failed prerequisite serves the off variation too: not
        // approximated.
        let mut gated = no_off.clone();
        gated["prerequisites"] = json!([{"key": "p", "variation": 0}]);
        assert!(flag("f", &gated, true).unwrap_err().contains("prerequisite"));
        let legacy = one_flag(json!({"on": true, "variations": [true], "offVariation": 0,
            "rules": [{"clauses": [{"attribute": "/odd", "op": "in", "values": ["x"]}], "variation": 0}],
            "fallthrough": {"variation": 0}}));
        assert!(legacy.unwrap_err().contains("rules[0].clauses[0]"));
        let over = one_flag(json!({"on": true, "variations": [true, false], "offVariation": 0,
            "fallthrough": {"rollout": {"variations": [{"variation": 0, "weight": 90000}, {"variation": 1, "weight": 20000}]}}}));
        assert!(over.unwrap_err().contains("over 100000"));
        let seed = one_flag(json!({"on": true, "variations": [true], "offVariation": 0,
            "fallthrough": {"rollout": {"seed": 61.5, "variations": [{"variation": 0, "weight": 100000}]}}}));
        assert!(seed.unwrap_err().contains("seed"));
        assert!(one_flag(json!({"deleted": true})).unwrap().is_none());
        let (_, report) = convert(&json!({"segments": {"b": {"unbounded": true}}}), false).unwrap();
        assert!(matches!(&report[0].outcome, Outcome::Skipped(w) if w.contains("big segment")));
        assert!(convert(&json!({"items": []}), false).is_err(), "not LaunchDarkly's data");
    }
}
