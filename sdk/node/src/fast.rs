//! The evaluation hot path as plain N-API callbacks, without napi-rs's
//! class machinery (per-call `this` unwrapping, type-tag checks and borrow
//! tracking cost several times the evaluation itself).
//!
//! Clients and prebuilt contexts live in per-JS-thread tables and JS holds
//! their ids (small integers): a call reads its arguments with a handful of
//! N-API calls (the key into a stack buffer), looks the ids up — bounds
//! checked, so a forged id is an error, never memory unsafety — and
//! evaluates. `index.js` frees a context's id when the `Context` is
//! collected (a `FinalizationRegistry`) and a client's at `close()` (or
//! when its `NativeClient` is collected).
//!
//! Contexts, in the object form (README "Node"): one kind is `{key, kind,
//! ...attributes}` (`key` default `""`, `kind` default `user`, every other
//! property an attribute: strings, numbers and booleans are scalars, arrays
//! of scalars lists, other arrays and objects JSON attributes, `null` a
//! missing attribute); several kinds are `{kind: "multi", user: {...},
//! org: {...}}`, every other property one kind named by the property (its
//! own `kind` ignored). index.js passes a flat object context (all
//! properties primitives) in a packed form ([`with_packed`]: no JSON, no
//! allocation), the same flat object as last time as the id of a context
//! read from it once (`contextSet`), and any other object as its
//! `JSON.stringify` text ([`from_json_text`]); [`from_object`] reads an
//! object directly with the same rules (for direct callers of the addon).
//! An invalid kind name or more kinds or attributes than the context
//! limits allow is a `TypeError`.

use std::cell::RefCell;
use std::ffi::c_char;
use std::ptr;

use flagstream::{AttrValue, Client, Context};
use napi::sys;
use serde_json::Value as Json;

/// A table of values by id, reusing freed ids.
pub(crate) struct Table<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Table<T> {
    const fn new() -> Self {
        Table { slots: Vec::new(), free: Vec::new() }
    }

    pub(crate) fn insert(&mut self, v: T) -> u32 {
        if let Some(id) = self.free.pop() {
            self.slots[id as usize] = Some(v);
            return id;
        }
        self.slots.push(Some(v));
        (self.slots.len() - 1) as u32
    }

    pub(crate) fn remove(&mut self, id: u32) -> Option<T> {
        let v = self.slots.get_mut(id as usize)?.take();
        if v.is_some() {
            self.free.push(id);
        }
        v
    }

    pub(crate) fn get(&self, id: u32) -> Option<&T> {
        self.slots.get(id as usize)?.as_ref()
    }

    /// Replaces the value of the live id `id`; false when `id` is not live.
    pub(crate) fn replace(&mut self, id: u32, v: T) -> bool {
        match self.slots.get_mut(id as usize) {
            Some(slot @ Some(_)) => {
                *slot = Some(v);
                true
            }
            _ => false,
        }
    }
}

thread_local! {
    /// The open clients of this JS thread.
    pub(crate) static CLIENTS: RefCell<Table<Client>> = const { RefCell::new(Table::new()) };
    /// The prebuilt contexts of this JS thread.
    pub(crate) static CONTEXTS: RefCell<Table<Context<'static>>> = const { RefCell::new(Table::new()) };
}

/// An N-API failure or a caller's bug, thrown as a `TypeError`.
pub(crate) struct Thrown(pub(crate) String);

type R<T> = Result<T, Thrown>;

fn check(status: sys::napi_status, what: &str) -> R<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Thrown(format!("{what} (N-API status {status})")))
    }
}

unsafe fn type_of(env: sys::napi_env, v: sys::napi_value) -> R<sys::napi_valuetype> {
    let mut t = 0;
    check(unsafe { sys::napi_typeof(env, v, &mut t) }, "typeof")?;
    Ok(t)
}

