//! Immutable, compiled flag sets: what the SDK swaps into its `ArcSwap` and
//! what the relay evaluates with.
//!
//! Compiling turns each model flag into the form evaluation wants (variations
//! typed, targets hashed, clauses pre-parsed, rollout thresholds summed) once
//! per change (or, in a snapshot that compiles on use, once when the flag is
//! first evaluated), so the hot path only reads. No model is kept: each flag
//! is held as its protobuf bytes, its facts and its compiled form
//! (`snapshot/cell.rs`). Flags and segments are held behind
//! `Arc`s, so applying a delta recompiles only what changed and shares the
//! rest with the previous snapshot. Prerequisites and `segment_match` refer to
//! other items by key and are resolved at evaluation time, which keeps one
//! flag's compiled form independent of all others.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::compile::compile_segments;
use crate::compiled::{CompiledSegment, FastMap};
use crate::error::ValidationErrors;
use crate::limit::Limits;
use crate::model::{Flag, FlagSet, Segment};
use crate::validate::{self, ItemCost, Links, Totals};
use crate::wire;
pub(crate) use cell::{Cell, Found, Head};
#[cfg(test)]
use change::Change;
use index::Cells;
use keys::Keys;

/// Source of [`Snapshot::generation`]: every snapshot built in this process
/// gets a distinct number, so a [`crate::FlagHandle`] can tell whether its
/// cached index still belongs to the snapshot it is handed.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// An immutable, compiled set of flags and segments at one revision.
///
/// The flags, their key index and the segments are held in pieces shared
/// with the snapshots applied from this one (`snapshot/index.rs`), so a
/// change copies what it touches.
#[derive(Debug)]
pub struct Snapshot {
    pub(crate) flags: Cells<Cell>,
    /// Headed for the SDK; bare for a snapshot compiling on use, which is
    /// what makes it one (`Snapshot::defer`).
    pub(crate) index: Keys,
    pub(crate) segments: Arc<FastMap<Box<str>, Arc<CompiledSegment>>>,
    pub(crate) max_depth: usize,
    pub(crate) max_segment_depth: usize,
    /// Set when this snapshot came out of a validation under these limits
    /// (a whole set's, or a change's): its cross-item rules hold and its
    /// totals are known, kept flags trusted through their costs as
    /// `validate::change` trusts them, so a change to it can be judged by
    /// its own items ([`validate::delta()`]).
    checked: Option<Box<Checked>>,
    /// Every slot of a compiled flag has its [`Head`] (false after a build
    /// from wire form, until a change finds the flags compiled; not kept
    /// up for a snapshot that compiles on use, whose slots get no heads).
    heads: bool,
    epoch: Box<str>,
    revision: u64,
    generation: u64,
}

/// What [`Snapshot::info`] tells of a flag without decoding its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlagInfo {
    pub flag_type: crate::model::FlagType,
    pub version: u64,
    /// How many variations it has.
    pub variations: usize,
    /// Shown to client-side SDKs.
    pub client_visible: bool,
}

/// A snapshot's validation: the limits it passed and its totals.
#[derive(Debug)]
struct Checked {
    limits: Limits,
    totals: Totals,
}

impl Snapshot {
    /// Validates `set` and compiles it. Nothing is compiled if anything is
    /// invalid; every problem is reported with its path.
    pub fn compile(set: &FlagSet, limits: &Limits) -> Result<Snapshot, ValidationErrors> {
        let passed = validate::flag_set_costs(set, limits)?;
        Ok(Snapshot::compile_with(set.clone(), None, passed.costs.into_iter().map(Some), limits)
            .checked(limits, passed.totals))
    }

    /// [`Snapshot::compile`] taking the set by value: validated, then each
    /// model is compiled and dropped (the snapshot keeps each flag's
    /// encoding and compiled form, not its model).
    pub fn compile_set(set: FlagSet, limits: &Limits) -> Result<Snapshot, ValidationErrors> {
        let passed = validate::flag_set_costs(&set, limits)?;
        Ok(Snapshot::compile_with(set, None, passed.costs.into_iter().map(Some), limits)
            .checked(limits, passed.totals))
    }

