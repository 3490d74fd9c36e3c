//! The data-driven evaluation suite's file format and runner.
//!
//! Each YAML file under `tests/data/eval/` holds a flag set and cases: a flag
//! key, a requested type, the caller's default, a context and the expected
//! value, variation and reason. The format is documented in
//! `docs/EVALUATION.md`'s companion, `tests/data/eval/README.md`.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use flagstream::{Context, Detail, FlagSet, FlagType, FromValue, Limits, Reason, Snapshot};
use serde::Deserialize;
use serde_json::Value as Json;

/// One case file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseFile {
    /// What the file covers.
    pub description: String,
    /// Whether the flags are meant to pass validation (default true).
    #[serde(default = "yes")]
    pub validate: bool,
    /// The flags.
    #[serde(default)]
    pub flags: Vec<flagstream::Flag>,
    /// The segments.
    #[serde(default)]
    pub segments: Vec<flagstream::Segment>,
    /// The cases.
    pub cases: Vec<Case>,
}

fn yes() -> bool {
    true
}

/// One evaluation and its expected result.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Unique name across all files.
    pub name: String,
    /// Flag key to evaluate.
    pub flag: String,
    /// Requested type.
    #[serde(rename = "type")]
    pub requested: FlagType,
    /// The caller's default.
    pub default: Json,
    /// Who for.
    pub context: Context<'static>,
    /// The evaluator's clock, for schedules: an RFC 3339 time or Unix
    /// milliseconds; absent: the system clock.
    #[serde(default)]
    pub now: Option<Json>,
    /// What should come back.
    pub expect: Expect,
}

/// An expected result.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The value.
    pub value: Json,
    /// The variation index; absent when the default is returned.
    #[serde(default)]
    pub variation: Option<u32>,
    /// The reason kind (`RULE_MATCH`, ...).
    pub reason: String,
    /// For RULE_MATCH.
    #[serde(default)]
    pub rule_index: Option<u32>,
    /// For RULE_MATCH with an id.
    #[serde(default)]
    pub rule_id: Option<String>,
    /// For PREREQUISITE_FAILED.
    #[serde(default)]
    pub prerequisite_key: Option<String>,
    /// For ERROR.
    #[serde(default)]
    pub error: Option<String>,
    /// For RULE_MATCH / FALLTHROUGH served by a schedule: its step.
    #[serde(default)]
    pub schedule_step: Option<u32>,
}

/// The directory holding the case files.
pub fn case_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/eval")
}

/// Loads every `*.yaml` file of the suite, sorted by name.
pub fn load_all() -> Vec<(String, CaseFile)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(case_dir())
        .expect("tests/data/eval exists")
        .map(|e| e.expect("readable dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("readable case file");
            let file: CaseFile =
                serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.file_name().unwrap_or_default().to_string_lossy().into_owned(), file)
        })
        .collect()
}

/// Builds the snapshot a file describes, validating it when the file says so.
pub fn snapshot(file: &CaseFile) -> Result<Snapshot, flagstream::ValidationErrors> {
    let set = FlagSet { flags: file.flags.clone(), segments: file.segments.clone() };
    if file.validate {
        Snapshot::compile(&set, &Limits::default())
    } else {
        Ok(Snapshot::compile_unvalidated(&set, &Limits::default()))
    }
}

fn observe<'s, T: FromValue<'s>>(d: Detail<'s, T>, to_json: impl Fn(T) -> Json) -> Expect {
    let (rule_index, rule_id, prerequisite_key, error, schedule_step) = match d.reason {
        Reason::RuleMatch { index, id, step } => {
            (Some(index), (!id.is_empty()).then(|| id.to_owned()), None, None, step)
        }
        Reason::PrerequisiteFailed { key } => (None, None, Some(key.to_owned()), None, None),
        Reason::Error(kind) => (None, None, None, Some(kind.name().to_owned()), None),
        Reason::Fallthrough { step, .. } => (None, None, None, None, step),
        _ => (None, None, None, None, None),
    };
    Expect {
        reason: d.reason.kind_name().to_owned(),
        value: to_json(d.value),
        variation: d.variation,
        rule_index,
        rule_id,
        prerequisite_key,
        error,
        schedule_step,
    }
}

/// A case's `now` in Unix milliseconds.
fn instant(v: &Json) -> Result<i64, String> {
    match v {
        Json::Number(n) => n.as_i64().ok_or_else(|| format!("now: {n} is not whole milliseconds")),
        Json::String(s) => chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| t.timestamp_millis())
            .map_err(|e| format!("now: {s:?}: {e}")),
        other => Err(format!("now: {other} is not a time")),
    }
}

/// Runs one case; `Err` describes the difference.
pub fn run(snap: &Snapshot, case: &Case) -> Result<(), String> {
    let (key, ctx, d) = (&case.flag, &case.context, &case.default);
    let bad_default = || format!("default {d} is not a {}", case.requested.name());
    let now = case.now.as_ref().map(instant).transpose()?;
    fn at<'s, T: FromValue<'s>>(
        snap: &'s Snapshot,
        key: &str,
        ctx: &Context<'_>,
        default: T,
        now: Option<i64>,
    ) -> Detail<'s, T> {
        match now {
            Some(t) => snap.detail_at(key, ctx, default, t),
            None => snap.detail(key, ctx, default),
        }
    }
    let got = match case.requested {
        FlagType::Bool => observe(at(snap, key, ctx, d.as_bool().ok_or_else(bad_default)?, now), Json::Bool),
        FlagType::String => observe(at(snap, key, ctx, d.as_str().ok_or_else(bad_default)?, now), Json::from),
        FlagType::Int => observe(at(snap, key, ctx, d.as_i64().ok_or_else(bad_default)?, now), Json::from),
        FlagType::Float => observe(at(snap, key, ctx, d.as_f64().ok_or_else(bad_default)?, now), Json::from),
        FlagType::Json => observe(at(snap, key, ctx, Cow::Borrowed(d), now), Cow::into_owned),
    };
    let mut want = case.expect.clone_normalised();
    if case.requested == FlagType::Float {
        // 1 and 1.0 are the same float.
        want.value = want.value.as_f64().map_or(want.value, Json::from);
    }
    if got == want { Ok(()) } else { Err(format!("expected {want:?}\n        got {got:?}")) }
}

impl Expect {
    fn clone_normalised(&self) -> Expect {
        Expect {
            value: self.value.clone(),
            variation: self.variation,
            reason: self.reason.clone(),
            rule_index: self.rule_index,
            rule_id: self.rule_id.clone().filter(|id| !id.is_empty()),
            prerequisite_key: self.prerequisite_key.clone(),
            error: self.error.clone(),
            schedule_step: self.schedule_step,
        }
    }
}
