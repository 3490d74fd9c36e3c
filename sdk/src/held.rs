//! What the client holds of its environment, as received ([`Held`]): every
//! item's raw bytes and checksum contribution, the cursor, and the running
//! checksum. Applying a complete snapshot or a delta yields the next held
//! state and a new compiled [`Snapshot`], or an [`ApplyError`] that makes
//! the sync task resynchronise; the checksum is verified after every apply.
//! Also its cache form ([`CacheBlob`]). Pure data, no I/O.
//!
//! (Named for what it is, not "replica": a replica is a relay role.)

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use flagstream_proto::v1 as pb;
use prost::Message;

use crate::error::ApplyError;
use crate::raw::{CACHE_FORMAT, CACHE_FORMAT_INLINE, CACHE_FORMAT_PARTS, CacheBlob, RawChunk, RawDelta};
use flagstream_core::checksum::{FLAG, SEGMENT, item_hash};
use flagstream_core::model::FlagSet;
use flagstream_core::wire::flag_key;
use flagstream_core::{Limits, Snapshot, wire};

/// Items by key. Keys are shared with the lazy snapshot built from the cache.
type ItemMap = HashMap<Arc<str>, Item, foldhash::fast::RandomState>;

#[derive(Debug, Clone)]
struct Item {
    bytes: Bytes,
    hash: u64,
}

/// What the client holds of one environment, as received.
#[derive(Debug, Clone, Default)]
pub(crate) struct Held {
    pub(crate) epoch: String,
    /// The epoch a forgotten cursor had ([`Held::forget_cursor`]): a
    /// snapshot of it older than `revision` is still refused.
    floor_epoch: String,
    pub(crate) revision: u64,
    pub(crate) checksum: u64,
    flags: ItemMap,
    segments: ItemMap,
}

/// A held state read from the cache, checksum-verified, with its items not yet
/// in maps: the sync task builds the [`Held`] ([`CachedHeld::into_held`])
/// after `build()` has returned, keeping that work off the cold start.
#[derive(Debug)]
pub(crate) struct CachedHeld {
    pub(crate) epoch: String,
    pub(crate) revision: u64,
    /// The items' checksum (verified against the cache's).
    pub(crate) checksum: u64,
    flags: Vec<(Arc<str>, Item)>,
    segments: Vec<(Arc<str>, Item)>,
}

impl CachedHeld {
    /// The held state, its items indexed by key.
    pub(crate) fn into_held(self) -> Held {
        let mut r = Held { epoch: self.epoch, revision: self.revision, ..Held::default() };
        r.flags = self.flags.into_iter().collect();
        r.segments = self.segments.into_iter().collect();
        r.checksum = r.sum();
        r
    }
}

/// The result of applying: the next held state, its compiled snapshot, and the
/// flag keys that changed.
pub(crate) struct Applied {
    pub(crate) held: Held,
    pub(crate) snapshot: Snapshot,
    pub(crate) changed_flags: Vec<String>,
}

fn decode_flag(bytes: &Bytes) -> Result<pb::Flag, ApplyError> {
    pb::Flag::decode(bytes.clone()).map_err(|source| ApplyError::Decode { what: "flag", source })
}

fn decode_segment(bytes: &Bytes) -> Result<pb::Segment, ApplyError> {
    pb::Segment::decode(bytes.clone()).map_err(|source| ApplyError::Decode { what: "segment", source })
}

impl Held {
    fn sum(&self) -> u64 {
        self.flags.values().chain(self.segments.values()).fold(0u64, |s, i| s.wrapping_add(i.hash))
    }

    fn verify(&self, expected: u64) -> Result<(), ApplyError> {
        if self.checksum == expected {
            Ok(())
        } else {
            Err(ApplyError::Checksum { revision: self.revision, computed: self.checksum, expected })
        }
    }

