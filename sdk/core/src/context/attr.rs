//! Attribute values: scalars, lists of scalars and any JSON (objects and
//! nested lists), in borrowed or owned form, and the borrowed views
//! evaluation reads them through.

use std::borrow::Cow;

use super::seq::Seq;
use serde_json::Value as Json;

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

/// An attribute value: a scalar, a list of scalars, or any other JSON value
/// (an object, or a list holding objects, lists or null), which clauses
/// address with references like `/address/city`.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue<'a> {
    /// A single value.
    Scalar(Scalar<'a>),
    /// A list; a clause matches if any element does.
    List(Seq<'a, Scalar<'a>>),
    /// An object, or a list that is not all scalars. Never `null` (a null
    /// attribute is a missing one) and never a bare scalar.
    Json(Cow<'a, Json>),
}

impl<'a> AttrValue<'a> {
    /// The scalar values a clause tests: the scalar itself, or each list
    /// element. Empty for [`AttrValue::Json`] (see [`AttrValue::to_json`]).
    pub fn values(&self) -> &[Scalar<'a>] {
        match self {
            AttrValue::Scalar(s) => std::slice::from_ref(s),
            AttrValue::List(l) => l,
            AttrValue::Json(_) => &[],
        }
    }

    /// A JSON value borrowed as an attribute: scalars and lists of scalars
    /// take their own forms; `None` for null.
    pub fn from_json_ref(v: &'a Json) -> Option<AttrValue<'a>> {
        match v {
            Json::Null => None,
            Json::String(s) => Some(AttrValue::Scalar(Scalar::Str(Cow::Borrowed(s)))),
            Json::Number(n) => n.as_f64().map(|n| AttrValue::Scalar(Scalar::Num(n))),
            Json::Bool(b) => Some(AttrValue::Scalar(Scalar::Bool(*b))),
            Json::Array(items) if items.iter().all(is_scalar) => {
                Some(AttrValue::List(Seq::Owned(items.iter().filter_map(Scalar::from_json_ref).collect())))
            }
            other => Some(AttrValue::Json(Cow::Borrowed(other))),
        }
    }

    pub(crate) fn into_owned(self) -> AttrValue<'static> {
        match self {
            AttrValue::Scalar(s) => AttrValue::Scalar(s.into_owned()),
            AttrValue::List(l) => {
                AttrValue::List(Seq::Owned(l.into_owned().into_iter().map(Scalar::into_owned).collect()))
            }
            AttrValue::Json(j) => AttrValue::Json(Cow::Owned(j.into_owned())),
        }
    }

    /// From a JSON value; `None` for null.
    pub fn from_json(v: &Json) -> Option<AttrValue<'static>> {
        AttrValue::from_json_ref(v).map(AttrValue::into_owned)
    }

    /// As JSON.
    pub fn to_json(&self) -> Json {
        match self {
            AttrValue::Scalar(s) => s.to_json(),
            AttrValue::List(l) => Json::Array(l.iter().map(Scalar::to_json).collect()),
            AttrValue::Json(j) => j.as_ref().clone(),
        }
    }
}

fn is_scalar(v: &Json) -> bool {
    matches!(v, Json::String(_) | Json::Bool(_)) || v.as_f64().is_some()
}

impl Scalar<'_> {
    pub(crate) fn into_owned(self) -> Scalar<'static> {
        match self {
            Scalar::Str(s) => Scalar::Str(Cow::Owned(s.into_owned())),
            Scalar::Num(n) => Scalar::Num(n),
            Scalar::Bool(b) => Scalar::Bool(b),
        }
    }

    /// From a JSON scalar; `None` for null, arrays and objects.
    pub fn from_json(v: &Json) -> Option<Scalar<'static>> {
        Scalar::from_json_ref(v).map(Scalar::into_owned)
    }

    fn from_json_ref(v: &Json) -> Option<Scalar<'_>> {
        match v {
            Json::String(s) => Some(Scalar::Str(Cow::Borrowed(s))),
            Json::Number(n) => n.as_f64().map(Scalar::Num),
            Json::Bool(b) => Some(Scalar::Bool(*b)),
            _ => None,
        }
    }

    pub(crate) fn to_json(&self) -> Json {
        match self {
            Scalar::Str(s) => Json::String(s.to_string()),
            Scalar::Num(n) => json_number(*n),
            Scalar::Bool(b) => Json::Bool(*b),
        }
    }
}