    /// [`Snapshot::compile_set`] for flags whose encodings the caller holds
    /// already: `raw[i]` is the protobuf encoding (`flagstream.v1.Flag`) of
    /// `set.flags[i]`, and the snapshot keeps those bytes (shared, not
    /// copied) instead of encoding each flag again.
    ///
    /// # Panics
    ///
    /// When `raw` and `set.flags` differ in length.
    pub fn compile_encoded(
        set: FlagSet,
        raw: Vec<Bytes>,
        limits: &Limits,
    ) -> Result<Snapshot, ValidationErrors> {
        assert_eq!(raw.len(), set.flags.len(), "one encoding per flag");
        let passed = validate::flag_set_costs(&set, limits)?;
        Ok(Snapshot::compile_with(set, Some(raw), passed.costs.into_iter().map(Some), limits)
            .checked(limits, passed.totals))
    }

    /// [`Snapshot::compile_encoded`] one flag at a time, for a set too
    /// large to hold as models all at once (a relay loading its store or
    /// taking a replica's snapshot, an SDK's first sync): each flag comes
    /// with its encoding, is validated on its own and kept as its bytes,
    /// facts and cost (compiled now, or when first evaluated if `on_use`,
    /// as [`Snapshot::compiling_on_use`]), and its model is dropped before
    /// the next one is taken; then the checks that cross items
    /// (prerequisites, segment references, totals, the environment's
    /// regex budget) run over the kept facts, as for a change's kept flags.
    /// The same verdict and problems as [`Snapshot::compile_encoded`], in
    /// another order: every flag's own problems first, then the
    /// segments', then those across items. Building 50,000 flags this way
    /// holds one model at a time instead of 50,000; with `on_use` false
    /// each flag is compiled as it passes, before the set's verdict (a set
    /// refused pays for compiling its flags).
    pub fn compile_each(
        flags: impl IntoIterator<Item = (Flag, Bytes)>,
        segments: Vec<Segment>,
        limits: &Limits,
        on_use: bool,
    ) -> Result<Snapshot, ValidationErrors> {
        let shared = Arc::new(limits.clone());
        let mut errors = Vec::new();
        let flags: Cells<Cell> = flags
            .into_iter()
            .map(|(f, raw)| {
                let (cost, mut problems) = validate::own(&f, limits);
                errors.append(&mut problems);
                Cell::of(&f, Some(raw), &shared, Some(cost), on_use)
            })
            .collect();
        let across = {
            let kept: Vec<(Links<'_>, ItemCost)> = flags.iter().map(|f| (f.links(), f.cost())).collect();
            let refs: Vec<&Segment> = segments.iter().collect();
            validate::change(&kept, &[], &refs, limits)
        };
        let totals = match across {
            Ok(passed) if errors.is_empty() => passed.totals,
            Ok(_) => return Err(ValidationErrors(errors)),
            Err(ValidationErrors(mut more)) => {
                errors.append(&mut more);
                return Err(ValidationErrors(errors));
            }
        };
        Ok(Snapshot::assemble(flags, compile_segments(segments, limits), limits, on_use)
            .checked(limits, totals))
    }

    /// Compiles without validating. Flags that cannot be compiled are kept
    /// and evaluate to `MALFORMED_FLAG`; nothing panics. For data already
    /// validated elsewhere, and for tests of the evaluator's own guards.
    pub fn compile_unvalidated(set: &FlagSet, limits: &Limits) -> Snapshot {
        Snapshot::compile_owned(set.clone(), limits)
    }

    /// [`Snapshot::compile_unvalidated`] taking the set by value: each
    /// model is dropped once compiled.
    pub fn compile_owned(set: FlagSet, limits: &Limits) -> Snapshot {
        Snapshot::compile_with(set, None, std::iter::repeat(None), limits)
    }

    /// Compiles `set`, each flag with its encoding (`raw`, in order; each
    /// encoded here when `None`) and its cost where known (in order). Each
    /// model is dropped once compiled.
    fn compile_with(
        set: FlagSet,
        raw: Option<Vec<Bytes>>,
        costs: impl Iterator<Item = Option<ItemCost>>,
        limits: &Limits,
    ) -> Snapshot {
        let segments = compile_segments(set.segments, limits);
        let raw = raw.into_iter().flatten().map(Some).chain(std::iter::repeat(None));
        let shared = Arc::new(limits.clone());
        let flags = set
            .flags
            .into_iter()
            .zip(raw)
            .zip(costs)
            .map(|((f, raw), cost)| Cell::of(&f, raw, &shared, cost, false))
            .collect();
        Snapshot::assemble(flags, segments, limits, false)
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

    /// [`Snapshot::from_encoded`] for a process that rarely evaluates (the
    /// relay, serving stored data that fails its limits): compiling on use
    /// ([`Snapshot::compiling_on_use`]), each flag held as its bytes until
    /// first evaluated, with no room kept for its compiled form (a cold
    /// cell, ~150 bytes instead of ~600). Not validated.
    pub fn from_encoded_on_use(
        flags: impl IntoIterator<Item = Bytes>,
        segments: Vec<Segment>,
        limits: &Limits,
    ) -> Result<Snapshot, prost::DecodeError> {
        let shared = Arc::new(limits.clone());
        let flags = flags
            .into_iter()
            .map(|raw| Ok(Cell::cold(Arc::from(wire::flag_key(&raw)?), raw, shared.clone())))
            .collect::<Result<_, prost::DecodeError>>()?;
        Ok(Snapshot::assemble(flags, compile_segments(segments, limits), limits, true))
    }

    /// A snapshot of flags still in wire form (`(key, protobuf bytes)`,
    /// the key already read, e.g. with [`crate::wire::flag_key`]), each
    /// compiled on first use, and compiled segments. Not validated: for data
    /// that was validated when received and verified by checksum since (the
    /// SDK's cache). See [`Snapshot::from_encoded`] and [`Snapshot::warm_up`].
    pub fn lazy(flags: Vec<(Arc<str>, Bytes)>, segments: Vec<Segment>, limits: &Limits) -> Snapshot {
        let shared = Arc::new(limits.clone());
        let flags = flags.into_iter().map(|(key, raw)| Cell::lazy(key, raw, shared.clone())).collect();
        Snapshot::assemble(flags, compile_segments(segments, limits), limits, false)
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
        Snapshot::assemble(Cells::new(), FastMap::default(), &Limits::default(), false)
    }

    /// A snapshot of `flags` in this order, with an index built for them;
    /// compiling on use if `defer` (its index bare).
    fn assemble(
        flags: Cells<Cell>,
        segments: FastMap<Box<str>, Arc<CompiledSegment>>,
        limits: &Limits,
        defer: bool,
    ) -> Snapshot {
        let index = Keys::of(&flags, defer);
        let heads = index.all_headed();
        Snapshot::with_index(flags, index, Arc::new(segments), heads, limits)
    }

    fn with_index(
        flags: Cells<Cell>,
        index: Keys,
        segments: Arc<FastMap<Box<str>, Arc<CompiledSegment>>>,
        heads: bool,
        limits: &Limits,
    ) -> Snapshot {
        Snapshot {
            flags,
            index,
            segments,
            max_depth: limits.max_prerequisite_depth,
            max_segment_depth: limits.max_segment_depth,
            checked: None,
            heads,
            epoch: Box::from(""),
            revision: 0,
            generation: GENERATION.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Whether flags written to this snapshot, and to those applied from
    /// it, are compiled when first evaluated, not when written
    /// ([`Snapshot::compiling_on_use`]): its index is bare.
    fn defer(&self) -> bool {
        matches!(self.index, Keys::Bare(_))
    }

    /// Marks this snapshot as validated as a whole under `limits`.
    fn checked(mut self, limits: &Limits, totals: Totals) -> Snapshot {
        self.checked = Some(Box::new(Checked { limits: limits.clone(), totals }));
        self
    }

    /// This snapshot, from which every snapshot applied compiles the flags
    /// a change writes when they are first evaluated instead of when they are
    /// written: validation reads each flag's facts, not its compiled form, so
    /// a process that rarely evaluates (the relay: OFREP and admin
    /// evaluations only) holds each flag as its bytes until it does.
    pub fn compiling_on_use(mut self) -> Snapshot {
        if let Keys::Headed(_) = self.index {
            // Rebuilt bare: its slots will never get heads.
            self.index = Keys::of(&self.flags, true);
            self.heads = false;
        }
        self
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
        self.flags.len() == 0
    }

    /// A flag's model form, decoded from its encoding (the snapshot keeps
    /// no models): for listeners, exports and admin reads, not for the
    /// evaluation path. It is the model as its encoding carries it: a flag
    /// compiled from a model that did not come from protobuf reads back
    /// normalised (a float flag's whole numbers as floats, clause values
    /// that are not scalars left out; unvalidated data that does not
    /// convert back as a flag with no variations, as evaluation treats it).
    pub fn flag(&self, key: &str) -> Option<Flag> {
        self.index.get(key).map(|slot| slot.cell.model())
    }

    /// A flag's protobuf encoding (`flagstream.v1.Flag`), as the stream
    /// and the cache carry it.
    pub fn flag_bytes(&self, key: &str) -> Option<&Bytes> {
        self.index.get(key).map(|slot| slot.cell.raw())
    }

    /// Whether the snapshot has a flag of this key.
    pub fn contains(&self, key: &str) -> bool {
        self.index.get(key).is_some()
    }

    /// What is known of a flag without its model or its compiled form:
    /// type, version, variation count, whether client-side SDKs see it (for
    /// a flag that arrived in wire form, read from its bytes once).
    pub fn info(&self, key: &str) -> Option<FlagInfo> {
        let f = self.index.get(key)?.cell.facts();
        Some(FlagInfo {
            flag_type: f.flag_type,
            version: f.version,
            variations: f.variations as usize,
            client_visible: f.client_visible,
        })
    }

    /// A flag's variation at `index`, as JSON: from the compiled form, or,
    /// for a flag not compiled, read from its bytes (its variations alone
    /// decoded; nothing compiled).
    pub fn variation(&self, key: &str, index: usize) -> Option<serde_json::Value> {
        let cell = &self.index.get(key)?.cell;
        match cell.get_now() {
            Some(f) => f.variations.get(index).map(crate::Value::to_json),
            None => wire::flag_variation(cell.raw(), index),
        }
    }

    /// The keys of a flag's prerequisites and of the segments its rules
    /// name, in order (compiling the flag if it is still in wire form).
    pub fn references(&self, key: &str) -> Option<(impl Iterator<Item = &str>, impl Iterator<Item = &str>)> {
        let links = self.index.get(key)?.cell.links();
        Some((links.prerequisites().map(|(k, _)| k), links.segment_refs().map(|(_, _, _, k)| k)))
    }

    /// A segment's model form.
    pub fn segment(&self, key: &str) -> Option<&Segment> {
        self.segments.get(key).map(|s| &*s.source)
    }

    /// All flags in model form, in no particular order, each decoded from
    /// its encoding (see [`Snapshot::flag`]; [`Snapshot::keys`] lists the
    /// keys alone).
    pub fn flags(&self) -> impl Iterator<Item = Flag> + '_ {
        self.flags.iter().map(|f| f.model())
    }

    /// Every flag key, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.flags.iter().map(|f| f.key())
    }

    /// All segments in model form, in no particular order.
    pub fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.values().map(|s| &*s.source)
    }

    /// The whole set in model form, sorted by key.
    pub fn to_flag_set(&self) -> FlagSet {
        let mut set = FlagSet { flags: self.flags().collect(), segments: self.segments().cloned().collect() };
        set.flags.sort_by(|a, b| a.key.cmp(&b.key));
        set.segments.sort_by(|a, b| a.key.cmp(&b.key));
        set
    }
}

mod cell;
mod change;
mod index;
mod keys;
#[cfg(test)]
mod tests;
