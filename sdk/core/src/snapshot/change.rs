//! Applying a change to a snapshot ([`Snapshot::apply`]): judged by the
//! change's own items where the snapshot was validated as a whole under the
//! same limits, else as the whole result; the next snapshot built from this
//! one's pieces, only what changed made anew.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;

use super::{Cell, Snapshot};
use crate::compile::compile_segment;
use crate::compiled::{CompiledSegment, FastMap};
use crate::error::ValidationErrors;
use crate::limit::Limits;
use crate::model::{Flag, FlagSet, Segment};
use crate::validate::{self, ItemCost, Links, Passed};

/// Keys asked of every flag and segment on the whole-set path: not std's
/// SipHash.
type Keys<'k> = HashSet<&'k str, foldhash::fast::RandomState>;

impl Snapshot {
    /// A new snapshot with the flags and segments of `change` replacing or
    /// adding to this one's, and the deleted keys removed. Only changed
    /// items are compiled (in a snapshot that compiles on use, a flag only
    /// when it is first evaluated); unchanged ones are shared. The result is
    /// validated as a whole would be, with the errors a whole-set
    /// validation gives, and on error nothing is returned.
    ///
    /// The cost grows with the change, not the environment, when this
    /// snapshot passed validation as a whole under `limits` (one compiled
    /// or applied here) and the change adds or replaces flags without
    /// shrinking a flag's variations or changing its prerequisite keys,
    /// and deletes flags only where no flag has a prerequisite; other
    /// changes (segments, such deletions, a first change to a snapshot
    /// built from wire form, or one with a problem) are validated against
    /// every item, and the result's pieces are still shared.
    pub fn apply(
        &self,
        change: &FlagSet,
        deleted_flags: &[String],
        deleted_segments: &[String],
        limits: &Limits,
    ) -> Result<Snapshot, ValidationErrors> {
        self.apply_change(Change { set: change, raw: None, deleted_flags, deleted_segments }, limits)
    }

    /// [`Snapshot::apply`] for written flags whose encodings the caller
    /// holds already: `raw[i]` is the protobuf encoding of
    /// `change.flags[i]`, kept (shared, not copied) by the snapshot.
    ///
    /// # Panics
    ///
    /// When `raw` and `change.flags` differ in length.
    pub fn apply_encoded(
        &self,
        change: &FlagSet,
        raw: &[Bytes],
        deleted_flags: &[String],
        deleted_segments: &[String],
        limits: &Limits,
    ) -> Result<Snapshot, ValidationErrors> {
        assert_eq!(raw.len(), change.flags.len(), "one encoding per written flag");
        self.apply_change(Change { set: change, raw: Some(raw), deleted_flags, deleted_segments }, limits)
    }

    fn apply_change(&self, change: Change<'_>, limits: &Limits) -> Result<Snapshot, ValidationErrors> {
        let passed = match self.judge_by_change(&change, limits) {
            Some(passed) => passed,
            None => self.judge_whole(&change, limits)?,
        };
        // A snapshot whose index has a slot per flag holds each key once,
        // so its pieces can be changed in place; one built from
        // unvalidated data may hold a key twice and is rebuilt from the
        // kept flags.
        let next = if self.index.len() == self.flags.len() {
            self.moved(&change, passed.costs, limits)
        } else {
            self.rebuilt(&change, passed.costs, limits)
        };
        Ok(next.checked(limits, passed.totals).with_cursor(&self.epoch, self.revision))
    }

    /// The verdict of `validate::delta` when it applies: `None` sends the
    /// change to the whole-set validation.
    pub(super) fn judge_by_change(&self, change: &Change<'_>, limits: &Limits) -> Option<Passed> {
        let checked = self.checked.as_ref().filter(|c| c.limits == *limits)?;
        if !change.deleted_segments.is_empty() || !change.set.segments.is_empty() {
            return None;
        }
        let fresh: Vec<&Flag> = change.set.flags.iter().collect();
        let old = |key: &str| self.index.get(key).map(|s| (s.cell.links(), s.cell.cost()));
        let has_segment = |key: &str| self.segments.contains_key(key);
        validate::delta(&checked.totals, &fresh, change.deleted_flags, &old, &has_segment, limits)
    }

