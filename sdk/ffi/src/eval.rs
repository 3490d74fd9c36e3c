//! Typed evaluation (by key, through a flag handle, or at another time):
//! one path for every type, the detail and strings it writes in
//! `detail.rs`.

use std::borrow::Cow;

use flagstream::{Detail, ErrorKind, FlagHandle, Reason};
use flagstream_binding::{Serving, client_parts, count, fixed_parts};
use serde_json::Value as Json;

use crate::*;

/// The answer to a null flag handle (the detail emptied).
///
/// # Safety
/// `detail` is null or valid for a write.
unsafe fn no_flag(detail: *mut FlagstreamDetail) -> FlagstreamStatus {
    guard(|| {
        // SAFETY: the caller's contract, above.
        unsafe { clear_detail(detail) };
        Err(invalid("flag: a null pointer"))
    })
}

/// What is evaluated: a key looked up, or a flag handle.
#[derive(Clone, Copy)]
enum Target<'a> {
    Key(&'a str),
    Flag(&'a FlagHandle),
}

impl Target<'_> {
    fn key(&self) -> &str {
        match self {
            Target::Key(k) => k,
            Target::Flag(h) => h.key(),
        }
    }
}

/// The result without data: the default, `ERROR`/`NOT_READY`.
fn not_ready<T>(value: T) -> Detail<'static, T> {
    Detail {
        value,
        variation: None,
        reason: Reason::Error(ErrorKind::NotReady),
        flag_version: 0,
        revision: 0,
        stale: false,
    }
}

/// What an evaluation reads: the client's Rust client directly (the
/// common case: no state guard to load and release), or its state.
enum Source<'a> {
    Direct(&'a flagstream::Client),
    Live(arc_swap::Guard<std::sync::Arc<flagstream_binding::Live>>),
}

impl Source<'_> {
    /// The Rust client that evaluates, if one does (else a fixed snapshot).
    fn client(&self) -> Option<&flagstream::Client> {
        match self {
            Source::Direct(c) => Some(c),
            Source::Live(live) => match &live.serving {
                Serving::Client(c) => Some(c),
                Serving::Fixed { .. } => None,
            },
        }
    }
}

/// Evaluates `$target` for `$ctx` from `$src` (a [`Source`]; `$at`:
/// `Some(unix_ms)` evaluates as of that time, from the snapshot), then
/// runs `$body` with the borrowed result bound to `$d`. The one path of
/// every evaluation: a Rust client's (counted, stale-marked, in the usage
/// summary), or a snapshot's (a fixed one counts its own fallbacks).
macro_rules! evaluate {
    ($src:expr, $target:expr, $ctx:expr, $default:expr, $at:expr, |$d:ident| $body:expr) => {{
        let target: Target<'_> = $target;
        let src: &Source<'_> = &$src;
        match (src.client(), $at) {
            (Some(c), None) => match c.loaded() {
                None => {
                    let $d = c.not_ready(target.key(), $default);
                    $body
                }
                Some(snap) => {
                    let $d = match target {
                        Target::Key(k) => c.eval_in(&snap, k, $ctx, $default),
                        Target::Flag(h) => c.eval_handle_in(&snap, h, $ctx, $default),
                    };
                    $body
                }
            },
            (_, at) => {
                let (snap, stale, fallbacks) = match src {
                    Source::Live(live) => fixed_parts(&live.serving),
                    Source::Direct(c) => client_parts(c),
                };
                let mut $d = match (snap.as_deref(), at, target) {
                    (None, _, _) => not_ready($default),
                    (Some(s), Some(t), Target::Key(k)) => s.detail_at(k, $ctx, $default, t),
                    (Some(s), None, Target::Key(k)) => s.detail(k, $ctx, $default),
                    (Some(s), _, Target::Flag(h)) => h.detail(s, $ctx, $default),
                };
                $d.stale = stale;
                count(&fallbacks, at, &$d.reason);
                $body
            }
        }
    }};
}

