//! An environment's items tree in the sled backend, by generation:
//! `items/{name}` (generation 0) or `items/{name}#{n}`, the current one
//! named in the `meta` tree at `items-gen/{name}` (absent: 0).
//!
//! A commit that changes many items (a replica taking an environment
//! whole) writes a new generation in batches of its own (100 items or
//! 128 KiB, flushed to disk each MiB so sled's writes do not trail the
//! batches), then one transaction makes it current with the
//! metadata, the change-log entry and the audit records; the old
//! generation is dropped after. One sled
//! transaction of 50,000 inserts kept every node version sled made until
//! it ended (a replica taking a 50 MiB environment peaked at 600 MiB); a
//! batch pins sled's epoch for its own inserts only. A crash before the
//! switch leaves the old generation current and the new one orphaned,
//! dropped when the environment is next loaded; after it, the new one is
//! current and the old one is the orphan.

use std::collections::HashSet;

use super::{SledBackend, item_key};
use crate::store::backend::Changes;
use crate::store::{StoreError, corrupt};

/// A commit changing at least this many items writes a new generation.
pub(super) const BULK_ITEMS: usize = 4096;

/// Items per batch when a generation is written (a batch also ends at
/// [`BATCH_BYTES`]). A batch pins sled's epoch while it inserts, and what
/// sled replaces meanwhile (node versions, sealed log buffers) is freed
/// only once the epoch moves on: batches of 100 items or 128 KiB took a
/// replica's peak at 20,000 flags from 60 to 57–58 MiB, and its time to
/// apply a 50,000-flag snapshot from ~1.0 s to ~0.75 s, against 1,000
/// items or 1 MiB (docs/RESILIENCE.md §5).
const BATCH: usize = 100;

/// Bytes of keys and values per batch, at most (or one item larger).
/// `resilience sled-floor --replica` writes the same batches
/// (`tests/src/fault/large.rs`): change both together.
const BATCH_BYTES: usize = 128 << 10;

/// A generation being written is flushed to disk after each this many
/// bytes of keys and values.
const FLUSH_BYTES: usize = 1 << 20;

/// The `meta` key naming an environment's current generation.
pub(super) fn gen_key(name: &str) -> String {
    format!("items-gen/{name}")
}

/// The items tree of `name` at `generation`.
fn tree_name(name: &str, generation: u64) -> String {
    match generation {
        0 => format!("items/{name}"),
        g => format!("items/{name}#{g}"),
    }
}

/// The generation a tree name is of `name`'s, if it is (environment names
/// hold no `#`).
fn generation_of(tree: &[u8], name: &str) -> Option<u64> {
    let rest = std::str::from_utf8(tree).ok()?.strip_prefix("items/")?.strip_prefix(name)?;
    match rest {
        "" => Some(0),
        r => r.strip_prefix('#')?.parse().ok(),
    }
}

impl SledBackend {
    /// The environment's current generation and its items tree.
    pub(super) fn items_tree(&self, name: &str) -> Result<(u64, sled::Tree), StoreError> {
        let generation = match self.meta.get(gen_key(name))? {
            None => 0,
            Some(v) => <[u8; 8]>::try_from(v.as_ref()).map(u64::from_be_bytes).map_err(|_| {
                corrupt(format!("items generation of {name:?}"), std::io::Error::other("not 8 bytes"))
            })?,
        };
        Ok((generation, self.db.open_tree(tree_name(name, generation))?))
    }

    /// Writes `generation` of the environment's items: `old`'s items that
    /// `changes` leave alone, then the changed ones, in batches. Not current
    /// until a transaction names it.
    pub(super) fn write_generation(
        &self,
        name: &str,
        old: &sled::Tree,
        generation: u64,
        changes: &Changes,
    ) -> Result<sled::Tree, StoreError> {
        let next = self.db.open_tree(tree_name(name, generation))?;
        next.clear()?; // what an attempt that failed left
        // The keys the change replaces; none to look up when the old
        // generation is empty (a replica's first sync writes every item).
        let changed: HashSet<Vec<u8>> = match old.is_empty() {
            true => HashSet::new(),
            false => changes.iter().map(|c| item_key(c.key)).collect(),
        };
        let mut batch = sled::Batch::default();
        let (mut in_batch, mut batch_bytes, mut unflushed) = (0, 0, 0);
        let mut put =
            |batch: &mut sled::Batch, k: sled::IVec, v: Option<sled::IVec>| -> Result<(), StoreError> {
                batch_bytes += k.len() + v.as_ref().map_or(0, |v| v.len());
                match v {
                    Some(v) => batch.insert(k, v),
                    None => batch.remove(k),
                }
                in_batch += 1;
                if in_batch == BATCH || batch_bytes >= BATCH_BYTES {
                    next.apply_batch(std::mem::take(batch))?;
                    unflushed += std::mem::take(&mut batch_bytes);
                    in_batch = 0;
                }
                // Written out as it goes: sled seals a log buffer per
                // 512 KiB and writes them on its own threads; unflushed,
                // the batches ran ahead of those writes and a replica
                // held more memory the slower the disk
                // (docs/RESILIENCE.md §5).
                if unflushed >= FLUSH_BYTES {
                    self.db.flush()?;
                    unflushed = 0;
                }
                Ok(())
            };
        for r in old.iter() {
            let (k, v) = r?;
            if !changed.contains(k.as_ref()) {
                put(&mut batch, k, Some(v))?;
            }
        }
        // In order, a deletion too: a key written and then deleted by one
        // change ends deleted, as the transaction would leave it.
        for c in changes.iter() {
            put(&mut batch, item_key(c.key).into(), c.stored_value())?;
        }
        next.apply_batch(batch)?;
        Ok(next)
    }

