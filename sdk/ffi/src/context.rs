//! Contexts kept and reused, and flag handles.

use flagstream::{AttrValue, Context};

use crate::*;

/// A context kept by the caller and reused: its key, kind and attributes
/// are owned here, so evaluating it crosses the boundary with a pointer.
pub struct FlagstreamContext {
    pub(crate) context: Context<'static>,
}

/// A new context with `key` (kind `user`); freed with
/// [`flagstream_context_free`].
///
/// # Safety
/// `key` points to `len` readable bytes; `out` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_context_new(
    key: *const u8,
    len: usize,
    out: *mut *mut FlagstreamContext,
) -> FlagstreamStatus {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out: a null out pointer"));
        }
        // SAFETY: the caller's contract, above.
        let key = unsafe { text(key, len, "key") }?;
        let boxed = Box::new(FlagstreamContext { context: Context::new(key.to_owned()) });
        // SAFETY: the caller's contract, above.
        unsafe { put(out, Box::into_raw(boxed), "out") }
    })
}

/// Sets (or replaces) a string attribute of a kept context (the names
/// `key` and `kind` are not attributes: they are ignored).
///
/// # Safety
/// `context` is a live context handle no other thread reads now; the
/// strings point to their lengths' readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_context_set_string(
    context: *mut FlagstreamContext,
    name: *const u8,
    name_len: usize,
    value: *const u8,
    value_len: usize,
) -> FlagstreamStatus {
    guard(|| {
        // SAFETY: the caller's contract, above.
        let (name, value) = unsafe { (text(name, name_len, "name")?, text(value, value_len, "value")?) };
        // SAFETY: the caller's contract, above.
        unsafe { set(context, name, value.to_owned()) }
    })
}

/// Sets (or replaces) a number attribute of a kept context.
///
/// # Safety
/// As [`flagstream_context_set_string`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_context_set_number(
    context: *mut FlagstreamContext,
    name: *const u8,
    name_len: usize,
    value: f64,
) -> FlagstreamStatus {
    guard(|| {
        // SAFETY: the caller's contract, above.
        let name = unsafe { text(name, name_len, "name") }?;
        // SAFETY: the caller's contract, above.
        unsafe { set(context, name, value) }
    })
}

/// Why a multi-kind context's attributes cannot be set.
const MULTI: &str = "context: a multi-kind context's attributes belong to its kinds: build it with flagstream_context_from_json";

/// Sets attribute `name` of a kept single-kind context (a multi-kind one
/// is refused: build it whole with [`flagstream_context_from_json`]).
///
/// # Safety
/// `context` is null or a live context handle no other thread reads now.
unsafe fn set(
    context: *mut FlagstreamContext,
    name: &str,
    value: impl Into<AttrValue<'static>>,
) -> Result<(), Failure> {
    // SAFETY: a live handle only this thread uses now (the contract).
    let c = unsafe { context.as_mut() }.ok_or_else(|| invalid("context: a null pointer"))?;
    if c.context.is_multi() {
        return Err(invalid(MULTI));
    }
    c.context.set(name.to_owned(), value);
    Ok(())
}

/// Sets (or replaces) a bool attribute of a kept context.
///
/// # Safety
/// As [`flagstream_context_set_string`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_context_set_bool(
    context: *mut FlagstreamContext,
    name: *const u8,
    name_len: usize,
    value: bool,
) -> FlagstreamStatus {
    guard(|| {
        // SAFETY: the caller's contract, above.
        let name = unsafe { text(name, name_len, "name") }?;
        // SAFETY: the caller's contract, above.
        unsafe { set(context, name, value) }
    })
}

/// Sets (or replaces) an attribute of a kept context from JSON text: a
/// string, number or bool, an array of those (matched element by
/// element), or any other JSON value (an object, a mixed array: kept as
/// JSON, for attribute references into it); JSON `null` removes it.
///
/// # Safety
/// As [`flagstream_context_set_string`]; `json` points to `json_len`
/// readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_context_set_json(
    context: *mut FlagstreamContext,
    name: *const u8,
    name_len: usize,
    json: *const u8,
    json_len: usize,
) -> FlagstreamStatus {
    guard(|| {
        // SAFETY: the caller's contract, above.
        let (name, json) = unsafe { (text(name, name_len, "name")?, text(json, json_len, "json")?) };
        let v: serde_json::Value = serde_json::from_str(json).map_err(|e| invalid(format!("json: {e}")))?;
        match AttrValue::from_json(&v) {
            // SAFETY: the caller's contract, above.
            Some(value) => unsafe { set(context, name, value) },
            // JSON null.
            None => {
                // SAFETY: a live handle only this thread uses now (the contract).
                let c = unsafe { context.as_mut() }.ok_or_else(|| invalid("context: a null pointer"))?;
                if c.context.is_multi() {
                    return Err(invalid(MULTI));
                }
                c.context.remove(name);
                Ok(())
            }
        }
    })
}

/// A context from its JSON form: `{"key": "u1", "kind": "user",
/// "attributes": {"plan": "pro"}}`, or `{"kind": "multi", "contexts":
/// [{...}, ...]}` for several kinds (docs/EVALUATION.md); freed with
/// [`flagstream_context_free`].
///
/// # Safety
/// `json` points to `len` readable bytes; `out` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_context_from_json(
    json: *const u8,
    len: usize,
    out: *mut *mut FlagstreamContext,
) -> FlagstreamStatus {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out: a null out pointer"));
        }
        // SAFETY: the caller's contract, above.
        let json = unsafe { text(json, len, "json") }?;
        let context: Context<'static> =
            serde_json::from_str(json).map_err(|e| invalid(format!("context: {e}")))?;
        let boxed = Box::new(FlagstreamContext { context });
        // SAFETY: the caller's contract, above.
        unsafe { put(out, Box::into_raw(boxed), "out") }
    })
}

/// Frees a context. Null is ignored.
///
/// # Safety
/// `context` is null or a live context handle, not used after this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_context_free(context: *mut FlagstreamContext) {
    if !context.is_null() {
        // SAFETY: made by `Box::into_raw` in `flagstream_context_new`, not
        // used after this call (the caller's contract).
        drop(unsafe { Box::from_raw(context) });
    }
}

/// A flag handle: the key looked up once, so a hot path passes a pointer.
pub struct FlagstreamFlag {
    pub(crate) handle: flagstream::FlagHandle,
}

/// A handle for flag `key`; freed with [`flagstream_flag_free`].
///
/// # Safety
/// `key` points to `len` readable bytes; `out` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_flag_new(
    key: *const u8,
    len: usize,
    out: *mut *mut FlagstreamFlag,
) -> FlagstreamStatus {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out: a null out pointer"));
        }
        // SAFETY: the caller's contract, above.
        let key = unsafe { text(key, len, "key") }?;
        let boxed = Box::new(FlagstreamFlag { handle: flagstream::FlagHandle::new(key) });
        // SAFETY: the caller's contract, above.
        unsafe { put(out, Box::into_raw(boxed), "out") }
    })
}

/// Frees a flag handle. Null is ignored.
///
/// # Safety
/// `flag` is null or a live flag handle, not used after this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_flag_free(flag: *mut FlagstreamFlag) {
    if !flag.is_null() {
        // SAFETY: made by `Box::into_raw` in `flagstream_flag_new`, not
        // used after this call (the caller's contract).
        drop(unsafe { Box::from_raw(flag) });
    }
}