/// An evaluation's client (open) and context, and what is evaluated
/// (`flag` when not null, else `key`).
///
/// # Safety
/// `client`, `flag` and `context` are null or live handles; `key` points
/// to `key_len` readable bytes.
unsafe fn inputs<'a>(
    client: *const FlagstreamClient,
    flag: *const FlagstreamFlag,
    key: *const u8,
    key_len: usize,
    context: *const FlagstreamContext,
) -> Result<(Source<'a>, Target<'a>, &'a FlagstreamContext), Failure> {
    // SAFETY: the caller's contract, above.
    unsafe {
        let c = handle(client, "client")?;
        let src = match c.engine.fast() {
            Some(direct) => Source::Direct(direct),
            None => Source::Live(open(client, false)?.1),
        };
        let target = match flag.as_ref() {
            Some(f) => Target::Flag(&f.handle),
            None => Target::Key(text(key, key_len, "key")?),
        };
        Ok((src, target, handle(context, "context")?))
    }
}

/// A scalar evaluation (bool, int, float) by key or handle.
///
/// # Safety
/// As [`inputs`]; `value` is valid for a write; `detail` is null or valid
/// for a write.
#[allow(clippy::too_many_arguments)] // the C signature's parts, passed on
unsafe fn scalar<T: for<'s> flagstream::FromValue<'s> + Copy>(
    client: *const FlagstreamClient,
    flag: *const FlagstreamFlag,
    key: *const u8,
    key_len: usize,
    context: *const FlagstreamContext,
    default: T,
    value: *mut T,
    detail: *mut FlagstreamDetail,
) -> FlagstreamStatus {
    // SAFETY: the caller's contract, above.
    guard(|| unsafe { scalar_inner(client, flag, key, key_len, context, default, value, detail) })
}

/// [`scalar`] without its guard.
///
/// # Safety
/// As [`scalar`].
#[allow(clippy::too_many_arguments)] // the C signature's parts, passed on
unsafe fn scalar_inner<T: for<'s> flagstream::FromValue<'s> + Copy>(
    client: *const FlagstreamClient,
    flag: *const FlagstreamFlag,
    key: *const u8,
    key_len: usize,
    context: *const FlagstreamContext,
    default: T,
    value: *mut T,
    detail: *mut FlagstreamDetail,
) -> Result<(), Failure> {
    // SAFETY: the caller's contract, above.
    unsafe { clear_detail(detail) };
    if value.is_null() {
        return Err(invalid("value: a null out pointer"));
    }
    // SAFETY: the caller's contract, above.
    let (src, target, ctx) = unsafe { inputs(client, flag, key, key_len, context) }?;
    let (v, d) = evaluate!(src, target, &ctx.context, default, None, |d| {
        (d.value, (!detail.is_null()).then(|| detail_of(&d)))
    });
    // SAFETY: the caller's contract, above.
    unsafe {
        if let Some(d) = d {
            put_detail(d, detail);
        }
        put(value, v, "value")
    }
}

/// A string or JSON evaluation by key or handle: the value as a string
/// the library owns (a string flag's text, or JSON text).
///
/// # Safety
/// As [`scalar`]; `default` points to `default_len` readable bytes.
#[allow(clippy::too_many_arguments)] // the C signature's parts, passed on
unsafe fn text_value(
    client: *const FlagstreamClient,
    flag: *const FlagstreamFlag,
    key: *const u8,
    key_len: usize,
    context: *const FlagstreamContext,
    json: bool,
    default: (*const u8, usize),
    value: *mut FlagstreamString,
    detail: *mut FlagstreamDetail,
) -> FlagstreamStatus {
    guard(|| {
        // SAFETY: the caller's contract, above.
        unsafe { clear_detail(detail) };
        if value.is_null() {
            return Err(invalid("value: a null out pointer"));
        }
        let name = if json { "default_json" } else { "default_value" };
        // SAFETY: the caller's contract, above.
        let ((src, target, ctx), default) =
            unsafe { (inputs(client, flag, key, key_len, context)?, text(default.0, default.1, name)?) };
        let want = !detail.is_null();
        let (v, d) = if json {
            let default: Json =
                serde_json::from_str(default).map_err(|e| invalid(format!("default_json: {e}")))?;
            evaluate!(src, target, &ctx.context, Cow::Owned(default), None, |d| {
                (d.value.to_string(), want.then(|| detail_of(&d)))
            })
        } else {
            evaluate!(src, target, &ctx.context, default, None, |d| {
                (d.value.to_owned(), want.then(|| detail_of(&d)))
            })
        };
        // SAFETY: the caller's contract, above.
        unsafe {
            if let Some(d) = d {
                put_detail(d, detail);
            }
            put(value, owned_string(v), "value")
        }
    })
}