    /// Builds the held state from a complete snapshot's raw items, validated.
    pub(crate) fn from_items(
        epoch: String,
        revision: u64,
        flags: impl IntoIterator<Item = Bytes>,
        segments: impl IntoIterator<Item = Bytes>,
        limits: &Limits,
    ) -> Result<(Held, Snapshot), ApplyError> {
        let mut r = Held { epoch, revision, ..Held::default() };
        let mut models = Vec::new();
        for bytes in segments {
            let p = decode_segment(&bytes)?;
            let hash = item_hash(SEGMENT, &p.key, &bytes);
            models.push(wire::segment_from_proto(&p)?);
            r.segments.insert(p.key.into(), Item { bytes, hash });
        }
        // One flag's model at a time: each is validated on its own and
        // compiled, then dropped (50,000 models at once would be the first
        // sync's peak); the snapshot shares the held items' bytes.
        let mut failed = None;
        let held = &mut r.flags;
        let flags = flags.into_iter().map_while(|bytes| {
            let decoded = decode_flag(&bytes).and_then(|p| Ok((wire::flag_from_proto(&p)?, p.key)));
            match decoded {
                Ok((f, key)) => {
                    let hash = item_hash(FLAG, &key, &bytes);
                    held.insert(key.into(), Item { bytes: bytes.clone(), hash });
                    Some((f, bytes))
                }
                Err(e) => {
                    failed = Some(e);
                    None
                }
            }
        });
        let built = Snapshot::compile_each(flags, models, limits, false);
        if let Some(e) = failed {
            return Err(e);
        }
        r.checksum = r.sum();
        let snapshot = built?.with_cursor(&r.epoch, r.revision);
        Ok((r, snapshot))
    }

    /// Applies a complete, in-order snapshot. `previous` (the state it
    /// replaces) makes the change list include flags the snapshot removed.
    pub(crate) fn from_chunks(
        chunks: Vec<RawChunk>,
        previous: Option<&Held>,
        limits: &Limits,
    ) -> Result<Applied, ApplyError> {
        for (i, c) in chunks.iter().enumerate() {
            if c.chunk_index as usize != i {
                return Err(ApplyError::ChunkOrder { got: c.chunk_index, want: i as u32 });
            }
        }
        let (epoch, revision, expected) =
            chunks.first().map(|c| (c.epoch.clone(), c.revision, c.checksum)).unwrap_or_default();
        // PROTOCOL.md §2.4: never go back within an epoch. A protocol
        // error: the sync task forgets its cursor and asks again.
        if let Some(prev) = previous
            && let ours = if prev.epoch.is_empty() { &prev.floor_epoch } else { &prev.epoch }
            && !ours.is_empty()
            && *ours == epoch
            && revision < prev.revision
        {
            return Err(ApplyError::Protocol(format!(
                "a snapshot at revision {revision} of our epoch, older than our revision {}",
                prev.revision
            )));
        }
        let flags: Vec<Bytes> = chunks.iter().flat_map(|c| c.flags.iter().cloned()).collect();
        let segments: Vec<Bytes> = chunks.iter().flat_map(|c| c.segments.iter().cloned()).collect();
        let (held, snapshot) = Held::from_items(epoch, revision, flags, segments, limits)?;
        held.verify(expected)?;
        let mut changed_flags: Vec<String> = held.flags.keys().map(|k| k.to_string()).collect();
        if let Some(prev) = previous {
            changed_flags
                .extend(prev.flags.keys().filter(|k| !held.flags.contains_key(*k)).map(|k| k.to_string()));
        }
        Ok(Applied { held, snapshot, changed_flags })
    }

    /// Forgets the cursor (the next Hello asks for a full snapshot) while
    /// keeping the floor: a snapshot of the same epoch older than what is
    /// held stays refused (PROTOCOL.md §2.4).
    pub(crate) fn forget_cursor(&mut self) {
        if !self.epoch.is_empty() {
            self.floor_epoch = std::mem::take(&mut self.epoch);
        }
    }

