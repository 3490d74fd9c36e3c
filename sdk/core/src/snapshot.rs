//! Immutable, compiled flag sets: what the SDK swaps into its `ArcSwap` and
//! what the relay evaluates with.
//!
//! Compiling turns each model flag into the form evaluation wants (variations
//! typed, targets hashed, clauses pre-parsed, rollout thresholds summed) once
//! per change, so the hot path only reads. Flags and segments are held behind
//! `Arc`s, so applying a delta recompiles only what changed and shares the
//! rest with the previous snapshot. Prerequisites and `segment_match` refer to
//! other items by key and are resolved at evaluation time, which keeps one
//! flag's compiled form independent of all others.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use once_cell::race::OnceBox;

use crate::compile::{compile_flag, compile_raw, compile_segment, compile_segments};
use crate::compiled::{CompiledFlag, CompiledSegment, Constant, FastMap};
use crate::error::ValidationErrors;
use crate::limit::Limits;
use crate::model::{Flag, FlagSet, FlagType, Segment};
use crate::usage::FlagUsage;
use crate::validate::{self, ItemCost};
use crate::wire;

/// Source of [`Snapshot::generation`]: every snapshot built in this process
/// gets a distinct number, so a [`crate::FlagHandle`] can tell whether its
/// cached index still belongs to the snapshot it is handed.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// What the key index holds per flag: its position, and for a flag compiled
/// when the index was built, enough to answer a constant flag from the index
/// entry alone without touching the compiled flag (one cache miss fewer on a
/// random lookup).
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub(crate) index: u32,
    /// `Snapshot::flags[index]`, held here too: a lookup by key reaches the
    /// flag without a read of the flags array (one cache miss fewer).
    pub(crate) cell: Arc<FlagCell>,
    /// `None` for a flag that was still in wire form (see [`FlagCell`]).
    pub(crate) head: Option<Head>,
}

/// The context-independent facts of a compiled flag.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub(crate) flag_type: FlagType,
    pub(crate) version: u64,
    pub(crate) constant: Option<Constant>,
}

impl Head {
    fn of(f: &CompiledFlag) -> Head {
        Head { flag_type: f.flag_type, version: f.version, constant: f.constant.clone() }
    }
}

/// One flag of a snapshot: compiled, or still in its wire form and compiled
/// on first use.
///
/// The lazy form exists for cold starts from the cache: decoding, converting
/// and compiling 10,000 flags takes tens of milliseconds, so a client built
/// from its cache indexes the raw bytes (checksum-verified), serves at once,
/// and compiles each flag the first time something reads it, while a
/// background warm-up compiles the rest. First use is lock-free: racing
/// readers may both compile, one result is kept ([`OnceBox`]).
///
/// The cell also holds the flag's usage counters ([`FlagUsage`]): a cell is
/// shared by every snapshot in which the flag did not change, so the counts
/// follow it across revisions.
#[derive(Debug)]
pub(crate) struct FlagCell {
    pub(crate) usage: FlagUsage,
    form: Form,
    /// What the flag adds to its environment's totals, kept so a change
    /// to the environment validates only what changed
    /// ([`Snapshot::apply`]); read from the compiled form on first need
    /// for a flag that was not validated here (one that arrived in wire
    /// form).
    cost: OnceLock<ItemCost>,
}

#[derive(Debug)]
enum Form {
    Compiled(CompiledFlag),
    Lazy { key: Arc<str>, raw: Bytes, limits: Arc<Limits>, compiled: OnceBox<CompiledFlag> },
}

impl FlagCell {
    fn compiled(flag: CompiledFlag, cost: Option<ItemCost>) -> FlagCell {
        FlagCell {
            usage: FlagUsage::default(),
            form: Form::Compiled(flag),
            cost: cost.map_or_else(OnceLock::new, OnceLock::from),
        }
    }

    /// The flag's [`ItemCost`]: as validation found it, else from the
    /// compiled form (compiling the flag if it is still in wire form, as
    /// the warm-up does anyway): its regex bytes as compiling charged
    /// them, its encoded size the wire bytes' (a model's, encoded to
    /// measure, for compiled data that was never validated).
    fn cost(&self) -> ItemCost {
        *self.cost.get_or_init(|| {
            let compiled = self.get();
            let encoded = match &self.form {
                Form::Lazy { raw, .. } => raw.len(),
                Form::Compiled(f) => prost::Message::encoded_len(&crate::wire::flag_to_proto(&f.source)),
            };
            ItemCost::new(encoded, compiled.regex_bytes)
        })
    }

