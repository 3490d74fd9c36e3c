//! Typed evaluation with its detail, and the strings the library owns.

use flagstream::EvaluationDetail;

use crate::*;

/// A string the library owns: free it with [`flagstream_string_free`].
#[repr(C)]
pub struct FlagstreamString {
    /// UTF-8 bytes, not NUL-terminated (null when `len` is 0).
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

/// One evaluation's result besides its value (docs/EVALUATION.md).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlagstreamDetail {
    /// The served variation's index, or -1 when the default was returned.
    pub variation: i64,
    /// 0 OFF, 1 TARGET_MATCH, 2 RULE_MATCH, 3 FALLTHROUGH,
    /// 4 PREREQUISITE_FAILED, 5 ERROR.
    pub reason: u32,
    /// For ERROR: 1 FLAG_NOT_FOUND, 2 WRONG_TYPE, 3 MALFORMED_FLAG,
    /// 4 NOT_READY; otherwise 0.
    pub error_kind: u32,
    /// For RULE_MATCH: the rule's index; otherwise -1.
    pub rule_index: i64,
    /// The flag's version (0 when not found).
    pub flag_version: u64,
    /// The revision of the data evaluated.
    pub revision: u64,
    /// Whether a percentage rollout or a schedule chose the variation (for
    /// RULE_MATCH only a schedule: a rule's rollout is not reported).
    pub in_rollout: bool,
    /// Whether that data was older than the staleness threshold.
    pub stale: bool,
}

pub(crate) fn reason_code(reason: &str) -> u32 {
    match reason {
        "OFF" => FLAGSTREAM_REASON_OFF,
        "TARGET_MATCH" => FLAGSTREAM_REASON_TARGET_MATCH,
        "RULE_MATCH" => FLAGSTREAM_REASON_RULE_MATCH,
        "FALLTHROUGH" => FLAGSTREAM_REASON_FALLTHROUGH,
        "PREREQUISITE_FAILED" => FLAGSTREAM_REASON_PREREQUISITE_FAILED,
        _ => FLAGSTREAM_REASON_ERROR,
    }
}

pub(crate) fn detail_of<T>(d: &EvaluationDetail<T>) -> FlagstreamDetail {
    FlagstreamDetail {
        variation: d.variation.map_or(-1, i64::from),
        reason: reason_code(d.reason),
        error_kind: match d.error {
            None => FLAGSTREAM_ERROR_NONE,
            Some(flagstream::ErrorKind::FlagNotFound) => FLAGSTREAM_ERROR_FLAG_NOT_FOUND,
            Some(flagstream::ErrorKind::WrongType) => FLAGSTREAM_ERROR_WRONG_TYPE,
            Some(flagstream::ErrorKind::MalformedFlag) => FLAGSTREAM_ERROR_MALFORMED_FLAG,
            Some(flagstream::ErrorKind::NotReady) => FLAGSTREAM_ERROR_NOT_READY,
        },
        rule_index: d.rule_index.map_or(-1, i64::from),
        in_rollout: d.in_rollout,
        flag_version: d.flag_version,
        revision: d.revision,
        stale: d.stale,
    }
}

/// Evaluates a bool flag: `*value` is its value or `default_value`;
/// `detail` (may be null) gets the rest of the result.
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
    guard(|| {
        // SAFETY: the caller's contract, above.
        let (c, key, ctx) = unsafe { inputs(client, key, key_len, context) }?;
        let d = c.client.bool_detail(key, &ctx.context, default_value);
        // SAFETY: the caller's contract, above.
        unsafe { finish(d, value, detail) }
    })
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
    guard(|| {
        // SAFETY: the caller's contract, above.
        let (c, key, ctx) = unsafe { inputs(client, key, key_len, context) }?;
        let d = c.client.int_detail(key, &ctx.context, default_value);
        // SAFETY: the caller's contract, above.
        unsafe { finish(d, value, detail) }
    })
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
    guard(|| {
        // SAFETY: the caller's contract, above.
        let (c, key, ctx) = unsafe { inputs(client, key, key_len, context) }?;
        let d = c.client.float_detail(key, &ctx.context, default_value);
        // SAFETY: the caller's contract, above.
        unsafe { finish(d, value, detail) }
    })
}

