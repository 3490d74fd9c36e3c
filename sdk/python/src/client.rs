//! `flagstream.Client`'s native half: the Rust client behind the GIL.
//!
//! Evaluations read the snapshot of the client that serves (one atomic load
//! of [`Live`], one compare of the fork count), convert the context and call
//! the Rust client's evaluation: no I/O, no lock, no await. Everything that
//! waits releases the GIL.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use flagstream::{
    Builder, Change, Context, Detail, ErrorKind, EvaluationDetail, FlagSet, FromValue, Limits, Reason,
    Snapshot, Source, Status,
};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString, PyTuple};
use tokio::sync::broadcast;

use crate::context::with_context;
use crate::convert::{from_json, to_json, utf8};
use crate::{FORKS, runtime};

/// Ids of the change feeds (one per Rust client started).
static FEEDS: AtomicU64 = AtomicU64::new(1);

/// Fallbacks to the caller's default counted by a client that has no Rust
/// client behind it (unvalidated test data, or closed).
#[derive(Debug, Default)]
struct Fallbacks {
    not_found: AtomicU64,
    not_ready: AtomicU64,
    wrong_type: AtomicU64,
    malformed: AtomicU64,
}

impl Fallbacks {
    fn count(&self, kind: ErrorKind) {
        let c = match kind {
            ErrorKind::FlagNotFound => &self.not_found,
            ErrorKind::NotReady => &self.not_ready,
            ErrorKind::WrongType => &self.wrong_type,
            ErrorKind::MalformedFlag => &self.malformed,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// What evaluations read.
#[derive(Debug, Clone)]
enum Serving {
    /// A Rust client (streaming, a flag file or validated test data).
    Client(flagstream::Client),
    /// A fixed snapshot: unvalidated test data, or the last data of a
    /// closed client (`None`: it never had any).
    Fixed { snap: Option<Arc<Snapshot>>, fallbacks: Arc<Fallbacks> },
}

/// The client state evaluations load, replaced whole (after a fork, when
/// the new sync has data, at close).
#[derive(Debug)]
struct Live {
    serving: Serving,
    /// In a forked child: the new sync, until it has data.
    pending: Option<flagstream::Client>,
    /// [`FORKS`] when this state was made.
    forks: u64,
    /// The process that made it.
    pid: u32,
    /// The change feed: the id of the Rust client whose changes listeners
    /// see (the pending one, or the serving one).
    feed: u64,
    closed: bool,
}

impl Live {
    /// The Rust client that syncs (status, stats, changes).
    fn syncing(&self) -> Option<&flagstream::Client> {
        match (&self.pending, &self.serving) {
            (Some(p), _) => Some(p),
            (None, Serving::Client(c)) => Some(c),
            (None, Serving::Fixed { .. }) => None,
        }
    }
}

/// One evaluation's full result.
#[pyclass(frozen, module = "flagstream._native", name = "EvaluationDetail")]
pub(crate) struct PyDetail {
    /// The value (the caller's default on error).
    #[pyo3(get)]
    value: Py<PyAny>,
    /// The served variation's index; None when the default was returned.
    #[pyo3(get)]
    variation: Option<u32>,
    /// OFF, TARGET_MATCH, RULE_MATCH, FALLTHROUGH, PREREQUISITE_FAILED or ERROR.
    #[pyo3(get)]
    reason: &'static str,
    /// For RULE_MATCH: the rule's index.
    #[pyo3(get)]
    rule_index: Option<u32>,
    /// For RULE_MATCH: the rule's id, when it has one.
    #[pyo3(get)]
    rule_id: Option<String>,
    /// For PREREQUISITE_FAILED: the prerequisite that failed.
    #[pyo3(get)]
    prerequisite_key: Option<String>,
    /// For ERROR: FLAG_NOT_FOUND, WRONG_TYPE, MALFORMED_FLAG or NOT_READY.
    #[pyo3(get)]
    error_kind: Option<&'static str>,
    /// For a schedule: its current step, 1-based (0 before the first).
    #[pyo3(get)]
    schedule_step: Option<u32>,
    /// Whether a percentage rollout or a schedule chose the variation.
    #[pyo3(get)]
    in_rollout: bool,
    /// The flag's version (0 when not found).
    #[pyo3(get)]
    flag_version: u64,
    /// The snapshot's revision.
    #[pyo3(get)]
    revision: u64,
    /// Whether the data was stale.
    #[pyo3(get)]
    stale: bool,
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
    fn from_owned<T>(d: EvaluationDetail<T>, value: Py<PyAny>) -> PyDetail {
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

    fn from_detail<T>(d: &Detail<'_, T>, value: Py<PyAny>) -> PyDetail {
        let (rule_index, rule_id, prerequisite_key, error_kind, in_rollout, schedule_step) = match d.reason {
            Reason::RuleMatch { index, id, step } => {
                (Some(index), (!id.is_empty()).then(|| id.to_owned()), None, None, step.is_some(), step)
            }
            Reason::PrerequisiteFailed { key } => (None, None, Some(key.to_owned()), None, false, None),
            Reason::Error(e) => (None, None, None, Some(e.name()), false, None),
            Reason::Fallthrough { rollout, step } => (None, None, None, None, rollout, step),
            Reason::Off | Reason::TargetMatch => (None, None, None, None, false, None),
        };
        PyDetail {
            value,
            variation: d.variation,
            reason: d.reason.kind_name(),
            rule_index,
            rule_id,
            prerequisite_key,
            error_kind,
            schedule_step,
            in_rollout,
            flag_version: d.flag_version,
            revision: d.revision,
            stale: d.stale,
        }
    }
}

/// How to start the sync again in a forked child.
#[derive(Debug)]
struct Restart {
    /// The settings, without the cache (the parent keeps it open).
    builder: Builder,
}

/// The native client. `flagstream.Client` subclasses it in Python.
#[pyclass(frozen, subclass, module = "flagstream._native", name = "NativeClient")]
pub(crate) struct NativeClient {
    live: Arc<ArcSwap<Live>>,
    restart: Option<Restart>,
    /// Serialises restarts after a fork.
    restart_lock: Mutex<()>,
    /// The change feed's receiver, with the feed id it belongs to. Taken
    /// out while a wait is in progress (no lock is held across a wait).
    changes: Mutex<Option<(u64, broadcast::Receiver<Change>)>>,
}

fn secs(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let s: f64 = v.extract().map_err(|_| PyTypeError::new_err(format!("{name}: seconds as a number")))?;
    Duration::try_from_secs_f64(s).map_err(|e| PyValueError::new_err(format!("{name}: {s} s: {e}")))
}

fn pem(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(utf8(s)?.as_bytes().to_vec());
    }
    v.extract::<Vec<u8>>().map_err(|_| PyTypeError::new_err(format!("{name}: PEM as str or bytes")))
}

/// Applies `Client(**options)` to the builder.
fn apply_options(mut b: Builder, options: Option<&Bound<'_, PyDict>>) -> PyResult<Builder> {
    let Some(options) = options else { return Ok(b) };
    for (name, v) in options.iter() {
        let name: String = name.extract()?;
        b = match name.as_str() {
            "connect_timeout" => b.connect_timeout(secs(&name, &v)?),
            "keepalive_interval" => b.keepalive_interval(secs(&name, &v)?),
            "keepalive_timeout" => b.keepalive_timeout(secs(&name, &v)?),
            "tcp_user_timeout" => b.tcp_user_timeout(secs(&name, &v)?),
            "first_message_timeout" => b.first_message_timeout(secs(&name, &v)?),
            "heartbeat_default" => b.heartbeat_default(secs(&name, &v)?),
            "backoff_base" => b.backoff_base(secs(&name, &v)?),
            "backoff_cap" => b.backoff_cap(secs(&name, &v)?),
            "healthy_after" => b.healthy_after(secs(&name, &v)?),
            "stall_jitter" => b.stall_jitter(secs(&name, &v)?),
            "stale_after" => b.stale_after(secs(&name, &v)?),
            "cache_write_interval" => b.cache_write_interval(secs(&name, &v)?),
            "watchdog_misses" => b.watchdog_misses(v.extract()?),
            "keep_endpoint_order" => {
                if v.extract::<bool>()? {
                    b.keep_endpoint_order()
                } else {
                    b
                }
            }
            "tls_ca_pem" => b.tls_ca_pem(pem(&name, &v)?),
            "tls_identity_pem" => {
                let (cert, key): (Bound<'_, PyAny>, Bound<'_, PyAny>) = v.extract()?;
                b.tls_identity_pem(pem("tls_identity_pem[0]", &cert)?, pem("tls_identity_pem[1]", &key)?)
            }
            other => return Err(PyTypeError::new_err(format!("Client() got an unknown option {other:?}"))),
        };
    }
    Ok(b)
}

fn build(b: Builder) -> PyResult<flagstream::Client> {
    let rt = runtime()?;
    let _in_runtime = rt.enter();
    b.build().map_err(|e| {
        let mut msg = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            msg.push_str(&format!(": {s}"));
            source = s.source();
        }
        PyValueError::new_err(msg)
    })
}

fn flag_set(v: &Bound<'_, PyAny>) -> PyResult<FlagSet> {
    let json = to_json(v)?;
    serde_json::from_value(json).map_err(|e| PyValueError::new_err(format!("test data: {e}")))
}

fn endpoints(v: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(utf8(s)?.split(',').map(|e| e.trim().to_owned()).filter(|e| !e.is_empty()).collect());
    }
    v.extract::<Vec<String>>().map_err(|_| PyTypeError::new_err("endpoints: a list of URLs (or one str)"))
}

fn unix_s(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn source_name(s: Source) -> &'static str {
    match s {
        Source::Stream => "stream",
        Source::Cache => "cache",
        Source::File => "file",
        Source::Test => "test",
    }
}

/// The not-ready result of a client without data.
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

/// `at` as Unix milliseconds: an int, or a `datetime` (its `timestamp()`).
fn at_ms(at: Option<&Bound<'_, PyAny>>) -> PyResult<Option<i64>> {
    let Some(at) = at else { return Ok(None) };
    if at.is_none() {
        return Ok(None);
    }
    if let Ok(ms) = at.extract::<i64>() {
        return Ok(Some(ms));
    }
    if at.hasattr("timestamp")? {
        let s: f64 = at.call_method0("timestamp")?.extract()?;
        return Ok(Some((s * 1000.0).round() as i64));
    }
    Err(PyTypeError::new_err("at: Unix milliseconds (int) or a datetime"))
}

impl NativeClient {
    fn from_serving(serving: Serving, restart: Option<Restart>) -> NativeClient {
        let live = Live {
            serving,
            pending: None,
            forks: FORKS.load(Ordering::SeqCst),
            pid: std::process::id(),
            feed: FEEDS.fetch_add(1, Ordering::Relaxed),
            closed: false,
        };
        NativeClient {
            live: Arc::new(ArcSwap::from_pointee(live)),
            restart,
            restart_lock: Mutex::new(()),
            changes: Mutex::new(None),
        }
    }