    /// The compiled flag, compiling it now if it is still in wire form.
    #[inline]
    pub(crate) fn get(&self) -> &CompiledFlag {
        match &self.form {
            Form::Compiled(f) => f,
            Form::Lazy { key, raw, limits, compiled } => {
                compiled.get_or_init(|| Box::new(compile_raw(key, raw, limits)))
            }
        }
    }

    /// The compiled flag if it is compiled already.
    fn get_now(&self) -> Option<&CompiledFlag> {
        match &self.form {
            Form::Compiled(f) => Some(f),
            Form::Lazy { compiled, .. } => compiled.get(),
        }
    }

    /// The flag key, without compiling.
    pub(crate) fn key(&self) -> &str {
        match &self.form {
            Form::Compiled(f) => &f.source.key,
            Form::Lazy { key, .. } => key,
        }
    }
}

/// Adds `flags` to `index`, the first at position `first`; on a duplicate
/// key (unvalidated data) the first one wins.
fn index_flags(index: &mut FastMap<Arc<str>, Slot>, flags: &[Arc<FlagCell>], first: usize) {
    for (i, f) in flags.iter().enumerate() {
        let key = match &f.form {
            Form::Lazy { key, .. } => key.clone(),
            Form::Compiled(c) => Arc::from(c.source.key.as_str()),
        };
        index.entry(key).or_insert_with(|| Slot {
            index: (first + i) as u32,
            cell: f.clone(),
            head: f.get_now().map(Head::of),
        });
    }
}

/// An immutable, compiled set of flags and segments at one revision.
#[derive(Debug)]
pub struct Snapshot {
    pub(crate) flags: Vec<Arc<FlagCell>>,
    pub(crate) index: FastMap<Arc<str>, Slot>,
    pub(crate) segments: FastMap<Box<str>, Arc<CompiledSegment>>,
    pub(crate) max_depth: usize,
    pub(crate) max_segment_depth: usize,
    epoch: Box<str>,
    revision: u64,
    generation: u64,
}

impl Snapshot {
    /// Validates `set` and compiles it. Nothing is compiled if anything is
    /// invalid; every problem is reported with its path.
    pub fn compile(set: &FlagSet, limits: &Limits) -> Result<Snapshot, ValidationErrors> {
        let costs = validate::flag_set_costs(set, limits)?;
        Ok(Snapshot::compile_with(set.clone(), costs.into_iter().map(Some), limits))
    }

    /// [`Snapshot::compile`] taking the set by value: validated, then the
    /// model items move into the snapshot instead of being copied (a large
    /// set is not held twice while it compiles).
    pub fn compile_set(set: FlagSet, limits: &Limits) -> Result<Snapshot, ValidationErrors> {
        let costs = validate::flag_set_costs(&set, limits)?;
        Ok(Snapshot::compile_with(set, costs.into_iter().map(Some), limits))
    }

    /// Compiles without validating. Flags that cannot be compiled are kept
    /// and evaluate to `MALFORMED_FLAG`; nothing panics. For data already
    /// validated elsewhere, and for tests of the evaluator's own guards.
    pub fn compile_unvalidated(set: &FlagSet, limits: &Limits) -> Snapshot {
        Snapshot::compile_owned(set.clone(), limits)
    }

    /// [`Snapshot::compile_unvalidated`] taking the set by value, so the
    /// model items move into the snapshot instead of being copied.
    pub fn compile_owned(set: FlagSet, limits: &Limits) -> Snapshot {
        Snapshot::compile_with(set, std::iter::repeat(None), limits)
    }

    /// Compiles `set`, each flag with its cost where known (in order).
    fn compile_with(
        set: FlagSet,
        costs: impl Iterator<Item = Option<ItemCost>>,
        limits: &Limits,
    ) -> Snapshot {
        let segments = compile_segments(set.segments, limits);
        let mut flags: Vec<_> = set
            .flags
            .into_iter()
            .zip(costs)
            .map(|(f, cost)| Arc::new(FlagCell::compiled(compile_flag(f, limits), cost)))
            .collect();
        // Collected in place, the pointers would keep the models' buffer
        // (50,000 flags: 22 MiB held for 400 KiB of pointers).
        flags.shrink_to_fit();
        Snapshot::assemble(flags, segments, limits)
    }

