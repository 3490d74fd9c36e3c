//! flagstream: feature flags evaluated in process memory.
//!
//! The [`Client`] keeps a stream open to a flagstream relay in the
//! background and swaps each new immutable [`Snapshot`] into lock-free
//! memory; a flag check reads that memory and never touches the network.
//! A sled cache keeps the last-known-good flags across restarts.
//!
//! The evaluation core, shared by the SDK, the relay and the CLI: the flag
//! [`model`], [`Context`]s, validation against [`Limits`], compilation into
//! an immutable [`Snapshot`], the evaluation algorithm and bucketing. The
//! core modules (`model`, `context`, `reference`, `validate`, `clause`,
//! `bucket`, `schedule`, `snapshot`, `eval`, `value`, `handle`) import nothing async or networked: evaluating a flag
//! is a synchronous function over memory, with no I/O, no lock and (for
//! bool, string and number flags) no allocation. `docs/EVALUATION.md`
//! specifies its semantics for every language.

mod backoff;
pub mod bucket;
mod cache;
mod cell;
pub mod checksum;
mod clause;
mod client;
mod context;
mod eval;
pub mod follow;
mod handle;
mod limit;
pub mod model;
#[cfg(feature = "openfeature")]
pub mod openfeature;
mod raw;
pub mod reference;
mod replica;
mod schedule;
mod secret;
mod snapshot;
mod stats;
mod status;
mod sync;
pub mod validate;
mod value;
pub mod wire;

pub use cache::CacheError;
pub use cell::SnapshotCell;
pub use client::{BuildError, Builder, Change, Client, EvaluationDetail, read_flag_file};
pub use context::{AttrValue, Context, DEFAULT_KIND, INLINE_ATTRIBUTES, Scalar, Seq};
pub use eval::{Detail, ErrorKind, Evaluation, Reason};
pub use handle::FlagHandle;
pub use limit::{Limits, MAX_PREREQUISITE_DEPTH, MAX_SEGMENT_DEPTH};
pub use model::{Flag, FlagSet, FlagType, Segment};
pub use replica::ApplyError;
pub use secret::Secret;
pub use snapshot::Snapshot;
pub use stats::Stats;
pub use status::{Attempt, Source, Status};
pub use validate::{ValidationError, ValidationErrors};
pub use value::{FromValue, Value};

/// The generated `flagstream.v1` protobuf types, re-exported so users need
/// no second dependency.
pub use flagstream_proto::v1 as proto;