fn type_name(t: sys::napi_valuetype) -> &'static str {
    match t {
        sys::ValueType::napi_undefined => "undefined",
        sys::ValueType::napi_null => "null",
        sys::ValueType::napi_boolean => "boolean",
        sys::ValueType::napi_number => "number",
        sys::ValueType::napi_string => "string",
        sys::ValueType::napi_symbol => "symbol",
        sys::ValueType::napi_object => "object",
        sys::ValueType::napi_function => "function",
        sys::ValueType::napi_external => "external",
        sys::ValueType::napi_bigint => "bigint",
        _ => "value",
    }
}

/// Runs `f` on the string `v`, read into a stack buffer when it fits.
unsafe fn with_str<T>(env: sys::napi_env, v: sys::napi_value, what: &str, f: impl FnOnce(&str) -> T) -> R<T> {
    let mut buf = [0u8; 256];
    let mut len = 0usize;
    let status = unsafe {
        sys::napi_get_value_string_utf8(env, v, buf.as_mut_ptr().cast::<c_char>(), buf.len(), &mut len)
    };
    if status != sys::Status::napi_ok {
        return Err(Thrown(format!("{what} must be a string")));
    }
    if len + 1 < buf.len() {
        return Ok(f(std::str::from_utf8(&buf[..len]).map_err(|_| Thrown(format!("{what}: not UTF-8")))?));
    }
    let s = unsafe { string(env, v, what)? };
    Ok(f(&s))
}

/// The string `v`, owned.
pub(crate) unsafe fn string(env: sys::napi_env, v: sys::napi_value, what: &str) -> R<String> {
    let mut len = 0usize;
    if unsafe { sys::napi_get_value_string_utf8(env, v, ptr::null_mut(), 0, &mut len) }
        != sys::Status::napi_ok
    {
        return Err(Thrown(format!("{what} must be a string")));
    }
    let mut buf = vec![0u8; len + 1];
    check(
        unsafe {
            sys::napi_get_value_string_utf8(env, v, buf.as_mut_ptr().cast::<c_char>(), buf.len(), &mut len)
        },
        what,
    )?;
    buf.truncate(len);
    String::from_utf8(buf).map_err(|_| Thrown(format!("{what}: not UTF-8")))
}

unsafe fn f64_of(env: sys::napi_env, v: sys::napi_value, what: &str) -> R<f64> {
    let mut n = 0f64;
    if unsafe { sys::napi_get_value_double(env, v, &mut n) } != sys::Status::napi_ok {
        return Err(Thrown(format!("{what} must be a number")));
    }
    Ok(n)
}

unsafe fn bool_of(env: sys::napi_env, v: sys::napi_value, what: &str) -> R<bool> {
    let mut b = false;
    if unsafe { sys::napi_get_value_bool(env, v, &mut b) } != sys::Status::napi_ok {
        return Err(Thrown(format!("{what} must be a boolean")));
    }
    Ok(b)
}

unsafe fn id_of(env: sys::napi_env, v: sys::napi_value, what: &str) -> R<u32> {
    let mut n = 0u32;
    if unsafe { sys::napi_get_value_uint32(env, v, &mut n) } != sys::Status::napi_ok {
        return Err(Thrown(format!("{what} must be an id")));
    }
    Ok(n)
}

unsafe fn property(env: sys::napi_env, obj: sys::napi_value, name: &std::ffi::CStr) -> R<sys::napi_value> {
    let mut v = ptr::null_mut();
    check(unsafe { sys::napi_get_named_property(env, obj, name.as_ptr(), &mut v) }, "property")?;
    Ok(v)
}

/// `obj.name` as a string, `None` when undefined or null.
unsafe fn string_prop(env: sys::napi_env, obj: sys::napi_value, name: &std::ffi::CStr) -> R<Option<String>> {
    let v = unsafe { property(env, obj, name)? };
    match unsafe { type_of(env, v)? } {
        sys::ValueType::napi_undefined | sys::ValueType::napi_null => Ok(None),
        sys::ValueType::napi_string => Ok(Some(unsafe { string(env, v, "context.key/kind")? })),
        t => {
            Err(Thrown(format!("context.{} must be a string, not {}", name.to_string_lossy(), type_name(t))))
        }
    }
}