    /// Applies a delta on top of this state and its `snapshot`.
    pub(crate) fn apply_delta(
        &self,
        snapshot: &Snapshot,
        d: RawDelta,
        limits: &Limits,
    ) -> Result<Applied, ApplyError> {
        if d.epoch != self.epoch || d.from_revision != self.revision {
            return Err(ApplyError::Gap {
                from: d.from_revision,
                to: d.to_revision,
                ours: self.revision,
                epoch_ok: d.epoch == self.epoch,
            });
        }
        if !d.deleted_flag_keys.is_empty() || !d.deleted_segment_keys.is_empty() {
            let upserted: std::collections::HashSet<String> = d
                .upserted_flags
                .iter()
                .filter_map(|b| decode_flag(b).ok().map(|f| format!("f/{}", f.key)))
                .chain(
                    d.upserted_segments
                        .iter()
                        .filter_map(|b| decode_segment(b).ok().map(|s| format!("s/{}", s.key))),
                )
                .collect();
            let deleted = d
                .deleted_flag_keys
                .iter()
                .map(|k| format!("f/{k}"))
                .chain(d.deleted_segment_keys.iter().map(|k| format!("s/{k}")));
            for key in deleted {
                if upserted.contains(&key) {
                    return Err(ApplyError::Protocol(format!(
                        "delta both upserts and deletes {}",
                        &key[2..]
                    )));
                }
            }
        }
        let mut next = self.clone();
        let mut change = FlagSet::default();
        let mut change_raw = Vec::with_capacity(d.upserted_flags.len());
        let mut changed_flags = Vec::new();
        for bytes in d.upserted_flags {
            let p = decode_flag(&bytes)?;
            let hash = item_hash(FLAG, &p.key, &bytes);
            change.flags.push(wire::flag_from_proto(&p)?);
            change_raw.push(bytes.clone());
            changed_flags.push(p.key.clone());
            if let Some(old) = next.flags.insert(p.key.into(), Item { bytes, hash }) {
                next.checksum = next.checksum.wrapping_sub(old.hash);
            }
            next.checksum = next.checksum.wrapping_add(hash);
        }
        for bytes in d.upserted_segments {
            let p = decode_segment(&bytes)?;
            let hash = item_hash(SEGMENT, &p.key, &bytes);
            change.segments.push(wire::segment_from_proto(&p)?);
            if let Some(old) = next.segments.insert(p.key.into(), Item { bytes, hash }) {
                next.checksum = next.checksum.wrapping_sub(old.hash);
            }
            next.checksum = next.checksum.wrapping_add(hash);
        }
        for key in &d.deleted_flag_keys {
            if let Some(old) = next.flags.remove(key.as_str()) {
                next.checksum = next.checksum.wrapping_sub(old.hash);
            }
            changed_flags.push(key.clone());
        }
        for key in &d.deleted_segment_keys {
            if let Some(old) = next.segments.remove(key.as_str()) {
                next.checksum = next.checksum.wrapping_sub(old.hash);
            }
        }
        next.revision = d.to_revision;
        next.verify(d.checksum)?;
        let snapshot = snapshot
            .apply_encoded(&change, &change_raw, &d.deleted_flag_keys, &d.deleted_segment_keys, limits)?
            .with_cursor(&next.epoch, next.revision);
        Ok(Applied { held: next, snapshot, changed_flags })
    }

    /// The cache form, stamped with the SDK key's fingerprint, the items
    /// inline (the cache moves them into parts).
    pub(crate) fn to_blob(&self, now_ms: u64, key_fingerprint: u64) -> CacheBlob {
        CacheBlob {
            key_fingerprint,
            format: CACHE_FORMAT,
            epoch: self.epoch.clone(),
            revision: self.revision,
            checksum: self.checksum,
            flags: self.flags.values().map(|i| i.bytes.clone()).collect(),
            segments: self.segments.values().map(|i| i.bytes.clone()).collect(),
            written_unix_ms: now_ms,
            parts: 0,
            generation: 0,
        }
    }