    /// A snapshot of protobuf-encoded flags (`flagstream.v1.Flag`, as the
    /// stream and the cache carry them), each decoded and compiled the first
    /// time it is evaluated, and model segments (compiled now). Only the
    /// flag keys are read here, which makes this several times faster than
    /// [`Snapshot::compile`] for a large set. Nothing is validated: for data
    /// validated when it was stored. A flag whose bytes do not decode
    /// evaluates to `MALFORMED_FLAG`; an error here means a flag's key could
    /// not be read.
    pub fn from_encoded(
        flags: impl IntoIterator<Item = Bytes>,
        segments: Vec<Segment>,
        limits: &Limits,
    ) -> Result<Snapshot, prost::DecodeError> {
        let flags = flags
            .into_iter()
            .map(|raw| Ok((Arc::from(wire::flag_key(&raw)?), raw)))
            .collect::<Result<_, prost::DecodeError>>()?;
        Ok(Snapshot::lazy(flags, segments, limits))
    }

    /// A snapshot of flags still in wire form (`(key, protobuf bytes)`,
    /// the key already read, e.g. with [`crate::wire::flag_key`]), each
    /// compiled on first use, and compiled segments. Not validated: for data
    /// that was validated when received and verified by checksum since (the
    /// SDK's cache). See [`Snapshot::from_encoded`] and [`Snapshot::warm_up`].
    pub fn lazy(flags: Vec<(Arc<str>, Bytes)>, segments: Vec<Segment>, limits: &Limits) -> Snapshot {
        let shared = Arc::new(limits.clone());
        let flags = flags
            .into_iter()
            .map(|(key, raw)| {
                Arc::new(FlagCell {
                    usage: FlagUsage::default(),
                    form: Form::Lazy { key, raw, limits: shared.clone(), compiled: OnceBox::new() },
                    cost: OnceLock::new(),
                })
            })
            .collect();
        Snapshot::assemble(flags, compile_segments(segments, limits), limits)
    }

    /// Compiles every flag still in wire form; returns how many it compiled.
    /// Run off the evaluation path after a lazy build, so evaluations after
    /// it never compile (or allocate).
    pub fn warm_up(&self) -> usize {
        let mut compiled = 0;
        for f in self.flags.iter().filter(|f| f.get_now().is_none()) {
            f.get();
            compiled += 1;
        }
        compiled
    }

    /// An empty snapshot: every evaluation answers `FLAG_NOT_FOUND`.
    pub fn empty() -> Snapshot {
        Snapshot::assemble(Vec::new(), FastMap::default(), &Limits::default())
    }

    fn assemble(
        flags: Vec<Arc<FlagCell>>,
        segments: FastMap<Box<str>, Arc<CompiledSegment>>,
        limits: &Limits,
    ) -> Snapshot {
        let mut index = FastMap::with_capacity_and_hasher(flags.len(), Default::default());
        index_flags(&mut index, &flags, 0);
        Snapshot::with_index(flags, index, segments, limits)
    }

