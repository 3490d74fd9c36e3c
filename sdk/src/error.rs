//! Every error type of the SDK, in one place at the bottom of the crate:
//! why received data could not be applied ([`ApplyError`], a resync), why a
//! client could not be built ([`BuildError`]) and, with the `cache`
//! feature, why the cache is not used ([`CacheError`]). Causes are kept as
//! `source`s. The core's errors (`ValidationErrors`, `ErrorKind`) are the
//! core's, re-exported at the crate root.
//!
//! The one mapping from a gRPC status (a relay's refusal, its retry-after
//! hint, a broken transport) is `follow/end.rs`.

use crate::raw::CACHE_FORMAT;
use flagstream_core::ValidationErrors;

/// Why received data could not be applied. Each one makes the client
/// discard what it got and ask for a full snapshot.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// An item did not decode.
    #[error("undecodable {what}")]
    Decode {
        /// Which item.
        what: &'static str,
        /// Why.
        #[source]
        source: prost::DecodeError,
    },
    /// The data broke validation.
    #[error("received data is invalid")]
    Invalid(#[from] ValidationErrors),
    /// The checksum after applying did not match the relay's.
    #[error(
        "checksum mismatch at revision {revision}: computed {computed:#018x}, relay sent {expected:#018x}"
    )]
    Checksum {
        /// Revision.
        revision: u64,
        /// Ours.
        computed: u64,
        /// Theirs.
        expected: u64,
    },
    /// A heartbeat named our epoch and revision as the relay's head with
    /// another checksum: the relay holds other content under our revision
    /// (a restored or replaced store whose new writes reached our revision
    /// number again). Our data is not current; a snapshot is requested.
    #[error(
        "the relay's head is our revision {revision} with other content: its checksum {theirs:#018x}, ours {ours:#018x} (a restored or replaced store)"
    )]
    Diverged {
        /// The revision both claim.
        revision: u64,
        /// Our checksum.
        ours: u64,
        /// The relay's, from its heartbeat.
        theirs: u64,
    },
    /// A delta that does not start at our cursor.
    #[error("delta {from}..{to} does not follow our revision {ours} (epoch {epoch_ok})")]
    Gap {
        /// Delta start.
        from: u64,
        /// Delta end.
        to: u64,
        /// Our revision.
        ours: u64,
        /// Whether the epoch matched.
        epoch_ok: bool,
    },
    /// Snapshot chunks out of order.
    #[error("snapshot chunk {got} arrived, expected {want}")]
    ChunkOrder {
        /// Received index.
        got: u32,
        /// Expected index.
        want: u32,
    },
    /// A snapshot larger than the snapshot size limit.
    #[error("snapshot of {bytes} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// Bytes received.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A message that contradicts itself (e.g. upserts and deletes one key).
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// A cache written for another SDK key.
    #[error("cache belongs to another SDK key")]
    OtherKey,
    /// A cache of another format version.
    #[error("cache format {0} is not {CACHE_FORMAT} (or 1 or 2, still read)")]
    Format(u32),
    /// The receiver could not store what it received (a replica relay's
    /// database failed).
    #[error("storing the received data failed")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Neither endpoints nor an offline source were given.
    #[error("no endpoints: call .endpoints([...]) or use an offline source")]
    NoEndpoints,
    /// Streaming needs an SDK key.
    #[error("no SDK key: call .sdk_key(...)")]
    NoSdkKey,
    /// An endpoint is not a URL.
    #[error("endpoint {0:?} is not an http:// or https:// URL")]
    BadEndpoint(String),
    /// The flag file could not be read.
    #[error("flag file {path}")]
    File {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A setting is out of range.
    #[error("invalid setting: {0}")]
    Config(String),
    /// `build()` was called outside a Tokio runtime.
    #[error("build() must run inside a Tokio runtime (the sync task is spawned on it)")]
    NoRuntime,
}

#[cfg(feature = "cache")]
/// Cache problems; none of them stops the client.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Another client (in this or another process) holds the directory.
    #[error("cache directory {path} is in use by another client (give each client its own cache_dir)")]
    Locked {
        /// The directory.
        path: String,
        /// sled's error.
        #[source]
        source: sled::Error,
    },
    /// The directory could not be made private to this user (mode 0700,
    /// files 0600): the cache is not used rather than left readable.
    #[error("cache directory {path} cannot be made private to this user (mode 0700)")]
    Private {
        /// The directory.
        path: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// sled failed.
    #[error("cache storage error")]
    Storage(#[from] sled::Error),
    /// The stored value does not decode.
    #[error("cache is corrupt or truncated")]
    Corrupt(#[from] prost::DecodeError),
    /// A part file could not be written, synced, read or removed.
    #[error("cache part file {path}: {source}")]
    PartFile {
        /// The file.
        path: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The header names a part that is not stored.
    #[error("cache is missing part {part} of {parts}")]
    MissingPart {
        /// The missing part's number.
        part: u32,
        /// Parts the header names.
        parts: u32,
    },
    /// The stored snapshot does not verify or compile.
    #[error("cached snapshot is unusable")]
    Unusable(#[from] ApplyError),
}
