//! An OFREP request's evaluation context (JSON) as a flagstream context,
//! mapped as the OpenFeature providers map theirs (docs/PROTOCOL.md,
//! "OFREP"): `targetingKey` is the key (absent: the empty key), `kind`
//! the kind (default `user`), every other member an attribute (`null`
//! members are absent ones); `"kind": "multi"` makes a multi-kind context
//! whose object members are its kinds, named by the member, each keyed by
//! its own `targetingKey` (or `key`). The context caps of every context
//! read from outside (`max-context-kinds`, `max-context-attributes`) are
//! checked before anything is converted.

use flagstream::{AttrValue, Context, context_attributes_problem, context_kinds_problem, reference};
use serde_json::{Map, Value as Json};

/// The context of a request body's `context` member (absent: the empty
/// key, no attributes); the error names the member and the problem.
pub(crate) fn context(v: Option<&Json>) -> Result<Context<'static>, String> {
    let m = match v {
        None | Some(Json::Null) => return Ok(Context::new("")),
        Some(Json::Object(m)) => m,
        Some(other) => return Err(format!("context: an object, not {}", kind_of(other))),
    };
    if m.get("kind").and_then(Json::as_str) != Some("multi") {
        return single(m, None, "context");
    }
    let kinds: Vec<(&String, &Map<String, Json>)> = m
        .iter()
        .filter_map(|(name, v)| match v {
            Json::Object(o) => Some((name, o)),
            _ => None,
        })
        .collect();
    if let Some(problem) = context_kinds_problem(kinds.len()) {
        return Err(format!("context: {problem}"));
    }
    let mut out = Vec::with_capacity(kinds.len());
    for (name, o) in kinds {
        out.push(single(o, Some(name), &format!("context.{name}"))?);
    }
    Context::multi(out)
        .ok_or_else(|| "context: a multi-kind context needs at least one kind (an object member)".into())
}

/// One kind: `kind` is its name in a multi-kind context (where `key` is
/// its key too), `None` at the top level (the `kind` member names it).
fn single(m: &Map<String, Json>, kind: Option<&str>, path: &str) -> Result<Context<'static>, String> {
    let key_member = m.get("targetingKey").or_else(|| kind.and_then(|_| m.get("key")));
    let key = match key_member {
        None | Some(Json::Null) => "",
        Some(Json::String(s)) => s,
        Some(other) => return Err(format!("{path}.targetingKey: a string, not {}", kind_of(other))),
    };
    let kind = match (kind, m.get("kind")) {
        (Some(k), _) => Some(k),
        (None, None | Some(Json::Null)) => None,
        (None, Some(Json::String(k))) => Some(k.as_str()),
        (None, Some(other)) => return Err(format!("{path}.kind: a string, not {}", kind_of(other))),
    };
    if let Some(problem) = kind.and_then(reference::kind_problem) {
        return Err(format!("{path}.kind: {problem}"));
    }
    let reserved =
        |name: &str| name == "targetingKey" || name == "kind" || (name == "key" && key_member.is_some());
    let attributes = m.iter().filter(|(name, _)| !reserved(name));
    if let Some(problem) = context_attributes_problem(attributes.clone().count()) {
        return Err(format!("{path}: {problem}"));
    }
    let mut ctx = Context::new(key.to_owned());
    if let Some(k) = kind {
        ctx = ctx.kind(k.to_owned());
    }
    for (name, v) in attributes {
        // A null member is the same as a missing one.
        if let Some(value) = AttrValue::from_json(v) {
            ctx.set(name.clone(), value);
        }
    }
    Ok(ctx)
}

/// A JSON value's type, for an error message.
fn kind_of(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a bool",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_openfeature_mapping() {
        let c =
            context(Some(&json!({"targetingKey": "u1", "plan": "pro", "seats": 3, "gone": null}))).unwrap();
        assert_eq!((c.key(), c.context_kind()), ("u1", "user"));
        assert!(
            c.attribute("plan").is_some() && c.attribute("seats").is_some() && c.attribute("gone").is_none()
        );
        let c = context(Some(&json!({"targetingKey": "o1", "kind": "org"}))).unwrap();
        assert_eq!(c.context_kind(), "org");
        let c = context(Some(
            &json!({"kind": "multi", "user": {"targetingKey": "u1"}, "org": {"key": "o1", "tier": 2}}),
        ))
        .unwrap();
        assert!(c.is_multi());
        assert_eq!(c.get_kind("org").map(Context::key), Some("o1"));
        assert_eq!(context(None).unwrap().key(), "");
    }

    #[test]
    fn bad_contexts_name_the_member() {
        for (bad, says) in [
            (json!([1]), "context: an object, not an array"),
            (json!({"targetingKey": 7}), "context.targetingKey: a string, not a number"),
            (json!({"kind": 7}), "context.kind: a string, not a number"),
            (json!({"kind": "multi", "org": {"targetingKey": false}}), "context.org.targetingKey"),
            (json!({"kind": "multi"}), "at least one kind"),
        ] {
            let e = context(Some(&bad)).unwrap_err();
            assert!(e.starts_with(says) || e.contains(says), "{bad}: {e}");
        }
        let many: Map<String, Json> = (0..1000).map(|i| (format!("a{i}"), json!(i))).collect();
        let e = context(Some(&Json::Object(many))).unwrap_err();
        assert!(e.starts_with("context: "), "{e}");
    }
}
