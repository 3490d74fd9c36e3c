//! Revisions received from an upstream relay (the replica role): verified
//! against the upstream's checksum, persisted atomically, and published
//! with the upstream's epoch, revision, item bytes, checksum and commit
//! time unchanged (PROTOCOL.md §2.2), so a cursor from any relay of the
//! tree is valid here.
//!
//! A snapshot of the same epoch extends the change log by diffing against
//! the current state (subscribers at older cursors keep getting deltas); a
//! snapshot of another epoch restarts the log. A coalesced delta, like a
//! diffed snapshot, becomes one log entry that names every item changed
//! since the previous head: a delta from any cursor in between is then
//! a superset of what that cursor needs, which a client applies
//! correctly (deleting an unknown key is a no-op).
//!
//! These run on tokio's blocking pool (the follow engine calls its sink
//! there) and block on the backend.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use flagstream::follow::{RawChunk, RawDelta};
use flagstream::{ApplyError, Snapshot};
use flagstream_proto::v1 as pb;

use super::backend::{Changes, Commit, ItemChange, SharedBuffers, shared_encoding};
use super::build::{build_snapshot, decode_items};
use super::meta::EnvMeta;
use super::state::{EnvState, Item, ItemKey, Items, Kind, Log, LogEntry, Totals};
use super::{DecodedItems, Env, Store, StoreError, build_items, decode_item, trim_log};

fn stored(e: StoreError) -> ApplyError {
    ApplyError::Store(Box::new(e))
}

/// The header every chunk of one snapshot shares.
struct Header {
    epoch: String,
    revision: u64,
    checksum: u64,
    committed_unix_ms: u64,
}

impl Store {
    /// Applies a complete snapshot of `env` from upstream.
    pub(crate) fn apply_snapshot_blocking(
        &self,
        env: &str,
        chunks: Vec<RawChunk>,
    ) -> Result<pb::Cursor, ApplyError> {
        let env = self.env(env).map_err(stored)?;
        let _write = env.write.blocking_lock();
        self.check_receiving(&env)?;
        self.receive_snapshot(&env, chunks, true, String::new())
    }

    /// Applies a delta of `env` from upstream.
    pub(crate) fn apply_delta_blocking(&self, env: &str, d: RawDelta) -> Result<pb::Cursor, ApplyError> {
        let env = self.env(env).map_err(stored)?;
        let _write = env.write.blocking_lock();
        self.check_receiving(&env)?;
        self.receive_delta(&env, d, true, String::new())
    }

