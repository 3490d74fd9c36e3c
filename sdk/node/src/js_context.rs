//! Contexts from JavaScript, in the object form (README "Node"): read from
//! the object itself ([`from_object`]), from its `JSON.stringify` text
//! ([`from_json_text`]), or from index.js's packed form of a flat object
//! ([`with_packed`]: no JSON, no allocation); and [`with_context`], which
//! takes any of them or a prebuilt context's id. An invalid kind name or
//! more kinds or attributes than the limits allow is a `TypeError`.

use flagstream::{AttrValue, Context};
use napi::sys;
use serde_json::Value as Json;

use std::cell::RefCell;

use crate::napi_value::*;
use crate::tables::{TABLES, Table};

pub(crate) fn check_kind(kind: &str) -> R<()> {
    match flagstream::reference::kind_problem(kind) {
        None => Ok(()),
        Some(problem) => Err(Thrown(format!("context kind {kind:?}: {problem}"))),
    }
}

/// One kind in the object form (`kind` given for a kind of a multi-kind
/// context: its property name).
pub(crate) unsafe fn single(
    env: sys::napi_env,
    obj: sys::napi_value,
    kind: Option<&str>,
) -> R<Context<'static>> {
    // No key: the empty key, as the file form reads it (EVALUATION.md).
    // The object form's documented default: a missing or null key is "".
    let key = unsafe { string_prop(env, obj, c"key")? }.unwrap_or_default();
    let mut ctx = Context::new(key);
    let own_kind = match kind {
        Some(k) => Some(k.to_owned()),
        None => unsafe { string_prop(env, obj, c"kind")? },
    };
    if let Some(k) = own_kind {
        check_kind(&k)?;
        ctx = ctx.kind(k);
    }
    let (arr, n) = unsafe { names(env, obj)? };
    let mut attributes = 0;
    for i in 0..n {
        let name_v = unsafe { element(env, arr, i)? };
        let name = unsafe { string(env, name_v, "an attribute name")? };
        if name == "key" || name == "kind" {
            continue;
        }
        let v = unsafe { get(env, obj, name_v)? };
        let value: AttrValue<'static> = match unsafe { type_of(env, v)? } {
            sys::ValueType::napi_undefined | sys::ValueType::napi_null => continue,
            sys::ValueType::napi_boolean => unsafe { bool_of(env, v, &name)? }.into(),
            sys::ValueType::napi_number => unsafe { f64_of(env, v, &name)? }.into(),
            sys::ValueType::napi_string => unsafe { string(env, v, &name)? }.into(),
            sys::ValueType::napi_object => {
                let env_ = napi::Env::from_raw(env);
                // SAFETY: `v` is a live value of this call's env.
                let unknown = unsafe { napi::bindgen_prelude::Unknown::from_raw_unchecked(env, v) };
                let json: serde_json::Value = env_
                    .from_js_value(unknown)
                    .map_err(|e| Thrown(format!("context attribute {name:?}: {e}")))?;
                match AttrValue::from_json(&json) {
                    Some(a) => a,
                    None => continue,
                }
            }
            t => {
                return Err(Thrown(format!(
                    "context attribute {name:?}: a {} is not an attribute value (string, number, boolean, array or object)",
                    type_name(t)
                )));
            }
        };
        attributes += 1;
        ctx.set(name, value);
    }
    if let Some(problem) = flagstream::context_attributes_problem(attributes) {
        return Err(Thrown(format!("context: {problem}")));
    }
    Ok(ctx)
}

/// A context from its object form (README "Node"; `context.rs`).
pub(crate) unsafe fn from_object(env: sys::napi_env, obj: sys::napi_value) -> R<Context<'static>> {
    match unsafe { type_of(env, obj)? } {
        sys::ValueType::napi_object => {}
        t => return Err(Thrown(format!("a context is an object or a Context, not {}", type_name(t)))),
    }
    if unsafe { string_prop(env, obj, c"kind")? }.as_deref() != Some("multi") {
        return unsafe { single(env, obj, None) };
    }
    let (arr, n) = unsafe { names(env, obj)? };
    let mut kinds = Vec::new();
    for i in 0..n {
        let name_v = unsafe { element(env, arr, i)? };
        let name = unsafe { string(env, name_v, "a kind name")? };
        if name == "kind" {
            continue;
        }
        let v = unsafe { get(env, obj, name_v)? };
        match unsafe { type_of(env, v)? } {
            sys::ValueType::napi_undefined | sys::ValueType::napi_null => continue,
            sys::ValueType::napi_object => {}
            t => {
                return Err(Thrown(format!(
                    "multi-kind context: property {name:?} must be an object (one kind), not {}",
                    type_name(t)
                )));
            }
        }
        check_kind(&name)?;
        kinds.push(unsafe { single(env, v, Some(&name))? });
    }
    if let Some(problem) = flagstream::context_kinds_problem(kinds.len()) {
        return Err(Thrown(format!("context: {problem}")));
    }
    // Property names are distinct, so kinds are too.
    Context::multi(kinds).ok_or_else(|| {
        Thrown("a multi-kind context needs at least one kind: {kind: \"multi\", user: {key: ...}}".into())
    })
}

