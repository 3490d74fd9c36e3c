//! The file form of a context (YAML/JSON in the test suite, `flagctl
//! eval`, offline tools): `{key, kind, attributes: {name: value}}` for one
//! kind, `{kind: multi, contexts: [{key, kind, attributes}, ...]}` for
//! several.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{AttrValue, Context, DEFAULT_KIND};
use crate::limit::{context_attributes_problem, context_kinds_problem};
use crate::reference::kind_problem;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ContextFile {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    attributes: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    contexts: Vec<ContextFile>,
}

impl ContextFile {
    /// One kind, from its file form; errors name the field under `path`.
    fn single(self, path: &str) -> Result<Context<'static>, String> {
        if !self.contexts.is_empty() {
            return Err(format!("{path}contexts: a kind of a multi-kind context cannot hold contexts"));
        }
        if let Some(problem) = context_attributes_problem(self.attributes.len()) {
            return Err(format!("{path}attributes: {problem}"));
        }
        let mut ctx = Context::new(self.key);
        if let Some(kind) = self.kind {
            if let Some(problem) = kind_problem(&kind) {
                return Err(format!("{path}kind: {problem}"));
            }
            ctx = ctx.kind(kind);
        }
        for (name, value) in self.attributes {
            // A null attribute is the same as a missing one.
            if let Some(v) = AttrValue::from_json(&value) {
                // Names are the keys of a map: each appears once.
                ctx.push_distinct(name.into(), v);
            }
        }
        Ok(ctx)
    }
}

impl<'de> Deserialize<'de> for Context<'static> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let file = ContextFile::deserialize(d)?;
        if file.contexts.is_empty() {
            if file.kind.as_deref() == Some("multi") {
                return Err(D::Error::custom("contexts: a multi-kind context needs at least one kind"));
            }
            return file.single("").map_err(D::Error::custom);
        }
        if !file.key.is_empty()
            || !file.attributes.is_empty()
            || file.kind.as_deref().is_some_and(|k| k != "multi")
        {
            return Err(D::Error::custom(
                "a multi-kind context has only `kind: multi` and `contexts`; each kind's key and attributes go inside",
            ));
        }
        if let Some(problem) = context_kinds_problem(file.contexts.len()) {
            return Err(D::Error::custom(format!("contexts: {problem}")));
        }
        let mut seen = std::collections::HashSet::with_capacity(file.contexts.len());
        let mut kinds = Vec::with_capacity(file.contexts.len());
        for (i, c) in file.contexts.into_iter().enumerate() {
            let kind = c.single(&format!("contexts[{i}].")).map_err(D::Error::custom)?;
            if !seen.insert(kind.context_kind().to_owned()) {
                let k = kind.context_kind();
                return Err(D::Error::custom(format!("contexts[{i}].kind: kind {k:?} appears twice")));
            }
            kinds.push(kind);
        }
        Ok(Context::of_distinct_kinds(kinds).expect("at least one kind"))
    }
}

fn to_file(ctx: &Context<'_>) -> ContextFile {
    ContextFile {
        key: ctx.key.to_string(),
        kind: (ctx.kind != DEFAULT_KIND).then(|| ctx.kind.to_string()),
        attributes: ctx.attributes().map(|(n, v)| (n.to_string(), v.to_json())).collect(),
        contexts: Vec::new(),
    }
}

impl Serialize for Context<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !self.is_multi() {
            return to_file(self).serialize(s);
        }
        ContextFile {
            key: String::new(),
            kind: Some("multi".into()),
            attributes: BTreeMap::new(),
            contexts: self
                .kinds()
                .map(|k| ContextFile { kind: Some(k.kind.to_string()), ..to_file(k) })
                .collect(),
        }
        .serialize(s)
    }
}
