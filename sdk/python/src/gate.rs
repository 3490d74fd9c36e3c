//! A hook for the package's own tests: the next stop of a Rust client
//! (by `close()`, or by a client collected without it) can be held at the
//! start of the part that runs without the GIL, so that a test calls
//! `close()` again, forks, or runs Python code at exactly that point every
//! time rather than by chance.
//!
//! Off unless a test arms it: a stop then pays one relaxed load. The
//! functions are private (`_native._hold_next_stop`,
//! `_native._wait_stop_held`, `_native._release_stop`) and none of them is
//! part of the package's API.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// Whether the next stop is to be held.
static ARMED: AtomicBool = AtomicBool::new(false);

/// Whether a stop is held now.
static HELD: Mutex<bool> = Mutex::new(false);
static CHANGED: Condvar = Condvar::new();

fn held() -> PyResult<MutexGuard<'static, bool>> {
    HELD.lock().map_err(|_| PyRuntimeError::new_err("stop gate lock poisoned"))
}

/// Called without the GIL where a client's stop begins: waits here if the
/// gate is armed (once), until [`_release_stop`].
pub(crate) fn pass() -> PyResult<()> {
    if !ARMED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut h = held()?;
    // Another stop may have taken it meanwhile: one is held.
    if !ARMED.swap(false, Ordering::Relaxed) {
        return Ok(());
    }
    *h = true;
    CHANGED.notify_all();
    while *h {
        h = CHANGED.wait(h).map_err(|_| PyRuntimeError::new_err("stop gate lock poisoned"))?;
    }
    Ok(())
}

/// Tests: the next stop to reach its GIL-released part waits there until
/// `_release_stop()`.
#[pyfunction]
pub(crate) fn _hold_next_stop() -> PyResult<()> {
    let mut h = held()?;
    *h = false;
    ARMED.store(true, Ordering::Relaxed);
    Ok(())
}

/// Tests: waits (the GIL released) up to `timeout_s` seconds until a
/// stop is held; whether one is.
#[pyfunction]
pub(crate) fn _wait_stop_held(py: Python<'_>, timeout_s: f64) -> PyResult<bool> {
    let timeout = Duration::try_from_secs_f64(timeout_s)
        .map_err(|e| PyValueError::new_err(format!("timeout_s: {timeout_s}: {e}")))?;
    py.detach(|| {
        let h = held()?;
        let (h, _) = CHANGED
            .wait_timeout_while(h, timeout, |h| !*h)
            .map_err(|_| PyRuntimeError::new_err("stop gate lock poisoned"))?;
        Ok(*h)
    })
}

/// Tests: lets the held stop go on (and disarms the gate).
#[pyfunction]
pub(crate) fn _release_stop() -> PyResult<()> {
    ARMED.store(false, Ordering::Relaxed);
    *held()? = false;
    CHANGED.notify_all();
    Ok(())
}