fn check_kind(kind: &str) -> R<()> {
    match flagstream::reference::kind_problem(kind) {
        None => Ok(()),
        Some(problem) => Err(Thrown(format!("context kind {kind:?}: {problem}"))),
    }
}

/// The own enumerable property names of `obj` and their count.
unsafe fn names(env: sys::napi_env, obj: sys::napi_value) -> R<(sys::napi_value, u32)> {
    let mut arr = ptr::null_mut();
    check(unsafe { sys::napi_get_property_names(env, obj, &mut arr) }, "property names")?;
    let mut n = 0u32;
    check(unsafe { sys::napi_get_array_length(env, arr, &mut n) }, "property names")?;
    Ok((arr, n))
}

unsafe fn element(env: sys::napi_env, arr: sys::napi_value, i: u32) -> R<sys::napi_value> {
    let mut v = ptr::null_mut();
    check(unsafe { sys::napi_get_element(env, arr, i, &mut v) }, "element")?;
    Ok(v)
}

unsafe fn get(env: sys::napi_env, obj: sys::napi_value, key: sys::napi_value) -> R<sys::napi_value> {
    let mut v = ptr::null_mut();
    check(unsafe { sys::napi_get_property(env, obj, key, &mut v) }, "property")?;
    Ok(v)
}

/// One kind in the object form (`kind` given for a kind of a multi-kind
/// context: its property name).
unsafe fn single(env: sys::napi_env, obj: sys::napi_value, kind: Option<&str>) -> R<Context<'static>> {
    // No key: the empty key, as the file form reads it (EVALUATION.md).
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
fn json_str(v: Option<Json>, what: &str) -> R<Option<String>> {
    match v {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) => Ok(Some(s)),
        Some(other) => Err(Thrown(format!("context.{what} must be a string, not {other}"))),
    }
}

/// One kind from the JSON of its object form.
fn single_json(mut m: serde_json::Map<String, Json>, kind: Option<&str>) -> R<Context<'static>> {
    // No key: the empty key, as the file form reads it (EVALUATION.md).
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
fn piece_end(b: &[u8], from: usize) -> Option<usize> {
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
fn is_packed(text: &str) -> bool {
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
unsafe fn with_any_context<T>(
    env: sys::napi_env,
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
        return CONTEXTS.with(|t| match t.borrow().get(id) {
            Some(c) => Ok(Some(f(c))),
            // index.js passes only live Contexts' ids: this is a number
            // the caller passed as a context.
            None => Err(Thrown("a context is an object or a Context, not a number".into())),
        });
    }
    let ctx = unsafe { from_object(env, v)? };
    Ok(Some(f(&ctx)))
}

/// The arguments `(clientId, key, ctx, default)` of a typed evaluation.
unsafe fn args4(env: sys::napi_env, info: sys::napi_callback_info) -> R<[sys::napi_value; 4]> {
    let mut argc = 4usize;
    let mut argv = [ptr::null_mut(); 4];
    check(
        unsafe {
            sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), ptr::null_mut(), ptr::null_mut())
        },
        "arguments",
    )?;
    if argc < 4 {
        return Err(Thrown(format!(
            "expected (key, context, default), got {} argument(s)",
            argc.saturating_sub(1)
        )));
    }
    Ok(argv)
}