    /// [`Store::apply_snapshot_blocking`] under the environment's write
    /// lock, which the caller holds. `persist`: store it through the backend
    /// (not when it came from the backend's own change feed); `commit_id`:
    /// the revision's id in a shared database.
    pub(crate) fn receive_snapshot(
        &self,
        env: &Env,
        chunks: Vec<RawChunk>,
        persist: bool,
        commit_id: String,
    ) -> Result<pb::Cursor, ApplyError> {
        let Some(first) = chunks.first() else {
            return Err(ApplyError::Protocol("a snapshot without chunks".into()));
        };
        let h = Header {
            epoch: first.epoch.clone(),
            revision: first.revision,
            checksum: first.checksum,
            committed_unix_ms: first.committed_unix_ms,
        };
        if h.epoch.is_empty() {
            return Err(ApplyError::Protocol("a snapshot without an epoch".into()));
        }
        // Each item to be stored copied once into the buffer the backend
        // stores as it is, found again by its address for the commit: held
        // once, and the network's buffers (often a whole chunk) let go. A
        // list of exactly the items' count, sorted once: a pointer and a
        // buffer handle per item, not a hash table grown by doubling.
        let count = chunks.iter().map(|c| c.flags.len() + c.segments.len()).sum();
        let mut stored: Vec<(usize, sled::IVec)> = Vec::with_capacity(if persist { count } else { 0 });
        let raw = chunks
            .into_iter()
            .flat_map(|c| {
                c.flags
                    .into_iter()
                    .map(|b| (Kind::Flag, b))
                    .chain(c.segments.into_iter().map(|b| (Kind::Segment, b)))
            })
            .map(|(kind, b)| {
                if !persist {
                    return (kind, b);
                }
                let (bytes, ivec) = shared_encoding(&b);
                stored.push((bytes.as_ptr() as usize, ivec));
                (kind, bytes)
            });
        // Decoded (what does not decode is refused before anything is
        // stored), the snapshot built after the commit (or, from a shared
        // database's feed, after the checks): it is not held through the
        // commit, whose writes are the largest part of this step's memory
        // (docs/RESILIENCE.md §5).
        let items =
            decode_items(raw, count).map_err(|e| ApplyError::Protocol(format!("undecodable item: {e}")))?;
        let totals = Totals::of(&items);
        let name = env.meta.load().name.clone();
        if totals.checksum != h.checksum {
            return Err(ApplyError::Checksum {
                revision: h.revision,
                computed: totals.checksum,
                expected: h.checksum,
            });
        }
        let state = env.state.load_full();
        let same_epoch = state.epoch == h.epoch;
        if same_epoch && h.revision < state.revision {
            return Err(ApplyError::Protocol(format!(
                "a snapshot at revision {} of our epoch, older than our revision {}",
                h.revision, state.revision
            )));
        }
        if same_epoch && h.revision == state.revision && h.checksum == state.checksum() {
            // Nothing new (a resync after a mismatch elsewhere in the tree).
            return Ok(cursor(&state));
        }
        // Our revision with other content (the upstream's store was
        // restored and new writes reached our revision number again; found
        // by a heartbeat's checksum, PROTOCOL.md §2.6): our history is not
        // the upstream's, so the log restarts here as for another epoch.
        let diverged = same_epoch && h.revision == state.revision;
        if diverged {
            tracing::warn!(env = %name, revision = h.revision, ours = state.checksum(), theirs = h.checksum,
                "the upstream holds other content under this relay's revision: replaced by its snapshot, the change log restarts");
        }
        // What changed. When this relay held no items (its first sync):
        // every item, the map itself (`Changes::Whole`). Otherwise the
        // upserts of new or different items and the deletes of the rest,
        // listed.
        let shared = SharedBuffers::new(stored);
        let changes = match state.items.is_empty() {
            true => Changes::Whole { items: items.clone(), shared: Arc::new(shared) },
            false => {
                let mut changes: Vec<ItemChange> = items
                    .iter()
                    .filter(|(k, i)| state.items.get(*k).is_none_or(|old| old.bytes != i.bytes))
                    .map(|(k, i)| ItemChange {
                        key: k.clone(),
                        bytes: Some(i.bytes.clone()),
                        shared: shared.of(&i.bytes).cloned(),
                    })
                    .collect();
                // The changes hold the buffers they store; the list is not
                // kept through the commit.
                drop(shared);
                changes.extend(state.items.keys().filter(|k| !items.contains_key(*k)).map(|k| ItemChange {
                    key: k.clone(),
                    bytes: None,
                    shared: None,
                }));
                Changes::Listed(changes)
            }
        };
        // Same epoch: the log goes on with one entry holding the net change
        // from our head. Another epoch: its history starts here, empty.
        let log = (same_epoch && !diverged).then(|| (state.log.clone(), Some(state.revision)));
        let snapshot = |items: &Items| {
            build_snapshot(&name, items, &self.inner.limits, &self.inner.metrics)
                .map_err(|e| ApplyError::Protocol(format!("undecodable item: {e}")))
        };
        self.commit_received(env, h, (items, totals), snapshot, changes, log, persist, commit_id)
    }

