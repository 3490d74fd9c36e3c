//! A native client across `os.fork()` and at its end: restarting the sync
//! in a child (serving the parent's snapshot, never calling the parent's
//! client) and stopping a client collected without `close()` (without the
//! GIL; a parent's state inherited by a child is leaked, never stopped).

use super::*;

impl NativeClient {
    pub(super) fn restart_after_fork_inner(&self) -> PyResult<()> {
        // The parent's change feed is leaked: dropping a receiver takes
        // the channel's lock, which the parent's sync may have held at the
        // fork.
        self.engine
            .restart(|| {
                let parents_feed =
                    self.changes.lock().map_err(|_| "changes lock poisoned".to_owned())?.take();
                std::mem::forget(parents_feed);
                Ok(())
            })
            .map_err(PyRuntimeError::new_err)
    }
}

impl Drop for NativeClient {
    /// A client collected without `close()`: its Rust client is stopped
    /// (the last handle's drop stops the sync and writes the cache) without
    /// the GIL, as `close()` does. A client still holding its parent's
    /// state in a forked child (the fork not yet seen) leaks it instead.
    fn drop(&mut self) {
        let cur = self.engine.take();
        // A poisoned lock still holds the receiver: it goes with the client.
        let feed = match self.changes.get_mut() {
            Ok(slot) => slot.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        // A parent's state inherited by a child: leaked (by the engine),
        // and its feed with it.
        let Some(cur) = cur else {
            std::mem::forget(feed);
            return;
        };
        let stop = move || {
            let held = gate::pass();
            drop(feed);
            drop(cur);
            held
        };
        // Collected on a thread attached to Python (the usual case): the
        // GIL is released meanwhile. Otherwise (no interpreter to attach
        // to) `stop` is dropped unrun, which stops the client all the same.
        Python::try_attach(|py| {
            if let Err(e) = py.detach(stop) {
                // A drop has no caller: reported as `__del__` errors are.
                e.write_unraisable(py, None);
            }
        });
    }
}