/// Evaluates a bool flag: `*value` is its value or `default_value`;
/// `detail` (may be null) gets the rest of the result (free its strings
/// with [`flagstream_detail_free`]).
///
/// # Safety
/// `client` and `context` are live handles; `key` points to `key_len`
/// readable bytes; `value` is valid for a write; `detail` is null or valid
/// for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_eval_bool(
    client: *const FlagstreamClient,
    key: *const u8,
    key_len: usize,
    context: *const FlagstreamContext,
    default_value: bool,
    value: *mut bool,
    detail: *mut FlagstreamDetail,
) -> FlagstreamStatus {
    // SAFETY: the caller's contract, above.
    unsafe { scalar(client, std::ptr::null(), key, key_len, context, default_value, value, detail) }
}

/// Evaluates an integer flag (as [`flagstream_eval_bool`]).
///
/// # Safety
/// As [`flagstream_eval_bool`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_eval_int(
    client: *const FlagstreamClient,
    key: *const u8,
    key_len: usize,
    context: *const FlagstreamContext,
    default_value: i64,
    value: *mut i64,
    detail: *mut FlagstreamDetail,
) -> FlagstreamStatus {
    // SAFETY: the caller's contract, above.
    unsafe { scalar(client, std::ptr::null(), key, key_len, context, default_value, value, detail) }
}

/// Evaluates a number flag (as [`flagstream_eval_bool`]).
///
/// # Safety
/// As [`flagstream_eval_bool`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_eval_float(
    client: *const FlagstreamClient,
    key: *const u8,
    key_len: usize,
    context: *const FlagstreamContext,
    default_value: f64,
    value: *mut f64,
    detail: *mut FlagstreamDetail,
) -> FlagstreamStatus {
    // SAFETY: the caller's contract, above.
    unsafe { scalar(client, std::ptr::null(), key, key_len, context, default_value, value, detail) }
}

/// Evaluates a string flag: `*value` is its value or `default_value`, a
/// string the library owns (free it with [`flagstream_string_free`]);
/// `detail` (may be null) gets the rest of the result.
///
/// # Safety
/// As [`flagstream_eval_bool`]; `default_value` points to `default_len`
/// readable bytes.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // a C signature: pointer and length apart
pub unsafe extern "C" fn flagstream_eval_string(
    client: *const FlagstreamClient,
    key: *const u8,
    key_len: usize,
    context: *const FlagstreamContext,
    default_value: *const u8,
    default_len: usize,
    value: *mut FlagstreamString,
    detail: *mut FlagstreamDetail,
) -> FlagstreamStatus {
    let default = (default_value, default_len);
    // SAFETY: the caller's contract, above.
    unsafe { text_value(client, std::ptr::null(), key, key_len, context, false, default, value, detail) }
}

/// Evaluates any flag as JSON: `*value` is its value as JSON text (on
/// error, `default_json` parsed and written out again), a string the
/// library owns.
///
/// # Safety
/// As [`flagstream_eval_string`]; `default_json` is JSON text.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // a C signature: pointer and length apart
pub unsafe extern "C" fn flagstream_eval_json(
    client: *const FlagstreamClient,
    key: *const u8,
    key_len: usize,
    context: *const FlagstreamContext,
    default_json: *const u8,
    default_len: usize,
    value: *mut FlagstreamString,
    detail: *mut FlagstreamDetail,
) -> FlagstreamStatus {
    let default = (default_json, default_len);
    // SAFETY: the caller's contract, above.
    unsafe { text_value(client, std::ptr::null(), key, key_len, context, true, default, value, detail) }
}