    /// [`Store::apply_delta_blocking`] under the environment's write lock
    /// (see [`Store::receive_snapshot`]).
    pub(crate) fn receive_delta(
        &self,
        env: &Env,
        d: RawDelta,
        persist: bool,
        commit_id: String,
    ) -> Result<pb::Cursor, ApplyError> {
        let state = env.state.load_full();
        if d.epoch != state.epoch || d.from_revision != state.revision || d.to_revision <= d.from_revision {
            return Err(ApplyError::Gap {
                from: d.from_revision,
                to: d.to_revision,
                ours: state.revision,
                epoch_ok: d.epoch == state.epoch,
            });
        }
        // A copy sharing every unchanged item; the totals moved by the
        // change alone.
        let mut items = state.items.clone();
        let mut totals = state.totals();
        let mut change = DecodedItems::default();
        let mut changes = Vec::new();
        let upserts = d
            .upserted_flags
            .into_iter()
            .map(|b| (Kind::Flag, b))
            .chain(d.upserted_segments.into_iter().map(|b| (Kind::Segment, b)));
        for (kind, bytes) in upserts {
            // Stored: held in the buffer the backend stores as it is.
            let (bytes, shared) = match persist {
                true => {
                    let (bytes, ivec) = shared_encoding(&bytes);
                    (bytes, Some(ivec))
                }
                false => (bytes, None),
            };
            let (key, version) = decode_item(kind, &bytes, &mut change)
                .map_err(|e| ApplyError::Protocol(format!("undecodable {}: {e}", kind.name())))?;
            let item = Item::new(kind, &key, bytes.clone(), version);
            let k: ItemKey = (kind, key);
            changes.push(ItemChange { key: k.clone(), bytes: Some(bytes), shared });
            totals.put(&mut items, k, Some(item));
        }
        let deletes = d
            .deleted_flag_keys
            .iter()
            .map(|k| (Kind::Flag, k))
            .chain(d.deleted_segment_keys.iter().map(|k| (Kind::Segment, k)));
        for (kind, key) in deletes {
            let k: ItemKey = (kind, key.clone());
            if totals.put(&mut items, k.clone(), None).is_some() {
                changes.push(ItemChange { key: k, bytes: None, shared: None });
            }
        }
        if totals.checksum != d.checksum {
            return Err(ApplyError::Checksum {
                revision: d.to_revision,
                computed: totals.checksum,
                expected: d.checksum,
            });
        }
        let name = state.name.clone();
        let snapshot = match state.snapshot.apply_encoded(
            &change.set,
            &change.flag_bytes,
            &d.deleted_flag_keys,
            &d.deleted_segment_keys,
            &self.inner.limits,
        ) {
            Ok(s) => s,
            Err(e) => {
                // A newer upstream's data this relay cannot validate: serve
                // and forward it anyway, loudly (as `build_items` does).
                tracing::error!(env = %name, error = %e, "received flags fail validation under this relay's limits; serving them anyway");
                self.inner.metrics.limit_hit("stored_data_invalid");
                let raw = items.iter().map(|((k, _), i)| (*k, i.bytes.clone()));
                build_items(&name, raw, &self.inner.limits, &self.inner.metrics)
                    .map_err(|e| ApplyError::Protocol(format!("undecodable item: {e}")))?
                    .1
            }
        };
        let h = Header {
            epoch: d.epoch,
            revision: d.to_revision,
            checksum: d.checksum,
            committed_unix_ms: d.committed_unix_ms,
        };
        let log = state.log.clone();
        self.commit_received(
            env,
            h,
            (items, totals),
            |_: &Items| Ok(snapshot),
            changes.into(),
            Some((log, None)),
            persist,
            commit_id,
        )
    }

    /// A received revision may be stored: the environment is neither
    /// deleted nor poisoned.
    fn check_receiving(&self, env: &Env) -> Result<(), ApplyError> {
        let name = env.meta.load().name.clone();
        self.check_committing(env, &name).map_err(stored)
    }

    /// Persists and publishes one received revision. `snapshot`: the
    /// items' snapshot, made once they are stored; `log`: the change log
    /// to extend, and for a diffed snapshot the revision it was diffed
    /// from; `None`: the log restarts empty (a new epoch).
    #[allow(clippy::too_many_arguments)]
    fn commit_received(
        &self,
        env: &Env,
        h: Header,
        (items, totals): (Items, Totals),
        snapshot: impl FnOnce(&Items) -> Result<Snapshot, ApplyError>,
        changes: Changes,
        log: Option<(Log, Option<u64>)>,
        persist: bool,
        commit_id: String,
    ) -> Result<pb::Cursor, ApplyError> {
        let reset_log = log.is_none();
        let (mut log, diffed_from) = log.unwrap_or_default();
        let entry = (!reset_log).then(|| LogEntry {
            revision: h.revision,
            changed: changes.iter().map(|c| c.key.clone()).collect(),
            committed_unix_ms: h.committed_unix_ms,
            bytes: changes.iter().map(|c| c.bytes.map_or(c.key.1.len(), Bytes::len)).sum(),
            diffed_from,
            commit_id,
        });
        log.extend(entry.clone().map(Arc::new));
        let trimmed = trim_log(&mut log, self.inner.retention);
        let mut meta = EnvMeta::clone(&env.meta.load());
        meta.epoch.clone_from(&h.epoch);
        meta.revision = h.revision;
        meta.checksum = h.checksum;
        meta.committed_unix_ms = h.committed_unix_ms;
        // Received now: current as of now (the heartbeat's staleness says
        // how old the upstream's own data was); from a shared database's
        // feed it is the truth, not a copy.
        meta.confirmed_unix_ms = if persist { super::now_ms() } else { 0 };
        let commit = Commit {
            meta: meta.clone(),
            base: env.state.load().revision,
            items: changes,
            entry,
            trimmed,
            reset_log,
            audit: Vec::new(),
            audit_floor: None,
            request_id: String::new(),
        };
        if persist {
            env.committing.store(true, Ordering::Release);
            let outcome = tokio::runtime::Handle::current().block_on(self.inner.backend.commit(commit));
            if let Err(e) = outcome {
                self.poison(env, &meta.name, &e);
                env.committing.store(false, Ordering::Release);
                return Err(stored(e));
            }
        }
        // Every item decoded above: a snapshot that still fails leaves
        // stored what memory does not hold, so the environment is fenced
        // off as after a failed commit, and the failure is this relay's
        // (a storage error), not the upstream's.
        let snapshot = match snapshot(&items) {
            Ok(s) => s,
            Err(e) => {
                let e = StoreError::Storage(
                    format!("revision {} was stored but its snapshot could not be built: {e}", h.revision)
                        .into(),
                );
                if persist {
                    self.poison(env, &meta.name, &e);
                }
                env.committing.store(false, Ordering::Release);
                return Err(stored(e));
            }
        };
        let state = EnvState::with_totals(
            meta.name.clone(),
            h.epoch.clone(),
            h.revision,
            h.committed_unix_ms,
            items,
            totals,
            log,
            Arc::new(snapshot.with_cursor(&h.epoch, h.revision)),
        );
        let c = cursor(&state);
        self.publish(env, meta, state);
        env.committing.store(false, Ordering::Release);
        Ok(c)
    }
}

