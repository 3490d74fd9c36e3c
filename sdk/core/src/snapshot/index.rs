//! A snapshot's key index and flag positions, in pieces shared between
//! revisions: a change copies the piece it touches and refers to the
//! others, so applying a one-flag change to an environment of 50,000 flags
//! copies a few hundred pointers and one shard of the index, not the
//! environment (docs/BENCHMARKS.md, "Writes at the change's size").
//!
//! [`Index`]: key → entry (the snapshot's slot), a hash table split into shards chosen by the
//! key's hash (one hash per lookup: the shard by its middle bits, the
//! bucket within the shard by the rest). [`Cells`]: the flags by position,
//! in fixed-size chunks. Both clone in O(pieces) and copy a piece on its
//! first write ([`Arc::make_mut`]).

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;

/// What [`Index`] holds: an entry that knows its key.
pub(crate) trait Keyed: Clone {
    fn key(&self) -> &str;
}

/// Entries per index shard aimed at: copying a shard on a change costs
/// this many slots, copying the shard list `len / PER_SHARD` pointers.
const PER_SHARD: usize = 128;

/// Flags per chunk of [`Cells`].
const CHUNK: usize = 256;

/// Key → entry, sharded; see the module docs.
#[derive(Debug, Clone)]
pub(crate) struct Index<T> {
    /// Seeded once per lineage: every revision applied from this index
    /// hashes a key to the same shard and bucket.
    hasher: foldhash::fast::RandomState,
    /// A power of two of them.
    shards: Vec<Arc<HashTable<T>>>,
    len: usize,
}

impl<T: Keyed> Index<T> {
    /// An empty index sized for `n` keys.
    pub(crate) fn with_capacity(n: usize) -> Index<T> {
        Index::with_hasher(n, foldhash::fast::RandomState::default())
    }

    fn with_hasher(n: usize, hasher: foldhash::fast::RandomState) -> Index<T> {
        let shards = n.div_ceil(PER_SHARD).next_power_of_two();
        let each = n.div_ceil(shards);
        Index {
            hasher,
            shards: (0..shards).map(|_| Arc::new(HashTable::with_capacity(each))).collect(),
            len: 0,
        }
    }

    #[inline]
    fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The shard of a hash: bits the buckets within a shard (the low
    /// ones) and hashbrown's tags (the top seven) do not use.
    #[inline]
    fn shard(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.shards.len() - 1)
    }

    /// The entry of `key`.
    #[inline]
    pub(crate) fn get(&self, key: &str) -> Option<&T> {
        let hash = self.hash(key);
        self.shards[self.shard(hash)].find(hash, |s| s.key() == key)
    }

    /// The entry of `key`, its shard copied first if another revision
    /// shares it.
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut T> {
        let hash = self.hash(key);
        let shard = self.shard(hash);
        // Looked for in the shared shard first: a missing key copies nothing.
        self.shards[shard].find(hash, |s| s.key() == key)?;
        Arc::make_mut(&mut self.shards[shard]).find_mut(hash, |s| s.key() == key)
    }

    /// Adds `entry` unless its key is here already (then the entry here
    /// stays: on unvalidated data with a key twice, the first wins).
    pub(crate) fn insert_new(&mut self, entry: T) {
        let hash = self.hash(entry.key());
        let shard = self.shard(hash);
        if self.shards[shard].find(hash, |s| s.key() == entry.key()).is_some() {
            return;
        }
        let hasher = &self.hasher;
        Arc::make_mut(&mut self.shards[shard]).insert_unique(hash, entry, |s| hasher.hash_one(s.key()));
        self.len += 1;
    }

    /// How many keys.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Takes `key`'s entry out.
    pub(crate) fn remove(&mut self, key: &str) -> Option<T> {
        let hash = self.hash(key);
        let shard = self.shard(hash);
        self.shards[shard].find(hash, |s| s.key() == key)?;
        let table = Arc::make_mut(&mut self.shards[shard]);
        let entry = table.find_entry(hash, |s| s.key() == key).ok()?.remove().0;
        self.len -= 1;
        Some(entry)
    }

