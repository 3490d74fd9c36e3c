//! Evaluation contexts: who a flag is evaluated for.
//!
//! A [`Context`] borrows whatever it can. Built from `&str` and numbers it
//! allocates nothing at all (up to [`INLINE_ATTRIBUTES`] attributes live
//! inline); built from `String`s it owns them. Either way evaluation reads it
//! without allocating. Attribute lookup is a linear scan: contexts carry a
//! handful of attributes, where a scan beats hashing.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smallvec::SmallVec;

/// Attributes stored inline before the context allocates. Four covers the
/// common "key + country + plan + version" shape.
pub const INLINE_ATTRIBUTES: usize = 4;

/// The kind of a context built without one.
pub const DEFAULT_KIND: &str = "user";

/// One scalar attribute value (or list element).
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar<'a> {
    /// A string.
    Str(Cow<'a, str>),
    /// A number. Integers up to 2^53 are exact.
    Num(f64),
    /// A bool.
    Bool(bool),
}

/// An attribute value: a scalar or a list of scalars.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue<'a> {
    /// A single value.
    Scalar(Scalar<'a>),
    /// A list; a clause matches if any element does.
    List(Cow<'a, [Scalar<'a>]>),
}

impl<'a> AttrValue<'a> {
    /// The values a clause tests: the scalar itself, or each list element.
    pub fn values(&self) -> &[Scalar<'a>] {
        match self {
            AttrValue::Scalar(s) => std::slice::from_ref(s),
            AttrValue::List(l) => l,
        }
    }
}

/// A borrowed view of one scalar, as evaluation sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ScalarRef<'s> {
    Str(&'s str),
    Num(f64),
    Bool(bool),
}

impl<'s> From<&'s Scalar<'_>> for ScalarRef<'s> {
    fn from(s: &'s Scalar<'_>) -> Self {
        match s {
            Scalar::Str(v) => ScalarRef::Str(v),
            Scalar::Num(n) => ScalarRef::Num(*n),
            Scalar::Bool(b) => ScalarRef::Bool(*b),
        }
    }
}

/// What an attribute lookup found.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Found<'s> {
    /// The context key or kind.
    Str(&'s str),
    /// A stored attribute's values (one for a scalar, each element of a list).
    Values(&'s [Scalar<'s>]),
}

impl<'s> Found<'s> {
    /// True when `f` holds for any value.
    #[inline]
    pub(crate) fn any(self, mut f: impl FnMut(ScalarRef<'s>) -> bool) -> bool {
        match self {
            Found::Str(s) => f(ScalarRef::Str(s)),
            Found::Values(vs) => vs.iter().any(|v| f(ScalarRef::from(v))),
        }
    }
}

/// Who a flag is evaluated for: a key, a kind and named attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct Context<'a> {
    key: Cow<'a, str>,
    kind: Cow<'a, str>,
    attrs: SmallVec<[(Cow<'a, str>, AttrValue<'a>); INLINE_ATTRIBUTES]>,
}

impl<'a> Context<'a> {
    /// A context of kind `user` with this targeting key.
    #[inline(always)]
    pub fn new(key: impl Into<Cow<'a, str>>) -> Self {
        Context { key: key.into(), kind: Cow::Borrowed(DEFAULT_KIND), attrs: SmallVec::new() }
    }

    /// Sets the context kind (default `user`; empty means `user`).
    #[inline(always)]
    pub fn kind(mut self, kind: impl Into<Cow<'a, str>>) -> Self {
        let kind = kind.into();
        self.kind = if kind.is_empty() { Cow::Borrowed(DEFAULT_KIND) } else { kind };
        self
    }

    /// Sets an attribute, replacing any earlier value of that name. The names
    /// `key` and `kind` are reserved for the context's own key and kind and
    /// are ignored here.
    #[inline(always)]
    pub fn with(mut self, name: impl Into<Cow<'a, str>>, value: impl Into<AttrValue<'a>>) -> Self {
        self.set(name, value);
        self
    }