/// Evaluates with the client `argv[0]`, the key `argv[1]`, the context
/// `argv[2]`; a closed client gives `closed()`; `None` for a packed
/// context that form cannot say (index.js passes the JSON text then).
unsafe fn evaluate<T>(
    env: sys::napi_env,
    argv: &[sys::napi_value; 4],
    closed: impl FnOnce() -> T,
    f: impl FnOnce(&Client, &str, &Context<'_>) -> T,
) -> R<Option<T>> {
    let id = unsafe { id_of(env, argv[0], "the client")? };
    let client = CLIENTS.with(|t| t.borrow().get(id).cloned());
    let Some(client) = client else { return Ok(Some(closed())) };
    unsafe {
        with_str(env, argv[1], "the flag key", |key| {
            with_any_context(env, argv[2], |ctx| f(&client, key, ctx))
        })?
    }
}

/// `undefined`: what the evaluation functions return for a packed context
/// that form cannot say.
unsafe fn undefined(env: sys::napi_env) -> R<sys::napi_value> {
    let mut out = ptr::null_mut();
    check(unsafe { sys::napi_get_undefined(env, &mut out) }, "result")?;
    Ok(out)
}

/// Throws `e` as a TypeError; returns the null the callback returns.
unsafe fn throw(env: sys::napi_env, e: Thrown) -> sys::napi_value {
    // NULs were replaced, so this cannot fail; an empty message if it did.
    let msg = std::ffi::CString::new(e.0.replace('\0', " ")).unwrap_or_default();
    // If throwing fails there is already an exception pending: that one
    // reaches the caller.
    unsafe { sys::napi_throw_type_error(env, ptr::null(), msg.as_ptr()) };
    ptr::null_mut()
}

unsafe fn finish(env: sys::napi_env, r: R<sys::napi_value>) -> sys::napi_value {
    match r {
        Ok(v) => v,
        Err(e) => unsafe { throw(env, e) },
    }
}

unsafe extern "C" fn eval_bool(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let r = (|| unsafe {
        let argv = args4(env, info)?;
        let default = bool_of(env, argv[3], "the default")?;
        let Some(v) = evaluate(env, &argv, || default, |c, k, x| c.bool(k, x, default))? else {
            return undefined(env);
        };
        let mut out = ptr::null_mut();
        check(sys::napi_get_boolean(env, v, &mut out), "result")?;
        Ok(out)
    })();
    unsafe { finish(env, r) }
}

unsafe extern "C" fn eval_number(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let r = (|| unsafe {
        let argv = args4(env, info)?;
        let default = f64_of(env, argv[3], "the default")?;
        let Some(v) = evaluate(env, &argv, || default, |c, k, x| c.float(k, x, default))? else {
            return undefined(env);
        };
        let mut out = ptr::null_mut();
        check(sys::napi_create_double(env, v, &mut out), "result")?;
        Ok(out)
    })();
    unsafe { finish(env, r) }
}

unsafe extern "C" fn eval_int(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let r = (|| unsafe {
        let argv = args4(env, info)?;
        let default =
            crate::int_default(f64_of(env, argv[3], "the default")?).map_err(|e| Thrown(e.reason))?;
        let Some(v) = evaluate(env, &argv, || default, |c, k, x| c.int(k, x, default))? else {
            return undefined(env);
        };
        let mut out = ptr::null_mut();
        check(sys::napi_create_int64(env, v, &mut out), "result")?;
        Ok(out)
    })();
    unsafe { finish(env, r) }
}

unsafe extern "C" fn eval_string(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let r = (|| unsafe {
        let argv = args4(env, info)?;
        let default = string(env, argv[3], "the default")?;
        let create = |s: &str| {
            let mut out = ptr::null_mut();
            check(
                sys::napi_create_string_utf8(env, s.as_ptr().cast::<c_char>(), s.len() as isize, &mut out),
                "result",
            )
            .map(|()| out)
        };
        match evaluate(env, &argv, || create(&default), |c, k, x| c.string_with(k, x, &default, create))? {
            Some(v) => v,
            None => undefined(env),
        }
    })();
    unsafe { finish(env, r) }
}

/// `contextNew(obj)`: reads a context once; returns its id.
unsafe extern "C" fn context_new(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let r = (|| unsafe {
        let mut argc = 1usize;
        let mut argv = [ptr::null_mut(); 1];
        check(
            sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), ptr::null_mut(), ptr::null_mut()),
            "arguments",
        )?;
        let ctx = if type_of(env, argv[0])? == sys::ValueType::napi_string {
            with_str(env, argv[0], "a context", from_json_text)??
        } else {
            from_object(env, argv[0])?
        };
        let id = CONTEXTS.with(|t| t.borrow_mut().insert(ctx));
        let mut out = ptr::null_mut();
        check(sys::napi_create_uint32(env, id, &mut out), "result")?;
        Ok(out)
    })();
    unsafe { finish(env, r) }
}