/// Writes a result's value and (when asked for) its detail.
///
/// # Safety
/// `value` is valid for a write; `detail` is null or valid for a write.
pub(crate) unsafe fn finish<T>(
    d: EvaluationDetail<T>,
    value: *mut T,
    detail: *mut FlagstreamDetail,
) -> Result<(), Failure> {
    // SAFETY: the caller's contract, above.
    unsafe { write_detail(&d, detail) };
    // SAFETY: the caller's contract, above.
    unsafe { put(value, d.value, "value") }
}

/// Writes a result's detail when asked for (`detail` not null).
///
/// # Safety
/// `detail` is null or valid for a write.
unsafe fn write_detail<T>(d: &EvaluationDetail<T>, detail: *mut FlagstreamDetail) {
    if !detail.is_null() {
        // SAFETY: non-null and writable (the contract).
        unsafe { detail.write(detail_of(d)) };
    }
}

/// An evaluation's client (open), key and context.
///
/// # Safety
/// `client` and `context` are null or live handles; `key` points to
/// `key_len` readable bytes.
unsafe fn inputs<'a>(
    client: *const FlagstreamClient,
    key: *const u8,
    key_len: usize,
    context: *const FlagstreamContext,
) -> Result<(&'a FlagstreamClient, &'a str, &'a FlagstreamContext), Failure> {
    // SAFETY: the caller's contract, above.
    unsafe { Ok((open(client)?, text(key, key_len, "key")?, handle(context, "context")?)) }
}

/// A string the library owns, made from `text`.
pub(crate) fn owned_string(text: String) -> FlagstreamString {
    let bytes = text.into_bytes().into_boxed_slice();
    let len = bytes.len();
    let ptr = if len == 0 { std::ptr::null_mut() } else { Box::into_raw(bytes).cast::<u8>() };
    FlagstreamString { ptr, len }
}

/// Evaluates a JSON flag: `*value` is its value as JSON text (on error,
/// `default_json` parsed and written out again), a string the library
/// owns.
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
    guard(|| {
        // SAFETY: the caller's contract, above.
        let ((c, key, ctx), default) = unsafe {
            (inputs(client, key, key_len, context)?, text(default_json, default_len, "default_json")?)
        };
        let default: serde_json::Value =
            serde_json::from_str(default).map_err(|e| invalid(format!("default_json: {e}")))?;
        if value.is_null() {
            return Err(invalid("value: a null out pointer"));
        }
        let d = c.client.json_detail(key, &ctx.context, default);
        // SAFETY: the caller's contract, above.
        unsafe { write_detail(&d, detail) };
        // SAFETY: the caller's contract, above.
        unsafe { put(value, owned_string(d.value.to_string()), "value") }
    })
}

/// Evaluates a bool flag through its handle: integers and pointers only.
///
/// # Safety
/// `client`, `flag` and `context` are live handles; `value` is valid for a
/// write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_eval_bool_flag(
    client: *const FlagstreamClient,
    flag: *const FlagstreamFlag,
    context: *const FlagstreamContext,
    default_value: bool,
    value: *mut bool,
) -> FlagstreamStatus {
    guard(|| {
        // SAFETY: the caller's contract, above.
        let (c, f, ctx) = unsafe { (open(client)?, handle(flag, "flag")?, handle(context, "context")?) };
        let v = c.client.handle_bool(&f.handle, &ctx.context, default_value);
        // SAFETY: the caller's contract, above.
        unsafe { put(value, v, "value") }
    })
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
    guard(|| {
        // SAFETY: the caller's contract, above.
        let ((c, key, ctx), default) = unsafe {
            (inputs(client, key, key_len, context)?, text(default_value, default_len, "default_value")?)
        };
        if value.is_null() {
            return Err(invalid("value: a null out pointer"));
        }
        let d = c.client.string_detail(key, &ctx.context, default);
        // SAFETY: the caller's contract, above.
        unsafe { write_detail(&d, detail) };
        // SAFETY: the caller's contract, above.
        unsafe { put(value, owned_string(d.value), "value") }
    })
}

/// Frees a string the library returned. A null `ptr` is ignored.
///
/// # Safety
/// `s` is a string this library returned, not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_string_free(s: FlagstreamString) {
    if !s.ptr.is_null() {
        // SAFETY: made by `Box::into_raw` of a boxed slice of `len` bytes
        // in `owned_string`, freed once (the caller's contract).
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(s.ptr, s.len)) });
    }
}