    /// The state to evaluate with; in a forked child, the sync is
    /// restarted first. The hot path: one atomic load and one compare.
    #[inline]
    fn live(&self) -> PyResult<arc_swap::Guard<Arc<Live>>> {
        let g = self.live.load();
        if g.forks == FORKS.load(Ordering::Relaxed) {
            return Ok(g);
        }
        drop(g);
        self.restart_after_fork_inner()?;
        Ok(self.live.load())
    }

    /// [`NativeClient::live`] with the PID check: a fork the Python hook
    /// did not see (a fork from C) counts here. Off the hot path.
    fn live_checked(&self) -> PyResult<arc_swap::Guard<Arc<Live>>> {
        if self.live.load().pid != std::process::id() {
            crate::count_fork();
        }
        self.live()
    }

    fn restart_after_fork_inner(&self) -> PyResult<()> {
        // Held with the GIL and never across a wait: no other thread can
        // hold it at a fork.
        let _one = self.restart_lock.lock().map_err(|_| PyRuntimeError::new_err("restart lock poisoned"))?;
        let forks = FORKS.load(Ordering::SeqCst);
        let cur = self.live.load_full();
        if cur.forks == forks {
            return Ok(());
        }
        // The parent's Rust clients stay alive for good in this process:
        // their tasks ran on threads that do not exist here, and their
        // last drop would write the parent's cache. The snapshot they hold
        // stays readable.
        std::mem::forget(cur.clone());
        let pending = match (&self.restart, cur.closed) {
            (Some(r), false) => Some(build(r.builder.clone())?),
            _ => None,
        };
        let feed = if pending.is_some() { FEEDS.fetch_add(1, Ordering::Relaxed) } else { cur.feed };
        let next = Live {
            serving: cur.serving.clone(),
            pending: pending.clone(),
            forks,
            pid: std::process::id(),
            feed,
            closed: cur.closed,
        };
        self.live.store(Arc::new(next));
        if let Some(p) = pending {
            // Serve the new sync's data as soon as it has any.
            let mut status = p.status_watch();
            drop(p);
            let live = self.live.clone();
            runtime()?.spawn(async move {
                if status.wait_for(Status::has_data).await.is_err() {
                    return; // closed before it had data
                }
                live.rcu(|cur| match &cur.pending {
                    Some(p) if cur.feed == feed => Arc::new(Live {
                        serving: Serving::Client(p.clone()),
                        pending: None,
                        forks: cur.forks,
                        pid: cur.pid,
                        feed: cur.feed,
                        closed: cur.closed,
                    }),
                    _ => cur.clone(),
                });
            });
        }
        Ok(())
    }