    /// Reads the cache form, verifying its checksum. The data was validated
    /// when it was received; the checksum proves it is the same data, so
    /// nothing is validated again, and flags are only indexed by key here and
    /// compiled on first use ([`Snapshot::lazy`]): cold start speed.
    pub(crate) fn from_blob(
        blob: CacheBlob,
        key_fingerprint: u64,
        limits: &Limits,
    ) -> Result<(CachedHeld, Arc<Snapshot>), ApplyError> {
        if ![CACHE_FORMAT, CACHE_FORMAT_PARTS, CACHE_FORMAT_INLINE].contains(&blob.format) {
            return Err(ApplyError::Format(blob.format));
        }
        if blob.key_fingerprint != key_fingerprint {
            return Err(ApplyError::OtherKey);
        }
        let mut r = CachedHeld {
            epoch: blob.epoch,
            revision: blob.revision,
            checksum: blob.checksum,
            flags: Vec::with_capacity(blob.flags.len()),
            segments: Vec::with_capacity(blob.segments.len()),
        };
        let mut checksum = 0u64;
        let mut lazy = Vec::with_capacity(blob.flags.len());
        for bytes in blob.flags {
            let key = flag_key(&bytes).map_err(|source| ApplyError::Decode { what: "flag", source })?;
            let hash = item_hash(FLAG, &key, &bytes);
            checksum = checksum.wrapping_add(hash);
            let key: Arc<str> = Arc::from(key);
            r.flags.push((key.clone(), Item { bytes: bytes.clone(), hash }));
            lazy.push((key, bytes));
        }
        let mut segments = Vec::with_capacity(blob.segments.len());
        for bytes in blob.segments {
            let p = decode_segment(&bytes)?;
            let hash = item_hash(SEGMENT, &p.key, &bytes);
            checksum = checksum.wrapping_add(hash);
            segments.push(wire::segment_from_proto(&p)?);
            r.segments.push((p.key.into(), Item { bytes, hash }));
        }
        if checksum != blob.checksum {
            return Err(ApplyError::Checksum {
                revision: r.revision,
                computed: checksum,
                expected: blob.checksum,
            });
        }
        let s = Snapshot::lazy(lazy, segments, limits).with_cursor(&r.epoch, r.revision);
        Ok((r, Arc::new(s)))
    }

    /// The cursor to resume from.
    pub(crate) fn cursor(&self) -> pb::Cursor {
        pb::Cursor { epoch: self.epoch.clone(), revision: self.revision }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty_snapshot(epoch: &str, revision: u64) -> Vec<RawChunk> {
        vec![RawChunk {
            epoch: epoch.into(),
            revision,
            chunk_index: 0,
            total_chunks: 1,
            last_chunk: true,
            checksum: 0,
            ..RawChunk::default()
        }]
    }

    /// PROTOCOL.md §2.4: a snapshot never moves a client back within its
    /// epoch; another epoch, or the same revision, is applied.
    #[test]
    fn an_older_snapshot_of_our_epoch_is_a_protocol_error() {
        let limits = Limits::default();
        let at5 = Held::from_chunks(empty_snapshot("e1", 5), None, &limits).expect("first snapshot").held;
        let Err(err) = Held::from_chunks(empty_snapshot("e1", 3), Some(&at5), &limits) else {
            panic!("an older snapshot of our epoch was applied")
        };
        assert!(matches!(&err, ApplyError::Protocol(m) if m.contains("older than our revision 5")), "{err}");
        Held::from_chunks(empty_snapshot("e2", 3), Some(&at5), &limits).expect("another epoch");
        Held::from_chunks(empty_snapshot("e1", 5), Some(&at5), &limits).expect("the same revision");
        // Forgetting the cursor (a resync) keeps the floor.
        let mut forgotten = at5.clone();
        forgotten.forget_cursor();
        assert!(forgotten.epoch.is_empty(), "the next Hello carries no cursor");
        assert!(Held::from_chunks(empty_snapshot("e1", 3), Some(&forgotten), &limits).is_err());
        Held::from_chunks(empty_snapshot("e1", 6), Some(&forgotten), &limits).expect("newer, same epoch");
        Held::from_chunks(empty_snapshot("e2", 1), Some(&forgotten), &limits).expect("another epoch");
    }
}
