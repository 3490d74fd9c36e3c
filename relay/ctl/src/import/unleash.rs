//! Unleash's client features document (`{"version", "features",
//! "segments"}`, what its SDKs fetch from `/api/client/features`) as
//! flagstream flags and segments, exactly or not at all
//! (docs/MIGRATION.md "From Unleash"). Pure: a JSON document in, a flag set
//! and a report out.
//!
//! A feature becomes the bool flag `<name>` (Unleash's `isEnabled`) and,
//! when it has variants, the JSON flag `<name>.variant` (its
//! `getVariant`: `{name, enabled, feature_enabled, payload}`), which has
//! `<name>` as its prerequisite. Strategies are OR'ed as rules serving
//! `true`; a strategy with a percentage becomes the segment
//! `<name>.strategy<i>` whose weighted rules keep Unleash's bucketing
//! (docs/EVALUATION.md "Imported bucketing"), so both flags test the same
//! membership. Unleash segments become `unleash-segment-<id>`.
//!
//! Here: the document, its segments, each feature's two flags and its
//! dependencies as prerequisites; `constraint.rs` (constraints as
//! clauses), `strategy.rs` (strategies and their percentages),
//! `variant.rs` (the variant flag's rules).

mod constraint;
mod strategy;
mod variant;

use std::collections::BTreeMap;

use flagstream::model::{Clause, Prerequisite, Rule, Segment, SegmentRule, Serve};
use flagstream::{Flag, FlagSet, FlagType};
use serde_json::{Value as Json, json};

use self::constraint::{Scope, Test, always, present, segment};
use self::strategy::HAS_USER_ID;
use super::{Line, Outcome, Owners};

/// Why a construct cannot be carried exactly.
type Why = String;

/// The key of an imported Unleash segment.
pub(super) fn segment_key(id: &Json) -> String {
    format!("unleash-segment-{}", id.as_i64().map_or_else(|| id.to_string(), |n| n.to_string()))
}

/// The key of a feature's variant flag.
pub(crate) fn variant_key(name: &str) -> String {
    format!("{name}.variant")
}

/// What converting one document accumulates.
pub(super) struct Convert<'a> {
    scope: Scope,
    approximate: bool,
    /// Unleash segments by id: imported, or why not.
    segments: BTreeMap<String, Result<(), Why>>,
    /// Approximations made for the feature being converted.
    approximations: Vec<String>,
    features: BTreeMap<&'a str, &'a Json>,
}

pub(super) fn array<'a>(v: &'a Json, field: &str) -> &'a [Json] {
    v.get(field).and_then(Json::as_array).map_or(&[], Vec::as_slice)
}

pub(super) fn str_of<'a>(v: &'a Json, field: &str) -> &'a str {
    v.get(field).and_then(Json::as_str).unwrap_or("")
}