    /// The detail of a fixed snapshot, or of any client at another time
    /// (`at`): straight from the snapshot.
    fn snapshot_detail<'s, T: FromValue<'s>>(
        snap: Option<&'s Snapshot>,
        key: &str,
        ctx: &Context<'_>,
        default: T,
        at: Option<i64>,
    ) -> Detail<'s, T> {
        match (snap, at) {
            (None, _) => not_ready(default),
            (Some(s), Some(t)) => s.detail_at(key, ctx, default, t),
            (Some(s), None) => s.detail(key, ctx, default),
        }
    }
}

/// Runs `$body` with `$c` the Rust client, or returns the fixed snapshot's
/// result built by `$fixed` with `$snap` and `$fb` (fallbacks).
macro_rules! eval_value {
    ($self:ident, $key:ident, $context:ident, $default:expr, $conv:expr) => {{
        let live = $self.live()?;
        let key = utf8($key)?;
        with_context($context, |ctx| match &live.serving {
            Serving::Client(c) => $conv(c, key, ctx),
            Serving::Fixed { snap, fallbacks } => {
                let d = NativeClient::snapshot_detail(snap.as_deref(), key, ctx, $default, None);
                if let Reason::Error(k) = d.reason {
                    fallbacks.count(k);
                }
                d.value
            }
        })
    }};
}

