//! Contexts on the wire (`flagstream.v1.Context`, server-side evaluation):
//! one kind, or a multi-kind context of several, with scalar, list and
//! JSON attribute values.

use flagstream_proto::v1 as pb;

use super::{err, scalar_from_proto, scalar_to_proto};
use crate::context::{AttrValue, Context};
use crate::reference::kind_problem;
use crate::validate::ValidationErrors;

/// The protobuf form of a context.
pub fn context_to_proto(c: &Context<'_>) -> pb::Context {
    if c.is_multi() {
        return pb::Context {
            kind: "multi".into(),
            contexts: c.kinds().map(single_to_proto).collect(),
            ..pb::Context::default()
        };
    }
    single_to_proto(c)
}

fn single_to_proto(c: &Context<'_>) -> pb::Context {
    pb::Context {
        key: c.key().to_owned(),
        kind: c.context_kind().to_owned(),
        attributes: c
            .attributes()
            .map(|(n, v)| {
                let value = match v {
                    AttrValue::Scalar(s) => pb::attribute_value::Value::Scalar(scalar_to_proto(s)),
                    AttrValue::List(l) => pb::attribute_value::Value::List(pb::ScalarList {
                        values: l.iter().map(scalar_to_proto).collect(),
                    }),
                    AttrValue::Json(j) => pb::attribute_value::Value::JsonValue(j.to_string()),
                };
                (n.to_owned(), pb::AttributeValue { value: Some(value) })
            })
            .collect(),
        contexts: Vec::new(),
    }
}

/// Reads a context from protobuf. Attributes without a value are skipped
/// (a null attribute is a missing one). Errors name the field: a reserved
/// or malformed kind, a kind given twice, JSON text that does not parse, a
/// multi-kind context with a key or attributes of its own.
pub fn context_from_proto(p: &pb::Context) -> Result<Context<'static>, ValidationErrors> {
    if p.contexts.is_empty() {
        if p.kind == "multi" {
            return Err(err("context.contexts".into(), "a multi-kind context needs at least one kind"));
        }
        return single_from_proto("context", p);
    }
    if !p.key.is_empty() || !p.attributes.is_empty() || !(p.kind.is_empty() || p.kind == "multi") {
        return Err(err(
            "context".into(),
            "a multi-kind context has only `contexts` (and kind \"multi\"); each kind's key and attributes go inside",
        ));
    }
    let mut out: Option<Context<'static>> = None;
    for (i, c) in p.contexts.iter().enumerate() {
        let path = format!("context.contexts[{i}]");
        if !c.contexts.is_empty() {
            return Err(err(
                format!("{path}.contexts"),
                "a kind of a multi-kind context cannot hold contexts",
            ));
        }
        let kind = single_from_proto(&path, c)?;
        if out.as_ref().is_some_and(|o| o.get_kind(kind.context_kind()).is_some()) {
            return Err(err(format!("{path}.kind"), format!("kind {:?} appears twice", kind.context_kind())));
        }
        out = Some(match out {
            None => kind,
            Some(o) => o.and(kind),
        });
    }
    Ok(out.expect("at least one kind"))
}

fn single_from_proto(path: &str, p: &pb::Context) -> Result<Context<'static>, ValidationErrors> {
    let mut ctx = Context::new(p.key.clone());
    if !p.kind.is_empty() {
        if let Some(problem) = kind_problem(&p.kind) {
            return Err(err(format!("{path}.kind"), problem));
        }
        ctx = ctx.kind(p.kind.clone());
    }
    for (name, v) in &p.attributes {
        let value = match &v.value {
            Some(pb::attribute_value::Value::Scalar(s)) => scalar_from_proto(s).map(AttrValue::Scalar),
            Some(pb::attribute_value::Value::List(l)) => {
                Some(AttrValue::from(l.values.iter().filter_map(scalar_from_proto).collect::<Vec<_>>()))
            }
            Some(pb::attribute_value::Value::JsonValue(text)) => {
                let json: serde_json::Value = serde_json::from_str(text).map_err(|e| {
                    err(format!("{path}.attributes[{name:?}].json_value"), format!("invalid JSON: {e}"))
                })?;
                AttrValue::from_json(&json)
            }
            None => None,
        };
        if let Some(value) = value {
            ctx.set(name.clone(), value);
        }
    }
    Ok(ctx)
}