/// The document as flags, segments and the report (segments in the
/// document's order, then features sorted by name).
pub(crate) fn convert(doc: &Json, approximate: bool) -> Result<(FlagSet, Vec<Line>, Owners), String> {
    let obj = doc.as_object().ok_or("the file is not a JSON object with `features`")?;
    let Some(features) = obj.get("features").and_then(Json::as_array) else {
        return Err("the file has no `features` list: is it Unleash's /api/client/features?".into());
    };
    let mut cv = Convert {
        scope: Scope::default(),
        approximate,
        segments: BTreeMap::new(),
        approximations: Vec::new(),
        features: features.iter().map(|f| (str_of(f, "name"), f)).collect(),
    };
    let unleash_segments = obj.get("segments").and_then(Json::as_array).map_or(&[][..], Vec::as_slice);
    // Deleted features and disabled strategies read nothing.
    let live = |v: &Json| v.get("deleted").and_then(Json::as_bool) != Some(true);
    for f in features.iter().filter(|f| live(f)) {
        for s in
            array(f, "strategies").iter().filter(|s| s.get("disabled").and_then(Json::as_bool) != Some(true))
        {
            cv.scope.note_numeric(array(s, "constraints"));
        }
    }
    for s in unleash_segments {
        cv.scope.note_numeric(array(s, "constraints"));
    }
    let (mut set, mut report) = (FlagSet::default(), Vec::new());
    let mut owners = Owners::default();
    for s in unleash_segments {
        let key = segment_key(s.get("id").unwrap_or(&Json::Null));
        let mark = cv.scope.segments.len();
        match cv.unleash_segment(&key, s) {
            Ok(seg) => {
                // Its negations' segments belong to its line.
                for helper in &cv.scope.segments[mark..] {
                    owners.segments.insert(helper.key.clone(), ("segment", key.clone()));
                    owners.generated.insert(helper.key.clone());
                }
                set.segments.push(seg);
                cv.segments.insert(key.clone(), Ok(()));
                report.push(Line::new("segment", &key, Outcome::Exact));
            }
            Err(why) => {
                cv.scope.segments.truncate(mark);
                cv.segments.insert(key.clone(), Err(why.clone()));
                report.push(Line::new("segment", &key, Outcome::Skipped(why)));
            }
        }
    }
    // Each feature on its own, then the prerequisites its dependencies
    // need (which read the parents' variant flags).
    let mut converted: BTreeMap<String, (Flag, Option<Flag>)> = BTreeMap::new();
    let mut feature_lines = BTreeMap::new();
    // The segments written for each feature.
    let mut owned: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, f) in cv.features.clone() {
        let mark = (cv.scope.segments.len(), set.segments.len());
        cv.approximations.clear();
        match cv.feature(name, f, &mut set.segments) {
            Ok(flags) => {
                let outcome = if cv.approximations.is_empty() {
                    Outcome::Exact
                } else {
                    Outcome::Approximate(cv.approximations.join("; "))
                };
                let keys = cv.scope.segments[mark.0..].iter().chain(&set.segments[mark.1..]);
                owned.insert(name.to_owned(), keys.map(|s| s.key.clone()).collect());
                converted.insert(name.to_owned(), flags);
                feature_lines.insert(name.to_owned(), outcome);
            }
            Err(why) => {
                cv.scope.segments.truncate(mark.0);
                set.segments.truncate(mark.1);
                feature_lines.insert(name.to_owned(), Outcome::Skipped(why));
            }
        }
    }
    let names: Vec<String> = converted.keys().cloned().collect();
    for name in names {
        let f = cv.features[name.as_str()];
        match dependencies(&name, f, &cv.features, &converted) {
            Ok(prerequisites) => {
                if let Some((flag, _)) = converted.get_mut(&name) {
                    flag.prerequisites = prerequisites;
                }
            }
            Err(why) => {
                converted.remove(&name);
                let gone = owned.remove(&name).unwrap_or_default(); // none written
                set.segments.retain(|s| !gone.contains(&s.key));
                cv.scope.segments.retain(|s| !gone.contains(&s.key));
                feature_lines.insert(name, Outcome::Skipped(why));
            }
        }
    }
    for (name, (flag, variant)) in converted {
        let line = ("feature", name.clone());
        owners.flags.insert(flag.key.clone(), line.clone());
        set.flags.push(flag);
        if let Some(v) = variant {
            owners.flags.insert(v.key.clone(), line.clone());
            set.flags.push(v);
        }
        let written = owned.remove(&name).unwrap_or_default(); // no entry: none written
        for key in written {
            owners.generated.insert(key.clone());
            owners.segments.insert(key, line.clone());
        }
    }
    // Segments of skipped features were dropped above; those they shared
    // (negations of a kept feature) stay.
    set.segments.extend(std::mem::take(&mut cv.scope.segments));
    if set.segments.iter().any(|s| s.rules.iter().any(|r| refers(&r.clauses, HAS_USER_ID))) {
        set.segments.push(segment(
            HAS_USER_ID,
            vec![SegmentRule { clauses: vec![present("userId")], ..SegmentRule::default() }],
        ));
        owners.generated.insert(HAS_USER_ID.to_owned());
    }
    for (name, outcome) in feature_lines {
        report.push(Line::new("feature", &name, outcome));
    }
    for attr in &cv.scope.numeric {
        report.push(Line::new(
            "attribute",
            attr,
            Outcome::Note("compared with NUM_*: pass it in the flagstream context as a number".into()),
        ));
    }
    Ok((set, report, owners))
}

fn refers(clauses: &[Clause], key: &str) -> bool {
    clauses.iter().any(|c| c.values.iter().any(|v| v.as_str() == Some(key)))
}

