//! Mapping between the model ([`crate::model`]) and the `flagstream.v1`
//! protobuf messages. Reading from the wire checks what the protobuf types
//! cannot (unknown enum numbers, empty oneofs, unparseable JSON) and reports
//! it with the same field paths as [`crate::validate`]; everything else is
//! validation's job.

use flagstream_proto::v1 as pb;
use serde_json::Value as Json;

use crate::context::Scalar;
use crate::error::ValidationErrors;
use crate::model::{
    Clause, Flag, FlagType, KindKeys, Operator, Prerequisite, Rollout, Rule, Schedule, Segment, SegmentRule,
    Serve, Step, Target, WeightedVariation,
};

mod context;
mod scalar;

pub use context::{context_from_proto, context_to_proto};
use scalar::{scalar_from_proto, scalar_to_proto};

/// The protobuf form of a flag.
pub fn flag_to_proto(f: &Flag) -> pb::Flag {
    pb::Flag {
        key: f.key.clone(),
        r#type: flag_type_to_proto(f.flag_type) as i32,
        variations: f.variations.iter().map(|v| variation_to_proto(f.flag_type, v)).collect(),
        on: f.on,
        off_variation: f.off_variation,
        targets: f
            .targets
            .iter()
            .map(|t| pb::Target {
                variation: t.variation,
                values: t.values.clone(),
                context_kind: t.context_kind.clone(),
            })
            .collect(),
        rules: f
            .rules
            .iter()
            .map(|r| pb::Rule {
                id: r.id.clone(),
                clauses: r.clauses.iter().map(clause_to_proto).collect(),
                serve: Some(serve_to_proto(&r.serve)),
            })
            .collect(),
        fallthrough: Some(serve_to_proto(&f.fallthrough)),
        prerequisites: f
            .prerequisites
            .iter()
            .map(|p| pb::Prerequisite { key: p.key.clone(), variation: p.variation })
            .collect(),
        salt: f.salt.clone(),
        version: f.version,
        revision: f.revision,
        description: f.description.clone(),
        tags: f.tags.clone(),
        owner: f.owner.clone(),
        client_visible: f.client_visible,
    }
}

/// Reads a flag from protobuf. Errors name the field path.
pub fn flag_from_proto(p: &pb::Flag) -> Result<Flag, ValidationErrors> {
    let path = format!("flags[{:?}]", p.key);
    let flag_type = match pb::FlagType::try_from(p.r#type) {
        Ok(pb::FlagType::Bool) => FlagType::Bool,
        Ok(pb::FlagType::String) => FlagType::String,
        Ok(pb::FlagType::Int) => FlagType::Int,
        Ok(pb::FlagType::Float) => FlagType::Float,
        Ok(pb::FlagType::Json) => FlagType::Json,
        _ => {
            return Err(ValidationErrors::at(
                format!("{path}.type"),
                format!("unknown flag type {}", p.r#type),
            ));
        }
    };
    let variations = p
        .variations
        .iter()
        .enumerate()
        .map(|(i, v)| {
            variation_from_proto(v).map_err(|m| ValidationErrors::at(format!("{path}.variations[{i}]"), m))
        })
        .collect::<Result<_, _>>()?;
    let rules = p
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let rpath = format!("{path}.rules[{i}]");
            Ok(Rule {
                id: r.id.clone(),
                clauses: clauses_from_proto(&rpath, &r.clauses)?,
                serve: serve_from_proto(&format!("{rpath}.serve"), r.serve.as_ref())?,
            })
        })
        .collect::<Result<_, ValidationErrors>>()?;
    Ok(Flag {
        key: p.key.clone(),
        flag_type,
        variations,
        on: p.on,
        off_variation: p.off_variation,
        targets: p
            .targets
            .iter()
            .map(|t| Target {
                variation: t.variation,
                values: t.values.clone(),
                context_kind: t.context_kind.clone(),
            })
            .collect(),
        rules,
        fallthrough: serve_from_proto(&format!("{path}.fallthrough"), p.fallthrough.as_ref())?,
        prerequisites: p
            .prerequisites
            .iter()
            .map(|q| Prerequisite { key: q.key.clone(), variation: q.variation })
            .collect(),
        salt: p.salt.clone(),
        version: p.version,
        revision: p.revision,
        description: p.description.clone(),
        tags: p.tags.clone(),
        owner: p.owner.clone(),
        client_visible: p.client_visible,
    })
}

