//! Variation values in evaluation form, and the typed views the evaluation
//! API hands back ([`FromValue`]): `bool`, `&str`, `i64`, `f64` and JSON.

use std::borrow::Cow;

use serde_json::Value as Json;

use crate::model::FlagType;
use crate::usage::{hash_str, mix};

/// One variation of a compiled flag.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A bool flag's variation.
    Bool(bool),
    /// A string flag's variation.
    Str(Box<str>),
    /// An int flag's variation.
    Int(i64),
    /// A float flag's variation.
    Float(f64),
    /// A JSON flag's variation.
    Json(Json),
}

impl Value {
    /// Reads a JSON variation as the flag's type; `None` if it is not one.
    pub fn from_json(flag_type: FlagType, v: &Json) -> Option<Value> {
        Some(match flag_type {
            FlagType::Bool => Value::Bool(v.as_bool()?),
            FlagType::String => Value::Str(v.as_str()?.into()),
            FlagType::Int => Value::Int(v.as_i64()?),
            FlagType::Float => Value::Float(v.as_f64().filter(|f| f.is_finite())?),
            FlagType::Json => Value::Json(v.clone()),
        })
    }

    /// The value as JSON (allocates for strings and JSON documents).
    pub fn to_json(&self) -> Json {
        match self {
            Value::Bool(b) => Json::Bool(*b),
            Value::Str(s) => Json::String(s.to_string()),
            Value::Int(i) => Json::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f).map_or(Json::Null, Json::Number),
            Value::Json(j) => j.clone(),
        }
    }
}

/// A Rust type a flag can be read as. Implemented for `bool`, `&str`, `i64`,
/// `f64` and `Cow<Json>`; see `docs/EVALUATION.md` step 2 for which flag
/// types each accepts.
pub trait FromValue<'s>: Sized {
    /// Whether a flag of this type may be read as `Self`.
    fn accepts(flag_type: FlagType) -> bool;
    /// The conversion; only called when [`FromValue::accepts`] said yes.
    fn from_value(v: &'s Value) -> Option<Self>;
    /// A 64-bit hash of this value as a caller's default, for usage
    /// summaries: equal values hash equal. Cheap and allocation-free for
    /// the built-in types; other implementations hash every value alike.
    #[inline]
    fn default_hash(&self) -> u64 {
        0
    }
    /// This value as JSON, for listing a caller's default in usage
    /// summaries (called once per distinct default and flag). `None`: not
    /// listed.
    fn default_json(&self) -> Option<Json> {
        None
    }
}

/// Hash of a JSON value, without allocating.
fn json_hash(j: &Json) -> u64 {
    match j {
        Json::Null => mix(1),
        Json::Bool(b) => mix(2 + u64::from(*b)),
        Json::Number(n) => mix(n.as_f64().unwrap_or(0.0).to_bits() ^ 0x6e75_6d62),
        Json::String(s) => hash_str(s),
        Json::Array(a) => a.iter().fold(mix(0x6172_7261 ^ a.len() as u64), |h, v| mix(h ^ json_hash(v))),
        Json::Object(o) => o.iter().fold(mix(0x6f62_6a65 ^ o.len() as u64), |h, (k, v)| {
            mix(h ^ hash_str(k) ^ json_hash(v).rotate_left(1))
        }),
    }
}

impl<'s> FromValue<'s> for bool {
    fn accepts(t: FlagType) -> bool {
        t == FlagType::Bool
    }
    #[inline]
    fn from_value(v: &'s Value) -> Option<Self> {
        match v {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }
    #[inline(always)]
    fn default_hash(&self) -> u64 {
        // Constants, not a mix: the hot path needs no arithmetic.
        if *self { 0x5a5a_0001 } else { 0x5a5a_0003 }
    }
    fn default_json(&self) -> Option<Json> {
        Some(Json::Bool(*self))
    }
}

impl<'s> FromValue<'s> for &'s str {
    fn accepts(t: FlagType) -> bool {
        t == FlagType::String
    }
    #[inline]
    fn from_value(v: &'s Value) -> Option<Self> {
        match v {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    #[inline]
    fn default_hash(&self) -> u64 {
        hash_str(self)
    }
    fn default_json(&self) -> Option<Json> {
        Some(Json::String((*self).to_owned()))
    }
}

impl<'s> FromValue<'s> for i64 {
    fn accepts(t: FlagType) -> bool {
        t == FlagType::Int
    }
    #[inline]
    fn from_value(v: &'s Value) -> Option<Self> {
        match v {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }
    #[inline(always)]
    fn default_hash(&self) -> u64 {
        mix(*self as u64 ^ 0x696e_7400)
    }
    fn default_json(&self) -> Option<Json> {
        Some(Json::from(*self))
    }
}

impl<'s> FromValue<'s> for f64 {
    fn accepts(t: FlagType) -> bool {
        matches!(t, FlagType::Float | FlagType::Int)
    }
    #[inline]
    fn from_value(v: &'s Value) -> Option<Self> {
        match v {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
    #[inline(always)]
    fn default_hash(&self) -> u64 {
        mix(self.to_bits() ^ 0x666c_6f61)
    }
    fn default_json(&self) -> Option<Json> {
        serde_json::Number::from_f64(*self).map(Json::Number)
    }
}

/// JSON reads any flag. JSON documents are borrowed; bools and numbers are
/// built without allocating; strings are copied (one allocation).
impl<'s> FromValue<'s> for Cow<'s, Json> {
    fn accepts(_: FlagType) -> bool {
        true
    }
    fn from_value(v: &'s Value) -> Option<Self> {
        Some(match v {
            Value::Json(j) => Cow::Borrowed(j),
            other => Cow::Owned(other.to_json()),
        })
    }
    fn default_hash(&self) -> u64 {
        json_hash(self)
    }
    fn default_json(&self) -> Option<Json> {
        Some(self.as_ref().clone())
    }
}