/// Evaluates a bool flag through its handle: pointers and integers only,
/// no key lookup (as [`flagstream_eval_bool`] otherwise).
///
/// # Safety
/// `client`, `flag` and `context` are live handles; `value` is valid for a
/// write; `detail` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_eval_bool_flag(
    client: *const FlagstreamClient,
    flag: *const FlagstreamFlag,
    context: *const FlagstreamContext,
    default_value: bool,
    value: *mut bool,
    detail: *mut FlagstreamDetail,
) -> FlagstreamStatus {
    guard(|| {
        // SAFETY: the caller's contract, above.
        unsafe { clear_detail(detail) };
        // SAFETY: the caller's contract, above.
        let (c, f) = unsafe { (handle(client, "client")?, handle(flag, "flag")?) };
        // The value alone, from the client's own handle path: a flag whose
        // answer does not depend on the context (off, a fixed fallthrough)
        // is served without loading the snapshot.
        if detail.is_null()
            && !value.is_null()
            && let Some(direct) = c.engine.fast()
        {
            // SAFETY: the caller's contract, above.
            let ctx = unsafe { handle(context, "context") }?;
            let v = direct.handle_bool(&f.handle, &ctx.context, default_value);
            // SAFETY: the caller's contract, above.
            return unsafe { put(value, v, "value") };
        }
        // SAFETY: the caller's contract, above.
        unsafe { scalar_inner(client, flag, std::ptr::null(), 0, context, default_value, value, detail) }
    })
}

/// Evaluates an integer flag through its handle.
///
/// # Safety
/// As [`flagstream_eval_bool_flag`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_eval_int_flag(
    client: *const FlagstreamClient,
    flag: *const FlagstreamFlag,
    context: *const FlagstreamContext,
    default_value: i64,
    value: *mut i64,
    detail: *mut FlagstreamDetail,
) -> FlagstreamStatus {
    if flag.is_null() {
        // SAFETY: the caller's contract, above.
        return unsafe { no_flag(detail) };
    }
    // SAFETY: the caller's contract, above.
    unsafe { scalar(client, flag, std::ptr::null(), 0, context, default_value, value, detail) }
}

/// Evaluates a number flag through its handle.
///
/// # Safety
/// As [`flagstream_eval_bool_flag`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_eval_float_flag(
    client: *const FlagstreamClient,
    flag: *const FlagstreamFlag,
    context: *const FlagstreamContext,
    default_value: f64,
    value: *mut f64,
    detail: *mut FlagstreamDetail,
) -> FlagstreamStatus {
    if flag.is_null() {
        // SAFETY: the caller's contract, above.
        return unsafe { no_flag(detail) };
    }
    // SAFETY: the caller's contract, above.
    unsafe { scalar(client, flag, std::ptr::null(), 0, context, default_value, value, detail) }
}

/// Evaluates a string flag through its handle (as
/// [`flagstream_eval_string`]).
///
/// # Safety
/// As [`flagstream_eval_bool_flag`]; `default_value` points to
/// `default_len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_eval_string_flag(
    client: *const FlagstreamClient,
    flag: *const FlagstreamFlag,
    context: *const FlagstreamContext,
    default_value: *const u8,
    default_len: usize,
    value: *mut FlagstreamString,
    detail: *mut FlagstreamDetail,
) -> FlagstreamStatus {
    if flag.is_null() {
        // SAFETY: the caller's contract, above.
        return unsafe { no_flag(detail) };
    }
    let default = (default_value, default_len);
    // SAFETY: the caller's contract, above.
    unsafe { text_value(client, flag, std::ptr::null(), 0, context, false, default, value, detail) }
}

