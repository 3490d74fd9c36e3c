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

impl RawChunk {
    /// Moves the items into one buffer of their exact size (see
    /// [`compact`]).
    pub(crate) fn compact(&mut self) {
        compact([&mut self.flags, &mut self.segments]);
    }
}

impl RawDelta {
    /// Moves the items into one buffer of their exact size (see
    /// [`compact`]).
    pub(crate) fn compact(&mut self) {
        compact([&mut self.upserted_flags, &mut self.upserted_segments]);
    }
}

/// Copies the items of one message into a single buffer of exactly their
/// size and points them there. Decoded, they are slices of the transport's
/// receive buffer, which is larger than the message (a 50 MiB snapshot
/// arrived in ~79 MiB of such buffers) and which every slice keeps whole for
/// as long as the item is held — for a flag that never changes again, the
/// life of the client.
fn compact<const N: usize>(lists: [&mut Vec<Bytes>; N]) {
    let total: usize = lists.iter().flat_map(|l| l.iter()).map(Bytes::len).sum();
    if total == 0 {
        return;
    }
    let mut buf = bytes::BytesMut::with_capacity(total);
    for item in lists.iter().flat_map(|l| l.iter()) {
        buf.extend_from_slice(item);
    }
    let mut all = buf.freeze();
    for list in lists {
        for item in list.iter_mut() {
            *item = all.split_to(item.len());
        }
    }
}

/// Version of [`CacheBlob`]'s layout this SDK writes: 3, the items in
/// [`CachePart`]s in files of their own beside sled's, named by the
/// header's generation. Versions 1 (the items inline in the one value) and
/// 2 (the parts as sled values) are still read.
pub(crate) const CACHE_FORMAT: u32 = 3;

/// The layout with the parts as sled values.
pub(crate) const CACHE_FORMAT_PARTS: u32 = 2;

/// The layout with every item inline in the [`CacheBlob`].
pub(crate) const CACHE_FORMAT_INLINE: u32 = 1;

/// The cache's header value (and, in format 1, its whole content).
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
    /// Format 1 only: the flags (formats 2 and 3: in the parts).
    #[prost(bytes = "bytes", repeated, tag = "5")]
    pub(crate) flags: Vec<Bytes>,
    /// Format 1 only: the segments (formats 2 and 3: in the parts).
    #[prost(bytes = "bytes", repeated, tag = "6")]
    pub(crate) segments: Vec<Bytes>,
    #[prost(uint64, tag = "7")]
    pub(crate) written_unix_ms: u64,
    /// XXH3 of the SDK key the snapshot was received with: a cache is never
    /// served to a client of another environment.
    #[prost(fixed64, tag = "8")]
    pub(crate) key_fingerprint: u64,
    /// Formats 2 and 3: how many [`CachePart`]s hold the items.
    #[prost(uint32, tag = "9")]
    pub(crate) parts: u32,
    /// Format 3: the generation the part files are named by (one more than
    /// the header's it replaced).
    #[prost(uint64, tag = "10")]
    pub(crate) generation: u64,
}

/// Formats 2 and 3: a run of the cached items, at most about
/// [`CACHE_PART_BYTES`], in snapshot order (flags, then segments).
#[cfg(feature = "cache")]
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct CachePart {
    #[prost(bytes = "bytes", repeated, tag = "1")]
    pub(crate) flags: Vec<Bytes>,
    #[prost(bytes = "bytes", repeated, tag = "2")]
    pub(crate) segments: Vec<Bytes>,
}

/// Item bytes per [`CachePart`] (an item larger than that is alone in
/// its part): a write encodes one part at a time, so it costs about one
/// part of memory on top of the items.
#[cfg(feature = "cache")]
pub(crate) const CACHE_PART_BYTES: usize = 1 << 20;

#[cfg(feature = "cache")]
impl CachePart {
    /// Splits items into parts of about `max_bytes` each, in order.
    pub(crate) fn split(flags: Vec<Bytes>, segments: Vec<Bytes>, max_bytes: usize) -> Vec<CachePart> {
        let mut parts = vec![CachePart::default()];
        let mut size = 0;
        let items = flags.into_iter().map(|b| (true, b)).chain(segments.into_iter().map(|b| (false, b)));
        for (is_flag, bytes) in items {
            let current = parts.last_mut().expect("parts starts non-empty");
            let empty = current.flags.is_empty() && current.segments.is_empty();
            if !empty && size + bytes.len() > max_bytes {
                parts.push(CachePart::default());
                size = 0;
            }
            size += bytes.len();
            let current = parts.last_mut().expect("just pushed");
            if is_flag { current.flags.push(bytes) } else { current.segments.push(bytes) }
        }
        parts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compacted items keep their bytes and order and share one buffer of
    /// exactly their size.
    #[test]
    fn compact_keeps_items_in_one_exact_buffer() {
        let big = Bytes::from(vec![7u8; 4096]);
        let mut d = RawDelta {
            upserted_flags: vec![big.slice(0..10), big.slice(100..130)],
            upserted_segments: vec![Bytes::from_static(b"seg")],
            ..Default::default()
        };
        d.compact();
        assert_eq!(d.upserted_flags, vec![big.slice(0..10), big.slice(100..130)]);
        assert_eq!(d.upserted_segments, vec![Bytes::from_static(b"seg")]);
        let base = d.upserted_flags[0].as_ptr();
        assert_eq!(d.upserted_flags[1].as_ptr(), base.wrapping_add(10), "one buffer, in order");
        assert_eq!(d.upserted_segments[0].as_ptr(), base.wrapping_add(40));
        drop(d);
        assert!(big.is_unique(), "the receive buffer is no longer held");
    }

    /// Parts stay within the bound (an oversized item alone) and keep every
    /// item in order.
    #[cfg(feature = "cache")]
    #[test]
    fn cache_parts_split_in_order_within_the_bound() {
        let item = |n: usize, b: u8| Bytes::from(vec![b; n]);
        let flags = vec![item(40, 1), item(40, 2), item(30, 3), item(200, 4), item(10, 5)];
        let parts = CachePart::split(flags.clone(), vec![item(5, 6)], 100);
        let sizes: Vec<usize> =
            parts.iter().map(|p| p.flags.iter().chain(&p.segments).map(Bytes::len).sum()).collect();
        assert_eq!(sizes, vec![80, 30, 200, 15]);
        let back: Vec<Bytes> = parts.iter().flat_map(|p| p.flags.clone()).collect();
        assert_eq!(back, flags);
        assert_eq!(parts[3].segments, vec![item(5, 6)]);
        assert_eq!(CachePart::split(vec![], vec![], 100).len(), 1, "an empty snapshot is one part");
    }
}
