//! The one place errors become gRPC statuses. The relay's errors are typed
//! where they arise ([`StoreError`] in the store, [`AccessError`] in the
//! token registry) and, for what a request does wrong or may not do,
//! [`Refusal`] here; each has one mapping to a `tonic::Status` below, and
//! nothing else in the crate builds a status. Messages say what was wrong
//! and which field; causes are logged, not leaked.

use tonic::Status;
use tonic::metadata::MetadataValue;

use crate::access::AccessError;
use crate::store::StoreError;

/// Trailer/header carrying a retry hint in milliseconds.
pub(crate) use flagstream_proto::metadata::RETRY_AFTER_MS;

/// Why the relay refuses a request (or ends a stream), typed by cause.
/// Converted to a status by `From<Refusal> for Status`, the one mapping.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    /// No credential, or one the relay does not know (UNAUTHENTICATED).
    #[error("{0}")]
    Unauthenticated(&'static str),
    /// The credential was revoked; what it held ends (UNAUTHENTICATED).
    #[error("{0}")]
    Revoked(String),
    /// The credential is known but lacks the role, scope or environment
    /// (PERMISSION_DENIED); the message names what is missing.
    #[error("{0}")]
    NotPermitted(String),
    /// A request field is wrong (INVALID_ARGUMENT).
    #[error("{field}: {message}")]
    Invalid {
        /// The field's path in the request (`ops[3].put_flag.flag`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The request breaks the protocol's message order or framing
    /// (INVALID_ARGUMENT).
    #[error("{0}")]
    Protocol(String),
    /// A message over its size limit, or a position past what exists
    /// (OUT_OF_RANGE: not to be retried unchanged).
    #[error("{field}: {message}")]
    OutOfRange {
        /// The field or message.
        field: String,
        /// The size and the limit, or what exists.
        message: String,
    },
    /// A request message over the stream's size limit (OUT_OF_RANGE).
    #[error("request message of {len} bytes exceeds the limit of {max} bytes")]
    MessageTooLarge {
        /// Its length, bytes.
        len: usize,
        /// The limit, bytes.
        max: usize,
    },
    /// A method this server does not have (UNIMPLEMENTED).
    #[error("no method {0}")]
    NoMethod(String),
    /// The client did not send what the protocol needs in time
    /// (DEADLINE_EXCEEDED).
    #[error("{0}")]
    TooSlow(&'static str),
    /// No such item in the environment (NOT_FOUND).
    #[error("{kind} {key:?} not found in environment {env:?}")]
    ItemNotFound {
        /// `flag` or `segment`.
        kind: &'static str,
        /// Its key.
        key: String,
        /// The environment.
        env: String,
    },
    /// The environment a stream follows was deleted (NOT_FOUND).
    #[error("environment {0:?} was deleted")]
    EnvDeleted(String),
    /// This relay cannot serve it now; another relay may (UNAVAILABLE).
    #[error("{0}")]
    NotHere(String),
    /// The environment's data uses an evaluation feature the client does
    /// not announce (FAILED_PRECONDITION naming it, PROTOCOL.md §8 rule 7):
    /// it would evaluate it wrongly.
    #[error(
        "environment {env:?} uses the evaluation feature {feature:?}, which this client does not announce: upgrade it (it keeps its last-known-good flags meanwhile)"
    )]
    MissingFeature {
        /// The environment.
        env: String,
        /// The feature's name.
        feature: &'static str,
    },
    /// A count limit is reached (RESOURCE_EXHAUSTED without a retry hint:
    /// it frees only when something open closes); the message names the
    /// limit and its option.
    #[error("{0}")]
    OverLimit(String),
    /// The blocking task doing the request's work failed (INTERNAL).
    #[error("{what}'s task failed")]
    TaskFailed {
        /// What the task was doing.
        what: &'static str,
        /// Why it failed.
        #[source]
        cause: tokio::task::JoinError,
    },
}

impl From<Refusal> for Status {
    fn from(r: Refusal) -> Status {
        let message = r.to_string();
        match r {
            Refusal::Unauthenticated(_) | Refusal::Revoked(_) => Status::unauthenticated(message),
            Refusal::NotPermitted(_) => Status::permission_denied(message),
            Refusal::Invalid { .. } | Refusal::Protocol(_) => Status::invalid_argument(message),
            Refusal::OutOfRange { .. } | Refusal::MessageTooLarge { .. } => Status::out_of_range(message),
            Refusal::NoMethod(_) => Status::unimplemented(message),
            Refusal::TooSlow(_) => Status::deadline_exceeded(message),
            Refusal::ItemNotFound { .. } | Refusal::EnvDeleted(_) => Status::not_found(message),
            Refusal::NotHere(_) => Status::unavailable(message),
            Refusal::MissingFeature { .. } => Status::failed_precondition(message),
            Refusal::OverLimit(_) => Status::resource_exhausted(message),
            Refusal::TaskFailed { cause, .. } => {
                tracing::error!(error = %cause, "{message}");
                Status::internal(message)
            }
        }
    }
}

