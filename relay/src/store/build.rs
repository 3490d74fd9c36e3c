//! An environment's items and snapshot from stored or received bytes
//! ([`build_items`]: each flag's model decoded, validated on its own and
//! dropped; data that fails this relay's limits served anyway, loudly), and
//! the decoding of one item a delta carries ([`decode_item`]).

use bytes::Bytes;
use flagstream::{Flag, FlagSet, Limits, Segment, Snapshot, wire};
use flagstream_proto::v1 as pb;
use prost::Message;

use super::bulk::BulkItems;
use super::state::{Item, Items, Kind};
use crate::ops::metrics::Metrics;

/// An item's bytes decoded for the model and its version.
pub(super) fn decode_item(
    kind: Kind,
    bytes: &Bytes,
    set: &mut DecodedItems,
) -> Result<(String, u64), String> {
    match kind {
        Kind::Flag => {
            let (key, f) = decode_flag(bytes)?;
            let v = (key, f.version);
            set.set.flags.push(f);
            set.flag_bytes.push(bytes.clone());
            Ok(v)
        }
        Kind::Segment => {
            let (key, s) = decode_segment(bytes)?;
            let v = (key, s.version);
            set.set.segments.push(s);
            Ok(v)
        }
    }
}

/// A flag's key and model from its bytes.
fn decode_flag(bytes: &Bytes) -> Result<(String, Flag), String> {
    let p = pb::Flag::decode(bytes.clone()).map_err(|e| e.to_string())?;
    let f = wire::flag_from_proto(&p).map_err(|e| e.to_string())?;
    Ok((p.key, f))
}

/// A segment's key and model from its bytes.
fn decode_segment(bytes: &Bytes) -> Result<(String, Segment), String> {
    let p = pb::Segment::decode(bytes.clone()).map_err(|e| e.to_string())?;
    let s = wire::segment_from_proto(&p).map_err(|e| e.to_string())?;
    Ok((p.key, s))
}

/// Decoded items with the flags' encodings (`flag_bytes[i]` is
/// `set.flags[i]`'s), for a snapshot that keeps the bytes the state holds.
#[derive(Default)]
pub(crate) struct DecodedItems {
    pub(crate) set: FlagSet,
    pub(crate) flag_bytes: Vec<Bytes>,
}

/// Items and their snapshot (compiling on use), from stored or received
/// bytes: each flag's model decoded, validated on its own and dropped
/// ([`Snapshot::compile_each`]), so loading 50,000 flags holds one model
/// at a time. Data that fails validation under this relay's limits (stored
/// under older limits, or sent by a newer upstream) is still served and
/// forwarded, loudly: it evaluates with errors here, and the bytes travel
/// on unchanged.
pub(crate) fn build_items(
    env: &str,
    raw: impl IntoIterator<Item = (Kind, Bytes)>,
    limits: &Limits,
    metrics: &Metrics,
) -> Result<(Items, Snapshot), String> {
    // The bytes are shared, not copied: the list costs a pointer or four
    // per item, and lets the segments be decoded before the flags.
    let raw: Vec<(Kind, Bytes)> = raw.into_iter().collect();
    let mut items = BulkItems::with_capacity(raw.len());
    let snapshot = compile(env, &raw, Some(&mut items), limits, metrics)?;
    Ok((items.finish(), snapshot))
}

/// Items from received bytes, each decoded (bytes that do not decode are
/// refused here, as [`build_items`] refuses them) and its model dropped:
/// what a commit needs. The snapshot is built from them once they are
/// stored ([`build_snapshot`]), so it is not held through the commit.
/// `expected`: how many there are (the map's build sized by it).
pub(crate) fn decode_items(
    raw: impl IntoIterator<Item = (Kind, Bytes)>,
    expected: usize,
) -> Result<Items, String> {
    let mut items = BulkItems::with_capacity(expected);
    for (kind, bytes) in raw {
        let (key, version) = match kind {
            Kind::Segment => decode_segment(&bytes).map(|(k, s)| (k, s.version)),
            Kind::Flag => decode_flag(&bytes).map(|(k, f)| (k, f.version)),
        }
        .map_err(|e| format!("{} {e}", kind.name()))?;
        let item = Item::new(kind, &key, bytes, version);
        items.push((kind, key), item);
    }
    Ok(items.finish())
}

/// The snapshot of items [`decode_items`] accepted, as [`build_items`]
/// builds it (each flag decoded again, one model at a time).
pub(crate) fn build_snapshot(
    env: &str,
    items: &Items,
    limits: &Limits,
    metrics: &Metrics,
) -> Result<Snapshot, String> {
    let raw: Vec<(Kind, Bytes)> = items.iter().map(|((kind, _), item)| (*kind, item.bytes.clone())).collect();
    compile(env, &raw, None, limits, metrics)
}

/// [`build_items`]' snapshot of `raw`, inserting each item into `items`
/// when given.
fn compile(
    env: &str,
    raw: &[(Kind, Bytes)],
    mut items: Option<&mut BulkItems>,
    limits: &Limits,
    metrics: &Metrics,
) -> Result<Snapshot, String> {
    let mut segments = Vec::new();
    for (_, bytes) in raw.iter().filter(|(k, _)| *k == Kind::Segment) {
        let (key, s) = decode_segment(bytes).map_err(|e| format!("segment {e}"))?;
        if let Some(items) = items.as_deref_mut() {
            let item = Item::new(Kind::Segment, &key, bytes.clone(), s.version);
            items.push((Kind::Segment, key), item);
        }
        segments.push(s);
    }
    let flag_bytes = || raw.iter().filter(|(k, _)| *k == Kind::Flag).map(|(_, b)| b);
    // Validated whole, one flag's model at a time (50,000 models at once
    // would double the relay's memory while it loads), into a snapshot
    // that compiles each flag when it is first evaluated (the relay's
    // snapshots do).
    let mut undecodable = None;
    let flags = flag_bytes().map_while(|bytes| match decode_flag(bytes) {
        Ok((key, f)) => {
            if let Some(items) = items.as_deref_mut() {
                let item = Item::new(Kind::Flag, &key, bytes.clone(), f.version);
                items.push((Kind::Flag, key), item);
            }
            Some((f, bytes.clone()))
        }
        Err(e) => {
            undecodable = Some(format!("flag {e}"));
            None
        }
    });
    let built = Snapshot::compile_each(flags, segments, limits, true);
    if let Some(e) = undecodable {
        return Err(e);
    }
    let snapshot = match built {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(env, error = %e, "flags fail validation under this relay's limits; serving them anyway");
            metrics.limit_hit("stored_data_invalid");
            // Each flag compiled on first use; one that cannot be
            // evaluates to MALFORMED_FLAG. The segments decoded again
            // (they decoded above): keeping a copy for this rare path
            // would cost every load.
            let segments = raw
                .iter()
                .filter(|(k, _)| *k == Kind::Segment)
                .map(|(_, b)| decode_segment(b).map(|(_, s)| s))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("segment {e}"))?;
            Snapshot::from_encoded_on_use(flag_bytes().cloned(), segments, limits)
                .map_err(|e| format!("flag {e}"))?
        }
    };
    Ok(snapshot)
}
