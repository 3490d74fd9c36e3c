//! JS contexts: a plain object read into a [`flagstream::Context`] at each
//! call, or a [`JsContext`] built once and reused on a hot path.
//!
//! The object form (README "Node"):
//!
//! - one kind: `{key, kind, ...attributes}`: `key` the targeting key
//!   (default `""`), `kind` the kind (default `user`), every other property
//!   an attribute. Strings, numbers and booleans are scalars; arrays and
//!   objects are JSON attributes (arrays of scalars are lists); `null` and
//!   `undefined` are missing attributes.
//! - several kinds: `{kind: "multi", user: {key, ...}, org: {key, ...}}`:
//!   every other property is one kind, named by the property, in the
//!   one-kind form (its own `kind` property is ignored).
//!
//! A context that is not an object, a kind name that is not valid
//! (docs/EVALUATION.md "Context kinds"), or more kinds or attributes than
//! the context limits allow is a caller's bug: a `TypeError`.

use flagstream::{AttrValue, Context};
use napi::bindgen_prelude::{Env, FromNapiValue, JsValue, Object, Unknown};
use napi::{Error, Result, Status, ValueType};

fn type_error(msg: String) -> Error {
    Error::new(Status::InvalidArg, msg)
}

/// The property `name` of `obj` as a string, `None` when absent (undefined
/// or null); a `TypeError` when it is another type.
fn string_prop(env: &Env, obj: &Object<'_>, name: &str) -> Result<Option<String>> {
    let Some(v) = obj.get::<Unknown<'_>>(name)? else { return Ok(None) };
    match v.get_type()? {
        ValueType::Undefined | ValueType::Null => Ok(None),
        // SAFETY: `v` is a live value of this call's env, checked to be a string.
        ValueType::String => Ok(Some(unsafe { String::from_napi_value(env.raw(), v.raw())? })),
        other => Err(type_error(format!("context.{name} must be a string, not {other}"))),
    }
}

fn check_kind(kind: &str) -> Result<()> {
    match flagstream::reference::kind_problem(kind) {
        None => Ok(()),
        Some(problem) => Err(type_error(format!("context kind {kind:?}: {problem}"))),
    }
}

/// One kind from its object form; `kind` given for a kind of a multi-kind
/// context (the property name).
fn single(env: &Env, obj: &Object<'_>, kind: Option<&str>) -> Result<Context<'static>> {
    let key = string_prop(env, obj, "key")?.unwrap_or_default();
    let mut ctx = Context::new(key);
    let own_kind = match kind {
        Some(k) => Some(k.to_owned()),
        None => string_prop(env, obj, "kind")?,
    };
    if let Some(k) = own_kind {
        check_kind(&k)?;
        ctx = ctx.kind(k);
    }
    let names = Object::keys(obj)?;
    let mut attributes = 0;
    for name in names {
        if name == "key" || name == "kind" {
            continue;
        }
        let Some(v) = obj.get::<Unknown<'_>>(&name)? else { continue };
        // SAFETY (each arm): `v` is a live value of this call's env, checked
        // to be of the type read.
        let value: AttrValue<'static> = match v.get_type()? {
            ValueType::Undefined | ValueType::Null => continue,
            ValueType::Boolean => unsafe { bool::from_napi_value(env.raw(), v.raw())? }.into(),
            ValueType::Number => unsafe { f64::from_napi_value(env.raw(), v.raw())? }.into(),
            ValueType::String => unsafe { String::from_napi_value(env.raw(), v.raw())? }.into(),
            ValueType::Object => {
                let json: serde_json::Value = env.from_js_value(v)?;
                match AttrValue::from_json(&json) {
                    Some(a) => a,
                    None => continue,
                }
            }
            other => {
                return Err(type_error(format!(
                    "context attribute {name:?}: a {other} is not an attribute value (string, number, boolean, array or object)"
                )));
            }
        };
        attributes += 1;
        ctx.set(name, value);
    }
    if let Some(problem) = flagstream::context_attributes_problem(attributes) {
        return Err(type_error(format!("context: {problem}")));
    }
    Ok(ctx)
}

/// A context from its object form (see the module docs).
pub(crate) fn from_object(env: &Env, obj: &Object<'_>) -> Result<Context<'static>> {
    if string_prop(env, obj, "kind")?.as_deref() != Some("multi") {
        return single(env, obj, None);
    }
    let mut kinds = Vec::new();
    for name in Object::keys(obj)? {
        if name == "kind" {
            continue;
        }
        let Some(v) = obj.get::<Unknown<'_>>(&name)? else { continue };
        match v.get_type()? {
            ValueType::Undefined | ValueType::Null => continue,
            ValueType::Object => {}
            other => {
                return Err(type_error(format!(
                    "multi-kind context: property {name:?} must be an object (one kind), not {other}"
                )));
            }
        }
        check_kind(&name)?;
        // SAFETY: `v` is a live object of this call's env.
        let kind_obj = unsafe { Object::from_napi_value(env.raw(), v.raw())? };
        kinds.push(single(env, &kind_obj, Some(&name))?);
    }
    if let Some(problem) = flagstream::context_kinds_problem(kinds.len()) {
        return Err(type_error(format!("context: {problem}")));
    }
    // Property names are distinct, so kinds are too.
    Context::multi(kinds).ok_or_else(|| {
        type_error("a multi-kind context needs at least one kind: {kind: \"multi\", user: {key: ...}}".into())
    })
}

/// A context built once, for evaluations on a hot path: no conversion at
/// each call (`new Context({key: "user-42", country: "US"})`).
#[napi_derive::napi(js_name = "Context")]
pub struct JsContext {
    pub(crate) inner: Context<'static>,
}

#[napi_derive::napi]
impl JsContext {
    /// Reads the object form once (see the README's Node section).
    #[napi(constructor)]
    pub fn new(env: Env, ctx: Object<'_>) -> Result<Self> {
        Ok(JsContext { inner: crate::js(&env, from_object(&env, &ctx))? })
    }

    /// The targeting key (of a multi-kind context: of its first kind).
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.inner.key().to_owned()
    }

    /// The kind (`multi` for a multi-kind context).
    #[napi(getter)]
    pub fn kind(&self) -> String {
        if self.inner.is_multi() { "multi".to_owned() } else { self.inner.context_kind().to_owned() }
    }

    /// The file form (`{key, kind, attributes}` or `{kind: "multi",
    /// contexts: [...]}`), as `flagctl eval` reads it.
    #[napi(js_name = "toJSON")]
    pub fn to_json(&self) -> Result<serde_json::Value> {
        serde_json::to_value(&self.inner).map_err(|e| Error::from_reason(e.to_string()))
    }
}