/// A dependency's parent flag as a prerequisite.
fn dependencies(
    name: &str,
    f: &Json,
    features: &BTreeMap<&str, &Json>,
    converted: &BTreeMap<String, (Flag, Option<Flag>)>,
) -> Result<Vec<Prerequisite>, Why> {
    let mut out = Vec::new();
    for d in array(f, "dependencies") {
        let parent = str_of(d, "feature");
        let Some(pf) = features.get(parent) else {
            return Err(format!("depends on {parent:?}, which is not in this file"));
        };
        if !array(pf, "dependencies").is_empty() {
            return Err(format!(
                "depends on {parent:?}, which has dependencies of its own (Unleash never enables {name:?})"
            ));
        }
        let Some((_, parent_variant)) = converted.get(parent) else {
            return Err(format!("depends on {parent:?}, which is not imported"));
        };
        let enabled = d.get("enabled").and_then(Json::as_bool).unwrap_or(true);
        let wanted: Vec<&str> = array(d, "variants").iter().filter_map(Json::as_str).collect();
        if !enabled {
            if !wanted.is_empty() {
                return Err(format!(
                    "depends on {parent:?} being disabled with variants {wanted:?}: not one flagstream prerequisite"
                ));
            }
            if pf.get("enabled").and_then(Json::as_bool) != Some(true) {
                return Err(format!(
                    "depends on {parent:?} being disabled while {parent:?} is switched off: a flagstream prerequisite needs its flag on"
                ));
            }
            out.push(Prerequisite { key: parent.to_owned(), variation: 1 });
            continue;
        }
        match (wanted.is_empty(), parent_variant) {
            (false, Some(pv)) => {
                let indexes: Vec<u32> = pv
                    .variations
                    .iter()
                    .enumerate()
                    .skip(2)
                    .filter(|(_, v)| {
                        v.get("name").and_then(Json::as_str).is_some_and(|n| wanted.contains(&n))
                    })
                    .map(|(i, _)| i as u32)
                    .collect();
                // Where the parent resolves no variant (its variation 1),
                // Unleash's variant test holds too.
                let serves_none = pv.fallthrough.variation == Some(1)
                    || pv.rules.iter().any(|r| r.serve.variation == Some(1));
                match (indexes.as_slice(), serves_none) {
                    ([one], false) => out.push(Prerequisite { key: pv.key.clone(), variation: *one }),
                    ([], true) => out.push(Prerequisite { key: pv.key.clone(), variation: 1 }),
                    ([], false) => {
                        return Err(format!(
                            "depends on variants {wanted:?} of {parent:?}, which it does not have (Unleash never enables {name:?})"
                        ));
                    }
                    _ => {
                        return Err(format!(
                            "depends on variants {wanted:?} of {parent:?}, held by more than one of its answers (a variant, or none resolved): a flagstream prerequisite names one variation"
                        ));
                    }
                }
            }
            // Without variants the parent's variant test is vacuous.
            _ => out.push(Prerequisite { key: parent.to_owned(), variation: 0 }),
        }
    }
    Ok(out)
}

/// Rules in order, up to the first that matches every context (which
/// becomes the fallthrough).
#[derive(Default)]
pub(super) struct Rules {
    rules: Vec<Rule>,
    fallthrough: Option<Serve>,
}

impl Rules {
    pub(super) fn add(&mut self, id: String, clauses: Vec<Clause>, serve: Serve) {
        if self.fallthrough.is_some() {
            return;
        }
        if clauses.is_empty() {
            self.fallthrough = Some(serve);
        } else {
            self.rules.push(Rule { id, clauses, serve });
        }
    }
}

