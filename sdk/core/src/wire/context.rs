//! Contexts on the wire (`flagstream.v1.Context`, server-side evaluation):
//! one kind, or a multi-kind context of several, with scalar, list and
//! JSON attribute values.

use flagstream_proto::v1 as pb;

use std::collections::HashSet;

use super::scalar::{scalar_from_proto, scalar_to_proto};
use crate::context::{AttrValue, Context, DEFAULT_KIND};
use crate::error::ValidationErrors;
use crate::limit::{context_attributes_problem, context_kinds_problem};
use crate::reference::kind_problem;

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
/// multi-kind context with a key or attributes of its own, more kinds than
/// [`crate::MAX_CONTEXT_KINDS`] or a kind with more attributes than
/// [`crate::MAX_CONTEXT_ATTRIBUTES`] (checked before anything is converted, so an
/// oversized context costs only its count). The work is linear in the
/// context's size: duplicate kinds are found with a set, attribute names
/// are unique in the protobuf map.
pub fn context_from_proto(p: &pb::Context) -> Result<Context<'static>, ValidationErrors> {
    if p.contexts.is_empty() {
        if p.kind == "multi" {
            return Err(ValidationErrors::at(
                "context.contexts",
                "a multi-kind context needs at least one kind",
            ));
        }
        return single_from_proto("context", p);
    }
    if !p.key.is_empty() || !p.attributes.is_empty() || !(p.kind.is_empty() || p.kind == "multi") {
        return Err(ValidationErrors::at(
            "context",
            "a multi-kind context has only `contexts` (and kind \"multi\"); each kind's key and attributes go inside",
        ));
    }
    if let Some(problem) = context_kinds_problem(p.contexts.len()) {
        return Err(ValidationErrors::at("context.contexts", problem));
    }
    let mut seen: HashSet<&str> = HashSet::with_capacity(p.contexts.len());
    let mut kinds = Vec::with_capacity(p.contexts.len());
    for (i, c) in p.contexts.iter().enumerate() {
        let path = format!("context.contexts[{i}]");
        if !c.contexts.is_empty() {
            return Err(ValidationErrors::at(
                format!("{path}.contexts"),
                "a kind of a multi-kind context cannot hold contexts",
            ));
        }
        let kind = single_from_proto(&path, c)?;
        // An empty kind is `user`, as `single_from_proto` made it.
        let name = if c.kind.is_empty() { DEFAULT_KIND } else { c.kind.as_str() };
        if !seen.insert(name) {
            return Err(ValidationErrors::at(format!("{path}.kind"), format!("kind {name:?} appears twice")));
        }
        kinds.push(kind);
    }
    Ok(Context::of_distinct_kinds(kinds).expect("at least one kind"))
}

