//! Compiling model flags and segments into their evaluation form: serves
//! into thresholds, targets grouped by kind, every rule's clauses into one
//! array, variations typed; and a flag from its wire bytes, for a snapshot
//! that compiles flags on first use. Data that bypassed validation compiles
//! to a flag or segment marked malformed, never a guess and never a panic.

use std::sync::Arc;

use bytes::Bytes;
use flagstream_proto::v1 as pb;
use prost::Message;

use crate::bucket;
use crate::clause::{CompiledClause, StrSet};
use crate::compiled::{
    CompiledFlag, CompiledRollout, CompiledRule, CompiledSegment, CompiledSegmentRule, CompiledServe,
    Constant, FastMap, TargetGroup, Variations,
};
use crate::limit::Limits;
use crate::model::{Clause, Flag, KindKeys, Segment, Serve, Target};
use crate::operand::{RegexBudget, regex_patterns};
use crate::reference::{KindSel, parse_attr};
use crate::schedule::CompiledSchedule;
use crate::validate::Facts;
use crate::value::Value;

fn compile_serve(serve: &Serve, salt: &str) -> Option<CompiledServe> {
    match (serve.variation, &serve.rollout, &serve.schedule) {
        (Some(v), None, None) => Some(CompiledServe::Variation(v)),
        (None, Some(r), None) => {
            let mut end = 0u32;
            let thresholds = r
                .variations
                .iter()
                .map(|wv| {
                    end = end.saturating_add(wv.weight);
                    (end, wv.variation)
                })
                .collect();
            Some(CompiledServe::Rollout(Box::new(CompiledRollout {
                kind: KindSel::parse(&r.context_kind),
                bucket_by: parse_attr(&r.bucket_by).ok()?,
                mode: bucket::Mode::of(r.bucketing.as_ref(), bucket::seed_for(r.seed, salt))?,
                thresholds,
            })))
        }
        (None, None, Some(s)) => {
            CompiledSchedule::compile(s, salt).ok().map(|c| CompiledServe::Schedule(Box::new(c)))
        }
        _ => None,
    }
}

/// Groups targets by kind, keeping each key's first target.
fn compile_targets(targets: &[Target]) -> Option<Box<[TargetGroup]>> {
    if targets.is_empty() {
        return None;
    }
    let mut groups: Vec<TargetGroup> = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let kind = KindSel::parse(&t.context_kind);
        let group = match groups.iter().position(|g| g.kind == kind) {
            Some(g) => &mut groups[g],
            None => {
                groups.push(TargetGroup { kind, keys: FastMap::default() });
                groups.last_mut().expect("just pushed")
            }
        };
        for key in &t.values {
            group.keys.entry(Box::from(key.as_str())).or_insert((i as u32, t.variation));
        }
    }
    Some(groups.into_boxed_slice())
}

/// The regex budget of one flag or segment. Over `max_regex_patterns` it
/// allows none, so no pattern is compiled and the item is malformed (only
/// unvalidated data gets here). The environment's budget is validation's:
/// every set an SDK receives is validated, its cache held validated data.
fn item_budget<'c>(clauses: impl IntoIterator<Item = &'c Clause>, limits: &Limits) -> RegexBudget {
    let mut budget = RegexBudget::item(limits);
    if regex_patterns(clauses) > limits.max_regex_patterns {
        budget.patterns = 0;
    }
    budget
}

