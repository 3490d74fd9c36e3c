//! flagstream: feature flags evaluated in process memory.
//!
//! The [`Client`] keeps a stream open to a flagstream relay in the
//! background and swaps each new immutable [`Snapshot`] into lock-free
//! memory; a flag check reads that memory and never touches the network.
//! A sled cache keeps the last-known-good flags across restarts.
//!
//! The evaluation itself — the flag [`model`], [`Context`]s, validation,
//! compiled snapshots, bucketing, handles and the wire mapping — lives in
//! the `flagstream-core` crate, which depends on nothing async, networked or
//! stored, and is re-exported here unchanged: `flagstream::Snapshot` and
//! `flagstream_core::Snapshot` are the same type. This crate adds the sync
//! task, the cache and the client API around it.

mod backoff;
mod cache;
mod client;
pub mod follow;
#[doc(hidden)]
pub mod fuzz;
#[cfg(feature = "openfeature")]
pub mod openfeature;
mod raw;
mod replica;
mod secret;
mod stats;
mod status;
mod sync;

pub use flagstream_core::{
    AttrValue, Context, DEFAULT_KIND, Detail, ErrorKind, Evaluation, FlagHandle, FromValue,
    INLINE_ATTRIBUTES, Limits, MAX_CONTEXT_ATTRIBUTES, MAX_CONTEXT_KINDS, MAX_PREREQUISITE_DEPTH,
    MAX_SEGMENT_DEPTH, Name, Reason, Scalar, Seq, Snapshot, SnapshotCell, ValidationError, ValidationErrors,
    Value, bucket, checksum, context_attributes_problem, context_kinds_problem, model, proto, reference,
    validate, wire,
};
pub use flagstream_core::{Flag, FlagSet, FlagType, Segment};

pub use cache::CacheError;
#[doc(hidden)]
pub use cache::make_private;
pub use client::{BuildError, Builder, Change, Client, EvaluationDetail, read_flag_file};
pub use replica::ApplyError;
pub use secret::Secret;
pub use stats::Stats;
pub use status::{Attempt, Source, Status};
