//! Pre-encoded `SubscribeResponse` messages.
//!
//! The Subscribe stream (`crate::stream::grpc`) sends [`Encoded`] values: bytes that
//! already are a complete gRPC message — the 5-byte length prefix and a
//! `SubscribeResponse` — so a delivery is one reference-count increment and
//! one HTTP/2 DATA frame, with no copy and no per-subscriber encoding. Snapshot
//! chunks and deltas are assembled here from each item's stored protobuf
//! bytes, byte for byte as committed (PROTOCOL.md §3.2), once per
//! (environment, revision) or (environment, from, to), and shared by every
//! subscriber through `Bytes` reference counts. Nothing here knows about
//! subscribers or the store.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use bytes::{BufMut, Bytes, BytesMut};
use flagstream_proto::v1 as pb;
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};

/// Length of the gRPC message prefix: compression flag and u32 length.
const GRPC_PREFIX: usize = 5;

/// A complete, encoded `SubscribeResponse`, held as a gRPC message (length
/// prefix included) ready to be written to any number of streams.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Encoded(Bytes);

impl std::fmt::Debug for Encoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Encoded({} bytes)", self.len())
    }
}

impl Encoded {
    /// Frames a message of `len` bytes that `write` appends to the buffer.
    fn framed(len: usize, write: impl FnOnce(&mut BytesMut)) -> Encoded {
        let mut out = BytesMut::with_capacity(GRPC_PREFIX + len);
        out.put_u8(0); // not compressed
        out.put_u32(len as u32);
        write(&mut out);
        debug_assert_eq!(out.len(), GRPC_PREFIX + len, "length prefix matches the body");
        Encoded(out.freeze())
    }

    /// The `SubscribeResponse` bytes.
    pub(crate) fn message(&self) -> &[u8] {
        &self.0[GRPC_PREFIX..]
    }

    /// Length of the `SubscribeResponse` bytes.
    pub(crate) fn len(&self) -> usize {
        self.0.len() - GRPC_PREFIX
    }

    /// The gRPC message (prefix and body), shared, for the transport.
    pub(crate) fn grpc_frame(&self) -> Bytes {
        self.0.clone()
    }
}

// Field numbers of SubscribeResponse.kind (sync.proto).
const RESPONSE_SNAPSHOT_CHUNK: u32 = 1;
const RESPONSE_DELTA: u32 = 2;

/// Writes a length-delimited field holding `bytes` verbatim: the wire form
/// of an embedded message, a string or a bytes field alike.
fn put_bytes(tag: u32, bytes: &[u8], buf: &mut impl BufMut) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(bytes.len() as u64, buf);
    buf.put_slice(bytes);
}

fn len_of_bytes_field(tag: u32, len: usize) -> usize {
    prost::encoding::key_len(tag) + encoded_len_varint(len as u64) + len
}

fn put_u64(tag: u32, v: u64, buf: &mut impl BufMut) {
    if v != 0 {
        encode_key(tag, WireType::Varint, buf);
        encode_varint(v, buf);
    }
}

fn put_fixed64(tag: u32, v: u64, buf: &mut impl BufMut) {
    if v != 0 {
        encode_key(tag, WireType::SixtyFourBit, buf);
        buf.put_u64_le(v);
    }
}

/// Wraps a message body as field `tag` of `SubscribeResponse`.
fn wrap(tag: u32, body: BytesMut) -> Encoded {
    Encoded::framed(len_of_bytes_field(tag, body.len()), |out| put_bytes(tag, &body, out))
}

/// The header fields shared by all chunks of one snapshot.
#[derive(Debug, Clone)]
pub(crate) struct ChunkHeader {
    pub(crate) environment: String,
    pub(crate) epoch: String,
    pub(crate) revision: u64,
    pub(crate) checksum: u64,
    pub(crate) committed_unix_ms: u64,
}

/// Upper bound of a chunk's non-item fields, so packing stays under the
/// configured message size.
const CHUNK_OVERHEAD: usize = 256;

// Field numbers of SnapshotChunk (sync.proto).
const CHUNK_FLAGS: u32 = 6;
const CHUNK_SEGMENTS: u32 = 7;

