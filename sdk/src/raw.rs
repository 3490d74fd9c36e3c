//! Mirror messages of `SubscribeResponse` whose items stay as raw bytes.
//!
//! PROTOCOL.md §3.2: a client hashes each item's bytes *as received*, so a
//! checksum still matches when the relay knows fields this SDK does not.
//! These types decode the stream with every flag and segment left as the
//! `Bytes` slice it arrived in (an embedded message and a bytes field share
//! a wire format); the sync task hashes them, then decodes each item. Also
//! the cache's on-disk format.

use bytes::Bytes;

/// `SubscribeResponse` with raw items.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RawResponse {
    #[prost(oneof = "RawKind", tags = "1, 2, 3, 4")]
    pub(crate) kind: Option<RawKind>,
}

/// `SubscribeResponse.kind`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum RawKind {
    #[prost(message, tag = "1")]
    SnapshotChunk(RawChunk),
    #[prost(message, tag = "2")]
    Delta(RawDelta),
    #[prost(message, tag = "3")]
    Heartbeat(flagstream_proto::v1::Heartbeat),
    #[prost(message, tag = "4")]
    Reconnect(flagstream_proto::v1::Reconnect),
}

/// `SnapshotChunk` with its items as the raw bytes they arrived in (see
/// `flagstream.v1.SnapshotChunk` for the fields).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawChunk {
    #[prost(string, tag = "1")]
    /// Epoch of the snapshot.
    pub epoch: String,
    #[prost(uint64, tag = "2")]
    /// Revision it represents.
    pub revision: u64,
    #[prost(uint32, tag = "3")]
    /// 0-based position.
    pub chunk_index: u32,
    #[prost(uint32, tag = "4")]
    /// Chunks in the snapshot.
    pub total_chunks: u32,
    #[prost(bool, tag = "5")]
    /// True on the final chunk only.
    pub last_chunk: bool,
    #[prost(bytes = "bytes", repeated, tag = "6")]
    /// Encoded `Flag`s, as received.
    pub flags: Vec<Bytes>,
    #[prost(bytes = "bytes", repeated, tag = "7")]
    /// Encoded `Segment`s, as received.
    pub segments: Vec<Bytes>,
    #[prost(fixed64, tag = "8")]
    /// Checksum of the whole state at `revision`.
    pub checksum: u64,
    #[prost(string, tag = "9")]
    /// Environment name.
    pub environment: String,
    #[prost(uint64, tag = "10")]
    /// Commit time of `revision` on the primary, Unix ms.
    pub committed_unix_ms: u64,
}

/// `Delta` with its items as the raw bytes they arrived in (see
/// `flagstream.v1.Delta` for the fields).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawDelta {
    #[prost(string, tag = "1")]
    /// Epoch of both revisions.
    pub epoch: String,
    #[prost(uint64, tag = "2")]
    /// Revision the delta starts from.
    pub from_revision: u64,
    #[prost(uint64, tag = "3")]
    /// Revision after applying it.
    pub to_revision: u64,
    #[prost(bytes = "bytes", repeated, tag = "4")]
    /// Encoded `Flag`s created or changed, as received.
    pub upserted_flags: Vec<Bytes>,
    #[prost(bytes = "bytes", repeated, tag = "5")]
    /// Encoded `Segment`s created or changed, as received.
    pub upserted_segments: Vec<Bytes>,
    #[prost(string, repeated, tag = "6")]
    /// Keys of deleted flags.
    pub deleted_flag_keys: Vec<String>,
    #[prost(string, repeated, tag = "7")]
    /// Keys of deleted segments.
    pub deleted_segment_keys: Vec<String>,
    #[prost(fixed64, tag = "8")]
    /// Checksum of the whole state at `to_revision`.
    pub checksum: u64,
    #[prost(uint64, tag = "9")]
    /// Commit time of `to_revision` on the primary, Unix ms.
    pub committed_unix_ms: u64,
}

/// Version of [`CacheBlob`]'s layout this SDK writes and reads.
pub(crate) const CACHE_FORMAT: u32 = 1;

/// The cache file's content: one atomic value.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct CacheBlob {
    /// Bumped when the layout changes; an unknown version is ignored.
    #[prost(uint32, tag = "1")]
    pub(crate) format: u32,
    #[prost(string, tag = "2")]
    pub(crate) epoch: String,
    #[prost(uint64, tag = "3")]
    pub(crate) revision: u64,
    #[prost(fixed64, tag = "4")]
    pub(crate) checksum: u64,
    #[prost(bytes = "bytes", repeated, tag = "5")]
    pub(crate) flags: Vec<Bytes>,
    #[prost(bytes = "bytes", repeated, tag = "6")]
    pub(crate) segments: Vec<Bytes>,
    #[prost(uint64, tag = "7")]
    pub(crate) written_unix_ms: u64,
    /// XXH3 of the SDK key the snapshot was received with: a cache is never
    /// served to a client of another environment.
    #[prost(fixed64, tag = "8")]
    pub(crate) key_fingerprint: u64,
}
