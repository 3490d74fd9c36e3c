//! An environment's item map built in bulk from entries that arrive in key
//! order (a load, a received snapshot), with every leaf of the map full.
//!
//! [`Items`] is a persistent B-tree of 16 entries per leaf. Filled in key
//! order, it splits each full leaf in half and never adds to the left half
//! again, so its leaves end half empty: 187 bytes per entry against 99
//! with full leaves (20,000 flags, measured by a counting allocator; the
//! difference is ~1.7 MiB of a relay's memory at 20,000 flags, ~4.2 MiB at
//! 50,000, docs/RESILIENCE.md §5). [`BulkItems`] inserts every other entry
//! first (leaves of 8, as before) and the rest after, each into the gap its
//! neighbours left: 16 per leaf and no split. Entries out of order make
//! the same map as inserting them one by one (a later entry of a key
//! replaces an earlier one), only a looser one. A write's changes are
//! inserted in [`filling_order`], for the same reason.

use super::state::{Item, ItemKey, Items};

/// `list`'s entries, of distinct keys, in the order that fills the map's
/// leaves when they are inserted one by one: every other entry in key
/// order, then the rest. For a write adding a run of keys (a batch of new
/// flags); with distinct keys the order changes nothing but the fill.
pub(crate) fn filling_order<T>(list: &[T], key: impl Fn(&T) -> &ItemKey) -> impl Iterator<Item = &T> {
    let mut sorted: Vec<&T> = list.iter().collect();
    sorted.sort_unstable_by(|a, b| key(a).cmp(key(b)));
    let odd: Vec<&T> = sorted.iter().skip(1).step_by(2).copied().collect();
    sorted.into_iter().step_by(2).chain(odd)
}

/// Builds [`Items`] from entries pushed in ascending key order; see the
/// module docs.
#[derive(Default)]
pub(crate) struct BulkItems {
    items: Items,
    /// The run's odd entries, inserted when the run ends.
    later: Vec<(ItemKey, Item)>,
    /// The last entry pushed, placed when the next one shows whether the
    /// run goes on.
    last: Option<(ItemKey, Item)>,
    /// Entries of the current run placed so far.
    placed: usize,
}

impl BulkItems {
    /// A builder for about `n` entries.
    pub(crate) fn with_capacity(n: usize) -> BulkItems {
        BulkItems { later: Vec::with_capacity(n / 2), ..BulkItems::default() }
    }

    /// Adds the item at `key`.
    pub(crate) fn push(&mut self, key: ItemKey, item: Item) {
        if let Some(last) = self.last.take() {
            // Not after the last key (out of order, or the same key again):
            // the run ends here, so every entry before this one is in the
            // map before it (the later of two entries of a key wins).
            let run_goes_on = last.0 < key;
            self.place(last);
            if !run_goes_on {
                self.end_run();
            }
        }
        self.last = Some((key, item));
    }

    /// The map of every entry pushed.
    pub(crate) fn finish(mut self) -> Items {
        if let Some(last) = self.last.take() {
            self.place(last);
        }
        self.end_run();
        self.items
    }

    /// Within a run the keys are distinct, so which half goes in first
    /// changes nothing but the leaves' fill.
    fn place(&mut self, (key, item): (ItemKey, Item)) {
        match self.placed % 2 {
            0 => {
                self.items.insert(key, item);
            }
            _ => self.later.push((key, item)),
        }
        self.placed += 1;
    }