/// `v` of the object form as a JSON value, for a key or kind: a string or
/// absent (null); anything else is refused.
pub(crate) fn json_str(v: Option<Json>, what: &str) -> R<Option<String>> {
    match v {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) => Ok(Some(s)),
        Some(other) => Err(Thrown(format!("context.{what} must be a string, not {other}"))),
    }
}

/// One kind from the JSON of its object form.
pub(crate) fn single_json(mut m: serde_json::Map<String, Json>, kind: Option<&str>) -> R<Context<'static>> {
    // No key: the empty key, as the file form reads it (EVALUATION.md).
    // The object form's documented default: a missing or null key is "".
    let key = json_str(m.remove("key"), "key")?.unwrap_or_default();
    let own = json_str(m.remove("kind"), "kind")?;
    let mut ctx = Context::new(key);
    if let Some(k) = kind.map(str::to_owned).or(own) {
        check_kind(&k)?;
        ctx = ctx.kind(k);
    }
    let mut attributes = 0;
    for (name, v) in m {
        // null (and what JSON.stringify drops: undefined, functions) is a
        // missing attribute.
        if let Some(a) = AttrValue::from_json(&v) {
            attributes += 1;
            ctx.set(name, a);
        }
    }
    if let Some(problem) = flagstream::context_attributes_problem(attributes) {
        return Err(Thrown(format!("context: {problem}")));
    }
    Ok(ctx)
}

/// A context from the JSON text of its object form (what index.js passes:
/// `JSON.stringify` of the object, a few times cheaper to read than the
/// object property by property through N-API).
pub(crate) fn from_json_text(text: &str) -> R<Context<'static>> {
    let mut m: serde_json::Map<String, Json> =
        serde_json::from_str(text).map_err(|e| Thrown(format!("a context is an object: {e}")))?;
    if !matches!(m.get("kind"), Some(Json::String(k)) if k == "multi") {
        return single_json(m, None);
    }
    m.remove("kind");
    let mut kinds = Vec::with_capacity(m.len());
    for (name, v) in m {
        match v {
            Json::Null => continue,
            Json::Object(one) => {
                check_kind(&name)?;
                kinds.push(single_json(one, Some(&name))?);
            }
            other => {
                return Err(Thrown(format!(
                    "multi-kind context: property {name:?} must be an object (one kind), not {other}"
                )));
            }
        }
    }
    if let Some(problem) = flagstream::context_kinds_problem(kinds.len()) {
        return Err(Thrown(format!("context: {problem}")));
    }
    Context::multi(kinds).ok_or_else(|| {
        Thrown("a multi-kind context needs at least one kind: {kind: \"multi\", user: {key: ...}}".into())
    })
}

/// The end of the piece of `text` starting at `from`: the next NUL or the
/// end; `None` at a U+FFFD (EF BF BD: what a lone surrogate reads as).
pub(crate) fn piece_end(b: &[u8], from: usize) -> Option<usize> {
    let mut j = from;
    while let Some(&c) = b.get(j) {
        if c == 0 {
            break;
        }
        if c == 0xEF && b.get(j + 1..j + 3) == Some(&[0xBF, 0xBD][..]) {
            return None;
        }
        j += 1;
    }
    Some(j)
}