/// The protobuf form of a segment.
pub fn segment_to_proto(s: &Segment) -> pb::Segment {
    pb::Segment {
        key: s.key.clone(),
        included: s.included.clone(),
        excluded: s.excluded.clone(),
        rules: s
            .rules
            .iter()
            .map(|r| pb::SegmentRule {
                id: r.id.clone(),
                clauses: r.clauses.iter().map(clause_to_proto).collect(),
                weight: r.weight,
                bucket_by: r.bucket_by.clone(),
                rollout_context_kind: r.rollout_context_kind.clone(),
                bucketing: r.bucketing.as_ref().map(bucketing_to_proto),
            })
            .collect(),
        version: s.version,
        revision: s.revision,
        description: s.description.clone(),
        included_contexts: s.included_contexts.iter().map(keys_to_proto).collect(),
        excluded_contexts: s.excluded_contexts.iter().map(keys_to_proto).collect(),
        salt: s.salt.clone(),
    }
}

/// Reads a segment from protobuf. Errors name the field path.
pub fn segment_from_proto(p: &pb::Segment) -> Result<Segment, ValidationErrors> {
    let path = format!("segments[{:?}]", p.key);
    let rules = p
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| {
            Ok(SegmentRule {
                id: r.id.clone(),
                clauses: clauses_from_proto(&format!("{path}.rules[{i}]"), &r.clauses)?,
                weight: r.weight,
                bucket_by: r.bucket_by.clone(),
                rollout_context_kind: r.rollout_context_kind.clone(),
                bucketing: bucketing_from_proto(&format!("{path}.rules[{i}]"), r.bucketing.as_ref())?,
            })
        })
        .collect::<Result<_, ValidationErrors>>()?;
    Ok(Segment {
        key: p.key.clone(),
        included: p.included.clone(),
        excluded: p.excluded.clone(),
        rules,
        version: p.version,
        revision: p.revision,
        description: p.description.clone(),
        included_contexts: p.included_contexts.iter().map(keys_from_proto).collect(),
        excluded_contexts: p.excluded_contexts.iter().map(keys_from_proto).collect(),
        salt: p.salt.clone(),
    })
}

fn keys_to_proto(k: &KindKeys) -> pb::KindKeys {
    pb::KindKeys { context_kind: k.context_kind.clone(), values: k.values.clone() }
}

fn keys_from_proto(k: &pb::KindKeys) -> KindKeys {
    KindKeys { context_kind: k.context_kind.clone(), values: k.values.clone() }
}

fn flag_type_to_proto(t: FlagType) -> pb::FlagType {
    match t {
        FlagType::Bool => pb::FlagType::Bool,
        FlagType::String => pb::FlagType::String,
        FlagType::Int => pb::FlagType::Int,
        FlagType::Float => pb::FlagType::Float,
        FlagType::Json => pb::FlagType::Json,
    }
}

/// Encodes a variation by the flag's type. A value that does not fit the
/// type (caught by validation) travels as JSON text so nothing is lost.
pub fn variation_to_proto(t: FlagType, v: &Json) -> pb::Variation {
    use pb::variation::Value as V;
    let value = match (t, v) {
        (FlagType::Bool, Json::Bool(b)) => V::BoolValue(*b),
        (FlagType::String, Json::String(s)) => V::StringValue(s.clone()),
        (FlagType::Int, Json::Number(n)) if n.as_i64().is_some() => V::IntValue(n.as_i64().unwrap_or(0)),
        (FlagType::Float, Json::Number(n)) if n.as_f64().is_some() => {
            V::FloatValue(n.as_f64().unwrap_or(0.0))
        }
        _ => V::JsonValue(v.to_string()),
    };
    pb::Variation { value: Some(value) }
}

/// Decodes a variation to JSON; an empty variation, a non-finite float or
/// JSON text that does not parse is an error saying which.
pub fn variation_from_proto(v: &pb::Variation) -> Result<Json, String> {
    use pb::variation::Value as V;
    Ok(match &v.value {
        None => return Err("variation has no value".into()),
        Some(V::BoolValue(b)) => Json::Bool(*b),
        Some(V::StringValue(s)) => Json::String(s.clone()),
        Some(V::IntValue(i)) => Json::from(*i),
        Some(V::FloatValue(f)) => serde_json::Number::from_f64(*f)
            .map(Json::Number)
            .ok_or_else(|| format!("{f} is not a finite float"))?,
        Some(V::JsonValue(text)) => serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?,
    })
}