/// A JSON number that prints integers without a fraction.
fn json_number(n: f64) -> Json {
    if n.fract() == 0.0 && n.abs() <= 9_007_199_254_740_992.0 {
        Json::from(n as i64)
    } else {
        serde_json::Number::from_f64(n).map(Json::Number).unwrap_or(Json::Null)
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

impl<'s> ScalarRef<'s> {
    /// A JSON scalar's view; `None` for null, arrays and objects.
    #[inline]
    pub(crate) fn of_json(v: &'s Json) -> Option<ScalarRef<'s>> {
        match v {
            Json::String(s) => Some(ScalarRef::Str(s)),
            Json::Number(n) => n.as_f64().map(ScalarRef::Num),
            Json::Bool(b) => Some(ScalarRef::Bool(*b)),
            _ => None,
        }
    }
}

/// What an attribute lookup found.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Found<'s> {
    /// A key.
    Str(&'s str),
    /// A stored scalar attribute.
    Scalar(&'s Scalar<'s>),
    /// A stored list attribute's elements.
    Values(&'s [Scalar<'s>]),
    /// A nested or JSON value: a scalar is one value, an array's scalar
    /// elements are its values, an object has none.
    Json(&'s Json),
}

impl<'s> Found<'s> {
    /// True when `f` holds for any value.
    #[inline(always)]
    pub(crate) fn any(self, mut f: impl FnMut(ScalarRef<'s>) -> bool) -> bool {
        match self {
            Found::Str(s) => f(ScalarRef::Str(s)),
            Found::Scalar(v) => f(ScalarRef::from(v)),
            Found::Values(vs) => vs.iter().any(|v| f(ScalarRef::from(v))),
            Found::Json(v) => json_any(v, &mut f),
        }
    }

    /// The value when it is one string (a key or a string attribute).
    #[inline(always)]
    pub(crate) fn as_str(self) -> Option<&'s str> {
        match self {
            Found::Str(s) => Some(s),
            Found::Scalar(Scalar::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// The single value a rollout buckets: a key, a scalar attribute or a
    /// nested scalar; `None` for lists, objects and kinds.
    #[inline]
    pub(crate) fn single(self) -> Option<ScalarRef<'s>> {
        match self {
            Found::Str(s) => Some(ScalarRef::Str(s)),
            Found::Scalar(v) => Some(ScalarRef::from(v)),
            Found::Values(_) => None,
            Found::Json(v) => ScalarRef::of_json(v),
        }
    }
}

/// [`Found::any`] over a JSON value: a scalar is one value, an array's
/// scalar elements are its values, an object has none. Out of line, so the
/// common scalar lookups stay small.
#[inline(never)]
fn json_any<'s>(v: &'s Json, f: &mut dyn FnMut(ScalarRef<'s>) -> bool) -> bool {
    match v {
        Json::Array(items) => items.iter().filter_map(ScalarRef::of_json).any(f),
        v => ScalarRef::of_json(v).is_some_and(f),
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
        AttrValue::List(Seq::Borrowed(v))
    }
}

impl<'a> From<Vec<Scalar<'a>>> for AttrValue<'a> {
    fn from(v: Vec<Scalar<'a>>) -> Self {
        AttrValue::List(Seq::Owned(v))
    }
}

impl<'a> From<Vec<&'a str>> for AttrValue<'a> {
    fn from(v: Vec<&'a str>) -> Self {
        AttrValue::List(Seq::Owned(v.into_iter().map(|s| Scalar::Str(Cow::Borrowed(s))).collect()))
    }
}

impl From<Vec<String>> for AttrValue<'static> {
    fn from(v: Vec<String>) -> Self {
        AttrValue::List(Seq::Owned(v.into_iter().map(|s| Scalar::Str(Cow::Owned(s))).collect()))
    }
}

/// The JSON null an attribute set from `null` holds.
static NULL: Json = Json::Null;

/// A borrowed JSON value: scalars and lists of scalars take their own
/// forms (the list is collected, which allocates); objects and other lists
/// are borrowed as they are. Null is held as null and reads as a missing
/// attribute (no clause matches it, negated or not).
impl<'a> From<&'a Json> for AttrValue<'a> {
    fn from(v: &'a Json) -> Self {
        AttrValue::from_json_ref(v).unwrap_or(AttrValue::Json(Cow::Borrowed(&NULL)))
    }
}

/// An owned JSON value; see the borrowed form.
impl From<Json> for AttrValue<'static> {
    fn from(v: Json) -> Self {
        match v {
            Json::Object(_) => AttrValue::Json(Cow::Owned(v)),
            Json::Array(ref items) if !items.iter().all(is_scalar) => AttrValue::Json(Cow::Owned(v)),
            other => AttrValue::from_json(&other).unwrap_or(AttrValue::Json(Cow::Borrowed(&NULL))),
        }
    }
}
