//! What a native client serves from: a Rust client or a fixed snapshot
//! ([`Serving`]), the state evaluations load whole ([`Live`]: replaced
//! after a fork once the new sync has data, and at close), and the
//! fallback counters of a client with no Rust client behind it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use flagstream::{ErrorKind, Reason, Snapshot};

/// Fallbacks to the caller's default counted by a client that has no Rust
/// client behind it (unvalidated test data, or closed).
#[derive(Debug, Default)]
pub(crate) struct Fallbacks {
    pub(crate) not_found: AtomicU64,
    pub(crate) not_ready: AtomicU64,
    pub(crate) wrong_type: AtomicU64,
    pub(crate) malformed: AtomicU64,
}

impl Fallbacks {
    pub(crate) fn count(&self, kind: ErrorKind) {
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
pub(crate) enum Serving {
    /// A Rust client (streaming, a flag file or validated test data).
    Client(flagstream::Client),
    /// A fixed snapshot: unvalidated test data, or the last data of a
    /// closed client (`None`: it never had any).
    Fixed { snap: Option<Arc<Snapshot>>, fallbacks: Arc<Fallbacks> },
}

/// The client state evaluations load, replaced whole (after a fork, when
/// the new sync has data, at close).
#[derive(Debug)]
pub(crate) struct Live {
    pub(crate) serving: Serving,
    /// In a forked child: the new sync, until it has data.
    pub(crate) pending: Option<flagstream::Client>,
    /// [`FORKS`] when this state was made.
    pub(crate) forks: u64,
    /// The process that made it.
    pub(crate) pid: u32,
    /// The change feed: the id of the Rust client whose changes listeners
    /// see (the pending one, or the serving one).
    pub(crate) feed: u64,
    pub(crate) closed: bool,
}

impl Live {
    /// The Rust client that syncs (status, stats, changes).
    pub(crate) fn syncing(&self) -> Option<&flagstream::Client> {
        match (&self.pending, &self.serving) {
            (Some(p), _) => Some(p),
            (None, Serving::Client(c)) => Some(c),
            (None, Serving::Fixed { .. }) => None,
        }
    }
}

/// The snapshot (None before data), staleness and fallback counters of
/// what serves, for an evaluation straight from the snapshot.
pub(crate) fn fixed_parts(serving: &Serving) -> (Option<Arc<Snapshot>>, bool, Option<Arc<Fallbacks>>) {
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
pub(crate) fn count(fallbacks: &Option<Arc<Fallbacks>>, at: Option<i64>, reason: &Reason<'_>) {
    if let (Some(f), None, Reason::Error(k)) = (fallbacks, at, reason) {
        f.count(*k);
    }
}
