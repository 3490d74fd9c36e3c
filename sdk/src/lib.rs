//! flagstream: feature flags evaluated in process memory.
//!
//! This crate holds the evaluation core shared by the SDK, the relay and the
//! CLI: the flag [`model`], [`Context`]s, validation against [`Limits`],
//! compilation into an immutable [`Snapshot`], the evaluation algorithm and
//! bucketing. The core imports nothing async or networked: evaluating a flag
//! is a synchronous function over memory, with no I/O, no lock and (for
//! bool, string and number flags) no allocation. `docs/EVALUATION.md`
//! specifies its semantics for every language.

pub mod bucket;
mod cell;
mod clause;
mod context;
mod eval;
mod handle;
mod limit;
pub mod model;
mod snapshot;
pub mod validate;
mod value;
pub mod wire;

pub use cell::SnapshotCell;
pub use context::{AttrValue, Context, DEFAULT_KIND, INLINE_ATTRIBUTES, Scalar};
pub use eval::{Detail, ErrorKind, Evaluation, Reason};
pub use handle::FlagHandle;
pub use limit::{Limits, MAX_PREREQUISITE_DEPTH};
pub use model::{Flag, FlagSet, FlagType, Segment};
pub use snapshot::Snapshot;
pub use validate::{ValidationError, ValidationErrors};
pub use value::{FromValue, Value};

/// The generated `flagstream.v1` protobuf types, re-exported so users need
/// no second dependency.
pub use flagstream_proto::v1 as proto;
