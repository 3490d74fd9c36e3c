//! Evaluation results as JS objects: `{value, variation, reason, ruleIndex,
//! ruleId, prerequisiteKey, errorKind, scheduleStep, inRollout,
//! flagVersion, revision, stale}`; a field that does not apply is absent.

use flagstream::{Detail, ErrorKind, EvaluationDetail};
use napi::Result;
use napi::bindgen_prelude::{Env, Object, ToNapiValue};

/// Everything of a result but its value.
pub(crate) struct Fields {
    variation: Option<u32>,
    reason: &'static str,
    rule_index: Option<u32>,
    rule_id: Option<String>,
    prerequisite_key: Option<String>,
    error: Option<ErrorKind>,
    schedule_step: Option<u32>,
    in_rollout: bool,
    flag_version: u64,
    revision: u64,
    stale: bool,
}

/// The fields of a client's owned result.
pub(crate) fn owned<T>(d: EvaluationDetail<T>) -> (T, Fields) {
    let fields = Fields {
        variation: d.variation,
        reason: d.reason,
        rule_index: d.rule_index,
        rule_id: d.rule_id.map(|n| n.as_str().to_owned()).filter(|id| !id.is_empty()),
        prerequisite_key: d.prerequisite_key.map(|n| n.as_str().to_owned()),
        error: d.error,
        schedule_step: d.schedule_step,
        in_rollout: d.in_rollout,
        flag_version: d.flag_version,
        revision: d.revision,
        stale: d.stale,
    };
    (d.value, fields)
}

/// The fields of a borrowed result (from a snapshot).
pub(crate) fn borrowed<T>(d: Detail<'_, T>) -> (T, Fields) {
    let p = d.reason.parts();
    let fields = Fields {
        variation: d.variation,
        reason: d.reason.kind_name(),
        rule_index: p.rule_index,
        rule_id: p.rule_id.map(str::to_owned),
        prerequisite_key: p.prerequisite_key.map(str::to_owned),
        error: p.error,
        schedule_step: p.schedule_step,
        in_rollout: p.in_rollout,
        flag_version: d.flag_version,
        revision: d.revision,
        stale: d.stale,
    };
    (d.value, fields)
}

/// The result before any data (or after `close()`): the default, reason
/// `ERROR`, `NOT_READY`.
pub(crate) fn not_ready<T>(value: T) -> (T, Fields) {
    let fields = Fields {
        variation: None,
        reason: "ERROR",
        rule_index: None,
        rule_id: None,
        prerequisite_key: None,
        error: Some(ErrorKind::NotReady),
        schedule_step: None,
        in_rollout: false,
        flag_version: 0,
        revision: 0,
        stale: false,
    };
    (value, fields)
}

/// The JS object of a result.
pub(crate) fn to_object<'e, V: ToNapiValue>(env: &'e Env, value: V, f: Fields) -> Result<Object<'e>> {
    let mut o = Object::new(env)?;
    o.set("value", value)?;
    if let Some(v) = f.variation {
        o.set("variation", v)?;
    }
    o.set("reason", f.reason)?;
    if let Some(i) = f.rule_index {
        o.set("ruleIndex", i)?;
    }
    if let Some(id) = f.rule_id {
        o.set("ruleId", id)?;
    }
    if let Some(k) = f.prerequisite_key {
        o.set("prerequisiteKey", k)?;
    }
    if let Some(e) = f.error {
        o.set("errorKind", e.name())?;
    }
    if let Some(s) = f.schedule_step {
        o.set("scheduleStep", s)?;
    }
    o.set("inRollout", f.in_rollout)?;
    // Numbers: exact up to 2^53, far beyond any version or revision.
    o.set("flagVersion", f.flag_version as f64)?;
    o.set("revision", f.revision as f64)?;
    o.set("stale", f.stale)?;
    Ok(o)
}
