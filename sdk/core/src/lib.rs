//! The flagstream evaluation core, shared by the SDK, the relay and the
//! CLI: the flag [`model`], [`Context`]s, validation against [`Limits`],
//! compilation into an immutable [`Snapshot`], the evaluation algorithm,
//! bucketing, [`FlagHandle`]s and the mapping to and from the
//! `flagstream.v1` protobuf messages ([`wire`]).
//!
//! This crate depends on no async runtime, network or storage crate (a test
//! in `tests/tests/tooling/core_dependencies.rs` checks its dependency tree): a flag
//! evaluation is a synchronous function over memory, with no I/O, no lock
//! and (for bool, string and number flags) no allocation. Getting snapshots
//! from a relay, caching them on disk and publishing them is the
//! `flagstream` SDK crate's job, which re-exports everything here.
//! `docs/EVALUATION.md` specifies the semantics for every language.

pub mod bucket;
mod cell;
pub mod checksum;
mod clause;
mod compile;
mod compiled;
mod context;
mod error;
mod eval;
pub mod feature;
mod handle;
mod limit;
pub mod model;
mod operand;
pub mod reference;
mod result;
mod schedule;
mod short;
mod snapshot;
pub mod usage;
pub mod validate;
mod value;
pub mod wire;

pub use cell::SnapshotCell;
pub use context::{AttrValue, Context, DEFAULT_KIND, INLINE_ATTRIBUTES, Scalar, Seq};
pub use error::{ErrorKind, ValidationError, ValidationErrors};
pub use handle::{FlagHandle, HandleUsage};
pub use limit::{
    Limits, MAX_CONTEXT_ATTRIBUTES, MAX_CONTEXT_KINDS, MAX_PREREQUISITE_DEPTH, MAX_SEGMENT_DEPTH,
    context_attributes_problem, context_kinds_problem,
};
pub use model::{Flag, FlagSet, FlagType, Segment};
pub use result::{Detail, Evaluation, Reason, ReasonParts};
pub use short::Name;
pub use snapshot::{FlagInfo, Snapshot};
pub use usage::{FlagUsage, UsageCounts};
pub use value::{FromValue, Value};

/// The generated `flagstream.v1` protobuf messages.
pub use flagstream_proto::v1 as proto;
