//! `flagstream.EvaluationDetail`: one evaluation's full result as Python
//! sees it (value, variation, reason, rule, error, versions, stale).

use flagstream::{Detail, ErrorKind, EvaluationDetail};
use pyo3::prelude::*;

/// One evaluation's full result.
#[pyclass(frozen, module = "flagstream._native", name = "EvaluationDetail")]
pub(crate) struct PyDetail {
    /// The value (the caller's default on error).
    #[pyo3(get)]
    pub(crate) value: Py<PyAny>,
    /// The served variation's index; None when the default was returned.
    #[pyo3(get)]
    pub(crate) variation: Option<u32>,
    /// OFF, TARGET_MATCH, RULE_MATCH, FALLTHROUGH, PREREQUISITE_FAILED or ERROR.
    #[pyo3(get)]
    pub(crate) reason: &'static str,
    /// For RULE_MATCH: the rule's index.
    #[pyo3(get)]
    pub(crate) rule_index: Option<u32>,
    /// For RULE_MATCH: the rule's id, when it has one.
    #[pyo3(get)]
    pub(crate) rule_id: Option<String>,
    /// For PREREQUISITE_FAILED: the prerequisite that failed.
    #[pyo3(get)]
    pub(crate) prerequisite_key: Option<String>,
    /// For ERROR: FLAG_NOT_FOUND, WRONG_TYPE, MALFORMED_FLAG or NOT_READY.
    #[pyo3(get)]
    pub(crate) error_kind: Option<&'static str>,
    /// For a schedule: its current step, 1-based (0 before the first).
    #[pyo3(get)]
    pub(crate) schedule_step: Option<u32>,
    /// Whether a percentage rollout or a schedule chose the variation.
    #[pyo3(get)]
    pub(crate) in_rollout: bool,
    /// The flag's version (0 when not found).
    #[pyo3(get)]
    pub(crate) flag_version: u64,
    /// The snapshot's revision.
    #[pyo3(get)]
    pub(crate) revision: u64,
    /// Whether the data was stale.
    #[pyo3(get)]
    pub(crate) stale: bool,
}

#[pymethods]
impl PyDetail {
    fn __repr__(&self, py: Python<'_>) -> String {
        // Python's own spelling: None, True/False, 'quoted' strings.
        fn num(v: Option<u32>) -> String {
            v.map_or_else(|| "None".to_owned(), |n| n.to_string())
        }
        fn text(v: Option<&str>) -> String {
            v.map_or_else(|| "None".to_owned(), |s| format!("{s:?}").replace('"', "'"))
        }
        fn flag(b: bool) -> &'static str {
            if b { "True" } else { "False" }
        }
        let value = self.value.bind(py).repr().map_or_else(|_| "?".to_owned(), |r| r.to_string());
        format!(
            "EvaluationDetail(value={value}, variation={}, reason='{}', rule_index={}, rule_id={}, \
             prerequisite_key={}, error_kind={}, schedule_step={}, in_rollout={}, flag_version={}, \
             revision={}, stale={})",
            num(self.variation),
            self.reason,
            num(self.rule_index),
            text(self.rule_id.as_deref()),
            text(self.prerequisite_key.as_deref()),
            text(self.error_kind),
            num(self.schedule_step),
            flag(self.in_rollout),
            self.flag_version,
            self.revision,
            flag(self.stale)
        )
    }
}

impl PyDetail {
    pub(crate) fn from_owned<T>(d: EvaluationDetail<T>, value: Py<PyAny>) -> PyDetail {
        PyDetail {
            value,
            variation: d.variation,
            reason: d.reason,
            rule_index: d.rule_index,
            rule_id: d.rule_id.map(|n| n.to_string()).filter(|s| !s.is_empty()),
            prerequisite_key: d.prerequisite_key.map(|n| n.to_string()),
            error_kind: d.error.map(ErrorKind::name),
            schedule_step: d.schedule_step,
            in_rollout: d.in_rollout,
            flag_version: d.flag_version,
            revision: d.revision,
            stale: d.stale,
        }
    }

    pub(crate) fn from_detail<T>(d: &Detail<'_, T>, value: Py<PyAny>) -> PyDetail {
        let p = d.reason.parts();
        PyDetail {
            value,
            variation: d.variation,
            reason: d.reason.kind_name(),
            rule_index: p.rule_index,
            rule_id: p.rule_id.map(str::to_owned),
            prerequisite_key: p.prerequisite_key.map(str::to_owned),
            error_kind: p.error.map(ErrorKind::name),
            schedule_step: p.schedule_step,
            in_rollout: p.in_rollout,
            flag_version: d.flag_version,
            revision: d.revision,
            stale: d.stale,
        }
    }
}