impl From<AccessError> for Status {
    fn from(e: AccessError) -> Status {
        match &e {
            AccessError::NotPermitted(m) => Status::permission_denied(m.clone()),
            AccessError::Invalid(m) => Status::invalid_argument(m.clone()),
            AccessError::Exists(_) => Status::already_exists(e.to_string()),
            AccessError::NotFound(_) => Status::not_found(e.to_string()),
            AccessError::LastAdmin(_) => Status::failed_precondition(e.to_string()),
            // Counted by the caller (the Admin call); no retry hint: a
            // count, not a rate.
            AccessError::Quota { .. } => Status::resource_exhausted(e.to_string()),
            AccessError::Storage(cause) => {
                tracing::error!(error = %cause, "token storage failure");
                Status::unavailable("storage failure")
            }
            AccessError::ReadOnly(m) => Status::unimplemented(m.clone()),
            AccessError::Io(cause) => {
                tracing::error!(error = %cause, "token file");
                Status::internal(e.to_string())
            }
        }
    }
}

/// `RESOURCE_EXHAUSTED` with a retry hint.
pub(crate) fn retry_later(message: &str, delay_ms: u64) -> Status {
    let mut status = Status::resource_exhausted(format!("{message}; retry in {delay_ms} ms"));
    if let Ok(v) = MetadataValue::try_from(delay_ms.to_string()) {
        status.metadata_mut().insert(RETRY_AFTER_MS, v);
    }
    status
}

impl From<StoreError> for Status {
    fn from(e: StoreError) -> Status {
        match &e {
            StoreError::EnvNotFound(_) | StoreError::ItemNotFound { .. } | StoreError::KeyNotFound { .. } => {
                Status::not_found(e.to_string())
            }
            StoreError::EnvExists(_) => Status::already_exists(e.to_string()),
            StoreError::Conflict { .. } | StoreError::RevisionConflict { .. } => {
                Status::failed_precondition(e.to_string())
            }
            StoreError::Invalid(v) => Status::invalid_argument(v.to_string()),
            StoreError::Poisoned(_) => Status::unavailable(e.to_string()),
            StoreError::Storage(cause) => {
                tracing::error!(error = %cause, "storage failure");
                Status::unavailable(
                    "storage failure; see the relay's log (with the embedded store, a failed commit or flush stops writes to its environment until the relay restarts)",
                )
            }
            StoreError::Abandoned => Status::cancelled(e.to_string()),
            StoreError::DatabaseUnavailable(cause) | StoreError::OutcomeUnknown(cause) => {
                tracing::error!(error = %cause, "database failure");
                Status::unavailable(e.to_string())
            }
            // A replica takes no changes: the client must go to the primary.
            StoreError::ReadOnly { .. } => Status::unimplemented(e.to_string()),
            // Internal to a shared backend's write loop; reaching a client
            // means the loop gave up: retryable.
            StoreError::Behind { .. } => Status::aborted(e.to_string()),
            // A size: retrying unchanged cannot help, so no retry hint.
            StoreError::Quota { .. } | StoreError::MemoryBudget(_) => {
                Status::resource_exhausted(e.to_string())
            }
            StoreError::Task(cause) => {
                tracing::error!(error = %cause, "write task failed");
                Status::internal(
                    "the write's task failed; the environment refuses further writes until the relay restarts",
                )
            }
            // Start-time refusals only: never a request's outcome.
            StoreError::RolledBack { .. } => Status::internal(e.to_string()),
            StoreError::MarksUnreadable { source, .. } => {
                tracing::error!(error = %source, "commit marks failure");
                Status::internal(e.to_string())
            }
            StoreError::Corrupt { what, source } => {
                tracing::error!(what = %what, error = %source, "corrupt stored data");
                Status::internal(format!("stored {what} is corrupt"))
            }
        }
    }
}

/// An `INVALID_ARGUMENT` naming a request field ([`Refusal::Invalid`]).
pub(crate) fn invalid(path: &str, message: impl std::fmt::Display) -> Status {
    Refusal::Invalid { field: path.to_owned(), message: message.to_string() }.into()
}

/// An `OUT_OF_RANGE` naming a request field (a position past what exists;
/// [`Refusal::OutOfRange`]).
pub(crate) fn out_of_range(path: &str, message: impl std::fmt::Display) -> Status {
    Refusal::OutOfRange { field: path.to_owned(), message: message.to_string() }.into()
}