impl Convert<'_> {
    fn unleash_segment(&mut self, key: &str, s: &Json) -> Result<Segment, Why> {
        let (mut clauses, never) = self.tests(s, key)?;
        if clauses.is_empty() {
            clauses.push(always());
        }
        // A segment no context is in has no rule.
        let rules = if never { Vec::new() } else { vec![SegmentRule { clauses, ..SegmentRule::default() }] };
        let mut seg = segment(key, rules);
        seg.description = str_of(s, "name").to_owned();
        Ok(seg)
    }

    /// The clauses of `v`'s constraints, and whether one of them is true
    /// for no context.
    pub(super) fn tests(&mut self, v: &Json, owner: &str) -> Result<(Vec<Clause>, bool), Why> {
        let (mut clauses, mut never) = (Vec::new(), false);
        for (i, c) in array(v, "constraints").iter().enumerate() {
            match self.scope.constraint(c, owner, i + 1).map_err(|e| format!("constraint {}: {e}", i + 1))? {
                Test::Clause(c) => clauses.push(c),
                Test::Always => {}
                Test::Never => never = true,
            }
        }
        Ok((clauses, never))
    }

    /// The bool flag and the variant flag of one feature (prerequisites
    /// come later); strategy segments go to `segments`.
    fn feature(
        &mut self,
        name: &str,
        f: &Json,
        segments: &mut Vec<Segment>,
    ) -> Result<(Flag, Option<Flag>), Why> {
        if f.get("deleted").and_then(Json::as_bool) == Some(true) {
            return Err("deleted".into());
        }
        let valid = !name.is_empty()
            && name.as_bytes()[0].is_ascii_alphanumeric()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !valid {
            return Err(format!(
                "name {name:?}: a flagstream key uses A-Z a-z 0-9 . _ - and starts with a letter or digit"
            ));
        }
        let declared = array(f, "strategies");
        let mut strategies = Vec::new();
        for (i, s) in declared.iter().enumerate() {
            if s.get("disabled").and_then(Json::as_bool) == Some(true) {
                continue;
            }
            if let Some(st) = self
                .strategy(name, i + 1, s, segments)
                .map_err(|e| format!("strategy {} ({}): {e}", i + 1, str_of(s, "name")))?
            {
                strategies.push(st);
            }
        }
        let active = declared.iter().any(|s| s.get("disabled").and_then(Json::as_bool) != Some(true));
        // isEnabled: any strategy (none at all: every context).
        let mut enabled = Rules::default();
        if !active {
            enabled.fallthrough = Some(Serve::variation(0));
        }
        for st in &strategies {
            enabled.add(format!("strategy-{}", st.n), st.cond.clone(), Serve::variation(0));
        }
        let on = f.get("enabled").and_then(Json::as_bool).unwrap_or(false);
        let flag = Flag {
            key: name.to_owned(),
            flag_type: FlagType::Bool,
            variations: vec![json!(true), json!(false)],
            on,
            off_variation: 1,
            targets: Vec::new(),
            rules: enabled.rules,
            fallthrough: enabled.fallthrough.unwrap_or_else(|| Serve::variation(1)),
            prerequisites: Vec::new(),
            salt: String::new(),
            version: 0,
            revision: 0,
            description: str_of(f, "description").to_owned(),
            tags: vec!["unleash".into()],
            owner: String::new(),
            client_visible: false,
        };
        let feature_variants = array(f, "variants");
        let any_variants = !feature_variants.is_empty()
            || strategies.iter().any(|s| s.variants.as_ref().is_some_and(|v| !v.is_empty()));
        if !any_variants {
            return Ok((flag, None));
        }
        if self.features.contains_key(variant_key(name).as_str()) {
            return Err(format!("its variant flag {:?} would be another feature's name", variant_key(name)));
        }
        // getVariant: the first matching strategy with variants, else the
        // feature's.
        let mut values = vec![
            json!({"name": "disabled", "enabled": false, "feature_enabled": false}),
            json!({"name": "disabled", "enabled": false, "feature_enabled": true}),
        ];
        let mut rules = Rules::default();
        for st in &strategies {
            let Some(list) = &st.variants else { continue };
            let id = format!("strategy-{}", st.n);
            if list.is_empty() {
                self.feature_variants(name, f, &id, &st.cond, &mut values, &mut rules)?;
            } else {
                self.split(&id, &st.cond, list, &st.group, &st.stick, &mut values, &mut rules)?;
            }
        }
        self.feature_variants(name, f, "variants", &[], &mut values, &mut rules)?;
        let variant = Flag {
            key: variant_key(name),
            flag_type: FlagType::Json,
            variations: values,
            on,
            off_variation: 0,
            targets: Vec::new(),
            rules: rules.rules,
            fallthrough: rules.fallthrough.unwrap_or_else(|| Serve::variation(1)),
            prerequisites: vec![Prerequisite { key: name.to_owned(), variation: 0 }],
            salt: String::new(),
            version: 0,
            revision: 0,
            description: format!("getVariant of {name}"),
            tags: vec!["unleash".into()],
            owner: String::new(),
            client_visible: false,
        };
        Ok((flag, Some(variant)))
    }
}