/// Evaluates any flag as JSON through its handle (as
/// [`flagstream_eval_json`]).
///
/// # Safety
/// As [`flagstream_eval_bool_flag`]; `default_json` points to
/// `default_len` readable bytes of JSON text.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_eval_json_flag(
    client: *const FlagstreamClient,
    flag: *const FlagstreamFlag,
    context: *const FlagstreamContext,
    default_json: *const u8,
    default_len: usize,
    value: *mut FlagstreamString,
    detail: *mut FlagstreamDetail,
) -> FlagstreamStatus {
    if flag.is_null() {
        // SAFETY: the caller's contract, above.
        return unsafe { no_flag(detail) };
    }
    let default = (default_json, default_len);
    // SAFETY: the caller's contract, above.
    unsafe { text_value(client, flag, std::ptr::null(), 0, context, true, default, value, detail) }
}

/// Evaluates a flag of type `value_type` (`FLAGSTREAM_TYPE_*`) as of
/// `at_ms` (Unix milliseconds): schedules and ramps at that time, from
/// the data served now (for tests and previews; not counted in the
/// stats or the usage summary). The default and the value are JSON text
/// (a string flag's value is a JSON string); `*value_json` is a string the
/// library owns.
///
/// # Safety
/// As [`flagstream_eval_json`].
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // a C signature: pointer and length apart
pub unsafe extern "C" fn flagstream_eval_at(
    client: *const FlagstreamClient,
    key: *const u8,
    key_len: usize,
    context: *const FlagstreamContext,
    value_type: u32,
    default_json: *const u8,
    default_len: usize,
    at_ms: i64,
    value_json: *mut FlagstreamString,
    detail: *mut FlagstreamDetail,
) -> FlagstreamStatus {
    guard(|| {
        // SAFETY: the caller's contract, above.
        unsafe { clear_detail(detail) };
        if value_json.is_null() {
            return Err(invalid("value_json: a null out pointer"));
        }
        // SAFETY: the caller's contract, above.
        let ((src, target, ctx), default) = unsafe {
            (
                inputs(client, std::ptr::null(), key, key_len, context)?,
                text(default_json, default_len, "default_json")?,
            )
        };
        let default: Json =
            serde_json::from_str(default).map_err(|e| invalid(format!("default_json: {e}")))?;
        let ctx = &ctx.context;
        let want = !detail.is_null();
        let wrong =
            |what: &str| invalid(format!("default_json: {default} is not {what} (value_type {value_type})"));
        let at = Some(at_ms);
        let (v, d): (Json, _) = match value_type {
            FLAGSTREAM_TYPE_BOOL => {
                let dv = default.as_bool().ok_or_else(|| wrong("a bool"))?;
                evaluate!(src, target, ctx, dv, at, |d| (Json::from(d.value), want.then(|| detail_of(&d))))
            }
            FLAGSTREAM_TYPE_INT => {
                let dv = default.as_i64().ok_or_else(|| wrong("an integer"))?;
                evaluate!(src, target, ctx, dv, at, |d| (Json::from(d.value), want.then(|| detail_of(&d))))
            }
            FLAGSTREAM_TYPE_FLOAT => {
                let dv = default.as_f64().ok_or_else(|| wrong("a number"))?;
                evaluate!(src, target, ctx, dv, at, |d| (Json::from(d.value), want.then(|| detail_of(&d))))
            }
            FLAGSTREAM_TYPE_STRING => {
                let dv = default.as_str().ok_or_else(|| wrong("a string"))?;
                evaluate!(src, target, ctx, dv, at, |d| (Json::from(d.value), want.then(|| detail_of(&d))))
            }
            FLAGSTREAM_TYPE_JSON => {
                let dv = Cow::Borrowed(&default);
                evaluate!(src, target, ctx, dv, at, |d| {
                    let detail = want.then(|| detail_of(&d));
                    (d.value.into_owned(), detail)
                })
            }
            other => return Err(invalid(format!("value_type: {other} is not a FLAGSTREAM_TYPE_* (0 to 4)"))),
        };
        // SAFETY: the caller's contract, above.
        unsafe {
            if let Some(d) = d {
                put_detail(d, detail);
            }
            put(value_json, owned_string(v.to_string()), "value_json")
        }
    })
}
