//! The client an application uses: the handle and what it reads
//! (`client/handle.rs`), building one (`client/builder.rs`), typed
//! evaluation and its owned results (`client/evaluate.rs`) and the
//! background tasks a client owns (`client/tasks.rs`). The state behind the
//! handle is `shared.rs`, fed by the sync task (`sync.rs`) or an offline
//! source.
//!
//! Evaluation is a synchronous function: one atomic load of the snapshot,
//! one hash lookup, the rules; no I/O, no await, no lock. It is safe inside
//! a database transaction.

mod builder;
mod evaluate;
mod handle;
mod tasks;

pub use builder::{Builder, read_flag_file};
pub use evaluate::EvaluationDetail;
pub use handle::Client;
