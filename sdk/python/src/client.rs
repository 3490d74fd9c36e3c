//! `flagstream.Client`'s native half: the Rust client behind the GIL.
//!
//! Evaluations read the snapshot of the client that serves (one atomic load
//! of [`Live`], one compare of the fork count), convert the context and call
//! the Rust client's evaluation: no I/O, no lock, no await. Everything that
//! waits releases the GIL: construction (the cache's lock and read),
//! `wait_ready`, the change feed, `close()` (the final usage summary, at
//! most 2 s, the sync's stop and the cache write), and the drop of a
//! client collected without `close()` (the sync's stop and the cache
//! write; the Rust client sends the final summary from its own runtime,
//! for at most 2 s, without waiting).
//!
//! No lock is held across a GIL release. The restart lock is taken only
//! with the GIL held and let go before anything waits, so no thread can
//! block on it while holding the GIL, and none holds it at a fork
//! (`os.fork` holds the GIL). A second `close()` finds the client closed
//! and returns while the first is still stopping it.
//!
//! After a fork the child never calls the parent's Rust client (its tasks'
//! locks may have been held at the fork, the `flagstream-binding` crate): it serves the
//! parent's snapshot, read without a lock, until its own sync has data,
//! and the parent's client and change feed are leaked, never dropped.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flagstream::{Builder, Change, Context, Detail, ErrorKind, FromValue, Limits, Reason, Snapshot, Status};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString, PyTuple};
use tokio::sync::broadcast;

use crate::context::with_context;
use crate::convert::{from_json, to_json, utf8};
use crate::detail::PyDetail;
use crate::options::{apply_options, at_ms, build_detached, endpoints, flag_set};
use crate::report;
use crate::{gate, runtime};
use flagstream_binding::{Engine, Live, Serving, count, fixed_parts};

mod fork;

/// How long `close()` waits for the relay to confirm the final usage
/// summary.
const CLOSE_FLUSH: Duration = Duration::from_secs(2);

#[pyclass(frozen, subclass, module = "flagstream._native", name = "NativeClient")]
pub(crate) struct NativeClient {
    /// What evaluations load, restarted in a forked child
    /// (`flagstream_binding::Engine`; its restart lock is taken only with
    /// the GIL held, never across a GIL release or a wait).
    engine: Engine,
    /// The change feed's receiver, with the feed id it belongs to. Taken
    /// out while a wait is in progress (no lock is held across a wait).
    changes: Mutex<Option<(u64, broadcast::Receiver<Change>)>>,
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

impl NativeClient {
    fn from_serving(serving: Serving, restart: Option<Builder>) -> PyResult<NativeClient> {
        let engine = Engine::new(serving, restart).map_err(PyRuntimeError::new_err)?;
        Ok(NativeClient { engine, changes: Mutex::new(None) })
    }

    /// The state to evaluate with; in a forked child, the sync is
    /// restarted first. The hot path: one atomic load and one compare.
    #[inline]
    fn live(&self) -> PyResult<arc_swap::Guard<Arc<Live>>> {
        let g = self.engine.cell().load();
        if g.forks == flagstream_binding::FORKS.load(Ordering::Relaxed) {
            return Ok(g);
        }
        drop(g);
        self.restart_after_fork_inner()?;
        Ok(self.engine.cell().load())
    }

    /// [`NativeClient::live`] with the PID check: a fork the Python hook
    /// did not see (a fork from C) counts here. Off the hot path.
    fn live_checked(&self) -> PyResult<arc_swap::Guard<Arc<Live>>> {
        if self.engine.cell().load().pid != std::process::id() {
            flagstream_binding::count_fork();
        }
        self.live()
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
            Serving::Fixed { snap, fallbacks, .. } => {
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
        py: Python<'_>,
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
                    let c = build_detached(py, Builder::default().test_data(set))?;
                    return NativeClient::from_serving(Serving::Client(c), None);
                }
                let snap = py.detach(|| Snapshot::compile_unvalidated(&set, &Limits::default()));
                return NativeClient::from_serving(Serving::fixed(Some(Arc::new(snap)), false), None);
            }
            if let Some(path) = opts.get_item("_offline_file")? {
                let path: PathBuf = path.extract()?;
                let c = build_detached(py, Builder::default().offline_file(path))?;
                return NativeClient::from_serving(Serving::Client(c), None);
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
        let c = build_detached(py, with_cache)?;
        NativeClient::from_serving(Serving::Client(c), Some(b))
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
            Serving::Fixed { snap, fallbacks, .. } => {
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
        let mut status = match &live.serving {
            Serving::Fixed { snap, .. } => return Ok(snap.is_some()),
            Serving::Client(c) if c.status().has_data() => return Ok(true),
            // Only the status, and the close signal that ends the wait
            // (the client's own sender lives as long as the client).
            Serving::Client(c) => c.status_watch(),
        };
        drop(live);
        let mut closed = self.engine.closed_signal();
        let rt = runtime()?;
        // The timer is made inside the runtime (it needs its reactor).
        let waited = py.detach(|| {
            rt.block_on(async {
                tokio::time::timeout(timeout, async {
                    tokio::select! {
                        r = status.wait_for(Status::has_data) => r.is_ok(),
                        _ = closed.wait_for(|c| *c) => false,
                    }
                })
                .await
            })
        });
        // A timeout, or the client closed meanwhile: not ready.
        Ok(matches!(waited, Ok(true)))
    }

    /// The client's status as a dict: state (initializing, ready, stale,
    /// failed, closed), source, revision, since (Unix s), reason, attempts.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let live = self.live_checked()?;
        report::status(py, &live)
    }

