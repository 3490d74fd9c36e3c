//! A native client across `os.fork()` and at its end: restarting the sync
//! in a child (serving the parent's snapshot, never calling the parent's
//! client) and stopping a client collected without `close()` (without the
//! GIL; a parent's state inherited by a child is leaked, never stopped).

use super::*;

impl NativeClient {
    pub(super) fn restart_after_fork_inner(&self) -> PyResult<()> {
        // Held with the GIL and never across a release or a wait: no other
        // thread can hold it at a fork.
        let _one = self.restart_lock.lock().map_err(|_| PyRuntimeError::new_err("restart lock poisoned"))?;
        let forks = FORKS.load(Ordering::SeqCst);
        let cur = self.live.load_full();
        if cur.forks == forks {
            return Ok(());
        }
        // The parent's Rust clients stay alive for good in this process:
        // their tasks ran on threads that do not exist here, and their
        // last drop would write the parent's cache. So does the parent's
        // change feed: dropping a receiver takes the channel's lock, which
        // the parent's sync may have held at the fork.
        std::mem::forget(cur.clone());
        let parents_feed =
            self.changes.lock().map_err(|_| PyRuntimeError::new_err("changes lock poisoned"))?.take();
        std::mem::forget(parents_feed);
        let (serving, pending) = match (&self.restart, cur.closed) {
            (Some(r), false) => {
                // The parent's snapshot, read without a lock (the cell is
                // an ArcSwap), if it had data.
                let snap = match &cur.serving {
                    Serving::Client(c) => cur.data.snapshot_of(c),
                    Serving::Fixed { snap, .. } => snap.clone(),
                };
                (Serving::fixed(snap, true), Some(build(r.builder.clone())?))
            }
            // Closed, or test data or a flag file: no task of the client
            // ran in the parent, so no lock of it can be held.
            _ => (cur.serving.clone(), None),
        };
        let feed = if pending.is_some() { FEEDS.fetch_add(1, Ordering::Relaxed) } else { cur.feed };
        let next = Live {
            serving,
            pending: pending.clone(),
            forks,
            pid: std::process::id(),
            feed,
            closed: cur.closed,
            data: cur.data.clone(),
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
                        data: DataSeen::yes(),
                    }),
                    _ => cur.clone(),
                });
            });
        }
        Ok(())
    }
}

impl Drop for NativeClient {
    /// A client collected without `close()`: its Rust client is stopped
    /// (the last handle's drop stops the sync and writes the cache) without
    /// the GIL, as `close()` does. A client still holding its parent's
    /// state in a forked child (the fork not yet seen) leaks it instead.
    fn drop(&mut self) {
        let cur = self.live.swap(GONE.clone());
        // A poisoned lock still holds the receiver: it goes with the client.
        let feed = match self.changes.get_mut() {
            Ok(slot) => slot.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if cur.pid != std::process::id() || cur.forks != FORKS.load(Ordering::SeqCst) {
            std::mem::forget(cur);
            std::mem::forget(feed);
            return;
        }
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