    fn with_index(
        flags: Vec<Arc<FlagCell>>,
        index: FastMap<Arc<str>, Slot>,
        segments: FastMap<Box<str>, Arc<CompiledSegment>>,
        limits: &Limits,
    ) -> Snapshot {
        Snapshot {
            flags,
            index,
            segments,
            max_depth: limits.max_prerequisite_depth,
            max_segment_depth: limits.max_segment_depth,
            epoch: Box::from(""),
            revision: 0,
            generation: GENERATION.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Returns this snapshot labelled with a stream cursor.
    pub fn with_cursor(mut self, epoch: &str, revision: u64) -> Snapshot {
        self.epoch = epoch.into();
        self.revision = revision;
        self
    }

    /// The store epoch this snapshot came from (empty if none).
    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// The environment revision this snapshot is at.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// A process-unique id of this snapshot value.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Number of flags.
    pub fn len(&self) -> usize {
        self.flags.len()
    }

    /// True when there are no flags.
    pub fn is_empty(&self) -> bool {
        self.flags.is_empty()
    }

    /// A flag's model form.
    pub fn flag(&self, key: &str) -> Option<&Flag> {
        self.index.get(key).map(|slot| &*self.flags[slot.index as usize].get().source)
    }

    /// A segment's model form.
    pub fn segment(&self, key: &str) -> Option<&Segment> {
        self.segments.get(key).map(|s| &*s.source)
    }

    /// All flags in model form, in no particular order.
    pub fn flags(&self) -> impl Iterator<Item = &Flag> {
        self.flags.iter().map(|f| &*f.get().source)
    }

    /// All segments in model form, in no particular order.
    pub fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.values().map(|s| &*s.source)
    }

    /// The whole set in model form, sorted by key.
    pub fn to_flag_set(&self) -> FlagSet {
        let mut set =
            FlagSet { flags: self.flags().cloned().collect(), segments: self.segments().cloned().collect() };
        set.flags.sort_by(|a, b| a.key.cmp(&b.key));
        set.segments.sort_by(|a, b| a.key.cmp(&b.key));
        set
    }

    /// A new snapshot with the flags and segments of `change` replacing or
    /// adding to this one's, and the deleted keys removed. Only changed items
    /// are compiled; unchanged ones are shared. The result is validated as a
    /// whole, with the errors a whole-set validation gives, and on error
    /// nothing is returned; but only the changed flags are checked on their
    /// own: an unchanged flag counts through its kept `ItemCost` and in
    /// the rules that cross items (`validate::change`), so the cost of a
    /// change grows with the change, plus a light walk of the rest.
    pub fn apply(
        &self,
        change: &FlagSet,
        deleted_flags: &[String],
        deleted_segments: &[String],
        limits: &Limits,
    ) -> Result<Snapshot, ValidationErrors> {
        // Asked of every flag and segment: not std's SipHash.
        type Keys<'k> = HashSet<&'k str, foldhash::fast::RandomState>;
        let drop_flag: Keys = deleted_flags
            .iter()
            .map(String::as_str)
            .chain(change.flags.iter().map(|f| f.key.as_str()))
            .collect();
        let drop_segment: Keys = deleted_segments
            .iter()
            .map(String::as_str)
            .chain(change.segments.iter().map(|s| s.key.as_str()))
            .collect();
        // Validate the would-be state: the changed flags on their own, the
        // kept ones through what they add to the totals, every flag in the
        // checks that cross items (prerequisites, segment references).
        // By reference: cloning every item to validate would double a large
        // environment's memory on every write. One pass finds the kept
        // flags and where each flag of this snapshot moves in the next
        // one's (its position among the kept).
        let mut kept_cells: Vec<&Arc<FlagCell>> = Vec::with_capacity(self.flags.len());
        let mut position: Vec<u32> = Vec::with_capacity(self.flags.len());
        for f in &self.flags {
            position.push(kept_cells.len() as u32);
            if !drop_flag.contains(f.key()) {
                kept_cells.push(f);
            }
        }
        let kept: Vec<(&Flag, ItemCost)> = kept_cells.iter().map(|&f| (&*f.get().source, f.cost())).collect();
        let fresh: Vec<&Flag> = change.flags.iter().collect();
        let next_segments: Vec<&Segment> = self
            .segments()
            .filter(|s| !drop_segment.contains(s.key.as_str()))
            .chain(&change.segments)
            .collect();
        let costs = validate::change(&kept, &fresh, &next_segments, limits)?;

        let mut segments = self.segments.clone();
        segments.retain(|k, _| !drop_segment.contains(k.as_ref()));
        for s in &change.segments {
            segments.insert(Box::from(s.key.as_str()), Arc::new(compile_segment(s.clone(), limits)));
        }
        let mut flags: Vec<Arc<FlagCell>> = Vec::with_capacity(kept_cells.len() + change.flags.len());
        flags.extend(kept_cells.into_iter().cloned());
        let kept = flags.len();
        flags.extend(
            change
                .flags
                .iter()
                .zip(costs)
                .map(|(f, cost)| Arc::new(FlagCell::compiled(compile_flag(f.clone(), limits), Some(cost)))),
        );
        // The key index is this one's with the changed and deleted keys
        // taken out, the kept flags' positions moved up past the dropped
        // ones, and the changed flags added: no key of a flag that did not
        // change is copied or inserted again (rebuilding the index was most
        // of what a change cost a large environment after validation). A
        // slot made while its flag was still in wire form gets the flag's
        // head now that it is compiled, as a rebuilt index would.
        let mut index = self.index.clone();
        for key in &drop_flag {
            index.remove(*key);
        }
        for slot in index.values_mut() {
            slot.index = position[slot.index as usize];
            if slot.head.is_none() {
                slot.head = slot.cell.get_now().map(Head::of);
            }
        }
        index_flags(&mut index, &flags[kept..], kept);
        Ok(Snapshot::with_index(flags, index, segments, limits).with_cursor(&self.epoch, self.revision))
    }
}

#[cfg(test)]
mod tests;