fn clause_to_proto(c: &Clause) -> pb::Clause {
    pb::Clause {
        attribute: c.attribute.clone(),
        // Operator::ALL is in protobuf order, starting at 1.
        op: Operator::ALL.iter().position(|o| *o == c.op).map_or(0, |i| i as i32 + 1),
        values: c.values.iter().filter_map(|v| Scalar::from_json(v).map(|s| scalar_to_proto(&s))).collect(),
        negate: c.negate,
        context_kind: c.context_kind.clone(),
    }
}

fn clauses_from_proto(path: &str, cs: &[pb::Clause]) -> Result<Vec<Clause>, ValidationErrors> {
    cs.iter()
        .enumerate()
        .map(|(i, c)| {
            let cpath = format!("{path}.clauses[{i}]");
            let op = usize::try_from(c.op - 1).ok().and_then(|i| Operator::ALL.get(i).copied()).ok_or_else(
                || ValidationErrors::at(format!("{cpath}.op"), format!("unknown operator {}", c.op)),
            )?;
            let values = c
                .values
                .iter()
                .enumerate()
                .map(|(j, s)| {
                    scalar_from_proto(s)
                        .map(|s| match s {
                            Scalar::Str(v) => Json::String(v.into_owned()),
                            Scalar::Num(n) => {
                                serde_json::Number::from_f64(n).map_or(Json::Null, Json::Number)
                            }
                            Scalar::Bool(b) => Json::Bool(b),
                        })
                        .ok_or_else(|| ValidationErrors::at(format!("{cpath}.values[{j}]"), "value is empty"))
                })
                .collect::<Result<_, _>>()?;
            Ok(Clause {
                context_kind: c.context_kind.clone(),
                attribute: c.attribute.clone(),
                op,
                values,
                negate: c.negate,
            })
        })
        .collect()
}

/// The protobuf form of an imported bucketing.
fn bucketing_to_proto(b: &crate::model::Bucketing) -> pb::Bucketing {
    use crate::model::Bucketing as B;
    let kind = match b {
        B::Launchdarkly { prefix } => {
            pb::bucketing::Kind::Launchdarkly(pb::LaunchDarklyBucketing { prefix: prefix.clone() })
        }
        B::Unleash { group, seed, modulus } => pb::bucketing::Kind::Unleash(pb::UnleashBucketing {
            group: group.clone(),
            seed: *seed,
            modulus: *modulus,
        }),
    };
    pb::Bucketing { kind: Some(kind) }
}

/// An imported bucketing from protobuf. A message without a mode this SDK
/// knows (a newer one) is an error, so the item is malformed rather than
/// bucketed another way.
fn bucketing_from_proto(
    path: &str,
    b: Option<&pb::Bucketing>,
) -> Result<Option<crate::model::Bucketing>, ValidationErrors> {
    use crate::model::Bucketing as B;
    let Some(b) = b else { return Ok(None) };
    match &b.kind {
        Some(pb::bucketing::Kind::Launchdarkly(l)) => Ok(Some(B::Launchdarkly { prefix: l.prefix.clone() })),
        Some(pb::bucketing::Kind::Unleash(u)) => {
            Ok(Some(B::Unleash { group: u.group.clone(), seed: u.seed, modulus: u.modulus }))
        }
        None => Err(ValidationErrors::at(
            format!("{path}.bucketing"),
            "a bucketing this SDK does not know (upgrade it)".to_owned(),
        )),
    }
}

/// The protobuf form of a serve.
pub fn serve_to_proto(s: &Serve) -> pb::Serve {
    let kind = match (s.variation, &s.rollout, &s.schedule) {
        (Some(v), _, _) => Some(pb::serve::Kind::Variation(v)),
        (None, Some(r), _) => Some(pb::serve::Kind::Rollout(pb::Rollout {
            bucket_by: r.bucket_by.clone(),
            seed: r.seed,
            variations: r
                .variations
                .iter()
                .map(|w| pb::WeightedVariation { variation: w.variation, weight: w.weight })
                .collect(),
            context_kind: r.context_kind.clone(),
            bucketing: r.bucketing.as_ref().map(bucketing_to_proto),
        })),
        (None, None, Some(sc)) => Some(pb::serve::Kind::Schedule(pb::Schedule {
            variation: sc.variation,
            otherwise: sc.otherwise,
            bucket_by: sc.bucket_by.clone(),
            context_kind: sc.context_kind.clone(),
            seed: sc.seed,
            steps: sc
                .steps
                .iter()
                .map(|st| pb::ScheduleStep { start_unix_ms: st.start_unix_ms, weight: st.weight })
                .collect(),
        })),
        (None, None, None) => None,
    };
    pb::Serve { kind }
}

