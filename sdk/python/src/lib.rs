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
//! `flagstream_binding::FORKS`; a client that sees the bump starts a new sync on a new
//! runtime and serves the snapshot its parent had, without calling the
//! parent's Rust client, until the new sync has data (`client.rs`,
//! and the `flagstream-binding` crate it shares with the C ABI).
//!
//! `gate.rs` is a hook for the package's tests (holding a client's stop
//! where it runs without the GIL), off unless a test arms it.

use std::sync::Arc;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

mod client;
mod context;
mod convert;
mod detail;
mod gate;
mod options;
mod report;

/// The process's runtime (`flagstream_binding::runtime`: built on first
/// use, and anew in a forked child). Called with the GIL held and never
/// released inside, so no thread holds its lock at a fork (`os.fork`
/// holds the GIL).
pub(crate) fn runtime() -> PyResult<Arc<tokio::runtime::Runtime>> {
    flagstream_binding::runtime().map_err(PyRuntimeError::new_err)
}

/// The package's `os.register_at_fork(after_in_child=...)` hook.
#[pyfunction]
fn _after_fork_in_child() {
    flagstream_binding::count_fork();
}

/// Forks seen so far (tests).
#[pyfunction]
fn _forks() -> u64 {
    flagstream_binding::FORKS.load(std::sync::atomic::Ordering::SeqCst)
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
