//! What an evaluation writes besides its value: the detail
//! ([`FlagstreamDetail`], flattened from the core's `Reason::parts`) and
//! the strings the library owns ([`FlagstreamString`]), with their free
//! functions.

use flagstream::{Detail, ErrorKind, Reason};

use crate::*;

/// A string the library owns: free it with [`flagstream_string_free`].
#[repr(C)]
#[derive(Debug)]
pub struct FlagstreamString {
    /// UTF-8 bytes, not NUL-terminated (null when `len` is 0).
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

impl FlagstreamString {
    /// The empty string (nothing to free).
    pub(crate) const EMPTY: FlagstreamString = FlagstreamString { ptr: std::ptr::null_mut(), len: 0 };
}

/// One evaluation's result besides its value (docs/EVALUATION.md). Its two
/// strings are the library's: free them with [`flagstream_detail_free`]
/// (they are allocated only when present).
#[repr(C)]
#[derive(Debug)]
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
    /// Whether that data was older than the staleness threshold (or, in a
    /// forked child, its parent's data until its own sync has some).
    pub stale: bool,
    /// A schedule's current step, 1-based (0 before the first step); -1
    /// when no schedule served.
    pub schedule_step: i64,
    /// For RULE_MATCH: the rule's id (empty when the rule has none).
    pub rule_id: FlagstreamString,
    /// For PREREQUISITE_FAILED: the first prerequisite that failed.
    pub prerequisite_key: FlagstreamString,
}

impl FlagstreamDetail {
    /// What a failed call leaves in a detail: nothing to free.
    pub(crate) const EMPTY: FlagstreamDetail = FlagstreamDetail {
        variation: -1,
        reason: FLAGSTREAM_REASON_ERROR,
        error_kind: FLAGSTREAM_ERROR_NONE,
        rule_index: -1,
        flag_version: 0,
        revision: 0,
        in_rollout: false,
        stale: false,
        schedule_step: -1,
        rule_id: FlagstreamString::EMPTY,
        prerequisite_key: FlagstreamString::EMPTY,
    };
}

/// Empties a detail the caller passed (not null) before anything can
/// fail, so a caller may free it after any status.
///
/// # Safety
/// `detail` is null or valid for a write.
pub(crate) unsafe fn clear_detail(detail: *mut FlagstreamDetail) {
    if !detail.is_null() {
        // SAFETY: non-null and writable (the contract).
        unsafe { detail.write(FlagstreamDetail::EMPTY) };
    }
}

/// The C form of `d`'s detail.
pub(crate) fn detail_of<T>(d: &Detail<'_, T>) -> FlagstreamDetail {
    let p = d.reason.parts();
    let name = |s: Option<&str>| s.map_or(FlagstreamString::EMPTY, |s| owned_string(s.to_owned()));
    FlagstreamDetail {
        variation: d.variation.map_or(-1, i64::from),
        reason: match d.reason {
            Reason::Off => FLAGSTREAM_REASON_OFF,
            Reason::TargetMatch => FLAGSTREAM_REASON_TARGET_MATCH,
            Reason::RuleMatch { .. } => FLAGSTREAM_REASON_RULE_MATCH,
            Reason::Fallthrough { .. } => FLAGSTREAM_REASON_FALLTHROUGH,
            Reason::PrerequisiteFailed { .. } => FLAGSTREAM_REASON_PREREQUISITE_FAILED,
            Reason::Error(_) => FLAGSTREAM_REASON_ERROR,
        },
        error_kind: match p.error {
            None => FLAGSTREAM_ERROR_NONE,
            Some(ErrorKind::FlagNotFound) => FLAGSTREAM_ERROR_FLAG_NOT_FOUND,
            Some(ErrorKind::WrongType) => FLAGSTREAM_ERROR_WRONG_TYPE,
            Some(ErrorKind::MalformedFlag) => FLAGSTREAM_ERROR_MALFORMED_FLAG,
            Some(ErrorKind::NotReady) => FLAGSTREAM_ERROR_NOT_READY,
        },
        rule_index: p.rule_index.map_or(-1, i64::from),
        flag_version: d.flag_version,
        revision: d.revision,
        in_rollout: p.in_rollout,
        stale: d.stale,
        schedule_step: p.schedule_step.map_or(-1, i64::from),
        rule_id: name(p.rule_id),
        prerequisite_key: name(p.prerequisite_key),
    }
}

/// Writes `detail` when asked for (`out` not null); frees its strings
/// otherwise.
///
/// # Safety
/// `out` is null or valid for a write.
pub(crate) unsafe fn put_detail(detail: FlagstreamDetail, out: *mut FlagstreamDetail) {
    if out.is_null() {
        let mut d = detail;
        // SAFETY: `d` is this library's, its strings not freed before.
        unsafe { flagstream_detail_free(&mut d) };
    } else {
        // SAFETY: non-null and writable (the contract).
        unsafe { out.write(detail) };
    }
}

/// A string the library owns, made from `text`.
pub(crate) fn owned_string(text: String) -> FlagstreamString {
    let bytes = text.into_bytes().into_boxed_slice();
    let len = bytes.len();
    let ptr = if len == 0 { std::ptr::null_mut() } else { Box::into_raw(bytes).cast::<u8>() };
    FlagstreamString { ptr, len }
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

/// Frees the strings of a detail an evaluation wrote (`rule_id`,
/// `prerequisite_key`) and empties them, so a second call is harmless.
/// Null is ignored.
///
/// # Safety
/// `detail` is null or a detail this library wrote (or emptied).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_detail_free(detail: *mut FlagstreamDetail) {
    // SAFETY: null or a valid detail (the caller's contract).
    let Some(d) = (unsafe { detail.as_mut() }) else { return };
    for s in [&mut d.rule_id, &mut d.prerequisite_key] {
        let taken = std::mem::replace(s, FlagstreamString::EMPTY);
        // SAFETY: this library's string, emptied above so never freed twice.
        unsafe { flagstream_string_free(taken) };
    }
}