/// One revision's snapshot, split into `SnapshotChunk` messages of at most
/// `max_bytes` each (an item larger than that travels alone).
///
/// The plan holds the items' stored bytes by reference count (the same
/// buffers the environment's state holds) and where each chunk starts; a
/// chunk's message is assembled from them when a stream needs it and
/// shared with every stream that needs it while any still holds it. A
/// multi-chunk snapshot is therefore not kept encoded a second time next
/// to its items: memory holds what is in flight. A snapshot of one chunk
/// is kept once assembled (at most `max_bytes`, or its one item when that
/// alone is larger; nearly every subscriber of a small environment needs
/// it).
pub(crate) struct SnapshotChunks {
    header: ChunkHeader,
    /// `(field, bytes)` of every item, in snapshot order.
    items: Vec<(u32, Bytes)>,
    /// Index in `items` where each chunk starts; one more entry, the end.
    starts: Vec<usize>,
    /// Each chunk's message while some stream holds it.
    assembled: Vec<Mutex<Weak<Vec<u8>>>>,
    /// The only chunk of a one-chunk snapshot, once assembled.
    whole: OnceLock<Encoded>,
}

impl std::fmt::Debug for SnapshotChunks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SnapshotChunks({} items in {} chunks)", self.items.len(), self.len())
    }
}

/// An assembled chunk, owned by the `Bytes` that streams hold; the plan
/// keeps only a weak reference.
struct Frame(Arc<Vec<u8>>);

impl AsRef<[u8]> for Frame {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl SnapshotChunks {
    /// Plans the chunks of a snapshot of `flags` and `segments` (the items'
    /// stored protobuf bytes): nothing is copied yet.
    pub(crate) fn plan(
        header: ChunkHeader,
        flags: Vec<Bytes>,
        segments: Vec<Bytes>,
        max_bytes: usize,
    ) -> Self {
        let budget = max_bytes.saturating_sub(CHUNK_OVERHEAD + header.environment.len() + header.epoch.len());
        let items: Vec<(u32, Bytes)> = flags
            .into_iter()
            .map(|b| (CHUNK_FLAGS, b))
            .chain(segments.into_iter().map(|b| (CHUNK_SEGMENTS, b)))
            .collect();
        // Pack items greedily, in order; cut when the next would not fit.
        let mut starts = vec![0];
        let mut size = 0;
        for (i, (field, bytes)) in items.iter().enumerate() {
            let len = len_of_bytes_field(*field, bytes.len());
            if i > *starts.last().expect("starts is non-empty") && size + len > budget {
                starts.push(i);
                size = 0;
            }
            size += len;
        }
        starts.push(items.len());
        let chunks = starts.len() - 1;
        SnapshotChunks {
            header,
            items,
            starts,
            assembled: (0..chunks).map(|_| Mutex::new(Weak::new())).collect(),
            whole: OnceLock::new(),
        }
    }

    /// Number of chunks (at least one: an empty snapshot is one chunk).
    pub(crate) fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Chunk `i`, assembled now unless a stream still holds it; `assembled`
    /// is called for each assembly (a metric).
    pub(crate) fn chunk(&self, i: usize, assembled: impl Fn()) -> Encoded {
        if self.len() == 1 {
            return self
                .whole
                .get_or_init(|| {
                    assembled();
                    Encoded(Bytes::from(self.assemble(0)))
                })
                .clone();
        }
        // A poisoned lock only means another stream panicked while
        // assembling; the weak reference is still valid.
        let mut slot = self.assembled[i].lock().unwrap_or_else(|p| p.into_inner());
        let frame = match slot.upgrade() {
            Some(frame) => frame,
            None => {
                assembled();
                let frame = Arc::new(self.assemble(i));
                *slot = Arc::downgrade(&frame);
                frame
            }
        };
        Encoded(Bytes::from_owner(Frame(frame)))
    }