/// Reads a serve; `path` prefixes errors.
pub fn serve_from_proto(path: &str, s: Option<&pb::Serve>) -> Result<Serve, ValidationErrors> {
    match s.and_then(|s| s.kind.as_ref()) {
        Some(pb::serve::Kind::Variation(v)) => Ok(Serve::variation(*v)),
        Some(pb::serve::Kind::Rollout(r)) => Ok(Serve::rollout(Rollout {
            bucket_by: r.bucket_by.clone(),
            context_kind: r.context_kind.clone(),
            seed: r.seed,
            variations: r
                .variations
                .iter()
                .map(|w| WeightedVariation { variation: w.variation, weight: w.weight })
                .collect(),
            bucketing: bucketing_from_proto(&format!("{path}.rollout"), r.bucketing.as_ref())?,
        })),
        Some(pb::serve::Kind::Schedule(sc)) => Ok(Serve::schedule(Schedule {
            variation: sc.variation,
            otherwise: sc.otherwise,
            bucket_by: sc.bucket_by.clone(),
            context_kind: sc.context_kind.clone(),
            seed: sc.seed,
            steps: sc
                .steps
                .iter()
                .map(|st| Step { start_unix_ms: st.start_unix_ms, weight: st.weight })
                .collect(),
        })),
        None => Err(ValidationErrors::at(path.to_owned(), "set variation, rollout or schedule")),
    }
}

/// A `Flag` read for its key alone: prost skips every other field without
/// decoding it. See [`flag_key`].
#[derive(Clone, PartialEq, prost::Message)]
struct FlagKey {
    #[prost(string, tag = "1")]
    key: String,
}

/// A `Flag` read for its variations alone (prost skips every other field).
#[derive(Clone, PartialEq, prost::Message)]
struct FlagVariations {
    #[prost(message, repeated, tag = "3")]
    variations: Vec<pb::Variation>,
}

/// Variation `index` of an encoded `Flag`, as JSON, without decoding the
/// rest of the flag; `None` when it has no such variation or the bytes do
/// not decode.
pub(crate) fn flag_variation(raw: &bytes::Bytes, index: usize) -> Option<Json> {
    let v = <FlagVariations as prost::Message>::decode(raw.clone()).ok()?;
    variation_from_proto(v.variations.get(index)?).ok()
}

/// The key of an encoded `Flag`, without decoding the rest: what a cold
/// start from the cache needs to index raw flags. Encoders write fields in
/// tag order, so the key (tag 1, length-delimited) normally comes first and
/// is borrowed in place; anything else takes prost's general decoder, which
/// also reports what is wrong with a malformed item.
pub fn flag_key(raw: &bytes::Bytes) -> Result<std::borrow::Cow<'_, str>, prost::DecodeError> {
    if let [0x0a, rest @ ..] = raw.as_ref() {
        // The key's length: a varint, at most 5 bytes for any `usize` here.
        let (mut len, mut shift) = (0usize, 0);
        for (i, b) in rest.iter().take(5).enumerate() {
            len |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                if let Some(key) = rest.get(i + 1..).and_then(|r| r.get(..len))
                    && let Ok(key) = std::str::from_utf8(key)
                {
                    return Ok(std::borrow::Cow::Borrowed(key));
                }
                break;
            }
        }
    }
    <FlagKey as prost::Message>::decode(raw.clone()).map(|f| std::borrow::Cow::Owned(f.key))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use prost::Message;

    use super::*;

    #[test]
    fn flag_key_borrows_a_leading_key_and_decodes_any_other_layout() {
        let flag = flagstream_proto::v1::Flag { key: "checkout".into(), version: 3, ..Default::default() };
        let raw = Bytes::from(flag.encode_to_vec());
        assert!(matches!(flag_key(&raw), Ok(std::borrow::Cow::Borrowed("checkout"))));
        // The version (tag 11, the last two bytes) moved before the key.
        let mut reordered = raw[raw.len() - 2..].to_vec();
        reordered.extend_from_slice(&raw[..raw.len() - 2]);
        let reordered = Bytes::from(reordered);
        assert_eq!(flag_key(&reordered).unwrap(), "checkout");
        assert!(flag_key(&Bytes::from_static(b"\x0a\x05ab")).is_err(), "truncated key");
    }
}
