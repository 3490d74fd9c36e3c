//! This relay process as a node of the relay tree (PROTOCOL.md "Relay
//! tree"): its id, name and start time, a sample of its memory and each
//! environment's data age (taken again at most every [`SAMPLE_EVERY`]), and
//! the bounds every node entry keeps. Below the hub (which holds this
//! relay's `Identity`) and propagation (which checks received entries
//! against the bounds); the tree itself (`tree.rs`) builds on all three.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::store::{Source, Store};

/// Entries a report (and the whole tree) holds at most.
pub(crate) const MAX_NODES: usize = 1_000;

/// Longest string a node entry may carry, bytes.
pub(crate) const MAX_NODE_STRING: usize = 256;

/// Environment entries a received node entry may carry (a report's own
/// entries carry one: the stream's environment).
pub(crate) const MAX_NODE_ENVIRONMENTS: usize = 16;

/// How long a sample of memory and data age is reused: reports, which are
/// resent only when they change, change at most this often for them.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// This relay process as a node of the tree.
#[derive(Debug)]
pub(crate) struct Identity {
    /// Random per process start.
    pub(crate) id: String,
    /// `advertise-url`, else the gRPC listen address (set once at start).
    name: OnceLock<String>,
    started_unix_ms: u64,
    /// The latest sample: when (monotonic, and Unix ms), resident bytes,
    /// and each environment's staleness then.
    sample: Mutex<Option<Sample>>,
}

/// A sample of this relay's memory and data age.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    at: Instant,
    pub(crate) unix_ms: u64,
    pub(crate) rss_bytes: u64,
    /// Per environment: the revision held then, and its staleness.
    pub(crate) staleness_ms: HashMap<String, (u64, u64)>,
}

impl Default for Identity {
    fn default() -> Self {
        Identity {
            id: crate::ops::secret::new_epoch()[..16].to_owned(),
            name: OnceLock::new(),
            started_unix_ms: crate::store::now_ms(),
            sample: Mutex::new(None),
        }
    }
}

impl Identity {
    /// Sets the name other relays and operators see (first call wins).
    pub(crate) fn set_name(&self, name: String) {
        let mut name = name;
        truncate(&mut name);
        // A second call (a test's relay restarted in-process) keeps the first.
        let _kept = self.name.set(name);
    }

    /// The current sample, taken again when older than [`SAMPLE_EVERY`].
    pub(crate) fn sample(&self, store: &Store) -> Sample {
        let mut slot = self.sample.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = slot.as_ref().filter(|s| s.at.elapsed() < SAMPLE_EVERY) {
            return s.clone();
        }
        let s = Sample {
            at: Instant::now(),
            unix_ms: crate::store::now_ms(),
            rss_bytes: crate::ops::process::resident_bytes(),
            staleness_ms: store
                .envs()
                .iter()
                .map(|e| (e.meta.load().name.clone(), (e.state.load().revision, store.staleness_ms(e))))
                .collect(),
        };
        *slot = Some(s.clone());
        s
    }

    /// The name other relays and operators see (empty before it is set).
    pub(crate) fn name(&self) -> String {
        // Unset before the server has bound its listener: the id names it.
        self.name.get().cloned().unwrap_or_default()
    }

    /// When this process started, Unix ms.
    pub(crate) fn started_unix_ms(&self) -> u64 {
        self.started_unix_ms
    }
}

/// The role name a node entry carries.
pub(crate) fn role(store: &Store) -> &'static str {
    match store.source() {
        Source::Primary => "primary",
        Source::Replica { .. } => "replica",
        Source::Shared => "shared",
    }
}

pub(crate) fn truncate(s: &mut String) {
    if s.len() > MAX_NODE_STRING {
        let mut end = MAX_NODE_STRING;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}