    /// Every entry, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.shards.iter().flat_map(|t| t.iter())
    }

    /// Every entry, mutable: copies every shard another revision shares
    /// (O(keys): for the one-time passes, not for a change).
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.shards.iter_mut().flat_map(|t| Arc::make_mut(t).iter_mut())
    }

    /// After keys were added: when the shards hold four times the
    /// entries aimed at, the index is rebuilt with enough shards for
    /// about half the aim each (the same hasher). Rebuilding costs
    /// O(keys) once per eightfold growth, so an environment grown one
    /// flag at a time pays O(1) per flag.
    pub(crate) fn rebalance(&mut self) {
        if self.len <= self.shards.len() * PER_SHARD * 4 {
            return;
        }
        let mut grown = Index::with_hasher(self.len, self.hasher.clone());
        for entry in self.values() {
            let hash = grown.hash(entry.key());
            let shard = grown.shard(hash);
            let hasher = &grown.hasher;
            Arc::make_mut(&mut grown.shards[shard])
                .insert_unique(hash, entry.clone(), |s| hasher.hash_one(s.key()));
        }
        grown.len = self.len;
        *self = grown;
    }
}

/// Values by position, in chunks of [`CHUNK`] shared between revisions.
#[derive(Debug)]
pub(crate) struct Cells<T> {
    chunks: Vec<Arc<Vec<T>>>,
    len: usize,
}

// By hand: a derived `Clone` would ask `T: Clone` of the chunks' owner.
impl<T> Clone for Cells<T> {
    fn clone(&self) -> Self {
        Cells { chunks: self.chunks.clone(), len: self.len }
    }
}

impl<T: Clone> Cells<T> {
    pub(crate) fn new() -> Cells<T> {
        Cells { chunks: Vec::new(), len: 0 }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn get(&self, i: usize) -> &T {
        &self.chunks[i / CHUNK][i % CHUNK]
    }

    /// Replaces the value at `i` (its chunk copied first if shared).
    pub(crate) fn set(&mut self, i: usize, value: T) {
        Arc::make_mut(&mut self.chunks[i / CHUNK])[i % CHUNK] = value;
    }

    pub(crate) fn push(&mut self, value: T) {
        if self.len.is_multiple_of(CHUNK) {
            self.chunks.push(Arc::new(Vec::with_capacity(CHUNK)));
        }
        let last = self.chunks.last_mut().expect("a chunk with room was just ensured");
        Arc::make_mut(last).push(value);
        self.len += 1;
    }

    /// Removes the value at `i`, moving the last one into its place;
    /// returns the position the moved one had (`None` when `i` was last).
    pub(crate) fn swap_remove(&mut self, i: usize) -> Option<usize> {
        let last = self.len - 1;
        let tail = self.chunks.last_mut().expect("not empty: a value is being removed");
        let moved = Arc::make_mut(tail).pop().expect("the last chunk holds the last value");
        if tail.is_empty() {
            self.chunks.pop();
        }
        self.len = last;
        (i != last).then(|| {
            self.set(i, moved);
            last
        })
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flat_map(|c| c.iter())
    }
}

impl<T: Clone> FromIterator<T> for Cells<T> {
    fn from_iter<I: IntoIterator<Item = T>>(values: I) -> Self {
        let mut cells = Cells::new();
        for v in values {
            cells.push(v);
        }
        cells
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_keep_every_value_through_pushes_sets_and_swap_removes() {
        let mut cells: Cells<u32> = (0..1000).collect();
        let mut model: Vec<u32> = (0..1000).collect();
        let shared = cells.clone();
        for step in 0..3000u32 {
            match step % 3 {
                0 => {
                    cells.push(step + 1000);
                    model.push(step + 1000);
                }
                1 if !model.is_empty() => {
                    let i = (step as usize * 7919) % model.len();
                    let moved = cells.swap_remove(i);
                    model.swap_remove(i);
                    assert_eq!(moved, (i != model.len()).then_some(model.len()));
                }
                _ if !model.is_empty() => {
                    let i = (step as usize * 104_729) % model.len();
                    cells.set(i, step);
                    model[i] = step;
                }
                _ => {}
            }
            assert_eq!(cells.len(), model.len());
        }
        assert_eq!(cells.iter().copied().collect::<Vec<_>>(), model);
        assert!((0..model.len()).all(|i| *cells.get(i) == model[i]));
        assert_eq!(
            shared.iter().copied().collect::<Vec<_>>(),
            (0..1000).collect::<Vec<_>>(),
            "the clone kept"
        );
    }
}
