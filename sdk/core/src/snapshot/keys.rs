//! A snapshot's key index in the form its snapshot needs ([`Keys`]): the
//! SDK's slots with room for each flag's [`Head`] (a constant flag answered
//! from its slot, one cache miss fewer on a random lookup), or, for a
//! snapshot compiling on use (the relay's, whose evaluations take the cell
//! and whose slots never get a head), slots without that room: 48 bytes a
//! slot instead of 104, which a batch write copying most of the index's
//! shards pays twice while the old snapshot is still served
//! (docs/RESILIENCE.md §5).

use super::cell::{Cell, Found, Head, HeadRoom, Slot};
use super::index::{Cells, Index};

/// Key → slot, headed or bare; see the module docs.
#[derive(Debug, Clone)]
pub(crate) enum Keys {
    Headed(Index<Slot<Option<Head>>>),
    Bare(Index<Slot<()>>),
}

impl Keys {
    /// An index of `flags` (each at its position; a key held twice, in
    /// unvalidated data, indexed at its first), `bare` for a snapshot
    /// compiling on use.
    pub(super) fn of(flags: &Cells<Cell>, bare: bool) -> Keys {
        fn build<H: HeadRoom>(flags: &Cells<Cell>) -> Index<Slot<H>> {
            let mut index = Index::with_capacity(flags.len());
            for (i, f) in flags.iter().enumerate() {
                index.insert_new(Slot::of(f, i));
            }
            index
        }
        if bare { Keys::Bare(build(flags)) } else { Keys::Headed(build(flags)) }
    }

    /// The slot of `key`.
    #[inline(always)]
    pub(crate) fn get(&self, key: &str) -> Option<Found<'_>> {
        match self {
            Keys::Headed(index) => index.get(key).map(Slot::found),
            Keys::Bare(index) => index.get(key).map(Slot::found),
        }
    }

    /// How many keys.
    pub(crate) fn len(&self) -> usize {
        match self {
            Keys::Headed(index) => index.len(),
            Keys::Bare(index) => index.len(),
        }
    }

    /// Whether every slot holds its flag's head (a bare index holds none).
    pub(super) fn all_headed(&self) -> bool {
        match self {
            Keys::Headed(index) => index.values().all(|s| s.head.is_some()),
            Keys::Bare(_) => false,
        }
    }

    /// Gives each headless slot of a headed index its flag's head where
    /// the flag is compiled (copying every shard another snapshot shares:
    /// once, after a start from wire form); returns [`Keys::all_headed`].
    pub(super) fn fill_heads(&mut self) -> bool {
        if let Keys::Headed(index) = self {
            for slot in index.values_mut().filter(|s| s.head.is_none()) {
                slot.head = slot.cell.get_now().map(Head::of);
            }
        }
        self.all_headed()
    }

    /// Applies a change to the index and the `flags` it indexes (a
    /// snapshot's pieces, shared with the snapshot before; each key held
    /// once): `deleted` keys removed, a deleted flag's position taken by
    /// the last flag; each of `fresh` replacing the flag of its key or
    /// appended.
    pub(super) fn replace<'a>(
        &mut self,
        flags: &mut Cells<Cell>,
        deleted: impl IntoIterator<Item = &'a str>,
        fresh: impl IntoIterator<Item = Cell>,
    ) {
        match self {
            Keys::Headed(index) => replace(index, flags, deleted, fresh),
            Keys::Bare(index) => replace(index, flags, deleted, fresh),
        }
    }

    /// Every slot, in no particular order.
    #[cfg(test)]
    pub(crate) fn values(&self) -> Vec<Found<'_>> {
        match self {
            Keys::Headed(index) => index.values().map(Slot::found).collect(),
            Keys::Bare(index) => index.values().map(Slot::found).collect(),
        }
    }
}

/// [`Keys::replace`] on an index of either form.
fn replace<'a, H: HeadRoom>(
    index: &mut Index<Slot<H>>,
    flags: &mut Cells<Cell>,
    deleted: impl IntoIterator<Item = &'a str>,
    fresh: impl IntoIterator<Item = Cell>,
) {
    for key in deleted {
        let Some(gone) = index.remove(key) else {
            continue; // not here, or deleted twice in one change
        };
        let at = gone.index as usize;
        if flags.swap_remove(at).is_some() {
            let moved = flags.get(at).clone();
            if let Some(slot) = index.get_mut(moved.key()) {
                slot.index = at as u32;
            }
        }
    }
    for cell in fresh {
        match index.get_mut(cell.key()) {
            Some(slot) => {
                flags.set(slot.index as usize, cell.clone());
                slot.head = H::of(&cell);
                slot.cell = cell;
            }
            None => {
                index.insert_new(Slot::of(&cell, flags.len()));
                flags.push(cell);
            }
        }
    }
    index.rebalance();
}
