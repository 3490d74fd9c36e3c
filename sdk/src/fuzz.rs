//! Entry points for the fuzz targets and property tests of inbound data
//! (`tests/fuzz/`, `tests/tests/fault/inbound_fuzz.rs`): what arrives from a
//! relay and what is read back from the cache, decoded, validated and
//! compiled the way the client does it, then every flag evaluated. Not
//! part of the API; no stability promise. Each returns whether the input
//! was accepted; none may panic or allocate without bound, whatever the
//! bytes.

use bytes::Bytes;
use prost::Message;

use crate::held::Held;
use crate::raw::{CacheBlob, RawKind, RawResponse};
use flagstream_core::{Context, Limits, Snapshot, wire};

/// A Subscribe response as the follow loop decodes it (items kept
/// encoded); a snapshot chunk's or a delta's items are then validated and
/// compiled as a snapshot apply does (before its checksum check, which a
/// fuzzer cannot forge).
pub fn subscribe_response(bytes: &[u8]) -> bool {
    let Ok(r) = RawResponse::decode(bytes) else { return false };
    let (flags, segments) = match r.kind {
        Some(RawKind::SnapshotChunk(c)) => (c.flags, c.segments),
        Some(RawKind::Delta(d)) => (d.upserted_flags, d.upserted_segments),
        _ => return true,
    };
    apply(flags, segments)
}

/// A cache value as a client start reads it: decoded and checked (its own
/// key fingerprint, so that check passes); its items then indexed lazily
/// and every flag compiled on first use, as after a matching checksum.
/// The value is the inline form (format 1); a format-2 cache is checked
/// the same way once its parts' items are joined to the header.
pub fn cache_blob(bytes: &[u8]) -> bool {
    let Ok(blob) = CacheBlob::decode(Bytes::copy_from_slice(bytes)) else { return false };
    let fingerprint = blob.key_fingerprint;
    let (flags, segments) = (blob.flags.clone(), blob.segments.clone());
    let accepted = Held::from_blob(blob, fingerprint, &Limits::default()).is_ok();
    let segments = segments
        .iter()
        .filter_map(|b| flagstream_proto::v1::Segment::decode(b.clone()).ok())
        .filter_map(|p| wire::segment_from_proto(&p).ok())
        .collect();
    if let Ok(snap) = Snapshot::from_encoded(flags, segments, &Limits::default()) {
        evaluate_all(&snap);
    }
    accepted
}

fn apply(flags: Vec<Bytes>, segments: Vec<Bytes>) -> bool {
    match Held::from_items(String::new(), 1, flags, segments, &Limits::default()) {
        Ok((_, snap)) => {
            evaluate_all(&snap);
            true
        }
        Err(_) => false,
    }
}

fn evaluate_all(snap: &Snapshot) {
    let ctx = Context::new("fuzz-user").with("country", "US").with("plan", "enterprise");
    let keys: Vec<String> = snap.keys().map(str::to_owned).collect();
    for k in &keys {
        std::hint::black_box((snap.bool(k, &ctx, false), snap.int(k, &ctx, 0), snap.string(k, &ctx, "")));
    }
}

/// A valid cache value (format 1, the items inline) holding these encoded
/// items (a seed for the `cache_blob` target), or `None` if they do not
/// validate.
pub fn cache_blob_seed(flags: Vec<Bytes>, segments: Vec<Bytes>) -> Option<Vec<u8>> {
    let (held, _) = Held::from_items("seed-epoch".into(), 1, flags, segments, &Limits::default()).ok()?;
    let mut blob = held.to_blob(0, 7);
    blob.format = crate::raw::CACHE_FORMAT_INLINE;
    Some(blob.encode_to_vec())
}