/// `contextSet(id, packed)`: replaces the context `id` (index.js's reused
/// context of plain objects) by the one read from the packed form
/// ([`with_packed`]); false, and nothing replaced, when that form cannot
/// say or the context is invalid (index.js then passes the packed form
/// itself to the evaluation).
unsafe extern "C" fn context_set(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let r = (|| unsafe {
        let mut argc = 2usize;
        let mut argv = [ptr::null_mut(); 2];
        check(
            sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), ptr::null_mut(), ptr::null_mut()),
            "arguments",
        )?;
        let id = id_of(env, argv[0], "a Context")?;
        let ctx = with_str(env, argv[1], "a packed context", |s| {
            // An invalid context (kind, attribute count) is not kept
            // either: index.js passes the packed form to the evaluation,
            // which throws its error, or returns the default for a closed
            // client without reading the context.
            if is_packed(s) { with_packed(s, |c| c.clone().into_owned()).ok().flatten() } else { None }
        })?;
        let set = match ctx {
            Some(ctx) => {
                if !CONTEXTS.with(|t| t.borrow_mut().replace(id, ctx)) {
                    return Err(Thrown("contextSet: no such context".into()));
                }
                true
            }
            None => false,
        };
        let mut out = ptr::null_mut();
        check(sys::napi_get_boolean(env, set, &mut out), "result")?;
        Ok(out)
    })();
    unsafe { finish(env, r) }
}

/// `contextFree(id)`: forgets a context (its `Context` was collected).
unsafe extern "C" fn context_free(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let r = (|| unsafe {
        let mut argc = 1usize;
        let mut argv = [ptr::null_mut(); 1];
        check(
            sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), ptr::null_mut(), ptr::null_mut()),
            "arguments",
        )?;
        let id = id_of(env, argv[0], "a Context")?;
        CONTEXTS.with(|t| t.borrow_mut().remove(id));
        let mut out = ptr::null_mut();
        check(sys::napi_get_undefined(env, &mut out), "result")?;
        Ok(out)
    })();
    unsafe { finish(env, r) }
}

/// The raw functions, as an object (`native.fastApi()`).
pub(crate) fn api(env: &napi::Env) -> napi::Result<napi::bindgen_prelude::Object<'_>> {
    type Callback = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;
    let fns: [(&std::ffi::CStr, Callback); 7] = [
        (c"bool", eval_bool),
        (c"number", eval_number),
        (c"int", eval_int),
        (c"string", eval_string),
        (c"contextNew", context_new),
        (c"contextSet", context_set),
        (c"contextFree", context_free),
    ];
    let mut obj = napi::bindgen_prelude::Object::new(env)?;
    for (name, cb) in fns {
        let mut f = ptr::null_mut();
        // SAFETY: a plain N-API function of this env (the name NUL-ended:
        // length -1, NAPI_AUTO_LENGTH); `cb` matches the callback
        // signature and uses no data pointer.
        let status = unsafe {
            sys::napi_create_function(env.raw(), name.as_ptr(), -1, Some(cb), ptr::null_mut(), &mut f)
        };
        if status != sys::Status::napi_ok {
            return Err(napi::Error::from_reason(format!("creating {name:?} failed ({status})")));
        }
        // SAFETY: `f` is the function just created in this env.
        let f = unsafe { napi::bindgen_prelude::Unknown::from_raw_unchecked(env.raw(), f) };
        obj.set(name.to_str().unwrap_or("fn"), f)?;
    }
    Ok(obj)
}