/// Runs `f` on the flat single-kind context of index.js's packed form of
/// a plain object whose own enumerable properties are all strings,
/// numbers, booleans, `null` or `undefined` (`packed()` in index.js): the
/// count of entries, then per string, number or boolean property
/// `\0name\0` and the value tagged `s` (string), `n` (number, as
/// `String(n)`), `t` or `f`, `key` and `kind` first; `null` and `undefined`
/// properties are left out, as `JSON.stringify` makes them missing. Read
/// in one pass with borrowed slices, no JSON and no allocation, into
/// exactly the context [`from_json_text`] reads from the object's
/// `JSON.stringify` text, or the same error; built in place (a context is
/// a few hundred bytes: every move is a copy).
///
/// `Ok(None)` whenever this form cannot say what the JSON path would:
/// a name or string holding a NUL (more entries than the count), a lone
/// surrogate (read here as U+FFFD, refused by the JSON path), a
/// non-string key or kind, a `multi` kind; index.js then passes the JSON
/// text.
pub(crate) fn with_packed<T>(text: &str, f: impl FnOnce(&Context<'_>) -> T) -> R<Option<T>> {
    let b = text.as_bytes();
    let mut at = 0;
    let mut n = 0usize;
    while let Some(&c) = b.get(at) {
        if c == 0 {
            break;
        }
        let Some(d) = c.checked_sub(b'0').filter(|d| *d <= 9) else { return Ok(None) };
        let Some(m) = n.checked_mul(10).and_then(|m| m.checked_add(usize::from(d))) else { return Ok(None) };
        n = m;
        at += 1;
    }
    if at == 0 {
        return Ok(None);
    }
    // The entry at `at` (the NUL before its name): name, value and the
    // next entry's position; `None` for a malformed form.
    let entry = |at: usize| -> Option<(&str, &str, usize)> {
        let name_end = piece_end(b, at + 1)?;
        if name_end == b.len() {
            return None;
        }
        let value_end = piece_end(b, name_end + 1)?;
        // NUL is ASCII: every bound is a char boundary.
        Some((&text[at + 1..name_end], &text[name_end + 1..value_end], value_end))
    };
    let (mut key, mut kind) = ("", None);
    let mut entries = 0usize;
    while at < b.len() {
        let Some((name, value, next)) = entry(at) else { return Ok(None) };
        if name != "key" && name != "kind" {
            break;
        }
        let Some(s) = value.strip_prefix('s') else { return Ok(None) };
        if name == "key" {
            key = s;
        } else {
            kind = Some(s);
        }
        entries += 1;
        at = next;
    }
    let mut ctx = Context::new(key);
    if let Some(k) = kind {
        if k == "multi" {
            return Ok(None);
        }
        check_kind(k)?;
        ctx = ctx.kind(k);
    }
    let mut attributes = 0usize;
    while at < b.len() {
        let Some((name, value, next)) = entry(at) else { return Ok(None) };
        at = next;
        entries += 1;
        let a: AttrValue<'_> = match value.split_at_checked(1) {
            // Key and kind come first in index.js's form.
            _ if name == "key" || name == "kind" => return Ok(None),
            Some(("s", s)) => s.into(),
            Some(("t", "")) => true.into(),
            Some(("f", "")) => false.into(),
            // What JSON.stringify writes as null: a missing attribute.
            Some(("n", "NaN" | "Infinity" | "-Infinity")) => continue,
            // The digits JSON.stringify writes, read as the JSON path
            // reads them.
            Some(("n", num)) => {
                match serde_json::from_str::<serde_json::Number>(num).ok().and_then(|x| x.as_f64()) {
                    Some(x) => x.into(),
                    None => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        attributes += 1;
        ctx.set(name, a);
    }
    if entries != n {
        return Ok(None);
    }
    if let Some(problem) = flagstream::context_attributes_problem(attributes) {
        return Err(Thrown(format!("context: {problem}")));
    }
    Ok(Some(f(&ctx)))
}

/// Whether `text` is index.js's packed form (it starts with its count),
/// not JSON text (an object's starts with `{`).
pub(crate) fn is_packed(text: &str) -> bool {
    text.as_bytes().first().is_some_and(u8::is_ascii_digit)
}

/// Runs `f` with the context `v`: a prebuilt context's id, the JSON text
/// of an object context (index.js), or the object itself.
pub(crate) unsafe fn with_context<T>(
    env: sys::napi_env,
    v: sys::napi_value,
    f: impl FnOnce(&Context<'_>) -> T,
) -> R<T> {
    unsafe { with_any_context(env, v, f) }?
        .ok_or_else(|| Thrown("a context is an object or a Context, not a string".into()))
}

/// [`with_context`], also taking index.js's packed form ([`with_packed`]):
/// `None` when that form cannot say.
pub(crate) unsafe fn with_any_context<T>(
    env: sys::napi_env,
    v: sys::napi_value,
    f: impl FnOnce(&Context<'_>) -> T,
) -> R<Option<T>> {
    TABLES.with(|t| unsafe { with_any_context_in(env, &t.contexts, v, f) })
}

/// [`with_any_context`] with this thread's prebuilt contexts at hand.
pub(crate) unsafe fn with_any_context_in<T>(
    env: sys::napi_env,
    contexts: &RefCell<Table<Context<'static>>>,
    v: sys::napi_value,
    f: impl FnOnce(&Context<'_>) -> T,
) -> R<Option<T>> {
    let t = unsafe { type_of(env, v)? };
    if t == sys::ValueType::napi_string {
        return unsafe {
            with_str(env, v, "a context", |text| {
                if is_packed(text) {
                    with_packed(text, f)
                } else {
                    from_json_text(text).map(|ctx| Some(f(&ctx)))
                }
            })?
        };
    }
    if t == sys::ValueType::napi_number {
        let id = unsafe { id_of(env, v, "a Context")? };
        return match contexts.borrow().get(id) {
            Some(c) => Ok(Some(f(c))),
            // index.js passes only live Contexts' ids: this is a number
            // the caller passed as a context.
            None => Err(Thrown("a context is an object or a Context, not a number".into())),
        };
    }
    let ctx = unsafe { from_object(env, v)? };
    Ok(Some(f(&ctx)))
}