    /// Validates the would-be state: the changed flags on their own, the
    /// kept ones through what they add to the totals, every flag in the
    /// checks that cross items (prerequisites, segment references). By
    /// reference: cloning every item to validate would double a large
    /// environment's memory.
    pub(super) fn judge_whole(
        &self,
        change: &Change<'_>,
        limits: &Limits,
    ) -> Result<Passed, ValidationErrors> {
        let (drop_flag, drop_segment) = change.dropped();
        let kept: Vec<(Links<'_>, ItemCost)> = self
            .flags
            .iter()
            .filter(|f| !drop_flag.contains(f.key()))
            .map(|f| (f.links(), f.cost()))
            .collect();
        let fresh: Vec<&Flag> = change.set.flags.iter().collect();
        let segments: Vec<&Segment> = self
            .segments()
            .filter(|s| !drop_segment.contains(s.key.as_str()))
            .chain(&change.set.segments)
            .collect();
        validate::change(&kept, &fresh, &segments, limits)
    }

    /// The next snapshot from this one's pieces: the changed and deleted
    /// flags' slots and positions replaced in the shared index and cells
    /// (a deleted flag's position taken by the last flag), new flags
    /// appended.
    fn moved(&self, change: &Change<'_>, costs: Vec<ItemCost>, limits: &Limits) -> Snapshot {
        let mut flags = self.flags.clone();
        let mut index = self.index.clone();
        let shared = Arc::new(limits.clone());
        let fresh = (change.set.flags.iter().zip(costs).enumerate())
            .map(|(i, (f, cost))| Cell::of(f, change.raw(i), &shared, Some(cost), self.defer()));
        index.replace(&mut flags, change.deleted_flags.iter().map(String::as_str), fresh);
        // Slots made while their flags were in wire form get their heads
        // once the flags are compiled, as a rebuilt index would have them:
        // once, on the first change after a start from the cache (whose
        // whole-set validation compiled every kept flag). A snapshot that
        // compiles on use keeps no heads (its evaluations take the cell):
        // looking for them would copy every shard on every change.
        let heads = if !self.heads && !self.defer() { index.fill_heads() } else { self.heads };
        let segments = self.next_segments(change, limits);
        // The index keeps its form, so the next snapshot compiles on use
        // if this one does.
        Snapshot::with_index(flags, index, segments, heads, limits)
    }

    /// The next snapshot built anew from the flags this one keeps and the
    /// changed ones, in that order (for a snapshot holding a key twice).
    fn rebuilt(&self, change: &Change<'_>, costs: Vec<ItemCost>, limits: &Limits) -> Snapshot {
        let (drop_flag, _) = change.dropped();
        let kept = self.flags.iter().filter(|f| !drop_flag.contains(f.key())).cloned();
        let shared = Arc::new(limits.clone());
        let fresh = (change.set.flags.iter().zip(costs).enumerate())
            .map(|(i, (f, cost))| Cell::of(f, change.raw(i), &shared, Some(cost), self.defer()));
        let segments = self.next_segments(change, limits);
        let mut next =
            Snapshot::assemble(kept.chain(fresh).collect(), FastMap::default(), limits, self.defer());
        next.segments = segments;
        next
    }

    /// This snapshot's segments with the change's: the same map when no
    /// segment changed.
    fn next_segments(
        &self,
        change: &Change<'_>,
        limits: &Limits,
    ) -> Arc<FastMap<Box<str>, Arc<CompiledSegment>>> {
        if change.deleted_segments.is_empty() && change.set.segments.is_empty() {
            return self.segments.clone();
        }
        let mut segments = (*self.segments).clone();
        for key in change.deleted_segments {
            segments.remove(key.as_str());
        }
        for s in &change.set.segments {
            segments.insert(Box::from(s.key.as_str()), Arc::new(compile_segment(s.clone(), limits)));
        }
        Arc::new(segments)
    }
}

/// A change as `Snapshot::apply` is given it.
pub(super) struct Change<'c> {
    /// Flags and segments written (added or replaced).
    pub(super) set: &'c FlagSet,
    /// The written flags' encodings, in order, when the caller has them.
    pub(super) raw: Option<&'c [Bytes]>,
    pub(super) deleted_flags: &'c [String],
    pub(super) deleted_segments: &'c [String],
}

impl<'c> Change<'c> {
    /// The encoding of the `i`th written flag, if given.
    fn raw(&self, i: usize) -> Option<Bytes> {
        self.raw.and_then(|r| r.get(i)).cloned()
    }

    /// The flag and segment keys the change takes out of the snapshot
    /// before it: the deleted ones and the written ones (replaced).
    fn dropped(&self) -> (Keys<'c>, Keys<'c>) {
        let written = self.set.flags.iter().map(|f| f.key.as_str());
        let flags = self.deleted_flags.iter().map(String::as_str).chain(written);
        let written = self.set.segments.iter().map(|s| s.key.as_str());
        let segments = self.deleted_segments.iter().map(String::as_str).chain(written);
        (flags.collect(), segments.collect())
    }
}
