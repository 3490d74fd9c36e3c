//! One environment's immutable in-memory state at one revision: item bytes,
//! the retained change log, the checksum and the compiled snapshot. Built by
//! the store on load and on every commit, published through `ArcSwap`, and
//! read by subscribers without touching sled. It also owns the
//! encode-once caches: one snapshot encoding and one delta per cursor, per
//! revision.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use flagstream::Snapshot;

use crate::ops::metrics::Metrics;
use crate::store::encoded::{self, ChunkHeader, DeltaParts, Encoded, SnapshotChunks};

/// Item kinds, numbered as `ItemKind` in admin.proto and as the checksum's
/// kind byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub enum Kind {
    /// A flag.
    Flag = 1,
    /// A segment.
    Segment = 2,
}

impl Kind {
    /// Lower-case name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Flag => "flag",
            Kind::Segment => "segment",
        }
    }
}

/// `(kind, key)`: flags sort before segments, each by key.
pub(crate) type ItemKey = (Kind, String);

/// Every live item of an environment, by key: a persistent map, so the
/// state after a write shares every unchanged item with the state before
/// it (a write costs its change, not the environment's size).
pub(crate) type Items = imbl::OrdMap<ItemKey, Item>;

/// The retained change log, oldest first: persistent too, its entries
/// shared (a write copies the edge chunk it appends to: pointers, not the
/// entries' key lists).
pub(crate) type Log = imbl::Vector<Arc<LogEntry>>;

/// What an environment's items add up to, kept with its state and moved
/// by each change rather than summed over every item.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    /// Wrapping sum of the item hashes (PROTOCOL.md §3.1).
    pub checksum: u64,
    /// Bytes of all item encodings.
    pub bytes: usize,
    /// Number of flags.
    pub flags: usize,
    /// Number of segments.
    pub segments: usize,
}

impl Totals {
    /// Summed over every item (at load, or for a received snapshot).
    pub(crate) fn of(items: &Items) -> Totals {
        let mut t = Totals::default();
        for (k, i) in items {
            t.change(k.0, None, Some(i));
        }
        t
    }

    /// Writes `new` at `key` in `items` (removes the item for `None`) and
    /// moves these totals by the change; returns the item replaced. Every
    /// change to a state's items goes through here, so items and totals
    /// cannot part.
    pub(crate) fn put(&mut self, items: &mut Items, key: ItemKey, new: Option<Item>) -> Option<Item> {
        let kind = key.0;
        let old = match &new {
            Some(item) => items.insert(key, item.clone()),
            None => items.remove(&key),
        };
        self.change(kind, old.as_ref(), new.as_ref());
        old
    }

    /// Moves the totals by one item replaced (`old` → `new`; either may be
    /// absent).
    fn change(&mut self, kind: Kind, old: Option<&Item>, new: Option<&Item>) {
        let count = match kind {
            Kind::Flag => &mut self.flags,
            Kind::Segment => &mut self.segments,
        };
        if let Some(o) = old {
            self.checksum = self.checksum.wrapping_sub(o.hash);
            self.bytes -= o.bytes.len();
            *count -= 1;
        }
        if let Some(n) = new {
            self.checksum = self.checksum.wrapping_add(n.hash);
            self.bytes += n.bytes.len();
            *count += 1;
        }
    }
}

/// One stored flag or segment.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    /// Canonical protobuf encoding, as committed; forwarded verbatim.
    pub bytes: Bytes,
    /// Its checksum contribution (PROTOCOL.md §3.1).
    pub hash: u64,
    /// The item's version.
    pub version: u64,
}

impl Item {
    /// The item of `kind` and `key` encoded as `bytes`, its checksum
    /// contribution worked out.
    pub(crate) fn new(kind: Kind, key: &str, bytes: Bytes, version: u64) -> Item {
        Item { hash: item_hash(kind, key, &bytes), bytes, version }
    }
}

