//! The one place domain errors become gRPC statuses. Messages say what was
//! wrong and which field; causes are logged, not leaked.

use tonic::Status;
use tonic::metadata::MetadataValue;

use crate::store::StoreError;

/// Trailer/header carrying a retry hint in milliseconds.
pub(crate) use flagstream_proto::metadata::RETRY_AFTER_MS;

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
            StoreError::Quota { .. } => Status::resource_exhausted(e.to_string()),
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

/// An `INVALID_ARGUMENT` naming a request field.
pub(crate) fn invalid(path: &str, message: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{path}: {message}"))
}

/// An `OUT_OF_RANGE` naming a request field (a position past what exists).
pub(crate) fn out_of_range(path: &str, message: impl std::fmt::Display) -> Status {
    Status::out_of_range(format!("{path}: {message}"))
}