pub(crate) fn compile_flag(flag: &Flag, limits: &Limits) -> CompiledFlag {
    let mut malformed = false;
    let variations = Variations::new(
        flag.variations
            .iter()
            .map(|v| {
                Value::from_json(flag.flag_type, v).unwrap_or_else(|| {
                    malformed = true;
                    Value::Json(v.clone())
                })
            })
            .collect(),
    );
    let targets = compile_targets(&flag.targets);
    let salt = flag.effective_salt().to_owned();
    let mut clauses = Vec::with_capacity(flag.rules.iter().map(|r| r.clauses.len()).sum());
    let mut budget = item_budget(flag.rules.iter().flat_map(|r| &r.clauses), limits);
    let rules = flag
        .rules
        .iter()
        .map(|r| {
            let compiled = r
                .clauses
                .iter()
                .map(|c| CompiledClause::compile(c, limits, &mut budget))
                .collect::<Result<Vec<_>, _>>();
            let serve = compile_serve(&r.serve, &salt);
            let start = clauses.len() as u32;
            match (compiled, serve) {
                (Ok(compiled), Some(serve)) => {
                    clauses.extend(compiled);
                    CompiledRule { clauses: (start, clauses.len() as u32), serve, id: r.id.as_str().into() }
                }
                _ => {
                    malformed = true;
                    CompiledRule {
                        clauses: (start, start),
                        serve: CompiledServe::Variation(u32::MAX),
                        id: r.id.as_str().into(),
                    }
                }
            }
        })
        .collect();
    let fallthrough = compile_serve(&flag.fallthrough, &salt).unwrap_or_else(|| {
        malformed = true;
        CompiledServe::Variation(u32::MAX)
    });
    let constant = if malformed {
        None
    } else if !flag.on {
        Some((flag.off_variation, true))
    } else if flag.prerequisites.is_empty() && targets.is_none() && flag.rules.is_empty() {
        match fallthrough {
            CompiledServe::Variation(v) => Some((v, false)),
            CompiledServe::Rollout(_) | CompiledServe::Schedule(_) => None,
        }
    } else {
        None
    };
    let constant = constant.and_then(|(variation, off)| {
        let value = variations.get(variation as usize)?.clone();
        Some(Constant { variation, off, value })
    });
    CompiledFlag {
        constant,
        flag_type: flag.flag_type,
        variations,
        on: flag.on,
        off_variation: flag.off_variation,
        prerequisites: flag.prerequisites.iter().map(|p| (Arc::from(p.key.as_str()), p.variation)).collect(),
        targets,
        rules,
        clauses: clauses.into_boxed_slice(),
        fallthrough,
        version: flag.version,
        malformed,
        regex_bytes: budget.charged,
    }
}

pub(crate) fn compile_segments(
    segments: Vec<Segment>,
    limits: &Limits,
) -> FastMap<Box<str>, Arc<CompiledSegment>> {
    segments.into_iter().map(|s| (Box::from(s.key.as_str()), Arc::new(compile_segment(s, limits)))).collect()
}

pub(crate) fn compile_segment(segment: Segment, limits: &Limits) -> CompiledSegment {
    let keys = |v: &[String]| StrSet::new(v.iter().map(|k| Box::from(k.as_str())).collect());
    let by_kind = |lists: &[KindKeys]| -> Box<[(KindSel, StrSet)]> {
        lists.iter().map(|l| (KindSel::parse(&l.context_kind), keys(&l.values))).collect()
    };
    let seed = bucket::seed_for(None, segment.effective_salt());
    let mut malformed = false;
    let mut budget = item_budget(segment.rules.iter().flat_map(|r| &r.clauses), limits);
    let rules = segment
        .rules
        .iter()
        .filter_map(|r| {
            let clauses: Result<Box<[_]>, _> =
                r.clauses.iter().map(|c| CompiledClause::compile(c, limits, &mut budget)).collect();
            let weight = match r.weight {
                None => Ok(None),
                Some(w) => parse_attr(&r.bucket_by).map_err(|_| ()).and_then(|by| {
                    let mode = bucket::Mode::of(r.bucketing.as_ref(), seed).ok_or(())?;
                    Ok(Some((w, KindSel::parse(&r.rollout_context_kind), by, mode)))
                }),
            };
            // Only unvalidated data fails here: the segment then answers
            // MALFORMED_FLAG wherever it is consulted, never a guess.
            match (clauses, weight) {
                (Ok(clauses), Ok(weight)) if !clauses.is_empty() || weight.is_some() => {
                    Some(CompiledSegmentRule { clauses, weight })
                }
                _ => {
                    malformed = true;
                    None
                }
            }
        })
        .collect();
    CompiledSegment {
        included: keys(&segment.included),
        excluded: keys(&segment.excluded),
        included_kinds: by_kind(&segment.included_contexts),
        excluded_kinds: by_kind(&segment.excluded_contexts),
        rules,
        malformed,
        source: Arc::new(segment),
    }
}

/// Compiles a flag from its wire bytes, with its [`Facts`]. Bytes that do
/// not decode or convert (they were checksum-verified, so only a format
/// change gets here) give a flag that evaluates to `MALFORMED_FLAG`, never a
/// guess.
pub(crate) fn compile_raw(key: &str, raw: &Bytes, limits: &Limits) -> (CompiledFlag, Facts) {
    match decode(key, raw) {
        Some(flag) => (compile_flag(&flag, limits), Facts::of(&flag)),
        None => {
            let placeholder = Flag::placeholder(key);
            let mut f = compile_flag(&placeholder, limits);
            f.malformed = true;
            f.constant = None;
            (f, Facts::of(&placeholder))
        }
    }
}

/// The model of a flag's wire bytes, if they decode and convert and hold
/// the flag of `key`.
pub(crate) fn decode(key: &str, raw: &Bytes) -> Option<Flag> {
    let p = pb::Flag::decode(raw.clone()).ok()?;
    crate::wire::flag_from_proto(&p).ok().filter(|f| f.key == key)
}
