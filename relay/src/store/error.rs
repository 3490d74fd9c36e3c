//! What can go wrong in the store, typed, each naming what was wrong and
//! where, with causes kept. Turning these into gRPC statuses is the
//! relay's one mapping (`crate::error`).

use std::path::PathBuf;

use flagstream::ValidationErrors;

use super::state::Kind;

/// Store errors. Each names what was wrong and where.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No such environment.
    #[error("environment {0:?} not found")]
    EnvNotFound(String),
    /// No such SDK key (or it expired).
    #[error("SDK key {id:?} not found in environment {env:?}")]
    KeyNotFound {
        /// Environment.
        env: String,
        /// Key id.
        id: String,
    },
    /// The environment name is taken.
    #[error("environment {0:?} already exists")]
    EnvExists(String),
    /// No such flag or segment.
    #[error("{} {key:?} not found in environment {env:?}", kind.name())]
    ItemNotFound {
        /// Environment.
        env: String,
        /// Item kind.
        kind: Kind,
        /// Item key.
        key: String,
    },
    /// Optimistic concurrency: the item changed since the caller read it.
    #[error("{} {key:?}: expected version {expected}, but it is at version {current}{}", kind.name(), changed_by.as_ref().map(|c| format!(" (last changed by {c})")).unwrap_or_default())]
    Conflict {
        /// Item kind.
        kind: Kind,
        /// Item key.
        key: String,
        /// What the caller expected (0 = must not exist).
        expected: u64,
        /// What it is (0 = does not exist).
        current: u64,
        /// Who made the current version and when, from the audit log.
        changed_by: Option<String>,
    },
    /// The environment moved past the revision a batch expected.
    #[error("environment {env:?} is at revision {current}, the request expected {expected}")]
    RevisionConflict {
        /// Environment.
        env: String,
        /// Expected revision.
        expected: u64,
        /// Actual revision.
        current: u64,
    },
    /// The write would leave invalid data.
    #[error(transparent)]
    Invalid(#[from] ValidationErrors),
    /// The database failed.
    #[error("storage error")]
    Storage(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// An earlier storage failure left memory and disk possibly apart;
    /// writes stop until a restart reloads the truth from disk.
    #[error("environment {0:?} refuses writes after a storage failure; restart the relay to reload it")]
    Poisoned(String),
    /// The write would take the environment past a size quota.
    #[error(
        "environment {env:?}: the write would make {used} {what}, quota {limit} ({setting}); nothing was written"
    )]
    Quota {
        /// Environment.
        env: String,
        /// What is counted (`flags`, `segments`, `bytes of flags and segments`).
        what: &'static str,
        /// The quota's metric label.
        quota: &'static str,
        /// The relay option that sets it.
        setting: &'static str,
        /// What the write would make.
        used: usize,
        /// The quota.
        limit: usize,
    },
    /// The write would take the relay past its memory budget (or, for an
    /// environment over its fair share, past the part of the budget such an
    /// environment may fill): the figures.
    #[error("{0}")]
    MemoryBudget(Box<BudgetRefusal>),
    /// This relay is a replica: its data comes from upstream, and every
    /// change is made at the primary.
    #[error("this relay is a replica (it follows {upstream}); send changes to the primary{}", primary.as_ref().map(|p| format!(" at {p}")).unwrap_or_default())]
    ReadOnly {
        /// The upstream URLs it follows.
        upstream: String,
        /// The primary's address, when the upstream announced one.
        primary: Option<String>,
    },
    /// A shared backend's head moved past the revision a write was planned
    /// on (another relay wrote): catch up and plan again.
    #[error("environment {env:?} moved to revision {current} in the database")]
    Behind {
        /// Environment.
        env: String,
        /// The database's epoch.
        epoch: String,
        /// The database's head.
        current: u64,
    },
    /// A shared database could not be reached: nothing was written.
    #[error("the database is unavailable; nothing was written")]
    DatabaseUnavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A shared database's connection failed during the commit and the
    /// commit's request id could not be looked up: it may have happened.
    #[error(
        "the database connection failed during the commit and its outcome could not be confirmed; re-read before retrying"
    )]
    OutcomeUnknown(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The caller went away while the write waited for its turn; it was
    /// not started.
    #[error("the caller went away before the write started; nothing was written")]
    Abandoned,
    /// A write's task failed (panicked, or the runtime is shutting down).
    #[error("the write's task failed")]
    Task(#[source] tokio::task::JoinError),
    /// The store holds less than was committed (sled cut a garbled or
    /// truncated log back): refused at start, never served.
    #[error(
        "environment {env:?}: the store holds {stored}, but {committed} was committed (recorded in {}): the database lost acknowledged writes (a garbled or truncated file); restore the data directory from a backup, or delete that file to serve what is left",
        marks.display()
    )]
    RolledBack {
        /// Environment.
        env: String,
        /// What the store holds.
        stored: String,
        /// What was committed.
        committed: String,
        /// The commit marks file.
        marks: PathBuf,
    },
    /// The commit marks file could not be read or written at start.
    #[error("the commit marks file {} cannot be read or written", path.display())]
    MarksUnreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Stored data did not decode.
    #[error("stored {what} is corrupt")]
    Corrupt {
        /// Which record.
        what: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl From<::sled::Error> for StoreError {
    fn from(e: ::sled::Error) -> StoreError {
        StoreError::Storage(Box::new(e))
    }
}

/// A corrupt-record error.
pub(crate) fn corrupt(what: String, e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Corrupt { what, source: Box::new(e) }
}

/// Serialises a record; a failure is reported, never written as an empty
/// (corrupt) value.
pub(crate) fn to_json<T: serde::Serialize>(what: &str, v: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(v).map_err(|e| corrupt(format!("{what} (while encoding)"), e))
}

/// The figures of a write the memory budget refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "environment {env:?}: the write would grow it to {env_bytes} bytes{}; with the relay at {resident} bytes resident, \
     {reserved} bytes set aside for other writes being applied, {copies}× the environment's size held while this one \
     is applied and {transient} bytes to process its {request_bytes}-byte request, that is {projected} bytes, over {}; \
     nothing was written",
    if *estimated { " (estimated from the request, before planning it)" } else { "" },
    match fair_share {
        Some(share) => format!(
            "{limit} bytes, 3/4 of memory-budget {budget}: the environment would hold more than its fair share \
             of the data ({share} bytes, 1/{environments} of all environments' item bytes), so the rest of the \
             budget is kept for the other environments"
        ),
        None => format!("memory-budget {budget}"),
    }
)]
pub struct BudgetRefusal {
    /// Environment.
    pub(crate) env: String,
    /// The environment's bytes of item encodings after the write.
    pub(crate) env_bytes: u64,
    /// Whether `env_bytes` is estimated from the request (before
    /// planning).
    pub(crate) estimated: bool,
    /// The relay's resident bytes when the write was checked.
    pub(crate) resident: u64,
    /// Bytes set aside for other writes being applied then.
    pub(crate) reserved: u64,
    /// Copies of the environment the estimate counts.
    pub(crate) copies: u64,
    /// The encoded bytes of the items the request carries.
    pub(crate) request_bytes: u64,
    /// What processing the request is estimated to add, bytes.
    pub(crate) transient: u64,
    /// `resident + reserved + copies × env_bytes + transient`.
    pub(crate) projected: u64,
    /// The budget (`memory-budget`).
    pub(crate) budget: u64,
    /// The limit applied: the budget, or 3/4 of it for an environment
    /// over its fair share.
    pub(crate) limit: u64,
    /// The environment's fair share of all environments' item bytes,
    /// when it would hold more than that.
    pub(crate) fair_share: Option<u64>,
    /// Environments the budget is shared by.
    pub(crate) environments: u64,
}
