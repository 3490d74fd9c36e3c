//! A binding's client state across forks: the [`Live`] state evaluations
//! load (one atomic load and one compare on the hot path, none of it with
//! [`Engine::fast`]), the sync restarted in a forked child, the close
//! signal that ends waits, and the state given up at the end without
//! touching a parent's client.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use arc_swap::{ArcSwap, Guard};
use flagstream::{Builder, Status};
use tokio::sync::watch;

use crate::fork_lock::ForkMutex;
use crate::serving::{DataSeen, Live, Serving};
use crate::{FORKS, runtime};

/// Change feed ids: a new one for every Rust client whose changes
/// listeners follow.
static FEEDS: AtomicU64 = AtomicU64::new(1);

/// The state of a client given up ([`Engine::take`]): closed, no data.
static GONE: LazyLock<Arc<Live>> = LazyLock::new(|| {
    Arc::new(Live {
        serving: Serving::fixed(None, false),
        pending: None,
        forks: 0,
        pid: 0,
        feed: 0,
        closed: true,
        data: DataSeen::yes(),
    })
});

/// A binding's client: what it serves, and how to start its sync again in
/// a forked child.
#[derive(Debug)]
pub struct Engine {
    live: Arc<ArcSwap<Live>>,
    /// The Rust client it was made with, for [`Engine::fast`]: evaluating
    /// through it skips the state's load (an `ArcSwap` guard, whose
    /// release is an atomic compare-and-swap) while nothing changed. Kept
    /// until the engine is dropped (an evaluation may hold it), so a close
    /// is signalled by `closed_tx`, not by the client's end.
    direct: Option<flagstream::Client>,
    /// [`FORKS`] when it was made.
    forks: u64,
    /// Set (before the state is swapped) by [`Engine::close`].
    closed: AtomicBool,
    /// `true` once closed: ends the waits of [`Engine::closed_signal`].
    closed_tx: watch::Sender<bool>,
    /// How the client was built (without its cache directory: a child
    /// never shares its parent's cache lock); `None` for test data or a
    /// flag file, which have no sync to restart.
    restart: Option<Builder>,
    /// One restart or close at a time; a [`ForkMutex`], so a parent's
    /// thread that held it at a fork does not block the child.
    restart_lock: ForkMutex<()>,
}

impl Engine {
    /// An engine serving `serving`; `restart` is the builder of a relay's
    /// client (see the field).
    pub fn new(serving: Serving, restart: Option<Builder>) -> Result<Engine, String> {
        let data = match &serving {
            // A relay's client: whether it has data is read after a fork.
            Serving::Client(c) if restart.is_some() => DataSeen::watch(c, &*runtime()?),
            // Test data and flag files have their data when built; a fixed
            // snapshot's is its own.
            _ => DataSeen::yes(),
        };
        let live = Live {
            serving,
            pending: None,
            forks: FORKS.load(Ordering::SeqCst),
            pid: std::process::id(),
            feed: FEEDS.fetch_add(1, Ordering::Relaxed),
            closed: false,
            data,
        };
        let direct = match &live.serving {
            Serving::Client(c) => Some(c.clone()),
            Serving::Fixed { .. } => None,
        };
        Ok(Engine {
            forks: live.forks,
            live: Arc::new(ArcSwap::from_pointee(live)),
            direct,
            closed: AtomicBool::new(false),
            closed_tx: watch::Sender::new(false),
            restart,
            restart_lock: ForkMutex::new(()),
        })
    }

    /// The Rust client to evaluate with directly, while the engine serves
    /// the one it was made with (not closed, no fork since): two atomic
    /// loads and no state guard. `None`: evaluate through
    /// [`Engine::live`].
    #[inline]
    pub fn fast(&self) -> Option<&flagstream::Client> {
        if self.closed.load(Ordering::Acquire) || FORKS.load(Ordering::Relaxed) != self.forks {
            return None;
        }
        self.direct.as_ref()
    }

    /// The state to evaluate with; in a forked child, the sync is
    /// restarted first. The hot path: one atomic load and one compare.
    #[inline]
    pub fn live(&self) -> Result<Guard<Arc<Live>>, String> {
        let g = self.live.load();
        if g.forks == FORKS.load(Ordering::Relaxed) {
            return Ok(g);
        }
        drop(g);
        self.restart(|| Ok(()))?;
        Ok(self.live.load())
    }

    /// [`Engine::live`] with a PID check: a fork no hook saw counts here.
    /// Off the evaluation path (status, waits, listeners, close).
    pub fn live_checked(&self) -> Result<Guard<Arc<Live>>, String> {
        self.check_pid();
        self.live()
    }

    /// Counts a fork no hook saw (the state's process is not this one).
    fn check_pid(&self) {
        if self.live.load().pid != std::process::id() {
            crate::count_fork();
        }
    }

    /// Whether the state is still a parent's, inherited by a forked child
    /// that has not restarted it (nothing of it may be called or dropped).
    pub fn inherited(&self) -> bool {
        self.check_pid();
        let cur = self.live.load();
        cur.pid != std::process::id() || cur.forks != FORKS.load(Ordering::SeqCst)
    }

