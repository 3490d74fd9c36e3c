//! Pre-encoded `SubscribeResponse` messages.
//!
//! The Subscribe stream (`crate::grpc`) sends [`Encoded`] values: bytes that
//! already are a complete gRPC message — the 5-byte length prefix and a
//! `SubscribeResponse` — so a delivery is one reference-count increment and
//! one HTTP/2 DATA frame, with no copy and no per-subscriber encoding. Snapshot
//! chunks and deltas are assembled here from each item's stored protobuf
//! bytes, byte for byte as committed (PROTOCOL.md §3.2), once per
//! (environment, revision) or (environment, from, to), and shared by every
//! subscriber through `Bytes` reference counts. Nothing here knows about
//! subscribers or the store.

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
fn put_bytes(tag: u32, bytes: &[u8], buf: &mut BytesMut) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(bytes.len() as u64, buf);
    buf.put_slice(bytes);
}

fn len_of_bytes_field(tag: u32, len: usize) -> usize {
    prost::encoding::key_len(tag) + encoded_len_varint(len as u64) + len
}

fn put_u64(tag: u32, v: u64, buf: &mut BytesMut) {
    if v != 0 {
        encode_key(tag, WireType::Varint, buf);
        encode_varint(v, buf);
    }
}

fn put_fixed64(tag: u32, v: u64, buf: &mut BytesMut) {
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
pub(crate) struct ChunkHeader<'a> {
    pub(crate) environment: &'a str,
    pub(crate) epoch: &'a str,
    pub(crate) revision: u64,
    pub(crate) checksum: u64,
    pub(crate) committed_unix_ms: u64,
}

/// Upper bound of a chunk's non-item fields, so packing stays under the
/// configured message size.
const CHUNK_OVERHEAD: usize = 256;

/// Splits a snapshot into encoded `SnapshotChunk` messages of at most
/// `max_bytes` each (an item larger than that travels alone). `flags` and
/// `segments` are the items' stored protobuf bytes.
pub(crate) fn snapshot_chunks(
    header: &ChunkHeader<'_>,
    flags: &[&Bytes],
    segments: &[&Bytes],
    max_bytes: usize,
) -> Vec<Encoded> {
    const FLAGS: u32 = 6;
    const SEGMENTS: u32 = 7;
    let budget = max_bytes.saturating_sub(CHUNK_OVERHEAD + header.environment.len() + header.epoch.len());
    // Pack items greedily: (field, bytes) in order, cut when full.
    let items = flags.iter().map(|b| (FLAGS, *b)).chain(segments.iter().map(|b| (SEGMENTS, *b)));
    let mut groups: Vec<Vec<(u32, &Bytes)>> = vec![Vec::new()];
    let mut size = 0;
    for (field, bytes) in items {
        let len = len_of_bytes_field(field, bytes.len());
        let current = groups.last_mut().expect("groups starts non-empty");
        if !current.is_empty() && size + len > budget {
            groups.push(Vec::new());
            size = 0;
        }
        groups.last_mut().expect("just pushed").push((field, bytes));
        size += len;
    }
    let total = groups.len() as u32;
    groups
        .into_iter()
        .enumerate()
        .map(|(i, group)| {
            let items_len: usize = group.iter().map(|(f, b)| len_of_bytes_field(*f, b.len())).sum();
            let mut body = BytesMut::with_capacity(items_len + CHUNK_OVERHEAD + header.environment.len());
            put_bytes(1, header.epoch.as_bytes(), &mut body);
            put_u64(2, header.revision, &mut body);
            put_u64(3, i as u64, &mut body);
            put_u64(4, u64::from(total), &mut body);
            put_u64(5, u64::from(i as u32 + 1 == total), &mut body);
            for (field, bytes) in group {
                put_bytes(field, bytes, &mut body);
            }
            put_fixed64(8, header.checksum, &mut body);
            if !header.environment.is_empty() {
                put_bytes(9, header.environment.as_bytes(), &mut body);
            }
            put_u64(10, header.committed_unix_ms, &mut body);
            wrap(RESPONSE_SNAPSHOT_CHUNK, body)
        })
        .collect()
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

    /// Hand-assembled chunks decode with the generated types, split under
    /// the size bound, and carry every item exactly once.
    #[test]
    fn chunks_decode_and_respect_the_bound() {
        let flags: Vec<Bytes> = (0..500).map(|i| flag(&format!("flag-{i:04}"))).collect();
        let refs: Vec<&Bytes> = flags.iter().collect();
        let seg: Bytes = pb::Segment { key: "s".into(), ..Default::default() }.encode_to_vec().into();
        let header = ChunkHeader {
            environment: "prod",
            epoch: "e1",
            revision: 7,
            checksum: 0xdead_beef,
            committed_unix_ms: 5,
        };
        let chunks = snapshot_chunks(&header, &refs, &[&seg], 1024);
        assert!(chunks.len() > 5);
        let mut seen = 0;
        for (i, c) in chunks.iter().enumerate() {
            assert!(c.len() <= 1024, "chunk {i} is {} bytes", c.len());
            assert_eq!(c.grpc_frame()[1..5], (c.len() as u32).to_be_bytes(), "gRPC length prefix");
            let msg = pb::SubscribeResponse::decode(c.message()).unwrap();
            let Some(pb::subscribe_response::Kind::SnapshotChunk(ch)) = msg.kind else { panic!() };
            assert_eq!((ch.chunk_index as usize, ch.total_chunks as usize), (i, chunks.len()));
            assert_eq!(ch.last_chunk, i + 1 == chunks.len());
            assert_eq!((ch.revision, ch.checksum, ch.epoch.as_str()), (7, 0xdead_beef, "e1"));
            seen += ch.flags.len() + ch.segments.len();
        }
        assert_eq!(seen, 501);
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
