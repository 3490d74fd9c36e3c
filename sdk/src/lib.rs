//! flagstream: feature flags evaluated in process memory.
//!
//! The [`Client`] keeps a stream open to a flagstream relay in the
//! background and swaps each new immutable [`Snapshot`] into lock-free
//! memory; a flag check reads that memory and never touches the network.
//! With the `cache` feature (on by default), a sled cache keeps the
//! last-known-good flags across restarts; without it the crate links no
//! sled and [`Builder`] has no `cache_dir` option.
//!
//! The evaluation itself — the flag [`model`], [`Context`]s, validation,
//! compiled snapshots, bucketing, handles and the wire mapping — lives in
//! the `flagstream-core` crate, which depends on nothing async, networked or
//! stored, and is re-exported here unchanged: `flagstream::Snapshot` and
//! `flagstream_core::Snapshot` are the same type. This crate adds the sync
//! task, the cache and the client API around it.

mod backoff;
#[cfg(feature = "cache")]
mod cache;
mod client;
mod clock;
mod error;
pub mod follow;
#[doc(hidden)]
pub mod fuzz;
mod held;
#[cfg(feature = "openfeature")]
pub mod openfeature;
mod private_dir;
mod raw;
mod secret;
mod shared;
mod stats;
mod status;
mod sync;
mod usage_summary;

pub use flagstream_core::{
    AttrValue, Context, DEFAULT_KIND, Detail, ErrorKind, Evaluation, FlagHandle, FromValue,
    INLINE_ATTRIBUTES, Limits, MAX_CONTEXT_ATTRIBUTES, MAX_CONTEXT_KINDS, MAX_PREREQUISITE_DEPTH,
    MAX_SEGMENT_DEPTH, Name, Reason, ReasonParts, Scalar, Seq, Snapshot, SnapshotCell, ValidationError,
    ValidationErrors, Value, bucket, checksum, context_attributes_problem, context_kinds_problem, feature,
    model, proto, reference, usage, validate, wire,
};
pub use flagstream_core::{Flag, FlagInfo, FlagSet, FlagType, Segment};
pub use flagstream_core::{FlagUsage, UsageCounts};

pub use client::{Builder, Client, EvaluationDetail, read_flag_file};
#[cfg(feature = "cache")]
pub use error::CacheError;
pub use error::{ApplyError, BuildError};
#[doc(hidden)]
pub use private_dir::make_private;
pub use secret::Secret;
pub use shared::Change;
pub use stats::Stats;
pub use status::{Attempt, Source, Status};