    /// Assembles chunk `i`: the gRPC prefix and its `SubscribeResponse`,
    /// written once into a buffer of the exact size.
    fn assemble(&self, i: usize) -> Vec<u8> {
        let h = &self.header;
        let total = self.len();
        let group = &self.items[self.starts[i]..self.starts[i + 1]];
        let mut head = Vec::with_capacity(64 + h.epoch.len());
        put_bytes(1, h.epoch.as_bytes(), &mut head);
        put_u64(2, h.revision, &mut head);
        put_u64(3, i as u64, &mut head);
        put_u64(4, total as u64, &mut head);
        put_u64(5, u64::from(i + 1 == total), &mut head);
        let mut tail = Vec::with_capacity(64 + h.environment.len());
        put_fixed64(8, h.checksum, &mut tail);
        if !h.environment.is_empty() {
            put_bytes(9, h.environment.as_bytes(), &mut tail);
        }
        put_u64(10, h.committed_unix_ms, &mut tail);
        let items_len: usize = group.iter().map(|(f, b)| len_of_bytes_field(*f, b.len())).sum();
        let body_len = head.len() + items_len + tail.len();
        let len = len_of_bytes_field(RESPONSE_SNAPSHOT_CHUNK, body_len);
        let mut out = Vec::with_capacity(GRPC_PREFIX + len);
        out.put_u8(0); // not compressed
        out.put_u32(len as u32);
        encode_key(RESPONSE_SNAPSHOT_CHUNK, WireType::LengthDelimited, &mut out);
        encode_varint(body_len as u64, &mut out);
        out.put_slice(&head);
        for (field, bytes) in group {
            put_bytes(*field, bytes, &mut out);
        }
        out.put_slice(&tail);
        debug_assert_eq!(out.len(), GRPC_PREFIX + len, "length prefix matches the body");
        out
    }
}

/// The parts of one `Delta`.
#[derive(Debug)]
pub(crate) struct DeltaParts<'a> {
    pub(crate) epoch: &'a str,
    pub(crate) from_revision: u64,
    pub(crate) to_revision: u64,
    pub(crate) flags: Vec<&'a Bytes>,
    pub(crate) segments: Vec<&'a Bytes>,
    pub(crate) deleted_flags: Vec<&'a str>,
    pub(crate) deleted_segments: Vec<&'a str>,
    pub(crate) checksum: u64,
    pub(crate) committed_unix_ms: u64,
}

/// Encodes a `Delta` from stored item bytes.
pub(crate) fn delta(d: &DeltaParts<'_>) -> Encoded {
    let mut body = BytesMut::with_capacity(
        CHUNK_OVERHEAD
            + d.flags.iter().chain(&d.segments).map(|b| b.len() + 8).sum::<usize>()
            + d.deleted_flags.iter().chain(&d.deleted_segments).map(|k| k.len() + 4).sum::<usize>(),
    );
    put_bytes(1, d.epoch.as_bytes(), &mut body);
    put_u64(2, d.from_revision, &mut body);
    put_u64(3, d.to_revision, &mut body);
    for b in &d.flags {
        put_bytes(4, b, &mut body);
    }
    for b in &d.segments {
        put_bytes(5, b, &mut body);
    }
    for k in &d.deleted_flags {
        put_bytes(6, k.as_bytes(), &mut body);
    }
    for k in &d.deleted_segments {
        put_bytes(7, k.as_bytes(), &mut body);
    }
    put_fixed64(8, d.checksum, &mut body);
    put_u64(9, d.committed_unix_ms, &mut body);
    wrap(RESPONSE_DELTA, body)
}