    /// Drops the environment's items trees other than generation `keep`
    /// (`None`: every one); returns how many it dropped.
    pub(super) fn drop_generations(&self, name: &str, keep: Option<u64>) -> Result<usize, StoreError> {
        let mut dropped = 0;
        for tree in self.db.tree_names() {
            if generation_of(&tree, name).is_some_and(|g| Some(g) != keep) && self.db.drop_tree(&tree)? {
                dropped += 1;
            }
        }
        Ok(dropped)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::{SledBackend, generation_of};
    use crate::store::Retention;
    use crate::store::backend::{Commit, ItemChange, whole_for_tests};
    use crate::store::meta::EnvMeta;
    use crate::store::state::Kind;

    const ENV: &str = "big";

    fn meta(revision: u64) -> EnvMeta {
        EnvMeta::for_tests(ENV, "e", revision)
    }

    fn commit(revision: u64, items: Vec<ItemChange>) -> Commit {
        Commit {
            meta: meta(revision),
            base: revision - 1,
            items: items.into(),
            entry: None,
            trimmed: Vec::new(),
            reset_log: false,
            audit: Vec::new(),
            audit_floor: None,
            request_id: String::new(),
        }
    }

    fn put(i: usize, value: &str) -> ItemChange {
        ItemChange {
            key: (Kind::Flag, format!("f{i}")),
            bytes: Some(Bytes::from(format!("{value}{i}"))),
            shared: None,
        }
    }

    fn delete(i: usize) -> ItemChange {
        ItemChange { key: (Kind::Flag, format!("f{i}")), bytes: None, shared: None }
    }

    /// Every item as the backend loads it: key → value.
    fn loaded(b: &SledBackend) -> std::collections::BTreeMap<String, String> {
        let retention = Retention { revisions: 100, bytes: 1 << 20, audit_revisions: 100 };
        let mut envs = b.load_now(retention).unwrap();
        assert_eq!(envs.len(), 1);
        let env = envs.pop().unwrap();
        env.items.into_iter().map(|((_, k), v)| (k, String::from_utf8(v.to_vec()).unwrap())).collect()
    }

    fn items_trees(b: &SledBackend) -> Vec<String> {
        let mut names: Vec<String> =
            b.db.tree_names()
                .iter()
                .filter_map(|t| {
                    std::str::from_utf8(t).ok().filter(|t| t.starts_with("items/")).map(str::to_owned)
                })
                .collect();
        names.sort();
        names
    }

    /// Commits of many items write a new generation of the items tree and
    /// drop the old one; small ones change the current one in place; what
    /// loads is always the last commit's whole set. A generation written
    /// but never made current (a crash before the switch) is dropped at the
    /// next load and changes nothing; deleting the environment drops every
    /// generation.
    #[tokio::test]
    async fn many_items_are_committed_as_a_new_generation_and_loaded_whole() {
        let dir = tempfile::tempdir().unwrap();
        let n = super::BULK_ITEMS + 10;
        {
            let b = SledBackend::open(&dir.path().join("db")).unwrap();
            b.put_meta_now(&meta(0)).unwrap();
            b.commit_now(commit(1, (0..n).map(|i| put(i, "a")).collect())).unwrap();
            assert_eq!(b.items_tree(ENV).unwrap().0, 1);
            assert_eq!(items_trees(&b), ["items/big#1"], "the first tree dropped");
            let got = loaded(&b);
            assert_eq!(got.len(), n);
            assert_eq!(got["f7"], "a7");
            // A small change: in place.
            b.commit_now(commit(2, vec![put(7, "b"), delete(8)])).unwrap();
            assert_eq!(b.items_tree(ENV).unwrap().0, 1);
            // Many again, with deletions: the kept items carried over.
            let mut changes: Vec<ItemChange> = (0..1000).map(delete).collect();
            changes.extend((n..n + super::BULK_ITEMS).map(|i| put(i, "c")));
            // Written and deleted by the same change: deleted.
            changes.extend([put(n + super::BULK_ITEMS, "x"), delete(n + super::BULK_ITEMS)]);
            b.commit_now(commit(3, changes)).unwrap();
            assert_eq!(b.items_tree(ENV).unwrap().0, 2);
            assert_eq!(items_trees(&b), ["items/big#2"]);
            let got = loaded(&b);
            assert_eq!(got.len(), n - 1000 + super::BULK_ITEMS);
            assert!(!got.contains_key("f7") && !got.contains_key("f999"), "deleted");
            assert!(!got.contains_key(&format!("f{}", n + super::BULK_ITEMS)), "written, then deleted");
            assert_eq!((got["f1000"].as_str(), got[&format!("f{n}")].as_str()), ("a1000", &*format!("c{n}")));
            // A generation written and never made current.
            let (_, current) = b.items_tree(ENV).unwrap();
            b.write_generation(ENV, &current, 3, &vec![put(1000, "lost")].into()).unwrap();
            b.db.flush().unwrap();
        }
        let b = SledBackend::open(&dir.path().join("db")).unwrap();
        let got = loaded(&b);
        assert_eq!(got["f1000"], "a1000", "the unswitched generation is not read");
        assert_eq!(items_trees(&b), ["items/big#2"], "and is dropped at load");
        // Deleting the environment drops its items, whatever generation.
        crate::store::backend::Backend::delete_env(&b, ENV.into(), None).await.unwrap();
        assert!(items_trees(&b).is_empty());
        assert!(b.items_tree(ENV).unwrap().0 == 0, "a new environment of the name starts again");
    }

    /// Values large enough that batches end at `BATCH_BYTES`, not at
    /// `BATCH` items, and that the generation is flushed several times as
    /// it is written: every item loads whole, in place of the old
    /// generation's. (Only the outcome is checked, not where the batches
    /// ended; what the batches and flushes are for, memory, is measured
    /// by `resilience large`.)
    #[tokio::test]
    async fn a_generation_of_large_values_written_across_flushes_loads_whole() {
        let dir = tempfile::tempdir().unwrap();
        let b = SledBackend::open(&dir.path().join("db")).unwrap();
        b.put_meta_now(&meta(0)).unwrap();
        let n = super::BULK_ITEMS + 10;
        let large = "v".repeat(2048);
        assert!(super::BATCH * large.len() > super::BATCH_BYTES, "batches end by bytes");
        assert!(n * large.len() > 4 * super::FLUSH_BYTES, "flushed several times");
        b.commit_now(commit(1, (0..n).map(|i| put(i, "a")).collect())).unwrap();
        b.commit_now(commit(2, (0..n).map(|i| put(i, &large)).collect())).unwrap();
        assert_eq!(items_trees(&b), ["items/big#2"]);
        let got = loaded(&b);
        assert_eq!(got.len(), n);
        assert!(
            got.iter()
                .all(|(k, v)| v.len() > large.len() && v.starts_with(&large) && k[1..] == v[large.len()..])
        );
    }

    /// A revision given as the whole map (`Changes::Whole`: a replica's
    /// first sync) stores every item, as a new generation when many and in
    /// place when few, whether or not the item has a buffer of its own
    /// (which buffer is stored: `backend::tests`).
    #[test]
    fn a_whole_map_is_stored_item_by_item() {
        for n in [3, super::BULK_ITEMS + 10] {
            let dir = tempfile::tempdir().unwrap();
            let b = SledBackend::open(&dir.path().join("db")).unwrap();
            b.put_meta_now(&meta(0)).unwrap();
            let mut c = commit(1, Vec::new());
            c.items = whole_for_tests(n, |i| format!("f{i}"), |i| format!("w{i}"));
            assert_eq!(c.items.len(), n);
            b.commit_now(c).unwrap();
            assert_eq!(b.items_tree(ENV).unwrap().0, u64::from(n > 3), "{n} items");
            let got = loaded(&b);
            assert_eq!(got.len(), n);
            assert!(got.iter().all(|(k, v)| v.strip_prefix('w') == k.strip_prefix('f')), "{n} items");
        }
    }

    #[test]
    fn tree_names_are_read_back_for_their_environment_only() {
        assert_eq!(generation_of(b"items/big", "big"), Some(0));
        assert_eq!(generation_of(b"items/big#7", "big"), Some(7));
        assert_eq!(generation_of(b"items/bigger", "big"), None);
        assert_eq!(generation_of(b"items/bigger#2", "big"), None);
        assert_eq!(generation_of(b"log/big", "big"), None);
        assert_eq!(generation_of(b"items/big#x", "big"), None);
    }
}