    /// The client's counters as a dict (see `flagstream.Stats`).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let live = self.live_checked()?;
        report::stats(py, &live)
    }

    /// The store epoch of the data evaluations read now (with an
    /// evaluation's `revision`, the data's version): empty when there is
    /// no data, and for test data and flag files (no store). As cheap as
    /// an evaluation's own read of the state: no lock, no copy of the data.
    fn epoch<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        let live = self.live()?;
        Ok(match &live.serving {
            Serving::Client(c) => PyString::new(py, c.snapshot().epoch()),
            Serving::Fixed { snap, .. } => PyString::new(py, snap.as_ref().map_or("", |s| s.epoch())),
        })
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
        self.engine.cell().load().closed
    }

    /// Closes the client: sends the usage counted since the last summary
    /// to the relay and waits for it to confirm, at most [`CLOSE_FLUSH`];
    /// then stops the background sync and writes the cache once more, all
    /// with the GIL released. Evaluations afterwards serve the last data.
    /// Whether the relay confirmed the final summary (false for a client
    /// without a relay stream, and for a client closed already: a call
    /// while another is still closing it returns at once).
    fn close(&self, py: Python<'_>) -> PyResult<bool> {
        // In a forked child, the parent's state is set aside first (never
        // stopped here: its tasks' threads are the parent's).
        drop(self.live_checked()?);
        // The restart lock is released before the stop below: a thread
        // that held it across the GIL release would deadlock a second
        // close() (which waits for it holding the GIL), and a child forked
        // meanwhile would find it held for good.
        let Some(cur) = self.engine.close() else {
            return Ok(false);
        };
        // The change feed ends with the client.
        let feed = self.changes.lock().map_err(|_| PyRuntimeError::new_err("changes lock poisoned"))?.take();
        let rt = runtime()?;
        // The final summary, the sync's stop and the cache write, then the
        // last handle's drop: waits and blocking I/O, without the GIL.
        py.detach(move || {
            gate::pass()?;
            let confirmed = match cur.syncing() {
                Some(c) => rt.block_on(c.close(CLOSE_FLUSH)),
                None => false,
            };
            drop(feed);
            drop(cur);
            Ok(confirmed)
        })
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
            // Fixed data never changes: no event can come, so the listener
            // thread's poll waits out its timeout (how it notices close())
            // without the GIL.
            py.detach(|| std::thread::sleep(timeout));
            return Ok(py.None().into_bound(py));
        };
        let rt = runtime()?;
        let mut closed = self.engine.closed_signal();
        // The timer is made inside the runtime (it needs its reactor); a
        // close ends the wait.
        let got = py.detach(|| {
            rt.block_on(async {
                tokio::time::timeout(timeout, async {
                    tokio::select! {
                        r = rx.recv() => Some(r),
                        _ = closed.wait_for(|c| *c) => None,
                    }
                })
                .await
            })
        });
        let got = match got {
            Ok(None) => return Ok(PyBool::new(py, false).to_owned().into_any()),
            Ok(Some(r)) => Ok(r),
            Err(elapsed) => Err(elapsed),
        };
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
                if self.engine.cell().load().closed {
                    return Ok(PyBool::new(py, false).to_owned().into_any());
                }
                return Ok(py.None().into_bound(py));
            }
        };
        let mut slot = self.changes.lock().map_err(|_| PyRuntimeError::new_err("changes lock poisoned"))?;
        if slot.is_none() && !self.engine.cell().load().closed {
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