    /// Sets an attribute in place; see [`Context::with`].
    #[inline]
    pub fn set(&mut self, name: impl Into<Cow<'a, str>>, value: impl Into<AttrValue<'a>>) {
        let name = name.into();
        if name == "key" || name == "kind" {
            return;
        }
        let value = value.into();
        match self.attrs.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.attrs.push((name, value)),
        }
    }

    /// The targeting key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The context kind.
    pub fn context_kind(&self) -> &str {
        &self.kind
    }

    /// A named attribute (not `key`/`kind`).
    pub fn attribute(&self, name: &str) -> Option<&AttrValue<'a>> {
        self.attrs.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// All named attributes in insertion order.
    pub fn attributes(&self) -> impl Iterator<Item = (&str, &AttrValue<'a>)> {
        self.attrs.iter().map(|(n, v)| (n.as_ref(), v))
    }

    /// A copy that owns all its data.
    pub fn into_owned(self) -> Context<'static> {
        Context {
            key: Cow::Owned(self.key.into_owned()),
            kind: Cow::Owned(self.kind.into_owned()),
            attrs: self
                .attrs
                .into_iter()
                .map(|(n, v)| (Cow::Owned(n.into_owned()), v.into_owned()))
                .collect(),
        }
    }

    /// Looks an attribute up the way clauses do.
    #[inline]
    pub(crate) fn lookup<'s>(&'s self, attr: &AttrName) -> Option<Found<'s>> {
        match attr {
            AttrName::Key => Some(Found::Str(&self.key)),
            AttrName::Kind => Some(Found::Str(&self.kind)),
            AttrName::Custom(name) => self
                .attrs
                .iter()
                .find(|(n, _)| n.as_ref() == name.as_ref())
                .map(|(_, v)| Found::Values(v.values())),
        }
    }
}

/// An attribute name resolved once at compile time, so the built-ins cost a
/// match arm instead of a string comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AttrName {
    Key,
    Kind,
    Custom(Box<str>),
}

impl AttrName {
    pub(crate) fn parse(name: &str) -> AttrName {
        match name {
            "" | "key" => AttrName::Key,
            "kind" => AttrName::Kind,
            other => AttrName::Custom(other.into()),
        }
    }
}

impl Scalar<'_> {
    fn into_owned(self) -> Scalar<'static> {
        match self {
            Scalar::Str(s) => Scalar::Str(Cow::Owned(s.into_owned())),
            Scalar::Num(n) => Scalar::Num(n),
            Scalar::Bool(b) => Scalar::Bool(b),
        }
    }

    /// From a JSON scalar; `None` for null, arrays and objects.
    pub fn from_json(v: &serde_json::Value) -> Option<Scalar<'static>> {
        match v {
            serde_json::Value::String(s) => Some(Scalar::Str(Cow::Owned(s.clone()))),
            serde_json::Value::Number(n) => n.as_f64().map(Scalar::Num),
            serde_json::Value::Bool(b) => Some(Scalar::Bool(*b)),
            _ => None,
        }
    }

    fn to_json(&self) -> serde_json::Value {
        match self {
            Scalar::Str(s) => serde_json::Value::String(s.to_string()),
            Scalar::Num(n) => json_number(*n),
            Scalar::Bool(b) => serde_json::Value::Bool(*b),
        }
    }
}

/// A JSON number that prints integers without a fraction.
fn json_number(n: f64) -> serde_json::Value {
    if n.fract() == 0.0 && n.abs() <= 9_007_199_254_740_992.0 {
        serde_json::Value::from(n as i64)
    } else {
        serde_json::Number::from_f64(n).map(serde_json::Value::Number).unwrap_or(serde_json::Value::Null)
    }
}

impl AttrValue<'_> {
    fn into_owned(self) -> AttrValue<'static> {
        match self {
            AttrValue::Scalar(s) => AttrValue::Scalar(s.into_owned()),
            AttrValue::List(l) => {
                AttrValue::List(Cow::Owned(l.into_owned().into_iter().map(Scalar::into_owned).collect()))
            }
        }
    }

    /// From a JSON value; `None` for null, objects and lists holding them.
    pub fn from_json(v: &serde_json::Value) -> Option<AttrValue<'static>> {
        match v {
            serde_json::Value::Array(items) => items
                .iter()
                .map(Scalar::from_json)
                .collect::<Option<Vec<_>>>()
                .map(|l| AttrValue::List(Cow::Owned(l))),
            other => Scalar::from_json(other).map(AttrValue::Scalar),
        }
    }

    /// As JSON.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            AttrValue::Scalar(s) => s.to_json(),
            AttrValue::List(l) => serde_json::Value::Array(l.iter().map(Scalar::to_json).collect()),
        }
    }
}