/// The checksum contribution of one item (PROTOCOL.md §3.1).
pub(crate) fn item_hash(kind: Kind, key: &str, bytes: &[u8]) -> u64 {
    flagstream::checksum::item_hash(kind as u8, key, bytes)
}

/// One committed revision in the change log.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct LogEntry {
    /// The revision.
    pub revision: u64,
    /// Items it upserted or deleted.
    pub changed: Vec<ItemKey>,
    /// Commit time, Unix ms.
    pub committed_unix_ms: u64,
    /// Approximate bytes this entry accounts for in the retention budget.
    pub bytes: usize,
    /// Set on a replica when the entry was made by diffing a received
    /// snapshot against revision `r` (the previous head): it holds the
    /// net change from `r`, so a cursor strictly between `r` and this
    /// revision (which this relay never served) cannot be given a delta
    /// from it and gets a snapshot instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diffed_from: Option<u64>,
    /// In a shared database: the random id its commit recorded, which a
    /// relay compares with the database's to detect lost history.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub commit_id: String,
}

/// An environment at one revision.
#[derive(Debug)]
pub(crate) struct EnvState {
    /// Environment name.
    pub name: String,
    /// Store epoch (random, made at creation).
    pub epoch: String,
    /// Head revision.
    pub revision: u64,
    /// The items' totals: checksum, bytes, counts.
    totals: Totals,
    /// Commit time of the head revision, Unix ms.
    pub committed_unix_ms: u64,
    /// All live items.
    pub items: Items,
    /// Retained change log, oldest first, ending at `revision`.
    pub log: Log,
    /// `(r, R)` of each diffed entry in the log: cursors strictly between
    /// get snapshots (see [`LogEntry::diffed_from`]). Almost always empty.
    holes: Vec<(u64, u64)>,
    /// Compiled form, for validation of the next write and server-side
    /// evaluation.
    pub snapshot: Arc<Snapshot>,
    /// The snapshot's chunks at this revision, planned on first demand
    /// (assembled while streams need them, [`SnapshotChunks`]).
    chunks: OnceLock<Arc<SnapshotChunks>>,
    /// The delta from the previous revision: what nearly every subscriber
    /// needs, read without a lock (`None`: larger than the delta bound).
    delta_from_previous: OnceLock<Option<Encoded>>,
    /// Encoded deltas to this revision from older revisions, by `from`,
    /// bounded in bytes.
    deltas: Mutex<DeltaCache>,
    /// The evaluation features the data uses, found on first demand.
    features: OnceLock<Vec<&'static str>>,
}

/// Deltas from older cursors, encoded once each while they fit the byte
/// budget. Any SDK-key holder chooses its cursor, so the cache must not
/// grow with what clients ask for: it holds at most `budget` bytes of
/// encodings (oldest insertions evicted first, each eviction counted),
/// and a delta over the delta bound is remembered only as "too large".
#[derive(Debug, Default)]
struct DeltaCache {
    /// `None`: larger than the delta bound (a snapshot is sent instead).
    entries: HashMap<u64, Option<Encoded>>,
    /// Insertion order of cached encodings, for eviction.
    order: VecDeque<u64>,
    bytes: usize,
}

/// Size bounds of what a subscriber is sent and of the delta cache.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Largest snapshot chunk, and largest delta, in bytes.
    pub chunk_bytes: usize,
    /// Most bytes of cached deltas per environment revision.
    pub delta_cache_bytes: usize,
}

/// What a subscriber at some cursor needs next.
#[derive(Debug)]
pub(crate) enum Catchup {
    /// Already at head.
    Current,
    /// One delta to head.
    Delta(Encoded),
    /// A full snapshot (cursor empty, foreign or too old), and why: the
    /// `cause` of `resyncs_total`, counted by the stream when it sends it.
    Snapshot(Arc<SnapshotChunks>, &'static str),
    /// The cursor is ahead of this head (same epoch): nothing may be sent
    /// until the head reaches it (PROTOCOL.md §2.2).
    Ahead,
}

impl EnvState {
    /// A state with empty caches, its totals summed over the items (at
    /// load: once).
    pub(crate) fn new(
        name: String,
        epoch: String,
        revision: u64,
        committed_unix_ms: u64,
        items: Items,
        log: Log,
        snapshot: Arc<Snapshot>,
    ) -> EnvState {
        let totals = Totals::of(&items);
        EnvState::with_totals(name, epoch, revision, committed_unix_ms, items, totals, log, snapshot)
    }