    fn end_run(&mut self) {
        for (key, item) in self.later.drain(..) {
            self.items.insert(key, item);
        }
        self.placed = 0;
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::BulkItems;
    use crate::store::state::{Item, ItemKey, Items, Kind};

    /// This test binary's allocator, counting the bytes each thread holds
    /// (allocated less freed), so a test can weigh what it built.
    struct Counting;

    thread_local! {
        static HELD: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
    }

    fn count(delta: isize) {
        // `try_with` fails only on a thread whose locals are being torn
        // down (its last frees): no test weighs such a thread, so those
        // are left uncounted rather than panicking inside the allocator.
        if HELD.try_with(|h| h.set(h.get() + delta)).is_err() {}
    }

    // SAFETY: the system allocator's calls, passed through unchanged;
    // counting touches only a thread-local integer.
    #[allow(unsafe_code)]
    unsafe impl std::alloc::GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
            count(layout.size() as isize);
            unsafe { std::alloc::System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
            count(-(layout.size() as isize));
            unsafe { std::alloc::System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static COUNTING: Counting = Counting;

    /// Bytes this thread holds more after `f` than before it, with what
    /// `f` returned kept until measured.
    fn weigh<T>(f: impl FnOnce() -> T) -> (T, isize) {
        let before = HELD.with(|h| h.get());
        let built = f();
        (built, HELD.with(|h| h.get()) - before)
    }

    fn item(version: u64) -> Item {
        Item::new(Kind::Flag, "k", Bytes::from(version.to_string()), version)
    }

    /// 20,000 entries in key order: the map built in bulk holds under
    /// two thirds of what inserting them one by one holds (its leaves
    /// full, not half empty: 99 against 187 bytes an entry, the keys'
    /// copies included).
    #[test]
    fn a_map_built_in_key_order_has_full_leaves() {
        let entries: Vec<(ItemKey, Item)> =
            (0..20_000).map(|i| ((Kind::Flag, format!("flag-{i:06}")), item(i))).collect();
        // Cloned once first: a `Bytes` made from a `String` allocates its
        // shared header on its first clone, which would weigh on the first
        // map built.
        let warm = entries.clone();
        let (one_by_one, loose) = weigh(|| {
            let mut m = Items::new();
            for (k, i) in entries.iter().cloned() {
                m.insert(k, i);
            }
            m
        });
        let (bulk, full) = weigh(|| {
            let mut b = BulkItems::with_capacity(entries.len());
            for (k, i) in entries.iter().cloned() {
                b.push(k, i);
            }
            b.finish()
        });
        assert_eq!(bulk.len(), one_by_one.len());
        drop(warm);
        let per = |bytes: isize| bytes / entries.len() as isize;
        assert!(full * 3 < loose * 2, "{} against {} bytes an entry", per(full), per(loose));
    }

    /// Every entry once: the even positions of key order, then the odd.
    #[test]
    fn the_filling_order_is_each_entry_once_evens_first() {
        let key = |i: u32| -> ItemKey { (Kind::Flag, format!("k{i:03}")) };
        let list: Vec<ItemKey> = [5, 0, 3, 1, 4, 2, 6].into_iter().map(key).collect();
        let order: Vec<&ItemKey> = super::filling_order(&list, |k| k).collect();
        let want: Vec<ItemKey> = [0, 2, 4, 6, 1, 3, 5].into_iter().map(key).collect();
        assert_eq!(order, want.iter().collect::<Vec<_>>());
        assert_eq!(super::filling_order(&[] as &[ItemKey], |k| k).count(), 0);
    }

    /// Each sequence makes the map that inserting its entries one by one
    /// makes: in order, reversed, shuffled, with a key repeated (the later
    /// entry wins), and with runs (segments pushed before flags).
    #[test]
    fn the_map_is_the_one_inserting_each_entry_makes() {
        let key = |kind: Kind, i: u64| -> ItemKey { (kind, format!("k{i:05}")) };
        let sorted: Vec<(ItemKey, u64)> = (0..1000).map(|i| (key(Kind::Flag, i), i)).collect();
        let mut shuffled = sorted.clone();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let mut repeated = sorted.clone();
        repeated.insert(500, (key(Kind::Flag, 100), 7_777));
        repeated.push((key(Kind::Flag, 3), 8_888));
        repeated.push((key(Kind::Flag, 3), 9_999));
        let runs: Vec<(ItemKey, u64)> = (0..40)
            .map(|i| (key(Kind::Segment, i), i))
            .chain((0..300).map(|i| (key(Kind::Flag, i), 1000 + i)))
            .collect();
        let cases = [
            ("in order", sorted.clone()),
            ("reversed", sorted.iter().rev().cloned().collect()),
            ("shuffled", shuffled),
            ("a key repeated", repeated),
            ("runs", runs),
            ("one entry", vec![(key(Kind::Flag, 1), 1)]),
            ("none", vec![]),
        ];
        for (name, entries) in cases {
            let mut one_by_one = Items::new();
            let mut bulk = BulkItems::with_capacity(entries.len());
            for (k, v) in entries {
                one_by_one.insert(k.clone(), item(v));
                bulk.push(k, item(v));
            }
            let built = bulk.finish();
            let pairs = |m: &Items| {
                m.iter().map(|(k, i)| (k.clone(), i.version, i.bytes.clone())).collect::<Vec<_>>()
            };
            assert_eq!(pairs(&built), pairs(&one_by_one), "{name}");
        }
    }
}