macro_rules! attr_from {
    ($($t:ty => |$v:ident| $e:expr),* $(,)?) => {$(
        impl<'a> From<$t> for AttrValue<'a> {
            #[inline]
            fn from($v: $t) -> Self { AttrValue::Scalar($e) }
        }
    )*};
}

attr_from! {
    &'a str => |v| Scalar::Str(Cow::Borrowed(v)),
    String => |v| Scalar::Str(Cow::Owned(v)),
    Cow<'a, str> => |v| Scalar::Str(v),
    f64 => |v| Scalar::Num(v),
    f32 => |v| Scalar::Num(f64::from(v)),
    i64 => |v| Scalar::Num(v as f64),
    i32 => |v| Scalar::Num(f64::from(v)),
    u32 => |v| Scalar::Num(f64::from(v)),
    u64 => |v| Scalar::Num(v as f64),
    bool => |v| Scalar::Bool(v),
    Scalar<'a> => |v| v,
}

impl<'a> From<&'a [Scalar<'a>]> for AttrValue<'a> {
    fn from(v: &'a [Scalar<'a>]) -> Self {
        AttrValue::List(Cow::Borrowed(v))
    }
}

impl<'a> From<Vec<Scalar<'a>>> for AttrValue<'a> {
    fn from(v: Vec<Scalar<'a>>) -> Self {
        AttrValue::List(Cow::Owned(v))
    }
}

impl<'a> From<Vec<&'a str>> for AttrValue<'a> {
    fn from(v: Vec<&'a str>) -> Self {
        AttrValue::List(Cow::Owned(v.into_iter().map(|s| Scalar::Str(Cow::Borrowed(s))).collect()))
    }
}

impl From<Vec<String>> for AttrValue<'static> {
    fn from(v: Vec<String>) -> Self {
        AttrValue::List(Cow::Owned(v.into_iter().map(|s| Scalar::Str(Cow::Owned(s))).collect()))
    }
}

/// The file form of a context: `{key, kind, attributes: {name: value}}`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ContextFile {
    #[serde(default)]
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default)]
    attributes: BTreeMap<String, serde_json::Value>,
}

impl<'de> Deserialize<'de> for Context<'static> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let file = ContextFile::deserialize(d)?;
        let mut ctx = Context::new(file.key);
        if let Some(kind) = file.kind {
            ctx = ctx.kind(kind);
        }
        for (name, value) in file.attributes {
            match value {
                // A null attribute is the same as a missing one.
                serde_json::Value::Null => {}
                v => {
                    let attr = AttrValue::from_json(&v).ok_or_else(|| {
                        serde::de::Error::custom(format!(
                            "attributes.{name}: expected a string, number, bool or a list of them"
                        ))
                    })?;
                    ctx.set(name, attr);
                }
            }
        }
        Ok(ctx)
    }
}

impl Serialize for Context<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ContextFile {
            key: self.key.to_string(),
            kind: (self.kind != DEFAULT_KIND).then(|| self.kind.to_string()),
            attributes: self.attributes().map(|(n, v)| (n.to_string(), v.to_json())).collect(),
        }
        .serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Setting the same attribute twice keeps the last value, and the
    /// reserved names cannot shadow the key.
    #[test]
    fn set_replaces_and_reserves_key() {
        let ctx = Context::new("u1").with("plan", "free").with("plan", "pro").with("key", "evil");
        assert_eq!(ctx.attribute("plan"), Some(&AttrValue::from("pro")));
        assert_eq!(ctx.attributes().count(), 1);
        assert_eq!(ctx.key(), "u1");
    }

    /// The file form round-trips, and null attributes read as missing.
    #[test]
    fn file_form() {
        let ctx: Context<'static> = serde_json::from_str(
            r#"{"key":"u1","kind":"org","attributes":{"n":42,"tags":["a",1,true],"gone":null}}"#,
        )
        .unwrap();
        assert_eq!(ctx.context_kind(), "org");
        assert!(ctx.attribute("gone").is_none());
        let back = serde_json::to_value(&ctx).unwrap();
        assert_eq!(back["attributes"]["n"], 42);
        assert_eq!(back["attributes"]["tags"][2], true);
    }
}