#[pymethods]
impl NativeClient {
    /// See `flagstream.Client`.
    #[new]
    #[pyo3(signature = (endpoints=None, sdk_key=None, cache_dir=None, **options))]
    fn new(
        endpoints: Option<&Bound<'_, PyAny>>,
        sdk_key: Option<String>,
        cache_dir: Option<PathBuf>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<NativeClient> {
        // The offline forms (`Client.test_data`, `Client.offline_file`)
        // come in as private options.
        if let Some(opts) = options {
            if let Some(data) = opts.get_item("_test_data")? {
                let validate =
                    opts.get_item("_validate")?.map(|v| v.extract::<bool>()).transpose()?.unwrap_or(true);
                let set = flag_set(&data)?;
                if validate {
                    let c = build(Builder::default().test_data(set))?;
                    return Ok(NativeClient::from_serving(Serving::Client(c), None));
                }
                let snap = Snapshot::compile_unvalidated(&set, &Limits::default());
                return Ok(NativeClient::from_serving(
                    Serving::Fixed { snap: Some(Arc::new(snap)), fallbacks: Arc::default() },
                    None,
                ));
            }
            if let Some(path) = opts.get_item("_offline_file")? {
                let path: PathBuf = path.extract()?;
                let c = build(Builder::default().offline_file(path))?;
                return Ok(NativeClient::from_serving(Serving::Client(c), None));
            }
        }
        let mut b = flagstream::Client::builder();
        if let Some(e) = endpoints {
            b = b.endpoints(self::endpoints(e)?);
        }
        if let Some(k) = sdk_key {
            b = b.sdk_key(k);
        }
        let b = apply_options(b, options)?;
        let with_cache = match cache_dir {
            Some(dir) => b.clone().cache_dir(dir),
            None => b.clone(),
        };
        let c = build(with_cache)?;
        Ok(NativeClient::from_serving(Serving::Client(c), Some(Restart { builder: b })))
    }

    /// A bool flag's value for `context`, or `default` (never raises for a
    /// missing or mistyped flag: counted in `stats()`).
    fn bool(&self, key: &Bound<'_, PyString>, context: &Bound<'_, PyAny>, default: bool) -> PyResult<bool> {
        eval_value!(self, key, context, default, |c: &flagstream::Client, k, ctx| c.bool(k, ctx, default))
    }

    /// An int flag's value, or `default`.
    fn int(&self, key: &Bound<'_, PyString>, context: &Bound<'_, PyAny>, default: i64) -> PyResult<i64> {
        eval_value!(self, key, context, default, |c: &flagstream::Client, k, ctx| c.int(k, ctx, default))
    }

    /// A float (or int) flag's value, or `default`.
    fn float(&self, key: &Bound<'_, PyString>, context: &Bound<'_, PyAny>, default: f64) -> PyResult<f64> {
        eval_value!(self, key, context, default, |c: &flagstream::Client, k, ctx| c.float(k, ctx, default))
    }

    /// A string flag's value, or `default`.
    fn string<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyString>,
        context: &Bound<'py, PyAny>,
        default: &Bound<'py, PyString>,
    ) -> PyResult<Bound<'py, PyString>> {
        let d = utf8(default)?;
        let live = self.live()?;
        let key = utf8(key)?;
        with_context(context, |ctx| match &live.serving {
            Serving::Client(c) => c.string_with(key, ctx, d, |s| {
                if std::ptr::eq(s, d) { default.clone() } else { PyString::new(py, s) }
            }),
            Serving::Fixed { snap, fallbacks } => {
                let r = NativeClient::snapshot_detail(snap.as_deref(), key, ctx, d, None);
                if let Reason::Error(k) = r.reason {
                    fallbacks.count(k);
                }
                PyString::new(py, r.value)
            }
        })
    }

    /// Any flag's value as JSON (dict, list, str, int, float, bool, None),
    /// or `default`.
    fn json<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyString>,
        context: &Bound<'py, PyAny>,
        default: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let d = self.json_detail(py, key, context, default, None)?;
        Ok(d.get().value.bind(py).clone())
    }

    /// `bool` with the full result (`EvaluationDetail`); `at` (Unix ms or a
    /// datetime) evaluates schedules as of that time (for tests; such an
    /// evaluation is not counted in `stats()`).
    #[pyo3(signature = (key, context, default, *, at=None))]
    fn bool_detail(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyString>,
        context: &Bound<'_, PyAny>,
        default: bool,
        at: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyDetail>> {
        self.typed_detail(py, key, context, default, at, |py, v| {
            Ok(PyBool::new(py, v).to_owned().into_any().unbind())
        })
    }

    /// `int` with the full result.
    #[pyo3(signature = (key, context, default, *, at=None))]
    fn int_detail(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyString>,
        context: &Bound<'_, PyAny>,
        default: i64,
        at: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyDetail>> {
        self.typed_detail(py, key, context, default, at, |py, v| Ok(v.into_pyobject(py)?.into_any().unbind()))
    }

    /// `float` with the full result.
    #[pyo3(signature = (key, context, default, *, at=None))]
    fn float_detail(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyString>,
        context: &Bound<'_, PyAny>,
        default: f64,
        at: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyDetail>> {
        self.typed_detail(py, key, context, default, at, |py, v| Ok(v.into_pyobject(py)?.into_any().unbind()))
    }

    /// `string` with the full result.
    #[pyo3(signature = (key, context, default, *, at=None))]
    fn string_detail(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyString>,
        context: &Bound<'_, PyAny>,
        default: &Bound<'_, PyString>,
        at: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyDetail>> {
        let d = utf8(default)?;
        let at = at_ms(at)?;
        let live = self.live()?;
        let key = utf8(key)?;
        let out = with_context(context, |ctx| -> PyResult<PyDetail> {
            match (&live.serving, at) {
                (Serving::Client(c), None) => {
                    let r = c.string_detail(key, ctx, d);
                    let v = PyString::new(py, &r.value).into_any().unbind();
                    Ok(PyDetail::from_owned(r, v))
                }
                (serving, at) => {
                    let (snap, stale, fallbacks) = fixed_parts(serving);
                    let mut r = NativeClient::snapshot_detail(snap.as_deref(), key, ctx, d, at);
                    r.stale = stale;
                    count(&fallbacks, at, &r.reason);
                    let v = PyString::new(py, r.value).into_any().unbind();
                    Ok(PyDetail::from_detail(&r, v))
                }
            }
        })??;
        Py::new(py, out)
    }

    /// `json` with the full result.
    #[pyo3(signature = (key, context, default, *, at=None))]
    fn json_detail(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyString>,
        context: &Bound<'_, PyAny>,
        default: &Bound<'_, PyAny>,
        at: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyDetail>> {
        let d = to_json(default)?;
        let at = at_ms(at)?;
        let live = self.live()?;
        let key = utf8(key)?;
        let out = with_context(context, |ctx| -> PyResult<PyDetail> {
            match (&live.serving, at) {
                (Serving::Client(c), None) => {
                    let r = c.json_detail(key, ctx, d);
                    let v = from_json(py, &r.value)?.unbind();
                    Ok(PyDetail::from_owned(r, v))
                }
                (serving, at) => {
                    let (snap, stale, fallbacks) = fixed_parts(serving);
                    let mut r = NativeClient::snapshot_detail(snap.as_deref(), key, ctx, Cow::Owned(d), at);
                    r.stale = stale;
                    count(&fallbacks, at, &r.reason);
                    let v = from_json(py, &r.value)?.unbind();
                    Ok(PyDetail::from_detail(&r, v))
                }
            }
        })??;
        Py::new(py, out)
    }

    /// Waits (the GIL released) until flags are served, up to `timeout_s`
    /// seconds; whether they are.
    fn wait_ready(&self, py: Python<'_>, timeout_s: f64) -> PyResult<bool> {
        let timeout = Duration::try_from_secs_f64(timeout_s)
            .map_err(|e| PyValueError::new_err(format!("timeout_s: {timeout_s}: {e}")))?;
        let live = self.live_checked()?;
        let c = match &live.serving {
            Serving::Fixed { snap, .. } => return Ok(snap.is_some()),
            Serving::Client(c) if c.status().has_data() => return Ok(true),
            Serving::Client(c) => c.clone(),
        };
        drop(live);
        let rt = runtime()?;
        Ok(py.detach(|| rt.block_on(c.wait_ready(timeout))).has_data())
    }

    /// The client's status as a dict: state (initializing, ready, stale,
    /// failed, closed), source, revision, since (Unix s), reason, attempts.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let live = self.live_checked()?;
        let out = PyDict::new(py);
        let serving_revision = match &live.serving {
            Serving::Client(c) => c.snapshot().revision(),
            Serving::Fixed { snap, .. } => snap.as_ref().map_or(0, |s| s.revision()),
        };
        if live.closed {
            out.set_item("state", "closed")?;
            out.set_item("revision", serving_revision)?;
            return Ok(out);
        }
        let status = match live.syncing() {
            Some(c) => c.status(),
            None => {
                Status::Ready { source: Source::Test, revision: serving_revision, since: SystemTime::now() }
            }
        };
        let status = match (&live.pending, status) {
            // After a fork, until the new sync has data: the snapshot the
            // parent had is served, marked stale.
            (Some(_), Status::Initializing { attempts }) => {
                out.set_item("attempts", attempts_list(py, &attempts)?)?;
                Status::Stale {
                    source: Source::Cache,
                    revision: serving_revision,
                    since: SystemTime::now(),
                    reason: "restarting the sync after a fork; serving the parent's flags".into(),
                }
            }
            (_, s) => s,
        };
        match status {
            Status::Initializing { attempts } => {
                out.set_item("state", "initializing")?;
                out.set_item("attempts", attempts_list(py, &attempts)?)?;
            }
            Status::Ready { source, revision, since } => {
                out.set_item("state", "ready")?;
                out.set_item("source", source_name(source))?;
                out.set_item("revision", revision)?;
                out.set_item("since", unix_s(since))?;
            }
            Status::Stale { source, revision, since, reason } => {
                out.set_item("state", "stale")?;
                out.set_item("source", source_name(source))?;
                out.set_item("revision", revision)?;
                out.set_item("since", unix_s(since))?;
                out.set_item("reason", reason)?;
            }
            Status::Failed { reason } => {
                out.set_item("state", "failed")?;
                out.set_item("reason", reason)?;
            }
        }
        Ok(out)
    }

    /// The client's counters as a dict (see `flagstream.Stats`).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let live = self.live_checked()?;
        let s = match (live.syncing(), &live.serving) {
            (Some(c), _) => c.stats(),
            (None, Serving::Fixed { fallbacks, .. }) => flagstream::Stats {
                default_not_found: fallbacks.not_found.load(Ordering::Relaxed),
                default_not_ready: fallbacks.not_ready.load(Ordering::Relaxed),
                default_wrong_type: fallbacks.wrong_type.load(Ordering::Relaxed),
                default_malformed: fallbacks.malformed.load(Ordering::Relaxed),
                ..Default::default()
            },
            (None, Serving::Client(c)) => c.stats(),
        };
        let out = PyDict::new(py);
        for (k, v) in [
            ("default_not_found", s.default_not_found),
            ("default_not_ready", s.default_not_ready),
            ("default_wrong_type", s.default_wrong_type),
            ("default_malformed", s.default_malformed),
            ("connects", s.connects),
            ("reconnects", s.reconnects),
            ("endpoint_switches", s.endpoint_switches),
            ("stalls", s.stalls),
            ("resyncs", s.resyncs),
            ("checksum_mismatches", s.checksum_mismatches),
            ("diverged_heads", s.diverged_heads),
            ("retry_hints", s.retry_hints),
            ("snapshots_applied", s.snapshots_applied),
            ("deltas_applied", s.deltas_applied),
            ("cache_writes", s.cache_writes),
            ("cache_errors", s.cache_errors),
            ("stale_ms", s.stale_ms),
        ] {
            out.set_item(k, v)?;
        }
        Ok(out)
    }

    /// How old the served data may be, in seconds; None until a relay
    /// confirmed any.
    fn data_age(&self) -> PyResult<Option<f64>> {
        let live = self.live_checked()?;
        Ok(live.syncing().and_then(flagstream::Client::data_age).map(|d| d.as_secs_f64()))
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.live.load().closed
    }

    /// Stops the background sync (writing the cache once more, if any),
    /// releasing the GIL meanwhile. Evaluations afterwards serve the last
    /// data. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let _one = self.restart_lock.lock().map_err(|_| PyRuntimeError::new_err("restart lock poisoned"))?;
        let cur = self.live.load_full();
        if cur.closed {
            return Ok(());
        }
        let snap = match &cur.serving {
            Serving::Client(c) => c.status().has_data().then(|| c.snapshot()),
            Serving::Fixed { snap, .. } => snap.clone(),
        };
        self.live.store(Arc::new(Live {
            serving: Serving::Fixed { snap, fallbacks: Arc::default() },
            pending: None,
            forks: cur.forks,
            pid: cur.pid,
            feed: cur.feed,
            closed: true,
        }));
        // The change feed ends with the client.
        drop(self.changes.lock().map_err(|_| PyRuntimeError::new_err("changes lock poisoned"))?.take());
        // The last handle's drop stops the tasks and writes the cache:
        // blocking I/O, without the GIL.
        py.detach(move || drop(cur));
        Ok(())
    }

    /// Restarts the sync in a forked child now rather than at the next
    /// call (the package's after-fork hook calls it).
    fn _restart_after_fork(&self) -> PyResult<()> {
        self.live_checked().map(drop)
    }

    /// Subscribes to the change feed (before the listener thread starts,
    /// so no change made after a listener was added is missed).
    fn _subscribe(&self) -> PyResult<()> {
        let live = self.live_checked()?;
        let mut slot = self.changes.lock().map_err(|_| PyRuntimeError::new_err("changes lock poisoned"))?;
        if slot.as_ref().is_some_and(|(feed, _)| *feed == live.feed) {
            return Ok(());
        }
        *slot = live.syncing().map(|c| (live.feed, c.changes()));
        Ok(())
    }

    /// The next applied revision, waiting up to `timeout_s` (without the
    /// GIL): `(revision, [flag keys])`; `(revision, None)` when changes
    /// were missed (the listener fell 64 revisions behind: re-read
    /// everything); None after the timeout; False once the client is
    /// closed.
    fn _next_change<'py>(&self, py: Python<'py>, timeout_s: f64) -> PyResult<Bound<'py, PyAny>> {
        let timeout = Duration::try_from_secs_f64(timeout_s)
            .map_err(|e| PyValueError::new_err(format!("timeout_s: {timeout_s}: {e}")))?;
        let live = self.live_checked()?;
        if live.closed {
            return Ok(PyBool::new(py, false).to_owned().into_any());
        }
        let feed = live.feed;
        let taken = {
            let mut slot =
                self.changes.lock().map_err(|_| PyRuntimeError::new_err("changes lock poisoned"))?;
            match slot.take() {
                Some((f, rx)) if f == feed => Some(rx),
                _ => live.syncing().map(flagstream::Client::changes),
            }
        };
        let revision = match &live.serving {
            Serving::Client(c) => c.snapshot().revision(),
            Serving::Fixed { snap, .. } => snap.as_ref().map_or(0, |s| s.revision()),
        };
        drop(live);
        let Some(mut rx) = taken else {
            // Fixed data never changes.
            py.detach(|| std::thread::sleep(timeout));
            return Ok(py.None().into_bound(py));
        };
        let rt = runtime()?;
        // The timer is made inside the runtime (it needs its reactor).
        let got = py.detach(|| rt.block_on(async { tokio::time::timeout(timeout, rx.recv()).await }));
        let out = match got {
            Err(_elapsed) => py.None().into_bound(py),
            Ok(Ok(change)) => {
                let keys = PyList::new(py, change.flags.iter())?;
                PyTuple::new(py, [change.revision.into_pyobject(py)?.into_any(), keys.into_any()])?.into_any()
            }
            Ok(Err(broadcast::error::RecvError::Lagged(_))) => {
                PyTuple::new(py, [revision.into_pyobject(py)?.into_any(), py.None().into_bound(py)])?
                    .into_any()
            }
            Ok(Err(broadcast::error::RecvError::Closed)) => {
                // This feed ended (a close, or a sync replaced after a
                // fork): say closed only if the client is.
                if self.live.load().closed {
                    return Ok(PyBool::new(py, false).to_owned().into_any());
                }
                return Ok(py.None().into_bound(py));
            }
        };
        let mut slot = self.changes.lock().map_err(|_| PyRuntimeError::new_err("changes lock poisoned"))?;
        if slot.is_none() && !self.live.load().closed {
            *slot = Some((feed, rx));
        }
        Ok(out)
    }
}

