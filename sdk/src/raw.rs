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

/// A `Flag` read for its key alone: prost skips every other field without
/// decoding it. See [`flag_key`].
#[derive(Clone, PartialEq, prost::Message)]
struct FlagKey {
    #[prost(string, tag = "1")]
    key: String,
}

/// The key of an encoded `Flag`, without decoding the rest: what a cold
/// start from the cache needs to index raw flags. Encoders write fields in
/// tag order, so the key (tag 1, length-delimited) normally comes first and
/// is borrowed in place; anything else takes prost's general decoder, which
/// also reports what is wrong with a malformed item.
pub(crate) fn flag_key(raw: &Bytes) -> Result<std::borrow::Cow<'_, str>, prost::DecodeError> {
    if let [0x0a, rest @ ..] = raw.as_ref() {
        // The key's length: a varint, at most 5 bytes for any `usize` here.
        let (mut len, mut shift) = (0usize, 0);
        for (i, b) in rest.iter().take(5).enumerate() {
            len |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                if let Some(key) = rest.get(i + 1..).and_then(|r| r.get(..len))
                    && let Ok(key) = std::str::from_utf8(key)
                {
                    return Ok(std::borrow::Cow::Borrowed(key));
                }
                break;
            }
        }
    }
    <FlagKey as prost::Message>::decode(raw.clone()).map(|f| std::borrow::Cow::Owned(f.key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn flag_key_borrows_a_leading_key_and_decodes_any_other_layout() {
        let flag = flagstream_proto::v1::Flag { key: "checkout".into(), version: 3, ..Default::default() };
        let raw = Bytes::from(flag.encode_to_vec());
        assert!(matches!(flag_key(&raw), Ok(std::borrow::Cow::Borrowed("checkout"))));
        // The version (tag 11, the last two bytes) moved before the key.
        let mut reordered = raw[raw.len() - 2..].to_vec();
        reordered.extend_from_slice(&raw[..raw.len() - 2]);
        let reordered = Bytes::from(reordered);
        assert_eq!(flag_key(&reordered).unwrap(), "checkout");
        assert!(flag_key(&Bytes::from_static(b"\x0a\x05ab")).is_err(), "truncated key");
    }
}