    /// The state cell itself, for a binding that replaces the state (at
    /// close) or watches it.
    pub fn cell(&self) -> &Arc<ArcSwap<Live>> {
        &self.live
    }

    /// A receiver that sees `true` once the client is closed: a binding's
    /// wait (for data, for a change) selects on it, since the client's own
    /// channels stay open while [`Engine::fast`] may hand it out.
    pub fn closed_signal(&self) -> watch::Receiver<bool> {
        self.closed_tx.subscribe()
    }

    /// In a forked child (a fork counted since the state was made):
    /// serves the parent's snapshot, stale, and starts this process's own
    /// sync, which serves once it has data. The parent's Rust clients are
    /// never called nor dropped here: their tasks ran on threads that do
    /// not exist in this process, and their last drop would write the
    /// parent's cache. `forget_inherited` lets the binding leak its own
    /// state tied to the parent's client (a change feed's receiver, whose
    /// drop takes a lock the parent's sync may have held at the fork); it
    /// runs only when a restart happens, under the restart lock.
    pub fn restart(&self, forget_inherited: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
        let _one = self.restart_lock.lock();
        let forks = FORKS.load(Ordering::SeqCst);
        let cur = self.live.load_full();
        if cur.forks == forks {
            return Ok(());
        }
        std::mem::forget(cur.clone());
        forget_inherited()?;
        let (serving, pending) = match (&self.restart, cur.closed) {
            (Some(builder), false) => {
                // The parent's snapshot, read without a lock (the cell is
                // an ArcSwap), if it had data.
                let snap = match &cur.serving {
                    Serving::Client(c) => cur.data.snapshot_of(c),
                    Serving::Fixed { snap, .. } => snap.clone(),
                };
                let rt = runtime()?;
                let _in_runtime = rt.enter();
                let child = builder
                    .clone()
                    .build()
                    .map_err(|e| with_causes("restarting the sync after a fork", &e))?;
                (Serving::fixed(snap, true), Some(child))
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
                if status.wait_for(Status::has_data).await.is_ok() {
                    promote(&live);
                }
            });
        }
        Ok(())
    }

    /// In a forked child whose own sync has data: serves it now (rather
    /// than when the task watching it runs), so a wait for that data sees
    /// it served on return.
    pub fn promote(&self) {
        promote(&self.live);
    }

    /// Marks the client closed: from now on it serves its last data as a
    /// fixed snapshot, and waits on [`Engine::closed_signal`] end. Returns
    /// the state it had, whose sync the caller stops (its final usage
    /// summary, then its drop), or `None` when it was closed already. Call
    /// [`Engine::live_checked`] first, so a forked child's parent state
    /// is set aside rather than returned.
    pub fn close(&self) -> Option<Arc<Live>> {
        // Held for the swap only, never across the caller's stop.
        let _one = self.restart_lock.lock();
        let cur = self.live.load_full();
        if cur.closed {
            return None;
        }
        self.closed.store(true, Ordering::Release);
        let snap = match &cur.serving {
            Serving::Client(c) => c.status().has_data().then(|| c.snapshot()),
            Serving::Fixed { snap, .. } => snap.clone(),
        };
        self.live.store(Arc::new(Live {
            serving: Serving::fixed(snap, false),
            pending: None,
            forks: cur.forks,
            pid: cur.pid,
            feed: cur.feed,
            closed: true,
            data: cur.data.clone(),
        }));
        self.closed_tx.send_replace(true);
        Some(cur)
    }

    /// Gives up the state and the direct client, leaving a closed state
    /// without data: `Some` to drop (the last handles' drop stops the sync
    /// and writes the cache: a binding drops them where it may block).
    /// What a forked child inherited from its parent (the state not yet
    /// restarted, and the direct client, always its parent's after a fork)
    /// is leaked instead.
    pub fn take(&mut self) -> Option<(Arc<Live>, Option<flagstream::Client>)> {
        self.closed.store(true, Ordering::Release);
        self.closed_tx.send_replace(true);
        let forks = FORKS.load(Ordering::SeqCst);
        let mut direct = self.direct.take();
        if self.forks != forks {
            std::mem::forget(direct.take());
        }
        let cur = self.live.swap(GONE.clone());
        if cur.pid != std::process::id() || cur.forks != forks {
            std::mem::forget(cur);
            return None;
        }
        Some((cur, direct))
    }
}

impl Drop for Engine {
    /// Stops the client with this process's state; leaks a parent's.
    fn drop(&mut self) {
        drop(self.take());
    }
}

/// Serves a forked child's own sync once it has data (the pending client
/// of the same feed), in place of the parent's snapshot.
fn promote(live: &ArcSwap<Live>) {
    live.rcu(|cur| match &cur.pending {
        Some(p) if p.status().has_data() => Arc::new(Live {
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
}

/// `what: error: cause: cause...`, every cause of `e` kept.
fn with_causes(what: &str, e: &dyn std::error::Error) -> String {
    let mut msg = format!("{what}: {e}");
    let mut source = e.source();
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    msg
}