fn single_from_proto(path: &str, p: &pb::Context) -> Result<Context<'static>, ValidationErrors> {
    if let Some(problem) = context_attributes_problem(p.attributes.len()) {
        return Err(ValidationErrors::at(format!("{path}.attributes"), problem));
    }
    let mut ctx = Context::new(p.key.clone());
    if !p.kind.is_empty() {
        if let Some(problem) = kind_problem(&p.kind) {
            return Err(ValidationErrors::at(format!("{path}.kind"), problem));
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
                    ValidationErrors::at(
                        format!("{path}.attributes[{name:?}].json_value"),
                        format!("invalid JSON: {e}"),
                    )
                })?;
                AttrValue::from_json(&json)
            }
            None => None,
        };
        if let Some(value) = value {
            // Names are the keys of a protobuf map: each appears once.
            ctx.push_distinct(name.clone().into(), value);
        }
    }
    Ok(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scalar;
    use crate::limit::{MAX_CONTEXT_ATTRIBUTES, MAX_CONTEXT_KINDS};

    fn kind(name: &str, attributes: usize) -> pb::Context {
        pb::Context {
            key: format!("{name}-key"),
            kind: name.to_owned(),
            attributes: (0..attributes)
                .map(|i| {
                    let v = pb::AttributeValue {
                        value: Some(pb::attribute_value::Value::Scalar(scalar_to_proto(&Scalar::Num(
                            i as f64,
                        )))),
                    };
                    (format!("a{i}"), v)
                })
                .collect(),
            contexts: Vec::new(),
        }
    }

    fn multi(kinds: Vec<pb::Context>) -> pb::Context {
        pb::Context { kind: "multi".into(), contexts: kinds, ..pb::Context::default() }
    }

    fn error(p: &pb::Context) -> String {
        context_from_proto(p).unwrap_err().to_string()
    }

    /// The largest context admitted: every kind and every attribute kept.
    #[test]
    fn largest_context_is_admitted_whole() {
        let kinds = (0..MAX_CONTEXT_KINDS).map(|k| kind(&format!("k{k}"), MAX_CONTEXT_ATTRIBUTES)).collect();
        let ctx = context_from_proto(&multi(kinds)).unwrap();
        assert_eq!(ctx.kinds().count(), MAX_CONTEXT_KINDS);
        let last = ctx.get_kind(&format!("k{}", MAX_CONTEXT_KINDS - 1)).unwrap();
        assert_eq!(last.attributes().count(), MAX_CONTEXT_ATTRIBUTES);
        assert_eq!(last.attribute("a255"), Some(&AttrValue::from(255i64)));
    }

    /// Over a cap, the error names the field and the limit.
    #[test]
    fn caps_name_the_field_and_the_limit() {
        let kinds = (0..=MAX_CONTEXT_KINDS).map(|k| kind(&format!("k{k}"), 0)).collect();
        assert_eq!(error(&multi(kinds)), "context.contexts: 65 kinds, the limit is 64 (max-context-kinds)");
        let kinds = vec![kind("org", 1), kind("device", MAX_CONTEXT_ATTRIBUTES + 1)];
        assert_eq!(
            error(&multi(kinds)),
            "context.contexts[1].attributes: 257 attributes, the limit is 256 (max-context-attributes)"
        );
        assert_eq!(
            error(&kind("user", 300)),
            "context.attributes: 300 attributes, the limit is 256 (max-context-attributes)"
        );
    }

    /// A kind twice is found (an empty kind is `user`), whatever lies
    /// between.
    #[test]
    fn duplicate_kinds() {
        let mut kinds: Vec<pb::Context> = (0..40).map(|k| kind(&format!("k{k}"), 0)).collect();
        kinds.push(kind("k3", 0));
        assert_eq!(error(&multi(kinds)), r#"context.contexts[40].kind: kind "k3" appears twice"#);
        assert_eq!(
            error(&multi(vec![kind("user", 0), kind("", 0)])),
            r#"context.contexts[1].kind: kind "user" appears twice"#
        );
    }

    /// The file form has the same caps.
    #[test]
    fn file_form_caps() {
        let kinds: Vec<serde_json::Value> = (0..=MAX_CONTEXT_KINDS)
            .map(|k| serde_json::json!({"key": "x", "kind": format!("k{k}")}))
            .collect();
        let e = serde_json::from_value::<Context<'static>>(
            serde_json::json!({"kind": "multi", "contexts": kinds}),
        )
        .unwrap_err();
        assert!(e.to_string().contains("contexts: 65 kinds, the limit is 64 (max-context-kinds)"), "{e}");
        let attrs: serde_json::Map<String, serde_json::Value> =
            (0..=MAX_CONTEXT_ATTRIBUTES).map(|i| (format!("a{i}"), serde_json::json!(i))).collect();
        let e =
            serde_json::from_value::<Context<'static>>(serde_json::json!({"key": "x", "attributes": attrs}))
                .unwrap_err();
        assert!(
            e.to_string().contains("attributes: 257 attributes, the limit is 256 (max-context-attributes)"),
            "{e}"
        );
    }
}
