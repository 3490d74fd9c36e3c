//! What a native client serves from: a Rust client or a fixed snapshot
//! ([`Serving`]), the state evaluations load whole ([`Live`]: replaced
//! after a fork, again once the new sync has data, and at close), and the
//! fallback counters of a client with no Rust client behind it.
//!
//! In a forked child the parent's Rust client is never called: its
//! background tasks ran on threads the child does not have, and any lock
//! one of them held at the fork (the usage aggregator's, the status
//! channel's) stays held. The child serves the parent's snapshot as a
//! fixed one, read once without a lock, until its own sync has data.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use flagstream::{ErrorKind, Reason, Snapshot};

/// Fallbacks to the caller's default counted by a client that has no Rust
/// client behind it (unvalidated test data, or closed).
#[derive(Debug, Default)]
pub struct Fallbacks {
    pub not_found: AtomicU64,
    pub not_ready: AtomicU64,
    pub wrong_type: AtomicU64,
    pub malformed: AtomicU64,
}

impl Fallbacks {
    pub fn count(&self, kind: ErrorKind) {
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
pub enum Serving {
    /// A Rust client (streaming, a flag file or validated test data).
    Client(flagstream::Client),
    /// A fixed snapshot: unvalidated test data, the last data of a closed
    /// client, or, in a forked child until its own sync has data, the
    /// parent's (`stale`). `None`: there was none.
    Fixed { snap: Option<Arc<Snapshot>>, fallbacks: Arc<Fallbacks>, stale: bool },
}

impl Serving {
    /// A fixed snapshot with counters of its own.
    pub fn fixed(snap: Option<Arc<Snapshot>>, stale: bool) -> Serving {
        Serving::Fixed { snap, fallbacks: Arc::default(), stale }
    }
}

/// The client state evaluations load, replaced whole (after a fork, when
/// the new sync has data, at close).
#[derive(Debug)]
pub struct Live {
    pub serving: Serving,
    /// In a forked child: the new sync, until it has data.
    pub pending: Option<flagstream::Client>,
    /// [`crate::FORKS`] when this state was made.
    pub forks: u64,
    /// The process that made it.
    pub pid: u32,
    /// The change feed: the id of the Rust client whose changes listeners
    /// see (the pending one, or the serving one).
    pub feed: u64,
    pub closed: bool,
    /// Whether the serving Rust client has had data, read after a fork
    /// (when asking the parent's client could wait on a lock).
    pub data: DataSeen,
}

impl Live {
    /// The client's counters: the syncing Rust client's, plus the
    /// fallbacks a fixed snapshot counted itself (after a fork until the
    /// new sync has data, and for unvalidated test data).
    pub fn stats(&self) -> flagstream::Stats {
        let mut s = match self.syncing() {
            Some(c) => c.stats(),
            // A fixed snapshot has no stream: its stream counters are zero.
            None => flagstream::Stats::default(),
        };
        if let Serving::Fixed { fallbacks, .. } = &self.serving {
            s.default_not_found += fallbacks.not_found.load(Ordering::Relaxed);
            s.default_not_ready += fallbacks.not_ready.load(Ordering::Relaxed);
            s.default_wrong_type += fallbacks.wrong_type.load(Ordering::Relaxed);
            s.default_malformed += fallbacks.malformed.load(Ordering::Relaxed);
        }
        s
    }

    /// The Rust client that syncs (status, stats, changes).
    pub fn syncing(&self) -> Option<&flagstream::Client> {
        match (&self.pending, &self.serving) {
            (Some(p), _) => Some(p),
            (None, Serving::Client(c)) => Some(c),
            (None, Serving::Fixed { .. }) => None,
        }
    }
}

/// The snapshot (None before data), staleness and fallback counters of
/// what serves, for an evaluation straight from the snapshot.
pub fn fixed_parts(serving: &Serving) -> (Option<Arc<Snapshot>>, bool, Option<Arc<Fallbacks>>) {
    match serving {
        Serving::Client(c) => client_parts(c),
        Serving::Fixed { snap, fallbacks, stale } => (snap.clone(), *stale, Some(fallbacks.clone())),
    }
}

/// [`fixed_parts`] of a Rust client: its snapshot once it has data, and
/// its staleness (no fallback counters of its own: it counts them).
pub fn client_parts(c: &flagstream::Client) -> (Option<Arc<Snapshot>>, bool, Option<Arc<Fallbacks>>) {
    let status = c.status();
    (status.has_data().then(|| c.snapshot()), status.is_stale(), None)
}

/// Counts a fallback of a fixed client (not of an evaluation `at` another
/// time: see `bool_detail`).
pub fn count(fallbacks: &Option<Arc<Fallbacks>>, at: Option<i64>, reason: &Reason<'_>) {
    if let (Some(f), None, Reason::Error(k)) = (fallbacks, at, reason) {
        f.count(*k);
    }
}

/// Whether a Rust client has had data, told without asking it: in a
/// forked child its status sits behind a lock a parent thread may have held
/// at the fork. It has if its snapshot is no longer the empty one it held
/// when it was made (a publish swaps the snapshot in before the status
/// says so), or once a task watching its status saw data (for the rare
/// snapshot published before the empty one was read).
#[derive(Debug, Clone)]
pub struct DataSeen {
    watched: Arc<AtomicBool>,
    /// The snapshot the client held without data; `None`: it had data.
    empty: Option<Arc<Snapshot>>,
}

impl DataSeen {
    /// For a client that has data.
    pub fn yes() -> DataSeen {
        DataSeen { watched: Arc::new(AtomicBool::new(true)), empty: None }
    }

    /// For `client`, watched on `rt` (a task that ends with the client)
    /// until it has data.
    pub fn watch(client: &flagstream::Client, rt: &tokio::runtime::Runtime) -> DataSeen {
        // The snapshot first: one published after it changes it.
        let empty = client.snapshot();
        if client.status().has_data() {
            return DataSeen::yes();
        }
        let watched = Arc::new(AtomicBool::new(false));
        let mut status = client.status_watch();
        let set = watched.clone();
        rt.spawn(async move {
            // An error: the client is gone without ever having data.
            if status.wait_for(flagstream::Status::has_data).await.is_ok() {
                set.store(true, Ordering::Release);
            }
        });
        DataSeen { watched, empty: Some(empty) }
    }

    /// `client`'s snapshot if it has had data, read without a lock.
    pub fn snapshot_of(&self, client: &flagstream::Client) -> Option<Arc<Snapshot>> {
        let now = client.snapshot();
        let seen = match &self.empty {
            None => true,
            Some(empty) => !Arc::ptr_eq(empty, &now) || self.watched.load(Ordering::Acquire),
        };
        seen.then_some(now)
    }
}