/// Encodes a small, per-stream message the ordinary way.
pub(crate) fn message(kind: pb::subscribe_response::Kind) -> Encoded {
    let msg = pb::SubscribeResponse { kind: Some(kind) };
    Encoded::framed(msg.encoded_len(), |out| msg.encode_raw(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flag(key: &str) -> Bytes {
        pb::Flag { key: key.into(), version: 1, ..Default::default() }.encode_to_vec().into()
    }

    fn header() -> ChunkHeader {
        ChunkHeader {
            environment: "prod".into(),
            epoch: "e1".into(),
            revision: 7,
            checksum: 0xdead_beef,
            committed_unix_ms: 5,
        }
    }

    /// Hand-assembled chunks decode with the generated types, split under
    /// the size bound, and carry every item exactly once, in order.
    #[test]
    fn chunks_decode_and_respect_the_bound() {
        let flags: Vec<Bytes> = (0..500).map(|i| flag(&format!("flag-{i:04}"))).collect();
        let seg: Bytes = pb::Segment { key: "s".into(), ..Default::default() }.encode_to_vec().into();
        let plan = SnapshotChunks::plan(header(), flags, vec![seg], 1024);
        assert!(plan.len() > 5);
        let mut keys = Vec::new();
        let mut segments = 0;
        for i in 0..plan.len() {
            let c = plan.chunk(i, || {});
            assert!(c.len() <= 1024, "chunk {i} is {} bytes", c.len());
            assert_eq!(c.grpc_frame()[1..5], (c.len() as u32).to_be_bytes(), "gRPC length prefix");
            let msg = pb::SubscribeResponse::decode(c.message()).unwrap();
            let Some(pb::subscribe_response::Kind::SnapshotChunk(ch)) = msg.kind else { panic!() };
            assert_eq!((ch.chunk_index as usize, ch.total_chunks as usize), (i, plan.len()));
            assert_eq!(ch.last_chunk, i + 1 == plan.len());
            assert_eq!((ch.revision, ch.checksum, ch.epoch.as_str()), (7, 0xdead_beef, "e1"));
            assert_eq!((ch.environment.as_str(), ch.committed_unix_ms), ("prod", 5));
            keys.extend(ch.flags.into_iter().map(|f| f.key));
            segments += ch.segments.len();
        }
        let expected: Vec<String> = (0..500).map(|i| format!("flag-{i:04}")).collect();
        assert_eq!((keys, segments), (expected, 1));
    }

    /// A chunk is assembled once while a stream holds it, and again only
    /// after every holder let it go; a one-chunk snapshot is kept.
    #[test]
    fn chunks_are_shared_while_held_and_not_kept() {
        let flags: Vec<Bytes> = (0..100).map(|i| flag(&format!("flag-{i:04}"))).collect();
        let plan = SnapshotChunks::plan(header(), flags.clone(), vec![], 512);
        assert!(plan.len() > 1);
        let count = std::cell::Cell::new(0);
        let first = plan.chunk(0, || count.set(count.get() + 1));
        let again = plan.chunk(0, || count.set(count.get() + 1));
        assert_eq!(count.get(), 1, "shared while held");
        assert_eq!(first.grpc_frame().as_ptr(), again.grpc_frame().as_ptr(), "the same buffer");
        drop((first, again));
        let rebuilt = plan.chunk(0, || count.set(count.get() + 1));
        assert_eq!(count.get(), 2, "assembled again once no stream held it");
        drop(rebuilt);

        let small = SnapshotChunks::plan(header(), flags[..2].to_vec(), vec![], 1 << 20);
        assert_eq!(small.len(), 1);
        let count = std::cell::Cell::new(0);
        drop(small.chunk(0, || count.set(count.get() + 1)));
        drop(small.chunk(0, || count.set(count.get() + 1)));
        assert_eq!(count.get(), 1, "a one-chunk snapshot is kept");
    }

    /// An empty snapshot is one (last) chunk.
    #[test]
    fn empty_snapshot_is_one_chunk() {
        let plan = SnapshotChunks::plan(header(), vec![], vec![], 1024);
        assert_eq!(plan.len(), 1);
        let msg = pb::SubscribeResponse::decode(plan.chunk(0, || {}).message()).unwrap();
        let Some(pb::subscribe_response::Kind::SnapshotChunk(ch)) = msg.kind else { panic!() };
        assert!(ch.last_chunk && ch.flags.is_empty() && ch.total_chunks == 1);
    }

    /// A delta decodes with the generated types.
    #[test]
    fn delta_decodes() {
        let f = flag("a");
        let d = delta(&DeltaParts {
            epoch: "e",
            from_revision: 3,
            to_revision: 5,
            flags: vec![&f],
            segments: vec![],
            deleted_flags: vec!["gone"],
            deleted_segments: vec!["old"],
            checksum: 9,
            committed_unix_ms: 1,
        });
        let msg = pb::SubscribeResponse::decode(d.message()).unwrap();
        let Some(pb::subscribe_response::Kind::Delta(d)) = msg.kind else { panic!() };
        assert_eq!((d.from_revision, d.to_revision), (3, 5));
        assert_eq!(d.upserted_flags[0].key, "a");
        assert_eq!(d.deleted_flag_keys, vec!["gone"]);
        assert_eq!(d.deleted_segment_keys, vec!["old"]);
    }
}