fn cursor(state: &EnvState) -> pb::Cursor {
    pb::Cursor { epoch: state.epoch.clone(), revision: state.revision }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use flagstream::follow::RawChunk;
    use flagstream::{ApplyError, Context, Limits};
    use prost::Message;

    use crate::ops::metrics::Metrics;
    use crate::store::backend::Backend;
    use crate::store::build::decode_items;
    use crate::store::meta::EnvMeta;
    use crate::store::sled::SledBackend;
    use crate::store::state::{Kind, Totals};
    use crate::store::{Retention, Source, Store};

    const ENV: &str = "r";

    async fn open(dir: &std::path::Path) -> Store {
        let backend: Arc<dyn Backend> = Arc::new(SledBackend::open(&dir.join("db")).unwrap());
        let retention = Retention { revisions: 100, bytes: 1 << 20, audit_revisions: 100 };
        let source = Source::Replica { upstream: "http://upstream".into() };
        Store::open(backend, Limits::default(), retention, Metrics::new(), source).await.unwrap()
    }

    fn flag(key: &str) -> Bytes {
        let yaml = format!(
            "flags:\n  - {{key: {key}, type: bool, variations: [false, true], on: true, off_variation: 0, fallthrough: {{variation: 1}}}}\n"
        );
        let set: flagstream::FlagSet = serde_yaml_ng::from_str(&yaml).unwrap();
        Bytes::from(flagstream::wire::flag_to_proto(&set.flags[0]).encode_to_vec())
    }

    /// One chunk holding `flags`, with their checksum when they decode.
    fn chunk(revision: u64, flags: Vec<Bytes>) -> RawChunk {
        let raw = flags.iter().map(|b| (Kind::Flag, b.clone()));
        let checksum = decode_items(raw, 0).map_or(0, |items| Totals::of(&items).checksum);
        RawChunk {
            epoch: "up".into(),
            revision,
            chunk_index: 0,
            total_chunks: 1,
            last_chunk: true,
            flags,
            segments: Vec::new(),
            checksum,
            ..Default::default()
        }
    }

    async fn apply(store: &Store, c: RawChunk) -> Result<u64, ApplyError> {
        let store = store.clone();
        tokio::task::spawn_blocking(move || store.apply_snapshot_blocking(ENV, vec![c]))
            .await
            .unwrap()
            .map(|cursor| cursor.revision)
    }

    /// A received snapshot is stored, then served: its flags answer, and a
    /// restart loads them. One with an item that does not decode is
    /// refused as the upstream's fault before anything is stored: memory
    /// and disk keep the revision before it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_received_snapshot_is_stored_then_served_and_an_undecodable_one_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        store.add_env(EnvMeta::for_tests(ENV, "", 0)).await.unwrap();
        assert_eq!(apply(&store, chunk(5, vec![flag("a"), flag("b")])).await.unwrap(), 5);
        let served = |store: &Store| {
            let state = store.env(ENV).unwrap().state.load_full();
            let on = state.snapshot.detail("b", &Context::new("u"), false).value;
            (state.revision, state.items.len(), on)
        };
        assert_eq!(served(&store), (5, 2, true));

        let refused = apply(&store, chunk(6, vec![flag("a"), Bytes::from_static(b"\xff\xff\xff")])).await;
        let Err(ApplyError::Protocol(msg)) = refused else {
            panic!("not refused as a protocol error: {refused:?}")
        };
        assert!(msg.contains("undecodable item: flag"), "{msg}");
        assert_eq!(served(&store), (5, 2, true), "memory unchanged");
        drop(store);
        let store = open(dir.path()).await;
        assert_eq!(served(&store), (5, 2, true), "disk unchanged");
    }
}
