//! Reading and making N-API values on the hot path: strings into a stack
//! buffer, numbers, booleans, ids, properties, and the one error type
//! ([`Thrown`], a caller's bug or an N-API failure, thrown as a
//! `TypeError`).

use std::ffi::c_char;
use std::ptr;

use napi::sys;

/// An N-API failure or a caller's bug, thrown as a `TypeError`.
pub(crate) struct Thrown(pub(crate) String);

pub(crate) type R<T> = Result<T, Thrown>;

pub(crate) fn check(status: sys::napi_status, what: &str) -> R<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Thrown(format!("{what} (N-API status {status})")))
    }
}

pub(crate) unsafe fn type_of(env: sys::napi_env, v: sys::napi_value) -> R<sys::napi_valuetype> {
    let mut t = 0;
    check(unsafe { sys::napi_typeof(env, v, &mut t) }, "typeof")?;
    Ok(t)
}

pub(crate) fn type_name(t: sys::napi_valuetype) -> &'static str {
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
pub(crate) unsafe fn with_str<T>(
    env: sys::napi_env,
    v: sys::napi_value,
    what: &str,
    f: impl FnOnce(&str) -> T,
) -> R<T> {
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

pub(crate) unsafe fn f64_of(env: sys::napi_env, v: sys::napi_value, what: &str) -> R<f64> {
    let mut n = 0f64;
    if unsafe { sys::napi_get_value_double(env, v, &mut n) } != sys::Status::napi_ok {
        return Err(Thrown(format!("{what} must be a number")));
    }
    Ok(n)
}

pub(crate) unsafe fn bool_of(env: sys::napi_env, v: sys::napi_value, what: &str) -> R<bool> {
    let mut b = false;
    if unsafe { sys::napi_get_value_bool(env, v, &mut b) } != sys::Status::napi_ok {
        return Err(Thrown(format!("{what} must be a boolean")));
    }
    Ok(b)
}

pub(crate) unsafe fn id_of(env: sys::napi_env, v: sys::napi_value, what: &str) -> R<u32> {
    let mut n = 0u32;
    if unsafe { sys::napi_get_value_uint32(env, v, &mut n) } != sys::Status::napi_ok {
        return Err(Thrown(format!("{what} must be an id")));
    }
    Ok(n)
}

pub(crate) unsafe fn property(
    env: sys::napi_env,
    obj: sys::napi_value,
    name: &std::ffi::CStr,
) -> R<sys::napi_value> {
    let mut v = ptr::null_mut();
    check(unsafe { sys::napi_get_named_property(env, obj, name.as_ptr(), &mut v) }, "property")?;
    Ok(v)
}

/// `obj.name` as a string, `None` when undefined or null.
pub(crate) unsafe fn string_prop(
    env: sys::napi_env,
    obj: sys::napi_value,
    name: &std::ffi::CStr,
) -> R<Option<String>> {
    let v = unsafe { property(env, obj, name)? };
    match unsafe { type_of(env, v)? } {
        sys::ValueType::napi_undefined | sys::ValueType::napi_null => Ok(None),
        sys::ValueType::napi_string => Ok(Some(unsafe { string(env, v, "context.key/kind")? })),
        t => {
            Err(Thrown(format!("context.{} must be a string, not {}", name.to_string_lossy(), type_name(t))))
        }
    }
}
/// The own enumerable property names of `obj` and their count.
pub(crate) unsafe fn names(env: sys::napi_env, obj: sys::napi_value) -> R<(sys::napi_value, u32)> {
    let mut arr = ptr::null_mut();
    check(unsafe { sys::napi_get_property_names(env, obj, &mut arr) }, "property names")?;
    let mut n = 0u32;
    check(unsafe { sys::napi_get_array_length(env, arr, &mut n) }, "property names")?;
    Ok((arr, n))
}

pub(crate) unsafe fn element(env: sys::napi_env, arr: sys::napi_value, i: u32) -> R<sys::napi_value> {
    let mut v = ptr::null_mut();
    check(unsafe { sys::napi_get_element(env, arr, i, &mut v) }, "element")?;
    Ok(v)
}

pub(crate) unsafe fn get(
    env: sys::napi_env,
    obj: sys::napi_value,
    key: sys::napi_value,
) -> R<sys::napi_value> {
    let mut v = ptr::null_mut();
    check(unsafe { sys::napi_get_property(env, obj, key, &mut v) }, "property")?;
    Ok(v)
}

/// `undefined`: what the evaluation functions return for a packed context
/// that form cannot say.
pub(crate) unsafe fn undefined(env: sys::napi_env) -> R<sys::napi_value> {
    let mut out = ptr::null_mut();
    check(unsafe { sys::napi_get_undefined(env, &mut out) }, "result")?;
    Ok(out)
}

/// Throws `e` as a TypeError; returns the null the callback returns.
pub(crate) unsafe fn throw(env: sys::napi_env, e: Thrown) -> sys::napi_value {
    // NULs were replaced, so this cannot fail; an empty message if it did.
    // Cannot fail: every NUL was just replaced.
    let msg = std::ffi::CString::new(e.0.replace('\0', " ")).unwrap_or_default();
    // If throwing fails there is already an exception pending: that one
    // reaches the caller.
    unsafe { sys::napi_throw_type_error(env, ptr::null(), msg.as_ptr()) };
    ptr::null_mut()
}