    /// A state with empty caches whose items add up to `totals` (kept by
    /// the write that made them).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn with_totals(
        name: String,
        epoch: String,
        revision: u64,
        committed_unix_ms: u64,
        items: Items,
        totals: Totals,
        log: Log,
        snapshot: Arc<Snapshot>,
    ) -> EnvState {
        debug_assert_eq!(totals, Totals::of(&items), "totals kept out of step with the items");
        // In every build, the counts (O(1)): totals out of step would be
        // committed as the environment's checksum.
        assert_eq!(totals.flags + totals.segments, items.len(), "totals kept out of step with the items");
        let holes = log.iter().filter_map(|e| e.diffed_from.map(|from| (from, e.revision))).collect();
        EnvState {
            holes,
            name,
            epoch,
            revision,
            totals,
            committed_unix_ms,
            items,
            log,
            snapshot,
            chunks: OnceLock::new(),
            delta_from_previous: OnceLock::new(),
            deltas: Mutex::new(DeltaCache::default()),
            features: OnceLock::new(),
        }
    }

    /// The first evaluation feature the data uses that a subscriber
    /// announcing `has` lacks (PROTOCOL.md §8, rule 7).
    pub(crate) fn missing_feature(&self, has: &[String]) -> Option<&'static str> {
        // A subscriber with every feature this relay knows lacks none: the
        // data is not looked at (one pass over it per revision otherwise).
        if flagstream::feature::IMPLEMENTED.iter().all(|f| has.iter().any(|h| h == f)) {
            return None;
        }
        let used = self.features.get_or_init(|| flagstream::feature::used(&self.snapshot));
        used.iter().copied().find(|f| !has.iter().any(|h| h == f))
    }

    /// Lowest cursor revision a delta can start from.
    pub(crate) fn oldest_delta_base(&self) -> u64 {
        self.log.front().map_or(self.revision, |e| e.revision - 1)
    }

    /// What a subscriber at `(epoch, revision)` needs to reach head.
    pub(crate) fn catchup(&self, epoch: &str, revision: u64, bounds: Bounds, metrics: &Metrics) -> Catchup {
        if epoch == self.epoch && revision == self.revision {
            return Catchup::Current;
        }
        let cause = if epoch.is_empty() {
            "empty_cursor"
        } else if epoch != self.epoch {
            "foreign_epoch"
        } else if revision > self.revision {
            return Catchup::Ahead;
        } else if revision < self.oldest_delta_base() {
            "too_old"
        } else if self.holes.iter().any(|(from, to)| *from < revision && revision < *to) {
            "inside_diffed_snapshot"
        } else {
            // Deltas obey the same size bound as snapshot chunks, so no
            // message outgrows what clients decode; a snapshot is chunked.
            match self.delta_from(revision, bounds, metrics) {
                Some(delta) => return Catchup::Delta(delta),
                None => "delta_too_large",
            }
        };
        Catchup::Snapshot(self.chunks(bounds.chunk_bytes, metrics), cause)
    }

    /// The snapshot at this revision, planned once.
    pub(crate) fn chunks(&self, chunk_bytes: usize, metrics: &Metrics) -> Arc<SnapshotChunks> {
        self.chunks
            .get_or_init(|| {
                metrics.encodes.get_or_create(&vec![("kind", "snapshot".to_owned())]).inc();
                let of = |kind: Kind| -> Vec<Bytes> {
                    self.items.iter().filter(|((k, _), _)| *k == kind).map(|(_, i)| i.bytes.clone()).collect()
                };
                let header = ChunkHeader {
                    environment: self.name.clone(),
                    epoch: self.epoch.clone(),
                    revision: self.revision,
                    checksum: self.totals.checksum,
                    committed_unix_ms: self.committed_unix_ms,
                };
                Arc::new(SnapshotChunks::plan(header, of(Kind::Flag), of(Kind::Segment), chunk_bytes))
            })
            .clone()
    }

    /// The delta from `from` to head, encoded once per `from` while the
    /// cache has room; `None` if it is over the delta bound.
    fn delta_from(&self, from: u64, bounds: Bounds, metrics: &Metrics) -> Option<Encoded> {
        let fits = |e: Encoded| (e.len() <= bounds.chunk_bytes).then_some(e);
        if from + 1 == self.revision {
            return self.delta_from_previous.get_or_init(|| fits(self.encode_delta(from, metrics))).clone();
        }
        // A poisoned lock only means another subscriber panicked while
        // encoding; the map itself is still a valid cache.
        let mut cache = self.deltas.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = cache.entries.get(&from) {
            return e.clone();
        }
        let delta = fits(self.encode_delta(from, metrics));
        let len = delta.as_ref().map_or(0, Encoded::len);
        if len > bounds.delta_cache_bytes {
            // Served, never cached: it alone would break the budget.
            metrics.limit_hit("delta_cache_bytes");
            return delta;
        }
        while cache.bytes + len > bounds.delta_cache_bytes {
            let Some(old) = cache.order.pop_front() else { break };
            if let Some(Some(e)) = cache.entries.remove(&old) {
                cache.bytes -= e.len();
                metrics.delta_cache_evictions.inc();
            }
        }
        if delta.is_some() {
            cache.order.push_back(from);
            cache.bytes += len;
        }
        // A "too large" marker costs a map slot; there is at most one per
        // revision in the change log.
        cache.entries.insert(from, delta.clone());
        delta
    }

    /// Bytes of deltas cached now.
    #[cfg(test)]
    fn delta_cache_bytes(&self) -> usize {
        self.deltas.lock().unwrap_or_else(|p| p.into_inner()).bytes
    }

    /// Encodes the delta `from` → this revision (counted: encode-once is
    /// checked against this metric).
    fn encode_delta(&self, from: u64, metrics: &Metrics) -> Encoded {
        metrics.encodes.get_or_create(&vec![("kind", "delta".to_owned())]).inc();
        let mut changed: Vec<&ItemKey> =
            self.log.iter().filter(|e| e.revision > from).flat_map(|e| e.changed.iter()).collect();
        changed.sort_unstable();
        changed.dedup();
        let mut parts = DeltaParts {
            epoch: &self.epoch,
            from_revision: from,
            to_revision: self.revision,
            flags: Vec::new(),
            segments: Vec::new(),
            deleted_flags: Vec::new(),
            deleted_segments: Vec::new(),
            checksum: self.totals.checksum,
            committed_unix_ms: self.committed_unix_ms,
        };
        for key in changed {
            match (self.items.get(key), key.0) {
                (Some(item), Kind::Flag) => parts.flags.push(&item.bytes),
                (Some(item), Kind::Segment) => parts.segments.push(&item.bytes),
                (None, Kind::Flag) => parts.deleted_flags.push(&key.1),
                (None, Kind::Segment) => parts.deleted_segments.push(&key.1),
            }
        }
        encoded::delta(&parts)
    }

    /// Bytes of all item encodings (store size).
    pub(crate) fn item_bytes(&self) -> usize {
        self.totals.bytes
    }

    /// The items' totals.
    pub(crate) fn totals(&self) -> Totals {
        self.totals
    }

    /// Checksum of all items (wrapping sum of item hashes, PROTOCOL.md
    /// §3.1).
    pub(crate) fn checksum(&self) -> u64 {
        self.totals.checksum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Totals moved change by change (inserts, replacements, deletes of
    /// present and missing keys, both kinds) equal the totals summed over
    /// the items.
    #[test]
    fn kept_totals_match_the_items() {
        let (mut items, mut totals) = (Items::new(), Totals::default());
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..5_000u64 {
            // xorshift: deterministic, spread over 64 keys of each kind.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let kind = if x & 1 == 0 { Kind::Flag } else { Kind::Segment };
            let key: ItemKey = (kind, format!("k{}", (x >> 8) % 64));
            let new = (!(x >> 20).is_multiple_of(3)).then(|| {
                let bytes = Bytes::from(vec![b'v'; ((x >> 24) % 300) as usize]);
                Item::new(kind, &key.1, bytes, step)
            });
            totals.put(&mut items, key, new);
            assert_eq!(totals, Totals::of(&items), "step {step}");
        }
        assert!(totals.flags > 0 && totals.segments > 0);
    }

    /// Revision 20 of an environment whose revision `r` changed flag `f-r`
    /// (1 KiB each).
    fn state() -> EnvState {
        let mut items = Items::new();
        let mut log = Log::new();
        for r in 1..=20u64 {
            let key = (Kind::Flag, format!("f-{r}"));
            let bytes = Bytes::from(vec![b'x'; 1024]);
            items.insert(key.clone(), Item::new(Kind::Flag, &key.1, bytes, 1));
            log.push_back(Arc::new(LogEntry {
                revision: r,
                changed: vec![key],
                committed_unix_ms: 0,
                bytes: 1024,
                diffed_from: None,
                commit_id: String::new(),
            }));
        }
        EnvState::new("e".into(), "E".into(), 20, 0, items, log, Arc::new(Snapshot::empty()))
    }

    fn delta_encodes(m: &Metrics) -> u64 {
        m.encodes.get_or_create(&vec![("kind", "delta".to_owned())]).get()
    }

    #[test]
    fn delta_cache_stays_within_its_byte_bound_and_counts_evictions() {
        let (s, m) = (state(), Metrics::new());
        let bounds = Bounds { chunk_bytes: 64 << 10, delta_cache_bytes: 8 << 10 };
        // Cursors 5..=15 ask for deltas of 5..15 KiB: more than the bound
        // in total, and some alone larger than it.
        for from in 5..=15 {
            assert!(matches!(s.catchup("E", from, bounds, &m), Catchup::Delta(_)), "from {from}");
            assert!(
                s.delta_cache_bytes() <= bounds.delta_cache_bytes,
                "{} bytes cached",
                s.delta_cache_bytes()
            );
        }
        assert!(m.delta_cache_evictions.get() > 0, "nothing evicted");
        assert!(m.limit_hits.get_or_create(&vec![("limit", "delta_cache_bytes".to_owned())]).get() > 0);
        // A cached delta is served again without encoding.
        let before = delta_encodes(&m);
        assert!(matches!(s.catchup("E", 15, bounds, &m), Catchup::Delta(_)));
        assert_eq!(delta_encodes(&m), before, "a cached delta was encoded again");
    }

    #[test]
    fn deltas_over_the_delta_bound_become_snapshots_and_are_not_cached() {
        let (s, m) = (state(), Metrics::new());
        let bounds = Bounds { chunk_bytes: 4 << 10, delta_cache_bytes: 1 << 20 };
        assert!(matches!(s.catchup("E", 2, bounds, &m), Catchup::Snapshot(_, "delta_too_large")));
        assert_eq!(s.delta_cache_bytes(), 0);
        // Remembered as too large: not encoded again.
        let before = delta_encodes(&m);
        assert!(matches!(s.catchup("E", 2, bounds, &m), Catchup::Snapshot(..)));
        assert_eq!(delta_encodes(&m), before);
        // Small ones still come as deltas; cursors ahead are held.
        assert!(matches!(s.catchup("E", 19, bounds, &m), Catchup::Delta(_)));
        assert!(matches!(s.catchup("E", 21, bounds, &m), Catchup::Ahead));
    }
}