impl NativeClient {
    fn typed_detail<T>(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyString>,
        context: &Bound<'_, PyAny>,
        default: T,
        at: Option<&Bound<'_, PyAny>>,
        to_py: impl Fn(Python<'_>, T) -> PyResult<Py<PyAny>>,
    ) -> PyResult<Py<PyDetail>>
    where
        T: for<'s> FromValue<'s> + Copy,
    {
        let at = at_ms(at)?;
        let live = self.live()?;
        let key = utf8(key)?;
        let out = with_context(context, |ctx| -> PyResult<PyDetail> {
            match (&live.serving, at) {
                (Serving::Client(c), None) => {
                    let r = c.detail(key, ctx, default);
                    let v = to_py(py, r.value)?;
                    Ok(PyDetail::from_owned(r, v))
                }
                (serving, at) => {
                    let (snap, stale, fallbacks) = fixed_parts(serving);
                    let mut r = NativeClient::snapshot_detail(snap.as_deref(), key, ctx, default, at);
                    r.stale = stale;
                    count(&fallbacks, at, &r.reason);
                    let v = to_py(py, r.value)?;
                    Ok(PyDetail::from_detail(&r, v))
                }
            }
        })??;
        Py::new(py, out)
    }
}

/// The snapshot (None before data), staleness and fallback counters of
/// what serves, for an evaluation straight from the snapshot.
fn fixed_parts(serving: &Serving) -> (Option<Arc<Snapshot>>, bool, Option<Arc<Fallbacks>>) {
    match serving {
        Serving::Client(c) => {
            let status = c.status();
            (status.has_data().then(|| c.snapshot()), status.is_stale(), None)
        }
        Serving::Fixed { snap, fallbacks } => (snap.clone(), false, Some(fallbacks.clone())),
    }
}

/// Counts a fallback of a fixed client (not of an evaluation `at` another
/// time: see `bool_detail`).
fn count(fallbacks: &Option<Arc<Fallbacks>>, at: Option<i64>, reason: &Reason<'_>) {
    if let (Some(f), None, Reason::Error(k)) = (fallbacks, at, reason) {
        f.count(*k);
    }
}

/// Failed attempts as a list of dicts (endpoint, error, retry_in seconds).
fn attempts_list<'py>(py: Python<'py>, attempts: &[flagstream::Attempt]) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for a in attempts {
        let d = PyDict::new(py);
        d.set_item("endpoint", &a.endpoint)?;
        d.set_item("error", &a.error)?;
        d.set_item("retry_in", a.retry_in.as_secs_f64())?;
        list.append(d)?;
    }
    Ok(list)
}
