//! `flagstream._native`: the flagstream Rust client for Python.
//!
//! The whole client runs here, on a Tokio runtime this module owns (two
//! worker threads named `flagstream`, created on first use and again in a
//! forked child): the stream, stall detection, failover, the cache. Python
//! threads only read the in-memory snapshot, under the GIL, without I/O;
//! every wait (construction, `wait_ready`, the change feed, `close()`, the
//! stop of a client collected without it) releases the GIL, and no lock of
//! this module is held across a release (`client.rs`).
//!
//! Fork: the runtime's threads do not exist in a child of `os.fork()`.
//! The package's after-fork hook (and, off the hot path, a PID check) bumps
//! [`FORKS`]; a client that sees the bump starts a new sync on a new
//! runtime and serves the snapshot its parent had, without calling the
//! parent's Rust client, until the new sync has data (`client.rs`,
//! `serving.rs`).
//!
//! `gate.rs` is a hook for the package's tests (holding a client's stop
//! where it runs without the GIL), off unless a test arms it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

mod client;
mod context;
mod convert;
mod detail;
mod gate;
mod options;
mod report;
mod serving;

/// Forks seen by this process's lineage: a client started under another
/// count is in a child of the process that started it.
pub(crate) static FORKS: AtomicU64 = AtomicU64::new(0);

/// The process in which [`FORKS`] was last bumped: a fork is counted once
/// per process, by the hook or by the first PID check that sees it.
static FORK_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Counts a fork into this process, unless it was counted already.
pub(crate) fn count_fork() {
    let pid = std::process::id();
    if FORK_PID.swap(pid, Ordering::SeqCst) != pid {
        FORKS.fetch_add(1, Ordering::SeqCst);
    }
}

/// The process's runtime, with the PID that built it.
static RUNTIME: Mutex<Option<(u32, Arc<tokio::runtime::Runtime>)>> = Mutex::new(None);

/// The runtime of this process, built on first use (and anew in a forked
/// child, leaking the parent's: its threads are gone and dropping it would
/// wait for them). Called with the GIL held and never released inside, so
/// no thread holds the lock at a fork (`os.fork` holds the GIL).
pub(crate) fn runtime() -> PyResult<Arc<tokio::runtime::Runtime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().map_err(|_| PyRuntimeError::new_err("flagstream runtime lock poisoned"))?;
    if let Some((built_by, rt)) = slot.as_ref()
        && *built_by == pid
    {
        return Ok(rt.clone());
    }
    if let Some((_, parents)) = slot.take() {
        std::mem::forget(parents);
    }
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("flagstream")
            .enable_all()
            .build()
            .map_err(|e| PyRuntimeError::new_err(format!("starting the flagstream runtime: {e}")))?,
    );
    *slot = Some((pid, rt.clone()));
    Ok(rt)
}

/// The package's `os.register_at_fork(after_in_child=...)` hook.
#[pyfunction]
fn _after_fork_in_child() {
    count_fork();
}

/// Forks seen so far (tests).
#[pyfunction]
fn _forks() -> u64 {
    FORKS.load(Ordering::SeqCst)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::NativeClient>()?;
    m.add_class::<detail::PyDetail>()?;
    m.add_class::<context::PyContext>()?;
    m.add_function(wrap_pyfunction!(_after_fork_in_child, m)?)?;
    m.add_function(wrap_pyfunction!(_forks, m)?)?;
    m.add_function(wrap_pyfunction!(gate::_hold_next_stop, m)?)?;
    m.add_function(wrap_pyfunction!(gate::_wait_stop_held, m)?)?;
    m.add_function(wrap_pyfunction!(gate::_release_stop, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
